//! The `lockwarden` command, run as a process against real servers: its
//! subcommands, JSON output, `run`'s child and signals, faults seen from the
//! command line, and what `status`, `who` and `top` show.
//!
//! Each file was a test binary of its own; as modules of one binary they share the
//! harness (`tests/support/`, the `lockwarden-testkit` crate, compiled once). How to add a file: docs/design/testing.md.

use lockwarden_testkit as support;

mod cli;
mod cli_candidates;
mod cli_causes;
mod cli_deadlock;
mod cli_faults;
mod cli_json;
mod cli_kept;
mod cli_late_grant;
mod cli_rough_edges;
mod cli_sync;
mod cli_top;
mod cli_who;
