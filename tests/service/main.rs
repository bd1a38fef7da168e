//! What a service's first users and operators meet: a new user's first hour, the
//! examples run as a user runs them, ACL users with only the rights the docs list,
//! the client registry, the tokio runtime, the Grafana dashboard's queries, and
//! deadlocks between real processes.
//!
//! Each file was a test binary of its own; as modules of one binary they share the
//! harness (`tests/support/`, the `lockwarden-testkit` crate, compiled once). How to add a file: docs/design/testing.md.

use lockwarden_testkit as support;

mod acl;
mod acl_lines;
mod dashboard;
mod deadlock_processes;
mod examples;
mod first_hour;
mod registry;
mod tokio_runtime;
mod unit_of_work;
