//! The count-down latch (issue 14, part 3) on a real Redis: every waiter of every
//! manager wakes once the count reaches zero, also when the message was missed
//! (resync after a resubscribe, fallback timer); Redisson's layout; bad input
//! refused with nothing written.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{LockError, Locks, NameError};
use support::{eventually, manager, raw, RedisServer};

/// Waits until `channel` has `n` subscribers.
async fn subscribers(server: &RedisServer, channel: &str, n: i64) -> bool {
    eventually(Duration::from_secs(10), || {
        let got: Vec<(String, i64)> = raw(server, &["PUBSUB", "NUMSUB", channel]);
        got.first().is_some_and(|(_, c)| *c == n)
    })
    .await
}

/// Three managers with three waiters each: the second count down opens all nine,
/// well before their fallback timer (30 s) could have.
#[actix_rt::test]
async fn every_waiter_of_every_manager_wakes_at_zero() {
    let server = RedisServer::start();
    let mut latches = Vec::new();
    for _ in 0..3 {
        let m = manager(&server, |c| c.max_retry_interval(Duration::from_secs(30))).await;
        latches.push(m.latch("batch").await.expect("handle"));
    }
    assert!(latches[0].try_set_count(2).await.expect("set"));
    assert!(!latches[1]
        .try_set_count(7)
        .await
        .expect("second set refused"));
    let mut waiters = Vec::new();
    for i in 0..9 {
        let l = latches[i % 3].clone();
        waiters.push(actix_rt::spawn(async move {
            l.wait_zero(Duration::from_secs(25)).await
        }));
    }
    let channel = "redisson_countdownlatch__channel__{batch}";
    assert!(
        subscribers(&server, channel, 3).await,
        "one subscription per manager"
    );
    assert_eq!(latches[2].count_down().await.expect("down"), 1);
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "opened at 1");
    let opened = Instant::now();
    assert_eq!(latches[1].count_down().await.expect("down"), 0);
    for w in waiters {
        assert!(
            w.await.expect("task").expect("answered"),
            "a waiter timed out"
        );
    }
    assert!(opened.elapsed() < Duration::from_secs(10));
    assert_eq!(latches[0].count().await.expect("read"), 0);
}

/// A zero reached without a message (the key deleted behind the latch's back)
/// still opens the waiter: at once when the subscriber reconnects (resync), and
/// by the fallback timer otherwise.
#[actix_rt::test]
async fn a_missed_message_is_caught_by_resync_and_by_the_timer() {
    let server = RedisServer::start();
    let slow = manager(&server, |c| c.max_retry_interval(Duration::from_secs(60))).await;
    let fast = manager(&server, |c| {
        c.max_retry_interval(Duration::from_millis(300))
    })
    .await;
    let by_resync = slow.latch("quiet").await.expect("handle");
    let by_timer = fast.latch("quiet").await.expect("handle");
    by_resync.try_set_count(1).await.expect("set");
    let w1 = {
        let l = by_resync.clone();
        actix_rt::spawn(async move { l.wait_zero(Duration::from_secs(40)).await })
    };
    let w2 = {
        let l = by_timer.clone();
        actix_rt::spawn(async move { l.wait_zero(Duration::from_secs(40)).await })
    };
    assert!(subscribers(&server, "redisson_countdownlatch__channel__{quiet}", 2).await);
    let _: i64 = raw(&server, &["DEL", "quiet"]); // zero, and nobody told
    let started = Instant::now();
    assert!(
        w2.await.expect("task").expect("answered"),
        "the timer did not open it"
    );
    actix_rt::time::sleep(Duration::from_millis(200)).await;
    assert!(!w1.is_finished(), "opened without a message or a resync");
    let _: i64 = raw(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(
        w1.await.expect("task").expect("answered"),
        "resync did not open it"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// A wait on a latch that stays closed answers `false` at its timeout; one on an
/// open latch `true` at once.
#[actix_rt::test]
async fn wait_zero_keeps_its_timeout() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let l = m.latch("slow").await.expect("handle");
    assert!(l
        .wait_zero(Duration::from_secs(5))
        .await
        .expect("open latch"));
    l.try_set_count(1).await.expect("set");
    let started = Instant::now();
    assert!(!l
        .wait_zero(Duration::from_millis(300))
        .await
        .expect("answered"));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// Redisson's layout: the count in a string at the bare name, `1` published on
/// `redisson_countdownlatch__channel__{name}` for a new count, `0` when it
/// reaches zero, and the key deleted then.
#[actix_rt::test]
async fn the_count_follows_the_redisson_layout() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let l = m.latch("{t}:jobs").await.expect("handle");
    let channel = "redisson_countdownlatch__channel__{{t}:jobs}";
    let (tx, rx) = std::sync::mpsc::channel();
    let mut conn = server.conn();
    std::thread::spawn(move || {
        let mut pubsub = conn.as_pubsub();
        pubsub.subscribe(channel).expect("subscribe");
        while let Ok(msg) = pubsub.get_message() {
            let _ = tx.send(msg.get_payload::<String>().unwrap_or_default());
        }
    });
    assert!(subscribers(&server, channel, 1).await);
    assert!(!l.exists().await.expect("exists"), "never set");
    assert!(l.try_set_count(2).await.expect("set"));
    assert!(l.exists().await.expect("exists"));
    assert_eq!(raw::<String>(&server, &["GET", "{t}:jobs"]), "2");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).expect("message"),
        "1"
    );
    l.count_down().await.expect("down");
    l.count_down().await.expect("down");
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).expect("message"),
        "0"
    );
    assert_eq!(raw::<i64>(&server, &["EXISTS", "{t}:jobs"]), 0);
    assert!(!l.exists().await.expect("exists"), "open again at zero");
    assert_eq!(l.count_down().await.expect("down on open"), 0);
    assert_eq!(raw::<i64>(&server, &["EXISTS", "{t}:jobs"]), 0);
}

/// A zero or too large count and a name with unbalanced braces get typed errors
/// and write nothing.
#[actix_rt::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let l = m.latch("bad").await.expect("handle");
    assert!(matches!(
        l.try_set_count(0).await,
        Err(LockError::InvalidAmount { .. })
    ));
    assert!(matches!(
        l.try_set_count(u64::MAX).await,
        Err(LockError::InvalidAmount { .. })
    ));
    assert!(matches!(
        m.latch("a{b").await,
        Err(LockError::InvalidName(NameError::CrossSlot))
    ));
    // Every manager keeps its registry entry (who holds what); nothing else.
    assert_eq!(support::data_key_count(&server), 0);
}
