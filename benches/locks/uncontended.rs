//! Scenario A, uncontended: C concurrent holders in one process, each on a key of
//! its own, acquire and release in a loop for a fixed time.
//!
//! Nobody ever waits, so this measures the cost of the path itself: how many
//! acquire+release pairs a second one client pushes through, and the acquire
//! latency a caller sees. With C = 1 it also checks the round trips of one pair on
//! an idle lock (top-level commands per pair; lockwarden's target is exactly 2).
//! Each cell runs in its own actix System, dropped at the end, so nothing of one
//! implementation lingers into the next.

use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::clients::{Client, Impl};
use crate::probe::{Delta, Probe};
use crate::stats::Samples;

/// What one cell measured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Acquire+release pairs completed.
    pub pairs: u64,
    /// Measured time.
    pub elapsed: Duration,
    /// Acquire latency of every pair (call to guard).
    pub acquire: Samples,
    /// Redis's side.
    pub redis: Delta,
    /// CPU seconds this process (the client) spent.
    pub client_cpu: f64,
}

/// Runs one cell: `holders` concurrent holders of `which` for `length`.
pub fn run(which: Impl, url: &str, holders: usize, length: Duration, tag: &str) -> Cell {
    let url = url.to_string();
    let tag = tag.to_string();
    actix_rt::System::new().block_on(async move {
        let client = Rc::new(Client::connect(which, &url, None).await);
        let keys: Vec<String> = (0..holders).map(|i| format!("bench:a:{tag}:{i}")).collect();
        // Warm-up, not measured: loads the scripts into Redis, starts lock actors.
        for key in &keys {
            let held = client.acquire(key).await;
            client.release(held).await;
        }
        let mut probe = Probe::connect(&url).await;
        let before = probe.snapshot().await;
        let cpu_before = crate::stats::process_cpu_secs();
        let start = Instant::now();
        let deadline = start + length;
        let tasks: Vec<_> = keys
            .into_iter()
            .map(|key| {
                let client = client.clone();
                actix_rt::spawn(async move {
                    let mut acquire = Samples::default();
                    let mut pairs = 0u64;
                    while Instant::now() < deadline {
                        let asked = Instant::now();
                        let held = client.acquire(&key).await;
                        acquire.push(asked.elapsed());
                        client.release(held).await;
                        pairs += 1;
                    }
                    (pairs, acquire)
                })
            })
            .collect();
        let mut cell = Cell::default();
        for task in tasks {
            let (pairs, acquire) = task.await.expect("uncontended holder task");
            cell.pairs += pairs;
            cell.acquire.extend(acquire);
        }
        cell.elapsed = start.elapsed();
        cell.client_cpu = crate::stats::process_cpu_secs() - cpu_before;
        let after = probe.snapshot().await;
        cell.redis = before.delta(&after, which.top_level());
        cell
    })
}

/// One row of scenario A: all rounds of one (C, implementation) merged.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    /// Pairs over all rounds.
    pub pairs: u64,
    /// Measured time over all rounds.
    pub elapsed: Duration,
    /// Every acquire latency.
    pub acquire: Samples,
    /// Commands over all rounds.
    pub commands: u64,
    /// Top-level commands over all rounds.
    pub top_level: u64,
    /// Redis CPU seconds over all rounds.
    pub cpu: f64,
    /// `WAIT` calls over all rounds.
    pub waits: u64,
    /// Client CPU seconds over all rounds.
    pub client_cpu: f64,
    /// Pairs a second of each round, to show the spread.
    pub per_round: Vec<f64>,
}

impl Merged {
    /// Adds one round.
    pub fn add(&mut self, cell: Cell) {
        self.per_round
            .push(cell.pairs as f64 / cell.elapsed.as_secs_f64().max(1e-9));
        self.pairs += cell.pairs;
        self.elapsed += cell.elapsed;
        self.acquire.extend(cell.acquire);
        self.commands += cell.redis.commands;
        self.top_level += cell.redis.top_level;
        self.cpu += cell.redis.cpu;
        self.waits += cell.redis.waits;
        self.client_cpu += cell.client_cpu;
    }

    /// Pairs a second over all rounds.
    pub fn rate(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Per pair, `n` of something counted over all rounds.
    pub fn per_pair(&self, n: u64) -> f64 {
        n as f64 / (self.pairs.max(1)) as f64
    }

    /// Redis CPU microseconds spent per pair.
    pub fn redis_us_per_pair(&self) -> f64 {
        1e6 * self.cpu / self.pairs.max(1) as f64
    }

    /// Client CPU microseconds spent per pair (every thread of the process).
    pub fn client_us_per_pair(&self) -> f64 {
        1e6 * self.client_cpu / self.pairs.max(1) as f64
    }

    /// Redis CPU as a percentage of one core.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu / self.elapsed.as_secs_f64().max(1e-9)
    }
}
