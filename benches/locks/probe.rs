//! What Redis itself says about a cell: how many commands it ran, how much CPU it
//! spent, how much memory it holds, read from `INFO` before and after. A cell on
//! several servers (scenario R's independent nodes) names them as one
//! comma-separated URL list; the probe then sums over them.
//!
//! A probe has its own connection, so its INFO calls never queue behind the
//! traffic it measures; the INFO calls themselves are left out of the counts.
//! `INFO commandstats` counts the commands scripts run inside Redis under the same
//! names as top-level ones, so "commands" here is all the work Redis did, and
//! "top-level" (the commands an implementation sends itself, see
//! `Impl::top_level`) is the number of requests, i.e. round trips.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::support::parse_commandstats;

/// Connections for INFO, one per server of the cell.
pub struct Probe {
    /// Its own connection to each server.
    conns: Vec<MultiplexedConnection>,
}

/// Redis's counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Calls per command name (`script|load` is `script`).
    calls: HashMap<String, u64>,
    /// `used_cpu_user + used_cpu_sys`, seconds.
    cpu: f64,
    /// `used_memory`, bytes.
    memory: u64,
    /// When it was taken.
    at: Instant,
}

/// What Redis did between two snapshots.
#[derive(Debug, Clone, Copy, Default)]
pub struct Delta {
    /// All commands, script-internal ones included, INFO left out.
    pub commands: u64,
    /// Commands of the implementation's own (see the module doc).
    pub top_level: u64,
    /// Redis CPU seconds, user + system.
    pub cpu: f64,
    /// Growth of Redis's `used_memory`, bytes (negative when it shrank).
    pub memory: i64,
    /// Wall time between the snapshots.
    pub wall: Duration,
    /// `WAIT` calls (replica confirmations, scenario Y).
    pub waits: u64,
}

impl Delta {
    /// Redis CPU as a percentage of one core over the wall time.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Reads `field:value` from an INFO reply.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

impl Probe {
    /// Connects to the server at `url` (or to each of a comma-separated list).
    pub async fn connect(url: &str) -> Probe {
        let mut conns = Vec::new();
        for url in url.split(',') {
            let conn = redis::Client::open(url)
                .expect("redis url")
                .get_multiplexed_async_connection()
                .await
                .expect("probe connect");
            conns.push(conn);
        }
        Probe { conns }
    }

    /// Takes a snapshot (one `INFO commandstats cpu memory` call per server),
    /// summed over the servers.
    pub async fn snapshot(&mut self) -> Snapshot {
        let mut calls: HashMap<String, u64> = HashMap::new();
        let (mut cpu, mut memory) = (0.0, 0u64);
        for conn in &mut self.conns {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .arg("cpu")
                .arg("memory")
                .query_async(conn)
                .await
                .expect("INFO");
            for (name, n) in parse_commandstats(&info) {
                let base = name.split('|').next().unwrap_or(&name).to_string();
                *calls.entry(base).or_default() += n;
            }
            let number = |field| {
                info_field(&info, field)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            cpu += number("used_cpu_user") + number("used_cpu_sys");
            memory += number("used_memory") as u64;
        }
        Snapshot {
            calls,
            cpu,
            memory,
            at: Instant::now(),
        }
    }
}

impl Snapshot {
    /// What happened from `self` to `later`, with `top` naming the top-level commands.
    pub fn delta(&self, later: &Snapshot, top: &[&str]) -> Delta {
        let grown = |name: &str| {
            later.calls.get(name).copied().unwrap_or(0) - self.calls.get(name).copied().unwrap_or(0)
        };
        let commands = later
            .calls
            .keys()
            .filter(|name| *name != "info")
            .map(|name| grown(name))
            .sum();
        let top_level = top.iter().map(|name| grown(name)).sum();
        Delta {
            commands,
            top_level,
            cpu: later.cpu - self.cpu,
            memory: later.memory as i64 - self.memory as i64,
            wall: later.at - self.at,
            waits: grown("wait"),
        }
    }
}

/// `redis_version` of the server at `url` (blocking: called outside any runtime).
pub fn redis_version(url: &str) -> String {
    let info: redis::RedisResult<String> = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .and_then(|mut c| redis::cmd("INFO").arg("server").query(&mut c));
    info.ok()
        .and_then(|i| info_field(&i, "redis_version").map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// The median round trip of 50 `PING`s to `url` (blocking: called outside any
/// runtime): scenario Y's far replica reports what its proxy really adds, as
/// tokio's timer rounds each delay up to its next millisecond.
pub fn round_trip(url: &str) -> Duration {
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("a connection for PING");
    let mut times: Vec<Duration> = (0..50)
        .map(|_| {
            let start = Instant::now();
            let _: String = redis::cmd("PING").query(&mut conn).expect("PING");
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Empties the server (each of a comma-separated list) between cells (blocking:
/// called outside any runtime), so that keys one implementation left behind
/// (latches, expired leases, counters) cost the next one nothing.
pub fn flush(url: &str) {
    for url in url.split(',') {
        let _: () = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .and_then(|mut c| redis::cmd("FLUSHALL").arg("SYNC").query(&mut c))
            .expect("FLUSHALL");
    }
}
