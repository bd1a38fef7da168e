//! A release no replica could confirm, then a failover: the manager keeps it
//! and redoes it on the new master, so the lock is not blind for the rest of
//! its lease (`src/wire/replicas/kept.rs`).

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockManager};
use support::{RedisServer, Sentinel, MASTER_NAME};

/// Waits until Sentinel `url` names the server on `port` as the master;
/// answers how long after `since` that was.
fn promoted(url: String, port: u16, since: Instant) -> std::thread::JoinHandle<Option<Duration>> {
    std::thread::spawn(move || {
        let client = redis::Client::open(url).expect("url");
        while since.elapsed() < Duration::from_secs(30) {
            let named: Option<(String, u16)> = client.get_connection().ok().and_then(|mut c| {
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(MASTER_NAME)
                    .query(&mut c)
                    .ok()
            });
            if named.is_some_and(|(_, p)| p == port) {
                return Some(since.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    })
}

/// Master, replica, three Sentinels: the replica is frozen and its link cut,
/// so the release goes with no replica to confirm it; the master is killed
/// and the replica (resumed) promoted with the old hold. The manager, living
/// on, redoes the release there: a waiter gets the lock within a second of
/// the promotion, not after the 30 s lease.
#[actix_rt::test]
async fn a_release_no_replica_confirmed_is_redone_after_a_failover() {
    let _heavy = support::heavy();
    let (log, _logging) = support::Captured::install();
    let mut master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
        .expect("config")
        .sync_replicas(1, Duration::from_millis(200));
    let m = LockManager::start(config.clone()).await.expect("started");
    let held = m
        .send(Acquire::new("kept").lease(Duration::from_secs(30)))
        .await
        .expect("running")
        .expect("granted");
    assert!(
        support::holder_on(&replica, "kept").is_some(),
        "the grant reached the replica"
    );

    replica.pause();
    let _: redis::Value = support::raw(&master, &["CLIENT", "KILL", "TYPE", "replica"]);
    // Once the manager counts no replica, a grant goes without a WAIT (before,
    // it is refused as not replicated).
    let none = support::until_no_replica_counted(&m, "probe").await;
    assert!(
        none,
        "the manager never stopped counting the frozen replica\n{}",
        log.text()
    );
    held.release().await.expect("released on the master");
    assert!(
        log.text()
            .contains("a release no replica confirmed is kept"),
        "{}",
        log.text()
    );

    master.kill();
    let killed = Instant::now();
    replica.resume();
    let watch = promoted(urls[0].clone(), replica.port(), killed);
    let waiter = actix_rt::spawn({
        let m = m.clone();
        async move {
            let g = m
                .send(Acquire::new("kept").wait(Duration::from_secs(40)))
                .await;
            (g, killed.elapsed())
        }
    });
    // The promoted replica had the hold; it is gone once the release is redone.
    let freed = support::eventually(Duration::from_secs(30), || {
        support::holder_on(&replica, "kept").is_none()
    })
    .await;
    let free = killed.elapsed();
    assert!(
        freed,
        "the old hold stayed on the new master\n{}",
        log.text()
    );
    let promoted = watch
        .join()
        .expect("watcher")
        .expect("Sentinel promoted the replica within 30 s");
    let (g, blind) = waiter.await.expect("task");
    let g = g.expect("running").expect("granted on the new master");
    eprintln!("free {free:?}, granted {blind:?}; Sentinel named the new master after {promoted:?}");
    // Measured: free 0.1-0.5 s after Sentinel names the new master; the waiter
    // (its pub/sub connection reconnecting, its retries backing off) gets it
    // within another second. Without the kept release: 30 s, the whole lease.
    assert!(
        free <= promoted + Duration::from_secs(1),
        "the lock stayed held {free:?}, the failover took {promoted:?}\n{}",
        log.text()
    );
    assert!(
        blind <= promoted + Duration::from_secs(3),
        "granted after {blind:?}"
    );
    g.release().await.expect("released");
}
