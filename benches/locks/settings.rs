//! What a run measures and for how long, read once from `LOCKWARDEN_BENCH_*`
//! environment variables, plus a description of the machine it runs on.
//!
//! Everything that decides the length of a run lives here so that one glance tells
//! how long `cargo bench --bench locks` takes: the defaults keep a full run of
//! every scenario and implementation under about five minutes on a 2-core machine,
//! and a development run (`LOCKWARDEN_BENCH_SECS=0.5 LOCKWARDEN_BENCH_ROUNDS=1`)
//! under a minute and a half.

use std::time::Duration;

use crate::clients::Impl;
use crate::fleet::Fleet;

/// The run's settings; see `docs/performance.md` for each variable.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Measured time of one cell (one scenario, one parameter, one implementation).
    pub cell: Duration,
    /// How many times every cell is run; implementations take turns within a round.
    pub rounds: usize,
    /// Lock counts of scenario C.
    pub lock_counts: Vec<usize>,
    /// Which scenarios to run (`A`, `B`, `C`, `R`, `P`, `K`, `Y`, `S`).
    pub scenarios: Vec<char>,
    /// Which implementations to run in scenarios A and B.
    pub impls: Vec<Impl>,
    /// How long a contended waiter holds the lock.
    pub hold: Duration,
    /// How long a contended waiter waits after its release before competing again.
    pub pause: Duration,
    /// Watchdog lease of the many-locks scenario (renewal every third of it).
    pub many_lease: Duration,
    /// How long the many-locks scenario watches Redis while every lock is held.
    pub many_window: Duration,
    /// Also run the largest K at lockwarden's default 30 s watchdog lease, watched
    /// for one whole renewal period (10 s), so the renewal cost the target speaks
    /// of is measured rather than scaled from the short lease.
    pub many_at_default: bool,
    /// Where the PNG chart goes.
    pub chart: String,
    /// Concurrent holders of scenario A (`LOCKWARDEN_BENCH_A_HOLDERS`, default
    /// `1,16,64`): one value alone is handy under a profiler.
    pub holders: Vec<usize>,
    /// Scenario Y's far replica: the delay a proxy adds each way on its
    /// replication link (`LOCKWARDEN_BENCH_REPLICA_DELAY_US`, default 500: a
    /// round trip 1 ms longer, a replica in another zone); `None` (0) runs no
    /// far rows.
    pub replica_delay: Option<Duration>,
}

/// Independent servers of scenario R.
pub const REDLOCK_NODES: usize = 3;

/// lockwarden's default watchdog lease, and its renewal period (a third of it).
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(10);

/// Reads a variable, falling back to `default` when it is unset or unreadable.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("ignoring {name}={v:?}: not a valid value");
            default
        }),
        Err(_) => default,
    }
}

impl Settings {
    /// The settings from the environment.
    pub fn from_env() -> Settings {
        let secs: f64 = env_or("LOCKWARDEN_BENCH_SECS", 2.0);
        let impls = match std::env::var("LOCKWARDEN_BENCH_IMPLS") {
            Ok(list) => list
                .split(',')
                .filter_map(|name| {
                    let found = Impl::ALL
                        .into_iter()
                        .chain(Impl::OPTIONAL)
                        .find(|i| i.name() == name.trim());
                    if found.is_none() {
                        eprintln!("ignoring unknown implementation {name:?}");
                    }
                    found
                })
                .collect(),
            Err(_) => Impl::ALL.to_vec(),
        };
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        Settings {
            cell: Duration::from_secs_f64(secs.max(0.05)),
            rounds: env_or("LOCKWARDEN_BENCH_ROUNDS", 2usize).max(1),
            lock_counts: env_or("LOCKWARDEN_BENCH_C_LOCKS", "1000,10000,100000".to_string())
                .split(',')
                .filter_map(|k| k.trim().parse().ok())
                .filter(|&k| k > 0)
                .collect(),
            scenarios: env_or("LOCKWARDEN_BENCH_SCENARIOS", "ABPKCR".to_string())
                .to_uppercase()
                .chars()
                .filter(|c| matches!(c, 'A' | 'B' | 'C' | 'R' | 'P' | 'K' | 'Y' | 'S'))
                .collect(),
            impls,
            hold: Duration::from_micros(env_or("LOCKWARDEN_BENCH_HOLD_US", 1000)),
            pause: Duration::from_micros(env_or("LOCKWARDEN_BENCH_PAUSE_US", 1000)),
            many_lease: Duration::from_millis(env_or("LOCKWARDEN_BENCH_C_LEASE_MS", 3000)),
            many_window: Duration::from_secs_f64(
                env_or("LOCKWARDEN_BENCH_C_WINDOW", 3.0f64).max(0.5),
            ),
            many_at_default: env_or("LOCKWARDEN_BENCH_C_DEFAULT_LEASE", 1u8) != 0,
            chart: env_or(
                "LOCKWARDEN_BENCH_CHART",
                format!("{target}/lockwarden-bench/handoff.png"),
            ),
            holders: env_or("LOCKWARDEN_BENCH_A_HOLDERS", "1,16,64".to_string())
                .split(',')
                .filter_map(|c| c.trim().parse().ok())
                .filter(|&c| c > 0)
                .collect(),
            replica_delay: Some(Duration::from_micros(env_or(
                "LOCKWARDEN_BENCH_REPLICA_DELAY_US",
                500,
            )))
            .filter(|d| !d.is_zero()),
        }
    }

    /// Concurrent holders of scenario A.
    pub fn holders(&self) -> &[usize] {
        &self.holders
    }

    /// Waiter counts of scenario B.
    pub fn waiters(&self) -> &'static [usize] {
        &[2, 8, 32]
    }

    /// Client layouts of scenario B: all waiters in one manager, or spread over four.
    pub fn layouts(&self) -> &'static [usize] {
        &[1, 4]
    }

    /// Waiter counts of scenario R (RedLock over [`REDLOCK_NODES`] servers, each
    /// waiter a client of its own, as separate processes would be).
    pub fn redlock_waiters(&self) -> &'static [usize] {
        &[2, 8]
    }

    /// Holders of scenario Y's uncontended loop (replica confirmation on/off).
    pub fn replicated_holders(&self) -> &'static [usize] {
        &[1, 16, 64]
    }

    /// Waiters of scenario Y's contended loop, over [`Y_MANAGERS`] managers.
    pub fn replicated_waiters(&self) -> &'static [usize] {
        &[8]
    }

    /// Fleets of scenario P, each process a client of its own: lockwarden and
    /// raw EVALSHA alone at W = 8 over 4 processes and W = 32 over 4 and 16, then
    /// lockwarden with raw-EVALSHA processes beside it (a quarter of the
    /// processes), for the foreign side's share.
    pub fn fleets(&self) -> Vec<Fleet> {
        let mut out = Vec::new();
        for base in [Impl::Lockwarden, Impl::LockwardenHandoff, Impl::Raw] {
            if !self.impls.contains(&base) {
                continue;
            }
            for (waiters, procs) in [(8, 4), (32, 4), (32, 16)] {
                out.push(Fleet {
                    waiters,
                    procs,
                    base,
                    foreign: 0,
                });
            }
        }
        if self.impls.contains(&Impl::Lockwarden) {
            for (waiters, procs) in [(8, 4), (32, 16)] {
                out.push(Fleet {
                    waiters,
                    procs,
                    base: Impl::Lockwarden,
                    foreign: procs / 4,
                });
            }
        }
        out
    }

    /// A rough duration of the whole run, printed up front.
    pub fn estimate(&self) -> Duration {
        let per_cell = self.cell + Duration::from_millis(150);
        let mut cells = 0u32;
        if self.scenarios.contains(&'A') {
            cells += (self.holders().len() * self.impls.len()) as u32;
        }
        if self.scenarios.contains(&'B') {
            cells += (self.waiters().len() * self.layouts().len() * self.impls.len()) as u32;
        }
        if self.scenarios.contains(&'R') {
            cells += (self.redlock_waiters().len() * Impl::REDLOCK.len()) as u32;
        }
        if self.scenarios.contains(&'Y') {
            cells += ((self.replicated_holders().len() + self.replicated_waiters().len())
                * Impl::REPLICATED.len()) as u32;
            if self.replica_delay.is_some() {
                cells += (self.replicated_holders().len() * Impl::FAR.len()) as u32;
            }
        }
        let mut total = per_cell * cells;
        if self.scenarios.contains(&'K') && self.impls.contains(&Impl::Lockwarden) {
            // the cluster forms in a few seconds, then A's and B's cells once more
            total += Duration::from_secs(4) / self.rounds.max(1) as u32;
            total += per_cell
                * (self.holders().len() + self.waiters().len() * self.layouts().len()) as u32;
        }
        if self.scenarios.contains(&'S') {
            // three kinds at two sizes
            total += per_cell * 6;
        }
        if self.scenarios.contains(&'P') {
            // processes started and warmed up, and the start line's lead
            let fleets = self.fleets().len() as u32;
            total += (self.cell + Duration::from_millis(400)) * fleets;
        }
        if self.scenarios.contains(&'C') {
            for &k in &self.lock_counts {
                // a child process, acquire and release at some 20,000 a second, the window
                total += self.many_window + Duration::from_secs_f64(0.3 + k as f64 / 15_000.0);
            }
            if let (true, Some(&k)) = (self.many_at_default, self.lock_counts.iter().max()) {
                total += DEFAULT_PERIOD + Duration::from_secs_f64(0.3 + k as f64 / 15_000.0);
            }
        }
        total * self.rounds as u32
    }
}

/// The machine a run happened on.
#[derive(Debug, Clone)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `/proc/loadavg` at the start of the run.
    pub load_before: String,
}

impl Machine {
    /// Reads what the kernel says.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, model)| model.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            load_before: crate::stats::load_average(),
        }
    }
}

/// Managers (clients) scenario Y's contended loop spreads its waiters over.
pub const Y_MANAGERS: usize = 4;
