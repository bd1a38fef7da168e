//! Redis failing under the library, on Redis only (not run on Valkey): restarts,
//! freezes, lost replies, busy scripts, out of memory and loading, a cluster master
//! killed with locks held, Redlock's servers frozen, and the turns every waiter
//! gets under contention. The cluster failover, the busy scripts and the turn
//! counts take `support::heavy()`.
//!
//! Each file was a test binary of its own; as modules of one binary they share one
//! build of `tests/support/`. How to add a file: docs/architecture.md, "Where a new
//! test goes".

// `#[macro_use]`: support's `standalone!` is in scope in every file below.
#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod cluster_failover;
mod failover;
mod redlock;
mod transient;
mod turns;
