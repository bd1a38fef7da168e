//! Redis failing under the library, on Redis only (not run on Valkey): restarts,
//! freezes, lost replies, busy scripts, out of memory and loading, a cluster master
//! killed with locks held, Redlock's servers frozen, and the turns every waiter
//! gets under contention. The cluster failover, the busy scripts and the turn
//! counts take `support::heavy()`.
//!
//! Each file was a test binary of its own; as modules of one binary they share the
//! harness (`tests/support/`, the `lockwarden-testkit` crate, compiled once). How to add a file: docs/design/testing.md.

use lockwarden_testkit as support;

mod cluster_failover;
mod cluster_kept;
mod failover;
mod redlock;
mod transient;
mod turns;
