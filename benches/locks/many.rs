//! Scenario C, many locks: one lockwarden manager takes K locks in watchdog mode
//! with a short lease, holds them all while Redis is watched for a window, then
//! releases them all.
//!
//! Measured: time to acquire and to release all K; Redis commands a second spent
//! keeping them (during the window nothing but renewal runs); Redis CPU over the
//! window; client memory per held lock (VmRSS growth / K) and client CPU.
//!
//! Each cell runs in a fresh child process (this same bench binary, re-executed
//! with `LOCKWARDEN_BENCH_CHILD=many`): RSS growth in a process that already held
//! and freed thousands of locks would mostly measure reused heap, not what a lock
//! costs. The child prints one `CHILD {json}` line that the parent reads.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{stream, StreamExt};
use lockwarden::{Acquire, Config, LockManager};
use serde_json::{json, Value};

use crate::probe::Probe;
use crate::stats::{process_cpu_secs, rss_kib};

/// Acquisitions (and releases) in flight at once while taking or giving back K locks.
const IN_FLIGHT: usize = 256;

/// What one cell measured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Locks held.
    pub locks: usize,
    /// Time to acquire them all, seconds.
    pub acquire_secs: f64,
    /// Time to release them all, seconds.
    pub release_secs: f64,
    /// Redis commands a second while all were held (script-internal included).
    pub commands_per_sec: f64,
    /// Requests (EVALSHA) a second while all were held.
    pub requests_per_sec: f64,
    /// Redis CPU over the window, % of one core.
    pub redis_cpu_pct: f64,
    /// Redis `used_memory` growth per held lock, bytes.
    pub redis_bytes_per_lock: f64,
    /// Client RSS growth per held lock, bytes.
    pub client_bytes_per_lock: f64,
    /// Client CPU over the window, % of one core.
    pub client_cpu_pct: f64,
    /// Locks reported lost before the release (should be 0).
    pub lost: usize,
}

impl Cell {
    fn to_json(&self) -> Value {
        json!({
            "locks": self.locks,
            "acquire_secs": self.acquire_secs,
            "release_secs": self.release_secs,
            "commands_per_sec": self.commands_per_sec,
            "requests_per_sec": self.requests_per_sec,
            "redis_cpu_pct": self.redis_cpu_pct,
            "redis_bytes_per_lock": self.redis_bytes_per_lock,
            "client_bytes_per_lock": self.client_bytes_per_lock,
            "client_cpu_pct": self.client_cpu_pct,
            "lost": self.lost,
        })
    }

    fn from_json(v: &Value) -> Cell {
        let f = |name: &str| v[name].as_f64().unwrap_or(f64::NAN);
        Cell {
            locks: v["locks"].as_u64().unwrap_or(0) as usize,
            acquire_secs: f("acquire_secs"),
            release_secs: f("release_secs"),
            commands_per_sec: f("commands_per_sec"),
            requests_per_sec: f("requests_per_sec"),
            redis_cpu_pct: f("redis_cpu_pct"),
            redis_bytes_per_lock: f("redis_bytes_per_lock"),
            client_bytes_per_lock: f("client_bytes_per_lock"),
            client_cpu_pct: f("client_cpu_pct"),
            lost: v["lost"].as_u64().unwrap_or(0) as usize,
        }
    }
}

/// The parent's side: runs one cell in a child process and reads its result.
pub fn run(url: &str, locks: usize, lease: Duration, window: Duration) -> Cell {
    let exe = std::env::current_exe().expect("path of the bench binary");
    let out = Command::new(exe)
        .env("LOCKWARDEN_BENCH_CHILD", "many")
        .env("LOCKWARDEN_BENCH_CHILD_URL", url)
        .env("LOCKWARDEN_BENCH_CHILD_LOCKS", locks.to_string())
        .env(
            "LOCKWARDEN_BENCH_CHILD_LEASE_MS",
            lease.as_millis().to_string(),
        )
        .env(
            "LOCKWARDEN_BENCH_CHILD_WINDOW_MS",
            window.as_millis().to_string(),
        )
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the many-locks child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD "))
        .unwrap_or_else(|| {
            panic!(
                "many-locks child gave no result ({}):\n{stdout}",
                out.status
            )
        });
    Cell::from_json(&serde_json::from_str(line).expect("child JSON"))
}

/// Reads a number from the child's environment.
fn child_env(name: &str) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} is not set for the many-locks child"))
}

/// The child's side: runs the cell and prints `CHILD {json}`.
pub fn child_main() {
    let url = std::env::var("LOCKWARDEN_BENCH_CHILD_URL").expect("LOCKWARDEN_BENCH_CHILD_URL");
    let locks = child_env("LOCKWARDEN_BENCH_CHILD_LOCKS") as usize;
    let lease = Duration::from_millis(child_env("LOCKWARDEN_BENCH_CHILD_LEASE_MS"));
    let window = Duration::from_millis(child_env("LOCKWARDEN_BENCH_CHILD_WINDOW_MS"));
    let cell = actix_rt::System::new().block_on(measure(url, locks, lease, window));
    println!("CHILD {}", cell.to_json());
}

/// Takes `locks` locks, watches the window, releases them.
async fn measure(url: String, locks: usize, lease: Duration, window: Duration) -> Cell {
    let config = Config::from_url(&url)
        .expect("redis url")
        .watchdog_lease(lease);
    let manager = LockManager::start(config).await.expect("lockwarden start");
    // Warm-up: the scripts are loaded and the manager's first allocations made.
    let guard = manager
        .send(Acquire::new("bench:c:warmup"))
        .await
        .expect("mailbox")
        .expect("warm-up acquire");
    guard.release().await.expect("warm-up release");

    let mut probe = Probe::connect(&url).await;
    let empty = probe.snapshot().await;
    let rss_before = rss_kib();
    let start = Instant::now();
    let guards: Vec<_> = stream::iter(0..locks)
        .map(|i| manager.send(Acquire::new(format!("bench:c:{i}"))))
        .buffer_unordered(IN_FLIGHT)
        .map(|res| res.expect("mailbox").expect("acquire"))
        .collect()
        .await;
    let acquire_secs = start.elapsed().as_secs_f64();

    let before = probe.snapshot().await;
    let cpu_before = process_cpu_secs();
    actix_rt::time::sleep(window).await;
    let after = probe.snapshot().await;
    let client_cpu = process_cpu_secs() - cpu_before;
    let rss_held = rss_kib();
    let held = before.delta(&after, &["evalsha", "eval"]);
    let stored = empty.delta(&before, &[]);
    let lost = guards.iter().filter(|g| g.is_lost().is_some()).count();

    let start = Instant::now();
    // A lock lost during the window answers `Lost` here; it is counted above.
    let _released: Vec<_> = stream::iter(guards)
        .map(|guard| async move { guard.release().await })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    let release_secs = start.elapsed().as_secs_f64();

    let secs = held.wall.as_secs_f64().max(1e-9);
    Cell {
        locks,
        acquire_secs,
        release_secs,
        commands_per_sec: held.commands as f64 / secs,
        requests_per_sec: held.top_level as f64 / secs,
        redis_cpu_pct: held.cpu_percent(),
        redis_bytes_per_lock: stored.memory as f64 / locks as f64,
        client_bytes_per_lock: rss_held.saturating_sub(rss_before) as f64 * 1024.0 / locks as f64,
        client_cpu_pct: 100.0 * client_cpu / secs,
        lost,
    }
}

/// One row of scenario C: the rounds of one K.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    /// Each round's cell.
    pub rounds: Vec<Cell>,
}

impl Merged {
    /// The rounds in which no lock was lost: the only ones whose steady-state
    /// numbers mean anything.
    pub fn healthy(&self) -> impl Iterator<Item = &Cell> {
        self.rounds.iter().filter(|c| c.lost == 0)
    }
}
