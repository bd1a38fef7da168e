//! Deadlocks between processes, and what the caller of the wait that gets
//! `LockError::Deadlock` does: as with a database's deadlock error, it lets go of
//! every lock its unit of work holds and runs the unit again. The others of the
//! cycle go on and are granted once it has let go ([`unit_of_work`] is the
//! pattern; the rest of the file measures it).
//!
//! Run with `cargo run --example deadlock`: it starts itself twice as the two
//! sides of an ABBA deadlock (three trials) on `REDIS_URL`, else
//! `redis://127.0.0.1:6379`, else a private `redis-server`. Two modes run one
//! process each, for tests/service/deadlock_processes.rs (which starts several
//! and reads the JSON line each prints last):
//!
//! - `abba URL ROLE TRIALS TIMEOUT_MS`: role 0 takes `abba:<t>:a` then
//!   `abba:<t>:b`, role 1 the other way round, for trials `t` = 0.. (fresh names
//!   each). Both meet on a count-down latch once each holds its first lock, so
//!   every trial closes a cycle; each side writes when its second wait began
//!   (`abba:<t>:start:<role>`), and the later of the two is when the cycle
//!   closed. Per trial: granted (`G`) or deadlock (`D`), and the time from the
//!   cycle closing to the answer.
//! - `fleet URL ordered|random SECS SEED [PROCESSES]`: units of work that take 2
//!   or 3 of the locks `fleet:0` to `fleet:7`, sorted (one global order, which
//!   cannot deadlock) or in a random order, hold them for 200-800 ms, and let go;
//!   new units start for `SECS` seconds. Every wait (lock, start, end, outcome),
//!   every grant (lock, fencing token, hold interval) and every deadlock (its
//!   cycle) is printed, for the test to check across processes. With
//!   `PROCESSES`, the processes start together (a latch).
//!
//! Times are microseconds of the wall clock, which the processes of one machine
//! share; the deadlock timeout is the library's default (1 s) in `fleet`.

use lockwarden_testkit as support;

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::Addr;
use lockwarden::{Acquire, Config, Deadlock, LockError, LockGuard, LockManager, Locks, Owner};
use redis::AsyncCommands;
use serde_json::{json, Value};

/// Microseconds since the Unix epoch.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A small seeded generator (xorshift64*): the fleet's choices are reproducible
/// from its seed, and the example needs no random-number crate.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    }
}

/// A cycle as the tests read it: for each link, the waiting owner, the lock it
/// waits for and when its wait began (ms).
fn cycle_json(cycle: &Deadlock) -> Value {
    cycle
        .links
        .iter()
        .map(|l| json!({"owner": l.owner, "lock": l.lock, "since_ms": l.since_ms}))
        .collect()
}

/// Everything one process saw, for the JSON line.
#[derive(Default)]
struct Log {
    /// `[lock, start us, end us, "granted" | "deadlock"]`.
    waits: Vec<Value>,
    /// `[lock, token, got us, release called us, release returned us]`.
    grants: Vec<Value>,
    /// `{at_us, cycle}` for each deadlock error.
    deadlocks: Vec<Value>,
    /// The owner field the locks were taken under, once one was.
    field: Option<String>,
}

/// Gives back `held`, newest first, noting when each release was called and
/// when it returned.
async fn release_all(held: &mut Vec<(LockGuard, u64)>, log: &mut Log) -> Result<(), LockError> {
    while let Some((guard, got)) = held.pop() {
        let (name, token) = (guard.name().to_string(), guard.fencing_token());
        let called = now_us();
        guard.release().await?;
        log.grants.push(json!([name, token, got, called, now_us()]));
    }
    Ok(())
}

/// How long a victim waits before it runs its unit again: 10-100 ms.
///
/// Not at once: a released lock is not handed to a waiter of another process
/// (that waiter hears of the release and then asks), so a victim that asks
/// again at once mostly takes back the lock it just let go of and closes the
/// same cycle again, to be broken a deadlock timeout later (a third of the
/// trials of `abba` did without the pause). A few milliseconds are enough
/// for the other waiter's turn; the randomness keeps two victims of
/// successive cycles from retrying in step.
fn pause(rng: &mut Rng) -> Duration {
    Duration::from_millis(10 + rng.below(90))
}

/// The pattern: take `names` in the order given, as one owner, do the work,
/// let go. On `LockError::Deadlock` (this wait was chosen to end a cycle), let
/// go of everything taken so far, pause a moment ([`pause`]) and run the unit
/// again: the other waits of the cycle are granted as soon as this one has let
/// go. Any other error is the caller's. Answers how many times the unit was
/// run again.
async fn unit_of_work(
    manager: &Addr<LockManager>,
    owner: Owner,
    names: &[String],
    work: Duration,
    rng: &mut Rng,
    log: &mut Log,
) -> Result<u32, LockError> {
    let mut again = 0;
    'unit: loop {
        let mut held: Vec<(LockGuard, u64)> = Vec::new();
        for name in names {
            let start = now_us();
            match manager.acquire(Acquire::new(name).owner(owner)).await {
                Ok(guard) => {
                    let got = now_us();
                    log.waits.push(json!([name, start, got, "granted"]));
                    log.field
                        .get_or_insert_with(|| guard.owner_field().to_string());
                    held.push((guard, got));
                }
                Err(LockError::Deadlock(cycle)) => {
                    let at = now_us();
                    log.waits.push(json!([name, start, at, "deadlock"]));
                    log.deadlocks
                        .push(json!({"at_us": at, "cycle": cycle_json(&cycle)}));
                    eprintln!("{cycle}");
                    release_all(&mut held, log).await?;
                    again += 1;
                    actix_rt::time::sleep(pause(rng)).await;
                    continue 'unit;
                }
                Err(e) => return Err(e),
            }
        }
        actix_rt::time::sleep(work).await;
        release_all(&mut held, log).await?;
        return Ok(again);
    }
}

/// Waits until `n` callers (of any process) have reached the latch `name`.
async fn meet(manager: &Addr<LockManager>, name: &str, n: u64) -> Result<(), String> {
    let e = |e: LockError| e.to_string();
    let latch = manager.latch(name).await.map_err(e)?;
    // Whoever comes first sets the count; it cannot open before all have
    // counted down, so a later `try_set_count` never starts a second count.
    latch.try_set_count(n).await.map_err(e)?;
    latch.count_down().await.map_err(e)?;
    match latch.wait_zero(Duration::from_secs(120)).await.map_err(e)? {
        true => Ok(()),
        false => Err(format!("the others never came to {name}")),
    }
}

async fn abba(url: &str, role: u64, trials: u64, timeout: Duration) -> Result<Value, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let config = Config::from_url(url).map_err(|x| e(&x))?;
    let manager = LockManager::start(config.deadlock_timeout(timeout))
        .await
        .map_err(|x| e(&x))?;
    let mut redis = redis::Client::open(url)
        .map_err(|x| e(&x))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|x| e(&x))?;
    let owner = Owner::new();
    let mut rng = Rng::new(role + 1);
    let (mut outcomes, mut after_close, mut cycles) = (String::new(), Vec::new(), Vec::new());
    for t in 0..trials {
        let (a, b) = (format!("abba:{t}:a"), format!("abba:{t}:b"));
        let (first, second) = if role == 0 { (a, b) } else { (b, a) };
        let mut log = Log::default();
        let held = manager
            .acquire(Acquire::new(&first).owner(owner))
            .await
            .map_err(|x| e(&x))?;
        meet(&manager, &format!("abba:{t}:holding"), 2).await?;
        let start = now_us();
        let _: () = redis
            // Gone a minute later, so that a demo run leaves no key of its own.
            .pset_ex(format!("abba:{t}:start:{role}"), start, 60_000)
            .await
            .map_err(|x| e(&x))?;
        let answer = manager.acquire(Acquire::new(&second).owner(owner)).await;
        let end = now_us();
        let other: u64 = redis
            .get(format!("abba:{t}:start:{}", 1 - role))
            .await
            .map_err(|x| e(&x))?;
        after_close.push((end.saturating_sub(start.max(other))) as f64 / 1000.0);
        match answer {
            Ok(guard) => {
                outcomes.push('G');
                guard.release().await.map_err(|x| e(&x))?;
                held.release().await.map_err(|x| e(&x))?;
            }
            Err(LockError::Deadlock(cycle)) => {
                outcomes.push('D');
                cycles.push(cycle_json(&cycle));
                if t == 0 {
                    println!("{cycle}");
                }
                // What a victim's caller does: let go, pause, run the unit again.
                held.release().await.map_err(|x| e(&x))?;
                actix_rt::time::sleep(pause(&mut rng)).await;
                let names = [first.clone(), second.clone()];
                unit_of_work(&manager, owner, &names, Duration::ZERO, &mut rng, &mut log)
                    .await
                    .map_err(|x| e(&x))?;
            }
            Err(other) => return Err(format!("trial {t}: {other}")),
        }
        meet(&manager, &format!("abba:{t}:done"), 2).await?;
    }
    let worst = after_close.iter().copied().fold(0.0, f64::max);
    println!(
        "role {role}: {trials} trials, {} deadlock errors, {} granted, the slowest answer {worst:.0} ms after the cycle closed",
        outcomes.matches('D').count(),
        outcomes.matches('G').count()
    );
    Ok(json!({
        "mode": "abba", "role": role, "trials": trials, "outcomes": outcomes,
        "after_close_ms": after_close, "cycles": cycles,
    }))
}

async fn fleet(url: &str, random: bool, secs: u64, seed: u64, n: u64) -> Result<Value, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let config = Config::from_url(url).map_err(|x| e(&x))?;
    let manager = LockManager::start(config).await.map_err(|x| e(&x))?;
    if n > 1 {
        meet(&manager, "fleet:start", n).await?;
    }
    let owner = Owner::new();
    let mut rng = Rng::new(seed);
    let mut log = Log::default();
    let (mut units, mut again) = (0u64, 0u32);
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        let mut picked: Vec<u64> = (0..8).collect();
        for i in (1..picked.len()).rev() {
            picked.swap(i, rng.below(i as u64 + 1) as usize);
        }
        picked.truncate(2 + rng.below(2) as usize);
        if !random {
            picked.sort_unstable();
        }
        let names: Vec<String> = picked.iter().map(|i| format!("fleet:{i}")).collect();
        let work = Duration::from_millis(200 + rng.below(600));
        again += unit_of_work(&manager, owner, &names, work, &mut rng, &mut log)
            .await
            .map_err(|x| e(&x))?;
        units += 1;
    }
    let longest = log
        .waits
        .iter()
        .filter_map(|w| Some(w[2].as_u64()? - w[1].as_u64()?))
        .max()
        .unwrap_or(0);
    eprintln!(
        "{units} units, {} waits, {} deadlock errors ({again} units run again), longest wait {} ms",
        log.waits.len(),
        log.deadlocks.len(),
        longest / 1000
    );
    Ok(json!({
        "mode": "fleet", "order": if random { "random" } else { "ordered" },
        "units": units, "again": again, "longest_wait_ms": longest / 1000,
        "owner": log.field,
        "waits": log.waits, "grants": log.grants, "deadlocks": log.deadlocks,
    }))
}

/// No arguments: both sides of three ABBA trials, as two processes of this
/// example, their lines printed as they come.
fn demo() -> ExitCode {
    let (url, _server) = match support::find_redis() {
        Ok(found) => found,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(me) = std::env::current_exe() else {
        eprintln!("cannot find this example's binary");
        return ExitCode::FAILURE;
    };
    // Both started before either is waited for: each meets the other per trial.
    let sides: Vec<_> = (0..2)
        .map(|role| {
            std::process::Command::new(&me)
                .args(["abba", &url, &role.to_string(), "3", "1000"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
        })
        .collect();
    let mut ok = true;
    for side in sides {
        match side.and_then(std::process::Child::wait_with_output) {
            Ok(out) if out.status.success() => {
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    if !line.starts_with('{') {
                        println!("{line}");
                    }
                }
            }
            other => {
                eprintln!("a side failed: {other:?}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        return demo();
    }
    let number = |i: usize| args.get(i).and_then(|v| v.parse::<u64>().ok());
    let run = |args: &[String]| -> Result<Value, String> {
        let system = actix_rt::System::new();
        match args {
            [mode, url, ..] if mode == "abba" => match (number(2), number(3), number(4)) {
                (Some(role @ 0..=1), Some(trials), Some(ms)) => {
                    system.block_on(abba(url, role, trials, Duration::from_millis(ms)))
                }
                _ => Err("abba URL ROLE(0|1) TRIALS TIMEOUT_MS".into()),
            },
            [mode, url, order, ..] if mode == "fleet" => match (number(3), number(4)) {
                (Some(secs), Some(seed)) if order == "ordered" || order == "random" => {
                    let n = number(5).unwrap_or(1);
                    system.block_on(fleet(url, order == "random", secs, seed, n))
                }
                _ => Err("fleet URL ordered|random SECS SEED [PROCESSES]".into()),
            },
            _ => Err("usage: deadlock [abba ... | fleet ...] (none: a demo)".into()),
        }
    };
    match run(&args) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
