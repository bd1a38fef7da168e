//! Quickstart: two lock managers (as two processes would be) take turns on one lock,
//! and every hold is printed with its fencing token, how long the new holder waited
//! and whom it took over from. At the end the example checks what it claims (one
//! holder at a time, the managers alternating, every fencing token larger than the
//! one before) and exits 1 if any of it failed.
//!
//! The lock is a fair one and each holder releases only once the other manager is
//! queued for it (seen with [`Inspect`]), so the handoffs really go from one manager
//! to the other: with a plain lock and no waiting, a manager that releases and asks
//! again at once often takes the lock back itself.
//!
//! Run with `cargo run --example quickstart`. It uses `REDIS_URL` if set, else it
//! starts a private `redis-server` (from the PATH) on a free port for as long as it
//! runs: it never writes to a server you did not name.

use lockwarden_testkit as support;

use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix::Addr;
use lockwarden::{Acquire, Config, Inspect, LockManager};

/// The lock both managers take turns on.
const LOCK: &str = "quickstart:report";
/// Holds per manager.
const ROUNDS: usize = 6;
/// Longest a holder waits for the other manager to queue (far above what it takes).
const QUEUE_LIMIT: Duration = Duration::from_secs(5);

#[actix::main]
async fn main() -> ExitCode {
    let (url, _private_server) = match support::private_redis() {
        Ok(found) => found,
        Err(why) => {
            eprintln!("quickstart: {why}");
            return ExitCode::from(2);
        }
    };
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One hold, as the holder saw it.
#[derive(Debug)]
struct Hold {
    /// The manager that held the lock.
    manager: &'static str,
    /// Its fencing token.
    token: u64,
}

/// What both managers share in this process: the holds so far, and who is holding
/// now (to check that nobody else is).
#[derive(Debug, Default)]
struct Log {
    holds: Vec<Hold>,
    holding: Option<&'static str>,
}

impl Log {
    /// Holds `manager` has had so far.
    fn holds_of(&self, manager: &str) -> usize {
        self.holds.iter().filter(|h| h.manager == manager).count()
    }
}

async fn run(url: &str) -> Result<(), String> {
    println!("Using Redis at {url}");
    let start = |url: &str| {
        let config = Config::from_url(url).map_err(|e| e.to_string());
        async move { LockManager::start(config?).await.map_err(|e| e.to_string()) }
    };
    let a = start(url).await?;
    let b = start(url).await?;
    let log = Rc::new(RefCell::new(Log::default()));
    let started = Instant::now();
    // A asks first, so that the order of the holds is A, B, A, B, ...
    let worker_a = actix_rt::spawn(worker("A", "B", a.clone(), log.clone(), started));
    if !support::eventually(QUEUE_LIMIT, || log.borrow().holds_of("A") == 1).await {
        return Err("manager A did not get the free lock".into());
    }
    let worker_b = actix_rt::spawn(worker("B", "A", b, log.clone(), started));
    let (done_a, done_b) = (worker_a.await, worker_b.await);
    done_a.map_err(|e| e.to_string())??;
    done_b.map_err(|e| e.to_string())??;
    let took = started.elapsed();

    // Check what the summary line claims, from what was recorded.
    let log = log.borrow();
    let holds = &log.holds;
    let between = holds
        .windows(2)
        .filter(|w| w[0].manager != w[1].manager)
        .count();
    if holds.len() != 2 * ROUNDS {
        return Err(format!("{} holds, expected {}", holds.len(), 2 * ROUNDS));
    }
    if between != holds.len() - 1 {
        return Err(format!(
            "only {between} of {} handoffs went to the other manager",
            holds.len() - 1
        ));
    }
    if let Some(w) = holds.windows(2).find(|w| w[1].token <= w[0].token) {
        return Err(format!(
            "fencing token {} (manager {}) came after {} (manager {}): not increasing",
            w[1].token, w[1].manager, w[0].token, w[0].manager
        ));
    }
    println!(
        "Done in {took:.1?}: {} holds, {between} handoffs between managers A and B, \
         one holder at a time, fencing tokens {}..{} each larger than the one before.",
        holds.len(),
        holds[0].token,
        holds[holds.len() - 1].token
    );
    Ok(())
}

/// One manager's worker: takes the lock [`ROUNDS`] times; each time it "works" until
/// the other manager is queued for the lock (while the other still has rounds to
/// go), then releases, so that the next hold is the other manager's.
async fn worker(
    me: &'static str,
    other: &'static str,
    manager: Addr<LockManager>,
    log: Rc<RefCell<Log>>,
    started: Instant,
) -> Result<(), String> {
    for _ in 0..ROUNDS {
        let asked = Instant::now();
        let guard = manager
            .send(Acquire::new(LOCK).fair().wait(Duration::from_secs(10)))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("manager {me}: {e}"))?;
        let waited = asked.elapsed();
        let token = guard.fencing_token();
        {
            let mut log = log.borrow_mut();
            if let Some(holder) = log.holding {
                return Err(format!("manager {me} got the lock while {holder} held it"));
            }
            log.holding = Some(me);
            let from = match log.holds.last() {
                Some(last) => format!("from manager {}", last.manager),
                None => "first".to_string(),
            };
            println!(
                "{:>7.1?}  manager {me} holds the lock: token {token}, waited {waited:.1?} ({from})",
                started.elapsed()
            );
            log.holds.push(Hold { manager: me, token });
        }
        // The critical section: in a real service, pass the token along to the
        // resource so it can refuse a stale holder. Here it lasts until the other
        // manager is queued, so the lock goes to it next.
        let other_goes_on = log.borrow().holds_of(other) < ROUNDS;
        if other_goes_on && !someone_queued(&manager).await {
            return Err(format!(
                "manager {other} did not queue for the lock within {QUEUE_LIMIT:?}"
            ));
        }
        log.borrow_mut().holding = None;
        guard
            .release()
            .await
            .map_err(|e| format!("manager {me}: releasing: {e}"))?;
    }
    Ok(())
}

/// Whether a waiter is queued for the lock, asked every few milliseconds for at
/// most [`QUEUE_LIMIT`].
async fn someone_queued(manager: &Addr<LockManager>) -> bool {
    let deadline = Instant::now() + QUEUE_LIMIT;
    while Instant::now() < deadline {
        if let Ok(Ok(info)) = manager.send(Inspect::new(LOCK)).await {
            if !info.queue.is_empty() {
                return true;
            }
        }
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    false
}
