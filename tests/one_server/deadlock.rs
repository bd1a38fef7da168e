//! Deadlocks across managers and within one: found after the deadlock timeout,
//! broken by failing exactly one wait of the cycle, which names it.

#[path = "../scenarios/deadlock.rs"]
mod scenarios;

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));
