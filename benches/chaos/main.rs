//! `cargo bench --bench chaos`: the chaos suite. Real topologies on this machine, a
//! fleet of real `lockwarden run` processes looping over critical sections on a few
//! locks, faults injected on a schedule, and the history checked (`history.rs`):
//! overlaps, overlaps with an unordered token, losses not told, tokens going
//! backwards, stuck waiters, and the blind time after each fault.
//!
//! Topologies (`LOCKWARDEN_CHAOS_TOPOLOGIES`, default all four):
//! - standalone: one server behind the suite's TCP proxy (tests/support/proxy.rs):
//!   a holder SIGKILLed, the link blackholed and delayed, the server frozen
//!   (SIGSTOP) and restarted without its data;
//! - sentinel: a master, a replica, three Sentinels (down-after 1000 ms): the
//!   master SIGKILLed, brought back (as a replica), the new master frozen
//!   (SIGSTOP: its connections stay open and silent);
//! - cluster: three masters with a replica each: a manual failover, the slot of a
//!   held lock resharded to another master, a master SIGKILLed;
//! - redlock: three independent servers (`run --redlock`): one SIGKILLed, one
//!   frozen (SIGSTOP) for 3 s, the killed one back without its data; then the
//!   third frozen 5 s with all up (the acquisitions queued in its socket run when
//!   it resumes) and the first killed again, which makes a majority need the
//!   third: a hold left there by a process that went on shows as blind time.
//!
//! Knobs: `LOCKWARDEN_CHAOS_WORKERS` (6), `LOCKWARDEN_CHAOS_LOCKS` (2),
//! `LOCKWARDEN_CHAOS_LEASE` (watchdog lease in s, 30, the default of the command),
//! `LOCKWARDEN_CHAOS_QUIET` (s of undisturbed running after each fault, 6),
//! `LOCKWARDEN_CHAOS_WRITE=0` to leave docs/faults.md alone. It prints one table
//! and writes it into docs/faults.md between the chaos markers. It exits 1 if
//! anything unsafe was seen.

#[path = "../../tests/support/mod.rs"]
mod support;

mod history;
mod report;
mod topologies;
mod workers;

use std::time::Duration;

use workers::Plan;

/// The settings of one run, from the environment.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) topologies: Vec<String>,
    pub(crate) workers: usize,
    pub(crate) locks: usize,
    pub(crate) lease: Duration,
    pub(crate) quiet: Duration,
    pub(crate) write: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let num = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let topologies = std::env::var("LOCKWARDEN_CHAOS_TOPOLOGIES")
            .unwrap_or_else(|_| "standalone,sentinel,cluster,redlock".into())
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        Settings {
            topologies,
            workers: num("LOCKWARDEN_CHAOS_WORKERS", 6) as usize,
            locks: num("LOCKWARDEN_CHAOS_LOCKS", 2).max(1) as usize,
            lease: Duration::from_secs(num("LOCKWARDEN_CHAOS_LEASE", 30)),
            quiet: Duration::from_secs(num("LOCKWARDEN_CHAOS_QUIET", 6)),
            write: std::env::var("LOCKWARDEN_CHAOS_WRITE").as_deref() != Ok("0"),
        }
    }

    /// The workers' plan against `connect`.
    pub(crate) fn plan(&self, connect: Vec<String>, dir: &std::path::Path) -> Plan {
        Plan {
            bin: env!("CARGO_BIN_EXE_lockwarden").to_string(),
            connect,
            run_flags: Vec::new(),
            workers: self.workers,
            locks: self.locks,
            wait: Duration::from_secs(20),
            lease: self.lease,
            section: Duration::from_millis(50),
            dir: dir.to_path_buf(),
        }
    }
}

fn main() {
    let settings = Settings::from_env();
    let began = std::time::Instant::now();
    eprintln!(
        "chaos: {} workers on {} locks, watchdog lease {:?}, topologies {:?}",
        settings.workers, settings.locks, settings.lease, settings.topologies
    );
    let mut rows = Vec::new();
    for topology in &settings.topologies {
        let found = match topology.as_str() {
            "standalone" => topologies::standalone(&settings),
            "sentinel" => topologies::sentinel(&settings),
            "cluster" => topologies::cluster(&settings),
            "redlock" => topologies::redlock(&settings),
            other => {
                eprintln!(
                    "chaos: unknown topology {other:?} (standalone, sentinel, cluster, redlock)"
                );
                std::process::exit(2);
            }
        };
        rows.extend(found);
    }
    let table = report::table(&rows);
    println!("{table}");
    let took = began.elapsed();
    eprintln!("chaos: done in {:.0} s", took.as_secs_f64());
    if settings.write {
        report::write_docs(&table, &settings, took);
    }
    if rows.iter().any(|r| !r.verdict.safe()) {
        eprintln!("chaos: UNSAFE behaviour seen (see the table)");
        std::process::exit(1);
    }
}
