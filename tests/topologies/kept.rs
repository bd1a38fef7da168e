//! A release no replica could confirm, then a failover: the manager keeps it
//! and redoes it on the new master, so the lock is not blind for the rest of
//! its lease (`src/wire/replicas/kept.rs`). One Sentinel topology and one
//! failover serve every lock kind: the exclusive lock, the fair lock, and the
//! read-write lock's read and write holds.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockManager};
use support::{RedisServer, Sentinel, MASTER_NAME};

/// Waits until Sentinel `url` names the server on `port` as the master;
/// answers how long after `since` that was.
pub(crate) fn promoted(
    url: String,
    port: u16,
    since: Instant,
) -> std::thread::JoinHandle<Option<Duration>> {
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

/// How a lock of one kind is asked for.
type Kind = fn(Acquire) -> Acquire;

/// The locks held through the failover, by kind: (name, how it is taken).
const KINDS: [(&str, Kind); 4] = [
    ("kept", |a| a),
    ("kept:fair", Acquire::fair),
    ("kept:read", Acquire::read),
    ("kept:write", Acquire::write),
];

/// Master, replica, three Sentinels: the replica is frozen and its link cut,
/// so the releases (one of each lock kind) go with no replica to confirm them;
/// the master is killed and the replica (resumed) promoted with the old holds.
/// The manager, living on, redoes every release there: each lock is free
/// within a second of the promotion, not after the 30 s lease, and a waiter
/// gets the exclusive one.
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
    let mut held = Vec::new();
    for (name, kind) in KINDS {
        let g = m
            .send(kind(Acquire::new(name).lease(Duration::from_secs(30))))
            .await
            .expect("running")
            .unwrap_or_else(|e| panic!("{name} granted: {e}"));
        held.push(g);
    }
    assert!(
        support::eventually(Duration::from_secs(5), || KINDS
            .iter()
            .all(|(name, _)| support::holder_on(&replica, name).is_some()))
        .await,
        "the grants reached the replica"
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
    for g in held {
        g.release().await.expect("released on the master");
    }
    let kept = log
        .text()
        .matches("a release no replica confirmed is kept")
        .count();
    assert!(kept >= KINDS.len(), "{kept} kept\n{}", log.text());

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
    // The promoted replica had the holds; each is gone once its release is
    // redone.
    let mut free = Vec::new();
    for (name, _) in KINDS {
        let freed = support::eventually(Duration::from_secs(30), || {
            support::holder_on(&replica, name).is_none()
        })
        .await;
        assert!(
            freed,
            "the old hold of {name} stayed on the new master\n{}",
            log.text()
        );
        free.push((name, killed.elapsed()));
    }
    // Redone on the master the connection followed to, they are settled: a
    // command would exit now rather than at the end of their window.
    let settled = support::eventually(Duration::from_secs(2), || {
        log.text()
            .contains("kept releases redone on the new master")
    })
    .await;
    assert!(settled, "{}", log.text());
    let promoted = watch
        .join()
        .expect("watcher")
        .expect("Sentinel promoted the replica within 30 s");
    let (g, blind) = waiter.await.expect("task");
    let g = g.expect("running").expect("granted on the new master");
    eprintln!("free {free:?}, granted {blind:?}; Sentinel named the new master after {promoted:?}");
    // Measured: free 0.1-0.5 s after Sentinel names the new master; the waiter
    // (its pub/sub connection reconnecting, its retries backing off) gets it
    // within another second. Without the kept releases: 30 s, the whole lease.
    for (name, free) in free {
        assert!(
            free <= promoted + Duration::from_secs(1),
            "{name} stayed held {free:?}, the failover took {promoted:?}\n{}",
            log.text()
        );
    }
    assert!(
        blind <= promoted + Duration::from_secs(3),
        "granted after {blind:?}"
    );
    g.release().await.expect("released");
}
