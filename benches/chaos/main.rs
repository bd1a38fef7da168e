//! `cargo bench --bench chaos`: the chaos suite. Real topologies on this machine, a
//! fleet of real `lockwarden run` processes looping over critical sections on a few
//! locks, faults injected on a schedule, and the history checked (`history.rs`):
//! overlaps, overlaps with an unordered token, losses not told, tokens going
//! backwards, stuck waiters, and the blind time after each fault.
//!
//! Topologies (`LOCKWARDEN_CHAOS_TOPOLOGIES`, default all five):
//! - standalone: one server behind the suite's TCP proxy (tests/support/proxy.rs):
//!   a holder SIGKILLed, the link blackholed and delayed, the server frozen
//!   (SIGSTOP) and restarted without its data;
//! - sentinel: a master, a replica, three Sentinels (down-after 1000 ms), the
//!   fleet with `--direct-handoff`: a queued waiter SIGKILLed, another
//!   frozen 3 s, the master SIGKILLed, brought back (as a replica), the new master frozen
//!   (SIGSTOP: its connections stay open and silent);
//! - cluster: three masters with a replica each, the fleet with
//!   `--direct-handoff`: a queued waiter SIGKILLed, another frozen 3 s, a
//!   manual failover, the slot of a
//!   held lock resharded to another master, a master SIGKILLed;
//! - redlock: three independent servers (`run --redlock`): one SIGKILLed, one
//!   frozen (SIGSTOP) for 3 s, the killed one back without its data; then the
//!   third frozen 5 s with all up (the acquisitions queued in its socket run when
//!   it resumes) and the first killed again, which makes a majority need the
//!   third: a hold left there by a process that went on shows as blind time;
//! - semaphore: one server, the fleet running `run --semaphore --permits 2`
//!   (plain, `--fair`, `--expirable` in turn), frozen (SIGSTOP) 1.5 s, 4 s and
//!   14 s: never more holders than permits, and exactly the permits left at the
//!   end (`semaphores.rs`, a table of its own).
//!
//! Knobs: `LOCKWARDEN_CHAOS_WORKERS` (6), `LOCKWARDEN_CHAOS_LOCKS` (2),
//! `LOCKWARDEN_CHAOS_LEASE` (watchdog lease in s, 30, the default of the command),
//! `LOCKWARDEN_CHAOS_QUIET` (s of undisturbed running after each fault, 6),
//! `LOCKWARDEN_CHAOS_WRITE=0` to leave docs/faults.md alone. It prints its tables
//! (the locks', the semaphores') and writes each that ran into docs/faults.md
//! between its markers. It exits 1 if anything unsafe was seen.

use lockwarden_testkit as support;

mod history;
mod report;
mod semaphores;
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
    pub(crate) logs: Option<std::path::PathBuf>,
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
            .unwrap_or_else(|_| "standalone,sentinel,cluster,redlock,semaphore".into())
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
            logs: std::env::var_os("LOCKWARDEN_CHAOS_LOGS").map(Into::into),
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
            logs: self.logs.clone(),
        }
    }
}

fn main() {
    let settings = Settings::from_env();
    if let Some(logs) = &settings.logs {
        if let Err(e) = std::fs::create_dir_all(logs) {
            eprintln!("chaos: cannot make {}: {e}", logs.display());
            std::process::exit(2);
        }
    }
    let began = std::time::Instant::now();
    eprintln!(
        "chaos: {} workers on {} locks, watchdog lease {:?}, topologies {:?}",
        settings.workers, settings.locks, settings.lease, settings.topologies
    );
    let (mut rows, mut sem_rows) = (Vec::new(), Vec::new());
    for topology in &settings.topologies {
        if topology == "semaphore" {
            sem_rows.extend(semaphores::semaphores(&settings));
            continue;
        }
        let found = match topology.as_str() {
            "standalone" => topologies::standalone(&settings),
            "sentinel" => topologies::sentinel(&settings),
            "cluster" => topologies::cluster(&settings),
            "redlock" => topologies::redlock(&settings),
            other => {
                eprintln!(
                    "chaos: unknown topology {other:?} (standalone, sentinel, cluster, redlock, semaphore)"
                );
                std::process::exit(2);
            }
        };
        rows.extend(found);
    }
    let table = (!rows.is_empty()).then(|| report::table(&rows));
    let sem_table = (!sem_rows.is_empty()).then(|| report::semaphore_table(&sem_rows));
    for t in table.iter().chain(&sem_table) {
        println!("{t}");
    }
    let took = began.elapsed();
    eprintln!("chaos: done in {:.0} s", took.as_secs_f64());
    if settings.write {
        report::write_docs(table.as_deref(), sem_table.as_deref(), &settings, took);
    }
    if rows.iter().any(|r| !r.verdict.safe()) || sem_rows.iter().any(|r| !r.safe()) {
        eprintln!("chaos: UNSAFE behaviour seen (see the table)");
        std::process::exit(1);
    }
}
