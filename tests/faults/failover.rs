//! Failover: each fault is made for real against a real server (killed pub/sub
//! connections, a restarted Redis with its data gone, a Redis frozen with SIGSTOP past
//! the lease, replies lost mid-call) and the test checks what a lock user relies on:
//! waiters are still served promptly, holders are told when their lock is lost, and
//! no two holders are ever told they hold the lock at once.

use crate::support;

use std::time::{Duration, Instant};

use actix::prelude::*;
use lockwarden::{Acquire, Config, GetStats, LockError, LockLost, LostReason, ReleaseOutcome};
use support::{eventually, hold, manager, raw, RedisServer};

const LEASE: Duration = Duration::from_millis(600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Short timeouts and backoff, so that faults are noticed in test time.
fn fast(c: Config) -> Config {
    c.watchdog_lease(LEASE)
        .response_timeout(ms(200))
        .connection_timeout(ms(200))
        .reconnect_backoff(ms(20), ms(200))
}

/// How many clients are subscribed to a lock's unlock channel.
fn subscribers(server: &RedisServer, name: &str) -> i64 {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let n: Vec<(String, i64)> = raw(server, &["PUBSUB", "NUMSUB", &channel]);
    n.first().map_or(0, |(_, c)| *c)
}

async fn wait_subscribed(server: &RedisServer, name: &str) {
    let ok = eventually(Duration::from_secs(5), || subscribers(server, name) == 1).await;
    assert!(ok, "nobody subscribed to {name}'s channel");
}

/// The pub/sub connection is killed while a waiter waits: the subscriber is
/// restarted, resubscribes, and the waiter is woken by the next unlock message, far
/// sooner than the holder's 30 s TTL or its 30 s fallback poll.
#[actix_rt::test]
async fn waiter_is_woken_after_its_pubsub_connection_was_killed() {
    let server = RedisServer::start();
    let holder = manager(&server, |c| c).await;
    let waiter = manager(&server, |c| {
        fast(c).max_retry_interval(Duration::from_secs(30))
    })
    .await;
    let guard = hold(&holder, "k1", |a| a).await;
    let waiting = actix_rt::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .send(Acquire::new("k1").wait(Duration::from_secs(20)))
                .await
        }
    });
    wait_subscribed(&server, "k1").await;

    let killed: i64 = raw(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(killed >= 1);
    let back = eventually(Duration::from_secs(5), || subscribers(&server, "k1") == 1).await;
    assert!(back, "the subscriber did not resubscribe");
    let stats = waiter.send(GetStats).await.expect("running");
    assert!(stats.reconnects >= 1, "{stats:?}");

    let released = Instant::now();
    guard.release().await.expect("released");
    let g = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("acquired");
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "woke after {:?}",
        released.elapsed()
    );
    g.release().await.expect("released");
}

/// The unlock message is published while the waiter's pub/sub connection is being
/// killed, so it never arrives; the resync after the reconnect still serves the
/// waiter at once.
#[actix_rt::test]
async fn unlock_published_during_the_disconnect_is_not_missed() {
    let server = RedisServer::start();
    // A foreign holder with a 30 s TTL, released by hand below.
    let _: i64 = raw(&server, &["HSET", "k2", "foreign:1", "1"]);
    let _: i64 = raw(&server, &["PEXPIRE", "k2", "30000"]);
    let waiter = manager(&server, |c| {
        fast(c).max_retry_interval(Duration::from_secs(30))
    })
    .await;
    let waiting = actix_rt::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .send(Acquire::new("k2").wait(Duration::from_secs(20)))
                .await
        }
    });
    wait_subscribed(&server, "k2").await;

    // In one transaction: drop every pub/sub connection, then free the lock and
    // publish. A client marked for closing gets no more output, so the message is lost.
    let start = Instant::now();
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .cmd("DEL")
        .arg("k2")
        .cmd("PUBLISH")
        .arg("redisson_lock__channel:{k2}")
        .arg("0")
        .query(&mut server.conn())
        .expect("transaction");
    let g = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("acquired");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "served after {:?}",
        start.elapsed()
    );
    g.release().await.expect("released");
}

/// An actor that records the `LockLost` messages it gets.
struct LossLog(std::sync::Arc<std::sync::Mutex<Vec<LockLost>>>);
impl Actor for LossLog {
    type Context = Context<Self>;
}
impl Handler<LockLost> for LossLog {
    type Result = ();
    fn handle(&mut self, msg: LockLost, _: &mut Context<Self>) {
        self.0.lock().expect("not poisoned").push(msg);
    }
}

/// Redis restarts on the same port with its data gone: the holder is told its lock
/// is lost (through `lost()` and a `LockLost` message), the waiter in another
/// manager acquires, scripts reload by themselves, and tokens keep increasing.
#[actix_rt::test]
async fn redis_restart_loses_holders_and_serves_waiters() {
    let mut server = RedisServer::start();
    let holder = manager(&server, fast).await;
    let waiter = manager(&server, fast).await;
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watcher = LossLog(log.clone()).start();
    let guard = hold(&holder, "k3", |a| a.on_lost(watcher.recipient())).await;
    let waiting = actix_rt::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .send(Acquire::new("k3").wait(Duration::from_secs(10)))
                .await
        }
    });
    wait_subscribed(&server, "k3").await;

    server.restart();
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("told within 3 s");
    assert!(
        matches!(reason, LostReason::OwnerGone | LostReason::Unreachable),
        "{reason:?}"
    );
    let g = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("waiter served after the restart");
    assert!(g.fencing_token() > guard.fencing_token());
    let got = eventually(Duration::from_secs(1), || {
        !log.lock().expect("not poisoned").is_empty()
    })
    .await;
    assert!(got, "no LockLost message");
    let msg = log.lock().expect("not poisoned")[0].clone();
    assert_eq!(
        (msg.name.as_str(), msg.owner_field.as_str()),
        ("k3", guard.owner_field())
    );
    assert!(matches!(guard.release().await, Err(LockError::Lost(_))));
    // The holder's manager works again, scripts reloaded (NOSCRIPT handled).
    let again = hold(&holder, "k3-other", |a| a).await;
    again.release().await.expect("released");
    g.release().await.expect("released");
}

/// Redis is frozen (SIGSTOP) for longer than the lease: the holder is told its lock
/// is lost before the waiter is told it acquired, and the waiter's token is larger.
#[actix_rt::test]
async fn pause_past_the_lease_never_leaves_two_holders() {
    let mut server = RedisServer::start();
    let holder = manager(&server, fast).await;
    let waiter = manager(&server, fast).await;
    let guard = hold(&holder, "k4", |a| a).await;
    let old_token = guard.fencing_token();
    let lost_watch = actix_rt::spawn(async move {
        let reason = guard.lost().await;
        (Instant::now(), reason)
    });
    let waiting = actix_rt::spawn({
        let waiter = waiter.clone();
        async move {
            let g = waiter
                .send(Acquire::new("k4").wait(Duration::from_secs(15)))
                .await;
            (Instant::now(), g)
        }
    });
    wait_subscribed(&server, "k4").await;

    server.pause();
    actix_rt::time::sleep(LEASE * 2 + ms(300)).await;
    server.resume();

    let (lost_at, reason) = tokio::time::timeout(Duration::from_secs(5), lost_watch)
        .await
        .expect("holder told")
        .expect("task");
    assert!(
        matches!(reason, LostReason::Unreachable | LostReason::OwnerGone),
        "{reason:?}"
    );
    let (acquired_at, g) = waiting.await.expect("task");
    let g = g
        .expect("running")
        .expect("waiter acquires after the resume");
    assert!(
        lost_at <= acquired_at,
        "the old holder still believed it held the lock"
    );
    assert!(g.fencing_token() > old_token);
    g.release().await.expect("released");
}

/// While Redis is down longer than a waiter's deadline, the waiter gets its error
/// on time, and so does a new request.
#[actix_rt::test]
async fn waiters_get_their_error_on_time_while_redis_is_down() {
    let mut server = RedisServer::start();
    let holder = manager(&server, fast).await;
    let m = manager(&server, fast).await;
    let _guard = hold(&holder, "k5", |a| a).await;
    let waiting = actix_rt::spawn({
        let m = m.clone();
        async move {
            let start = Instant::now();
            (
                m.send(Acquire::new("k5").wait(ms(800))).await,
                start.elapsed(),
            )
        }
    });
    wait_subscribed(&server, "k5").await;
    server.kill();
    let (res, took) = waiting.await.expect("task");
    assert!(
        matches!(
            res.expect("running"),
            Err(LockError::Timeout { .. } | LockError::Redis(_))
        ),
        "expected a timeout or a Redis error"
    );
    assert!(took < ms(800) + ms(700), "answered after {took:?}");

    let start = Instant::now();
    let res = m
        .send(Acquire::new("k5-new").wait(ms(300)))
        .await
        .expect("running");
    assert!(
        matches!(res, Err(LockError::Timeout { .. } | LockError::Redis(_))),
        "{res:?}"
    );
    assert!(
        start.elapsed() < ms(300) + ms(700),
        "answered after {:?}",
        start.elapsed()
    );
}

/// `SCRIPT FLUSH` between calls is invisible to callers: scripts reload, renewal
/// keeps working.
#[actix_rt::test]
async fn script_flush_is_invisible() {
    let server = RedisServer::start();
    let m = manager(&server, fast).await;
    let g = hold(&m, "k6", |a| a).await;
    let _: () = raw(&server, &["SCRIPT", "FLUSH"]);
    actix_rt::time::sleep(LEASE * 2).await; // several renewals after the flush
    assert!(g.is_lost().is_none(), "renewal failed after SCRIPT FLUSH");
    assert_eq!(
        g.release().await.expect("release after flush"),
        ReleaseOutcome::Released
    );
    let _: () = raw(&server, &["SCRIPT", "FLUSH"]);
    let g = hold(&m, "k6", |a| a).await;
    g.release().await.expect("released");
    assert_eq!(m.send(GetStats).await.expect("running").renewals_failed, 0);
}

/// A release whose reply is lost (Redis frozen until the client times out) is
/// retried with the same request id: the caller learns the true outcome, the lock
/// is free, and nothing was released twice.
#[actix_rt::test]
async fn release_with_a_lost_reply_reports_the_true_outcome() {
    let mut server = RedisServer::start();
    let m = manager(&server, |c| fast(c).watchdog_lease(Duration::from_secs(10))).await;
    let g = hold(&m, "k7", |a| a).await;
    server.pause();
    let releasing = actix_rt::spawn(async move { g.release().await });
    actix_rt::time::sleep(ms(700)).await; // several response timeouts
    server.resume();
    let outcome = tokio::time::timeout(Duration::from_secs(5), releasing)
        .await
        .expect("release answered")
        .expect("task");
    assert_eq!(outcome.expect("released"), ReleaseOutcome::Released);
    let exists: i64 = raw(&server, &["EXISTS", "k7"]);
    assert_eq!(exists, 0, "the lock was left held");
}

/// An acquisition whose reply is lost has an unknown outcome: it is resolved before
/// the caller is answered, so the caller holds exactly one hold and its release
/// frees the lock.
#[actix_rt::test]
async fn acquire_with_a_lost_reply_is_resolved_before_answering() {
    let mut server = RedisServer::start();
    let m = manager(&server, |c| fast(c).watchdog_lease(Duration::from_secs(10))).await;
    // Load the scripts first: on a cold server the attempts sent during the pause
    // would only get NOSCRIPT and take nothing, which would hide the problem.
    hold(&m, "warm-up", |a| a)
        .await
        .release()
        .await
        .expect("released");
    server.pause();
    let acquiring = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("k8").wait(Duration::from_secs(10)))
                .await
        }
    });
    actix_rt::time::sleep(ms(700)).await;
    server.resume();
    let g = tokio::time::timeout(Duration::from_secs(8), acquiring)
        .await
        .expect("answered")
        .expect("task")
        .expect("running")
        .expect("acquired");
    let count: String = raw(&server, &["HGET", "k8", g.owner_field()]);
    assert_eq!(
        count, "1",
        "the caller would hold more than its guard accounts for"
    );
    assert_eq!(
        g.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let exists: i64 = raw(&server, &["EXISTS", "k8"]);
    assert_eq!(exists, 0);
}

/// With the default 30 s lease (renewal every 10 s), a Redis restarted empty is
/// noticed at the reconnect: the renewer checks every held lock at once, so the
/// holder is told within 2 s of the restart, not a renewal period or two later.
#[actix_rt::test]
async fn a_lock_lost_in_a_restart_is_reported_right_after_the_reconnect() {
    let mut server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let guard = hold(&m, "restart-default-lease", |a| a).await;
    server.restart();
    let restarted = std::time::Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .unwrap_or_else(|_| panic!("not told within 2 s of the restart\n{}", server.log()));
    assert_eq!(reason, LostReason::OwnerGone);
    eprintln!("told {:?} after the restart", restarted.elapsed());
}
