//! The permit-expirable semaphore (issue 14, part 2) on a real Redis: a dead
//! holder's permits come back within one lease, the watchdog keeps a live
//! holder's, a lease that runs out or a reclaimed permit is reported through
//! `lost()`, Redisson's layout (ids as 16 bytes in `{name}:timeout`, expiries on
//! the Redis clock), bad input refused with nothing written.

use crate::support;

use std::time::{Duration, Instant};

use actix::prelude::*;
use lockwarden::{LockError, LockManager, LostReason, PermitSemaphore, PermitSemaphoreHandle};
use support::{manager, raw, RedisServer};

const LEASE: Duration = Duration::from_millis(1000);

async fn handle(m: &Addr<LockManager>, name: &str) -> PermitSemaphoreHandle {
    m.send(PermitSemaphore::new(name))
        .await
        .expect("running")
        .expect("handle")
}

/// The server's clock in ms.
fn redis_now(server: &RedisServer) -> u64 {
    let (s, us): (u64, u64) = raw(server, &["TIME"]);
    s * 1000 + us / 1000
}

/// A holder on an actix system of its own thread takes every permit without a
/// lease and its system is stopped (nothing renews any more): a waiter
/// elsewhere gets a permit within one lease of the stop.
#[actix_rt::test]
async fn a_dead_holders_permits_come_back_within_one_lease() {
    let server = RedisServer::start();
    let config = support::config(&server).watchdog_lease(LEASE);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runner = System::new();
        runner.block_on(async move {
            let m = LockManager::start(config).await.expect("manager");
            let s = m
                .send(PermitSemaphore::new("pool"))
                .await
                .expect("running")
                .expect("handle");
            s.try_set_permits(2).await.expect("set");
            let g = s.acquire(2, None).await.expect("taken");
            std::mem::forget(g); // "crashes" holding them
            tx.send(System::current()).expect("test waits");
        });
        let _ = runner.run();
    });
    let system = rx.recv().expect("holder started");
    let m = manager(&server, |c| c.watchdog_lease(LEASE)).await;
    let s = handle(&m, "pool").await;
    // Held past several renewals while alive.
    actix_rt::time::sleep(LEASE * 2).await;
    assert!(
        s.try_acquire(1, None).await.expect("asked").is_none(),
        "renewal failed"
    );
    system.stop();
    let stopped = Instant::now();
    let g = s
        .acquire_within(2, Duration::from_secs(10), None)
        .await
        .expect("the dead holder's permits came back");
    let after = stopped.elapsed();
    assert!(
        after <= LEASE + Duration::from_millis(900),
        "came back after {after:?}"
    );
    g.release().await.expect("released");
}

/// Three managers, twelve tasks taking permits of a 3-permit semaphore again
/// and again, half with a lease and half renewed by the watchdog: never more
/// than 3 held at once, and all 3 back at the end.
#[actix_rt::test]
async fn never_more_holders_than_permits_across_managers() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let server = RedisServer::start();
    let mut handles = Vec::new();
    for _ in 0..3 {
        let m = manager(&server, |c| c.watchdog_lease(LEASE)).await;
        handles.push(handle(&m, "busy").await);
    }
    handles[0].try_set_permits(3).await.expect("set");
    let (held, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (s, held, peak) = (handles[i % 3].clone(), held.clone(), peak.clone());
        let lease = (i % 2 == 0).then_some(Duration::from_secs(30));
        tasks.push(actix_rt::spawn(async move {
            for _ in 0..4 {
                let g = s
                    .acquire_within(1, Duration::from_secs(60), lease)
                    .await
                    .expect("taken");
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                actix_rt::time::sleep(Duration::from_millis(2)).await;
                held.fetch_sub(1, Ordering::SeqCst);
                g.release().await.expect("released");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (2..=3).contains(&peak),
        "peak of {peak} permits held at once out of 3"
    );
    assert_eq!(handles[1].available().await.expect("read"), 3);
    assert_eq!(raw::<i64>(&server, &["ZCARD", "{busy}:timeout"]), 0);
}

/// A lease that runs out tells the holder `LeaseExpired`, the permit goes to a
/// waiter, and the late release answers `Lost`.
#[actix_rt::test]
async fn an_expired_lease_is_reported_lost() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = handle(&m, "short").await;
    s.try_set_permits(1).await.expect("set");
    let g = s
        .acquire(1, Some(Duration::from_millis(300)))
        .await
        .expect("taken");
    let waiter = {
        let s = s.clone();
        actix_rt::spawn(async move { s.acquire_within(1, Duration::from_secs(10), None).await })
    };
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost()).await;
    assert_eq!(reason.expect("told"), LostReason::LeaseExpired);
    let next = waiter
        .await
        .expect("task")
        .expect("the waiter got the expired permit");
    assert!(matches!(
        g.release().await,
        Err(LockError::Lost(LostReason::LeaseExpired))
    ));
    next.release().await.expect("released");
    assert_eq!(s.available().await.expect("read"), 1);
}

/// An operator deleting the taken permits: the watchdog's next renewal finds
/// them gone and the holder is told `OwnerGone`.
#[actix_rt::test]
async fn a_reclaimed_permit_is_reported_lost() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c.watchdog_lease(LEASE)).await;
    let s = handle(&m, "gone").await;
    s.try_set_permits(1).await.expect("set");
    let g = s.acquire(1, None).await.expect("taken");
    let _: i64 = raw(&server, &["DEL", "{gone}:timeout"]);
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost()).await;
    assert_eq!(reason.expect("told"), LostReason::OwnerGone);
}

/// Redisson's layout: permits available in a string at the name, the taken
/// ones in `{name}:timeout` as 16-byte ids scored with their expiry, which is
/// the Redis clock plus the lease; a release by id (as a Java client does it)
/// gives the permit back.
#[actix_rt::test]
async fn permits_follow_the_redisson_layout() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = handle(&m, "api").await;
    s.try_set_permits(3).await.expect("set");
    let g = s
        .acquire(2, Some(Duration::from_secs(60)))
        .await
        .expect("taken");
    let now = redis_now(&server);
    assert_eq!(raw::<String>(&server, &["GET", "api"]), "1");
    let taken: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg("{api}:timeout")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut server.conn())
        .expect("zrange");
    assert_eq!(taken.len(), 2);
    let mut hex: Vec<String> = taken
        .iter()
        .map(|(id, _)| id.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    hex.sort();
    let mut ids = g.ids().to_vec();
    ids.sort();
    assert_eq!(hex, ids, "ids are stored as the bytes they spell");
    for (_, expiry) in &taken {
        let left = *expiry as i64 - now as i64;
        assert!(
            (55_000..=60_000).contains(&left),
            "expiry {left} ms from Redis's now"
        );
    }
    // A Java client releasing one by id: ZREM + INCRBY + PUBLISH.
    let id: Vec<u8> = taken[0].0.clone();
    let _: i64 = redis::cmd("ZREM")
        .arg("{api}:timeout")
        .arg(id)
        .query(&mut server.conn())
        .expect("zrem");
    let _: i64 = raw(&server, &["INCRBY", "api", "1"]);
    assert_eq!(s.available().await.expect("read"), 2);
    assert!(
        matches!(
            g.release().await,
            Err(LockError::Lost(LostReason::OwnerGone))
        ),
        "one of the two was not ours to give back any more"
    );
    assert_eq!(s.available().await.expect("read"), 3);
}

/// Zero permits and a zero lease get typed errors; nothing is written.
#[actix_rt::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = handle(&m, "bad").await;
    assert!(matches!(
        s.acquire(0, None).await,
        Err(LockError::InvalidAmount { .. })
    ));
    assert!(matches!(
        s.try_acquire(1, Some(Duration::ZERO)).await,
        Err(LockError::InvalidLease { .. })
    ));
    assert!(matches!(
        s.add_permits(0).await,
        Err(LockError::InvalidAmount { .. })
    ));
    assert!(matches!(
        m.send(PermitSemaphore::new("}x")).await.expect("running"),
        Err(LockError::InvalidName(_))
    ));
    // Every manager keeps its registry entry (who holds what); nothing else.
    assert_eq!(support::data_key_count(&server), 0);
}

/// A permit-expirable semaphore lockwarden sets up is labelled as one
/// (`lockwarden_kind:{<name>}` = `permit-semaphore`), and an operator sees it by
/// that kind with its permits out.
#[actix_rt::test]
async fn its_kind_label_and_permits_out_are_what_an_operator_sees() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let sem = handle(&m, "crawl").await;
    assert!(sem.try_set_permits(3).await.expect("set"));
    let permit = sem
        .acquire(1, Some(Duration::from_secs(60)))
        .await
        .expect("taken");
    assert_eq!(
        raw::<String>(&server, &["GET", "lockwarden_kind:{crawl}"]),
        "permit-semaphore"
    );
    let admin = lockwarden::Admin::connect(&support::config(&server))
        .await
        .expect("admin");
    let seen = admin
        .synchronizer("crawl")
        .await
        .expect("read")
        .expect("there");
    assert_eq!(
        (seen.kind, seen.labelled, seen.value, seen.taken),
        (
            lockwarden::SynchronizerKind::PermitSemaphore,
            true,
            2,
            Some(1)
        )
    );
    permit.release().await.expect("given back");
}
