//! MultiLock (all of several locks as one) and RedLock (one lock on a majority of
//! independent servers), on real redis-server processes.

use crate::support;

use std::time::Duration;

use futures::future::join_all;
use lockwarden::{Acquire, LockError, MultiLock, RedLock};
use support::{hold, manager, raw, RedisServer};

/// Two MultiLocks over the same two locks on two servers, listed in opposite
/// orders, from two managers each, many times over: they never deadlock and never
/// overlap.
#[actix_rt::test]
async fn opposite_orders_never_deadlock_or_overlap() {
    let (s1, s2) = (RedisServer::start(), RedisServer::start());
    let (a1, a2) = (manager(&s1, |c| c).await, manager(&s2, |c| c).await);
    let (b1, b2) = (manager(&s1, |c| c).await, manager(&s2, |c| c).await);
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let runs = [(a1, a2, false), (b1, b2, true)].map(|(m1, m2, flip)| {
        let inside = inside.clone();
        actix_rt::spawn(async move {
            for _ in 0..20 {
                let members = if flip {
                    vec![(&m2, "y"), (&m1, "x")]
                } else {
                    vec![(&m1, "x"), (&m2, "y")]
                };
                let g = MultiLock::new(members)
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await
                    .expect("acquired within 10 s: no deadlock");
                let was = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(was, 0, "two MultiLocks inside at once");
                actix_rt::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                g.release().await.expect("released");
            }
        })
    });
    for run in join_all(runs).await {
        run.expect("task");
    }
}

/// When the last member cannot be had within the wait, the ones taken first are
/// released before the error comes back (checked in Redis).
#[actix_rt::test]
async fn a_failure_on_the_last_member_releases_the_first() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let other = manager(&server, |c| c).await;
    let _z = hold(&other, "z", |a| a).await;
    let err = MultiLock::new([(&m, "a"), (&m, "z")])
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .expect_err("z is held elsewhere");
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    let exists: i64 = raw(&server, &["EXISTS", "a"]);
    assert_eq!(exists, 0, "the first member was left held");
}

/// Bad input is refused before anything reaches Redis.
#[actix_rt::test]
async fn bad_multilocks_and_redlocks_are_refused_and_write_nothing() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let empty: [(&actix::Addr<lockwarden::LockManager>, &str); 0] = [];
    for (what, res) in [
        ("empty", MultiLock::new(empty).acquire().await.err()),
        (
            "twice",
            MultiLock::new([(&m, "a"), (&m, "a")]).acquire().await.err(),
        ),
        (
            "bad name",
            MultiLock::new([(&m, "a"), (&m, "")]).acquire().await.err(),
        ),
        ("no node", RedLock::new(&[], "r").acquire().await.err()),
        (
            "same node twice",
            RedLock::new(&[m.clone(), m.clone()], "r")
                .acquire()
                .await
                .err(),
        ),
    ] {
        let err = res.unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(
            matches!(err, LockError::InvalidConfig(_) | LockError::InvalidName(_)),
            "{what}: {err:?}"
        );
    }
    let keys = support::data_keys(&server);
    assert!(keys.is_empty(), "something was written: {keys:?}");
}

/// RedLock over three nodes: exclusive; granted with one node frozen (in about the
/// per-node wait); refused with two frozen, leaving nothing held on the healthy
/// node.
#[actix_rt::test]
async fn redlock_needs_a_majority_and_leaves_nothing_behind() {
    let mut servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut nodes = Vec::new();
    let mut others = Vec::new();
    for s in &servers {
        nodes.push(manager(s, |c| c).await);
        others.push(manager(s, |c| c).await);
    }
    let g = RedLock::new(&nodes, "pay")
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .expect("acquired");
    assert_eq!(g.holding(), 3);
    let refused = RedLock::new(&others, "pay")
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(refused.is_err(), "a second RedLock got in");
    g.release().await.expect("released");

    servers[0].pause();
    let began = std::time::Instant::now();
    let g = RedLock::new(&nodes, "pay2")
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("a majority is enough");
    assert!(
        began.elapsed() < Duration::from_secs(1),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(g.holding(), 2);
    g.release().await.expect("released");

    servers[1].pause();
    let err = RedLock::new(&nodes, "pay3")
        .wait(Duration::from_millis(500))
        .acquire()
        .await
        .expect_err("one node of three is not a majority");
    assert!(err.is_retryable(), "{err:?}");
    let left: i64 = raw(&servers[2], &["EXISTS", "pay3"]);
    assert_eq!(left, 0, "the healthy node was left holding");
    servers[0].resume();
    servers[1].resume();
}

/// A RedLock in watchdog mode survives one node dying and reports `lost()` when
/// a second dies, before the validity ends.
#[actix_rt::test]
async fn redlock_is_lost_when_the_majority_is() {
    let mut servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut nodes = Vec::new();
    for s in &servers {
        nodes.push(manager(s, |c| c.watchdog_lease(Duration::from_millis(900))).await);
    }
    let g = RedLock::new(&nodes, "job")
        .acquire()
        .await
        .expect("acquired");
    servers[0].kill();
    // Several leases later it is still held by the two others.
    actix_rt::time::sleep(Duration::from_millis(2000)).await;
    assert!(g.holding() >= 2, "held by {}", g.holding());
    let still = nodes[1]
        .send(Acquire::new("job").wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(still.is_err(), "node 2 let another owner in");
    servers[1].kill();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("told within a lease or two");
    assert!(
        matches!(
            reason,
            lockwarden::LostReason::Unreachable | lockwarden::LostReason::OwnerGone
        ),
        "{reason:?}"
    );
}
