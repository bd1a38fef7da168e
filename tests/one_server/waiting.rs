//! Waiting: who wakes when. Waiters are woken by the holder's unlock message (not
//! by polling), local waiters share one Redis attempt at a time, deadlines are kept,
//! and a waiter whose caller went away never ends up holding the lock.

#[path = "../scenarios/waiting.rs"]
mod scenarios;

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));
