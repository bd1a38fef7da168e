//! Non-reentrant locks (Redisson's `getNonReentrantLock` and
//! `getNonReentrantFairLock`): an owner that holds the lock and asks again is
//! refused at once, in the reentrant lock's Redis layout.

#[path = "../scenarios/non_reentrant.rs"]
mod scenarios;

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));
