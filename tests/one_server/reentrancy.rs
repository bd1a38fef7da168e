//! Reentrancy and release: hold counts per owner, what a second release or a
//! release by a non-owner gets, and that neither changes the lock.

#[path = "../scenarios/reentrancy.rs"]
mod scenarios;

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));
