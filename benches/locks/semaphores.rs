//! Scenario S, semaphores: C concurrent callers in one process take one permit of
//! one semaphore and give it back in a loop, for each kind (plain, fair,
//! permit-expirable), with as many permits as callers (nobody waits: the cost
//! of the path) and with a quarter of that (callers wait for each other).
//!
//! What each pair costs in Redis commands is printed beside the rate: the
//! change that makes every take and give-back count once (an op marker written
//! by the scripts) shows there as script-internal commands, not as round trips.
//! Opt-in (`LOCKWARDEN_BENCH_SCENARIOS=S`): it compares lockwarden with itself
//! across commits, not with other libraries (none has these semaphores).

use std::rc::Rc;
use std::time::{Duration, Instant};

use lockwarden::{Config, LockManager, Locks, PermitSemaphore, Semaphore};

use crate::probe::Probe;

/// The kinds of semaphore the scenario runs.
const KINDS: [&str; 3] = ["plain", "fair", "expirable"];

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// The kind.
    pub kind: &'static str,
    /// Concurrent callers.
    pub callers: usize,
    /// Permits of the semaphore.
    pub permits: u32,
    /// Take+give-back pairs a second.
    pub per_sec: f64,
    /// Redis commands per pair (script-internal ones included).
    pub commands: f64,
    /// Top-level commands (round trips) per pair.
    pub round_trips: f64,
    /// Redis CPU per pair, in microseconds.
    pub redis_cpu_us: f64,
}

/// Runs every kind at `callers` callers, with `callers` and `callers / 4`
/// permits, each cell for `length`.
pub fn run(url: &str, callers: usize, length: Duration) -> Vec<Row> {
    let mut rows = Vec::new();
    for kind in KINDS {
        for permits in [callers as u32, (callers as u32 / 4).max(1)] {
            rows.push(cell(url, kind, callers, permits, length));
        }
    }
    rows
}

/// One kind at one size, in an actix System of its own.
fn cell(url: &str, kind: &'static str, callers: usize, permits: u32, length: Duration) -> Row {
    let url = url.to_string();
    actix_rt::System::new().block_on(async move {
        let config = Config::from_url(&url).expect("url");
        let m = LockManager::start(config).await.expect("manager");
        let name = format!("bench:s:{kind}:{permits}:{}", std::process::id());
        let mut probe = Probe::connect(&url).await;
        let pairs = match kind {
            "expirable" => {
                let sem = m
                    .send(PermitSemaphore::new(&name))
                    .await
                    .expect("up")
                    .expect("sem");
                sem.try_set_permits(permits).await.expect("set");
                let sem = Rc::new(sem);
                let before = probe.snapshot().await;
                let (n, took) = loop_for(length, callers, move || {
                    let sem = sem.clone();
                    async move {
                        let p = sem.acquire(1, None).await.expect("taken");
                        p.release().await.expect("given back");
                    }
                })
                .await;
                (n, took, before)
            }
            _ => {
                let sem = m
                    .send(Semaphore::new(&name).fair(kind == "fair"))
                    .await
                    .expect("up")
                    .expect("sem");
                sem.try_set_permits(permits).await.expect("set");
                let sem = Rc::new(sem);
                let before = probe.snapshot().await;
                let (n, took) = loop_for(length, callers, move || {
                    let sem = sem.clone();
                    async move {
                        let p = sem.acquire(1).await.expect("taken");
                        p.release().await.expect("given back");
                    }
                })
                .await;
                (n, took, before)
            }
        };
        let (n, took, before) = pairs;
        let after = probe.snapshot().await;
        let delta = before.delta(&after, &["evalsha", "eval"]);
        m.shutdown().await;
        let per = |x: u64| x as f64 / n.max(1) as f64;
        Row {
            kind,
            callers,
            permits,
            per_sec: n as f64 / took.as_secs_f64(),
            commands: per(delta.commands),
            round_trips: per(delta.top_level),
            redis_cpu_us: delta.cpu * 1e6 / n.max(1) as f64,
        }
    })
}

/// Runs `callers` tasks, each repeating `pair` until `length` is over; answers
/// the pairs done and the time taken.
async fn loop_for<F, Fut>(length: Duration, callers: usize, pair: F) -> (u64, Duration)
where
    F: Fn() -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let start = Instant::now();
    let deadline = start + length;
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let pair = pair.clone();
            actix_rt::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    pair().await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("caller task");
    }
    (total, start.elapsed())
}

/// Prints the table (rows from every round, merged by cell as medians).
pub fn table(rows: &[Row]) {
    if rows.is_empty() {
        return;
    }
    println!("\n## S: semaphores, take + give back one permit (pairs/s, median of rounds)\n");
    println!(
        "| kind | C | permits | pairs/s | commands/pair | round trips/pair | Redis CPU µs/pair |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut cells: Vec<(&str, usize, u32)> = rows
        .iter()
        .map(|r| (r.kind, r.callers, r.permits))
        .collect();
    cells.dedup();
    cells.sort_by_key(|c| {
        (
            KINDS.iter().position(|k| *k == c.0),
            c.1,
            std::cmp::Reverse(c.2),
        )
    });
    cells.dedup();
    for (kind, callers, permits) in cells {
        let mut of: Vec<&Row> = rows
            .iter()
            .filter(|r| r.kind == kind && r.callers == callers && r.permits == permits)
            .collect();
        of.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
        let mid = of[of.len() / 2];
        println!(
            "| {kind} | {callers} | {permits} | {:.0} | {:.2} | {:.2} | {:.1} |",
            mid.per_sec, mid.commands, mid.round_trips, mid.redis_cpu_us
        );
        println!(
            "{{\"scenario\":\"S\",\"kind\":\"{kind}\",\"callers\":{callers},\"permits\":{permits},\"pairs_per_sec\":{:.0},\"commands_per_pair\":{:.3},\"round_trips_per_pair\":{:.3},\"redis_cpu_us_per_pair\":{:.1}}}",
            mid.per_sec, mid.commands, mid.round_trips, mid.redis_cpu_us
        );
    }
}
