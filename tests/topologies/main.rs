//! The deployments beyond one server: Sentinel (plain and TLS), replica
//! confirmation, Redis Cluster (the behaviour scenarios, and 2,000 locks on three
//! masters) and a short chaos run. CI runs this binary a second time on Valkey 8
//! (`.ci/run`). Most tests here take `support::heavy()` first, so that no two
//! topologies share the cores at once.
//!
//! Each file was a test binary of its own; as modules of one binary they share the
//! harness (`tests/support/`, the `lockwarden-testkit` crate, compiled once). How to add a file: docs/design/testing.md.

use lockwarden_testkit as support;

mod chaos;
mod cluster;
mod kept;
mod on_cluster;
mod replica_faults;
mod replicas;
mod sentinel;
mod sentinel_failover;
mod sentinel_tls;
mod unconfirmed;
