//! What the library does against one Redis server: each kind of lock and
//! synchronizer, fencing, waiting, the wire protocol and TLS. CI runs this binary a
//! second time on Valkey 8 (`.ci/run`), so a test here must hold on both.
//!
//! Each file was a test binary of its own; as modules of one binary they share the
//! harness (`tests/support/`, the `lockwarden-testkit` crate, compiled once). How to add a file: docs/design/testing.md.

// `#[macro_use]`: the harness's `standalone!` is in scope in every file below.
#[macro_use]
extern crate lockwarden_testkit;
use lockwarden_testkit as support;

mod bad_input;
mod coalesce;
mod deadlock;
mod deadlock_cost;
mod exclusion;
mod fair;
mod fair_semaphore;
mod fenced;
mod fencing;
mod handoff;
mod latch;
mod late_grant;
mod leader;
mod lock_delay;
mod multilock;
mod non_reentrant;
mod permit_semaphore;
mod protocol;
mod reentrancy;
mod rwlock;
mod semaphore;
mod spin;
mod stall;
mod stall_release;
mod tls;
mod waiting;
mod watchdog;
