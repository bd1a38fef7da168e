//! Leader election demo: three candidates, each with its own lock manager on its
//! own actix system (as three processes would have), campaign for one name.
//!
//! Run with `cargo run --example leader` (needs `redis-server` on the PATH; it
//! starts its own on a free port). The leader's whole system is stopped (its
//! manager, renewer and candidate die together, as in a crash): the old leader is
//! told `Deposed` at once, and another candidate is elected once the lock's lease
//! runs out, within one lease. That leader then resigns and the last candidate
//! takes over at once. Each leader writes its fencing token to a shared Redis key
//! that only accepts a larger token than it holds. The demo exits 0 only if there
//! were never two leaders at once, every token was larger than the last, every
//! handover happened in time and every deposed leader was told before its
//! successor was elected.

use lockwarden_testkit as support;

use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use lockwarden::{Deposed, DeposedReason, Elected, Leader, LockManager, LostReason, Resign};
use support::RedisServer;

const ELECTION: &str = "leader:demo";
const FENCE: &str = "leader:demo:fence";
const LEASE: Duration = Duration::from_millis(1500);

/// What a candidate's application actor saw, stamped when it saw it.
#[derive(Debug)]
enum Seen {
    Elected { token: u64, fenced: bool },
    Deposed { reason: DeposedReason },
}

/// The application actor of one candidate: on election it writes its token to
/// the shared resource (which keeps only rising tokens), and it reports both
/// events to the demo.
struct App {
    id: usize,
    redis: redis::Connection,
    report: mpsc::Sender<(usize, Seen, Instant)>,
}

impl Actor for App {
    type Context = Context<Self>;
}

impl Handler<Elected> for App {
    type Result = ();

    fn handle(&mut self, msg: Elected, _: &mut Context<Self>) {
        // The resource's fencing check, done by Redis: a token not above the one
        // it holds is refused.
        let fenced: i64 = redis::Script::new(
            "if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then \
             redis.call('set', KEYS[1], ARGV[1]) return 1 end return 0",
        )
        .key(FENCE)
        .arg(msg.fencing_token)
        .invoke(&mut self.redis)
        .unwrap_or(0);
        let seen = Seen::Elected {
            token: msg.fencing_token,
            fenced: fenced == 1,
        };
        let _ = self.report.send((self.id, seen, Instant::now()));
    }
}

impl Handler<Deposed> for App {
    type Result = ();

    fn handle(&mut self, msg: Deposed, _: &mut Context<Self>) {
        let seen = Seen::Deposed { reason: msg.reason };
        let _ = self.report.send((self.id, seen, Instant::now()));
    }
}

/// The candidates' application actors, on a system of their own that outlives
/// the candidates' (as a supervisor or a log would): so the demo hears a
/// candidate's `Deposed` even when that candidate's system dies.
fn apps(server: &RedisServer, report: mpsc::Sender<(usize, Seen, Instant)>) -> Vec<Addr<App>> {
    let conns: Vec<redis::Connection> = (0..3).map(|_| server.conn()).collect();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runner = System::new();
        runner.block_on(async move {
            let apps = conns
                .into_iter()
                .enumerate()
                .map(|(id, redis)| {
                    App {
                        id,
                        redis,
                        report: report.clone(),
                    }
                    .start()
                })
                .collect();
            tx.send(apps).expect("demo waits");
        });
        let _ = runner.run();
    });
    rx.recv().expect("apps started")
}

/// One candidate on a system of its own thread (its manager, renewer and
/// candidate); answers that system and the candidate's address.
fn candidate(server: &RedisServer, app: Addr<App>) -> (System, Addr<Leader>) {
    let config = support::config(server).watchdog_lease(LEASE);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let runner = System::new();
        runner.block_on(async move {
            let manager = LockManager::start(config).await.expect("manager");
            let leader =
                Leader::campaign(manager, ELECTION, app.clone().recipient(), app.recipient())
                    .await
                    .expect("campaign");
            tx.send((System::current(), leader)).expect("demo waits");
        });
        // Runs until the demo stops this system; the runner then drops every
        // actor on it, the candidate included.
        let _ = runner.run();
    });
    rx.recv().expect("candidate started")
}

/// Waits for the next event, at most `limit`.
fn next(
    rx: &mpsc::Receiver<(usize, Seen, Instant)>,
    limit: Duration,
) -> Option<(usize, Seen, Instant)> {
    rx.recv_timeout(limit).ok()
}

fn main() -> ExitCode {
    let server = RedisServer::start();
    let start = Instant::now();
    let say = |what: String| println!("{:>7.3}s  {what}", start.elapsed().as_secs_f64());
    let (report, events) = mpsc::channel();
    let mut systems = Vec::new();
    let mut leaders = Vec::new();
    for app in apps(&server, report) {
        let (system, leader) = candidate(&server, app);
        systems.push(system);
        leaders.push(leader);
    }
    let mut ok = true;
    let mut check = |good: bool, what: String| {
        say(format!("{} {what}", if good { "ok  " } else { "FAIL" }));
        ok &= good;
    };

    // Act 1: someone is elected.
    let Some((first, Seen::Elected { token, fenced }, _)) = next(&events, Duration::from_secs(10))
    else {
        check(false, "nobody was elected".into());
        return ExitCode::FAILURE;
    };
    check(
        fenced,
        format!("candidate {first} elected with token {token}, accepted by the resource"),
    );
    let mut last_token = token;
    let mut leading = Some(first);
    let quiet = next(&events, Duration::from_millis(500));
    check(
        quiet.is_none(),
        format!("no second leader meanwhile ({quiet:?})"),
    );

    // Act 2: the leader's system dies.
    let killed = Instant::now();
    say(format!(
        "stopping candidate {first}'s system (manager, renewer, candidate)"
    ));
    systems[first].stop();
    let mut deposed_at = None;
    let mut successor = None;
    while successor.is_none() {
        let Some((id, seen, at)) = next(&events, LEASE * 4) else {
            check(false, "no new leader within four leases".into());
            return ExitCode::FAILURE;
        };
        match seen {
            Seen::Deposed { reason } => {
                check(
                    id == first && reason == DeposedReason::Lost(LostReason::ManagerStopped),
                    format!("candidate {id} deposed: {reason:?}"),
                );
                deposed_at = Some(at);
                leading = None;
            }
            Seen::Elected { token, fenced } => {
                let after = at - killed;
                check(
                    leading.is_none(),
                    format!("candidate {id} elected, nobody else leads"),
                );
                check(
                    deposed_at.is_some_and(|d| d <= at),
                    "the old leader was deposed first".into(),
                );
                check(
                    token > last_token && fenced,
                    format!("token {token} > {last_token}, accepted"),
                );
                check(
                    after <= LEASE + Duration::from_millis(500),
                    format!("elected {after:?} after the kill (lease {LEASE:?})"),
                );
                last_token = token;
                leading = Some(id);
                successor = Some(id);
            }
        }
    }
    let second = successor.unwrap_or(first);

    // Act 3: the new leader resigns; the last candidate takes over at once.
    let resigned = Instant::now();
    let answer = System::new().block_on(leaders[second].send(Resign));
    check(
        matches!(answer, Ok(Ok(()))),
        format!("candidate {second} resigned ({answer:?})"),
    );
    let mut third = None;
    while third.is_none() {
        let Some((id, seen, at)) = next(&events, LEASE * 4) else {
            check(false, "no leader after the resignation".into());
            return ExitCode::FAILURE;
        };
        match seen {
            Seen::Deposed { reason } => {
                check(
                    id == second && reason == DeposedReason::Resigned,
                    format!("candidate {id} deposed: {reason:?}"),
                );
                leading = None;
            }
            Seen::Elected { token, fenced } => {
                check(
                    leading.is_none() && id != first && id != second,
                    format!("candidate {id} elected"),
                );
                check(
                    token > last_token && fenced,
                    format!("token {token} > {last_token}, accepted"),
                );
                check(
                    at - resigned < Duration::from_secs(2),
                    format!("elected {:?} after the resignation", at - resigned),
                );
                third = Some(id);
            }
        }
    }
    for system in &systems {
        system.stop();
    }
    if ok {
        say("every check held".into());
        ExitCode::SUCCESS
    } else {
        say("some check failed".into());
        ExitCode::FAILURE
    }
}
