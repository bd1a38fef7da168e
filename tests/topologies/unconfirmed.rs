//! Lock changes that no replica confirmed are never silent: a grant made while
//! no replica can answer is held but says so (`LockGuard::confirmed`), and with
//! `Config::refuse_unconfirmed_grants` it is refused and given back instead. A
//! replica exactly in sync with a master that has written nothing yet (offset
//! 0 on both sides) counts, so the first grant of a new manager there waits
//! for it.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockError, LockManager};
use support::{eventually, raw, RedisServer};

/// `WAIT` calls the master has answered so far.
fn waits(master: &RedisServer) -> u64 {
    master.commandstats().get("wait").copied().unwrap_or(0)
}

/// A manager started on a master with a synced replica and no write yet sends
/// `WAIT` behind its first grant (a replica at offset 0 was not counted, and the
/// first changes of such a process went unconfirmed).
#[actix_rt::test]
async fn a_manager_on_an_unwritten_master_waits_for_its_synced_replica() {
    let (log, _logging) = support::Captured::install();
    let master = RedisServer::start();
    // No periodic PING to the replica (it would be the master's first write),
    // and no 5 s wait before the diskless sync.
    let _: () = raw(
        &master,
        &["CONFIG", "SET", "repl-ping-replica-period", "3600"],
    );
    let _: () = raw(&master, &["CONFIG", "SET", "repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let _replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let synced = eventually(Duration::from_secs(20), || {
        let info = master.info("replication");
        info.contains("state=online,offset=0,lag=0") && info.contains("master_repl_offset:0")
    })
    .await;
    assert!(synced, "{}", master.info("replication"));
    // A replica fresh from a sync may acknowledge the first write only with its
    // once-a-second ACK (0.1-0.9 s seen here), which a loaded machine can push
    // past the default 1 s `WAIT`: this test is about whom the count includes,
    // so it gives the `WAIT` room.
    let config = Config::from_url(&master.url())
        .expect("url")
        .response_timeout(Duration::from_secs(10))
        .sync_replicas(1, Duration::from_secs(5));
    let m = LockManager::start(config).await.expect("started");
    let before = waits(&master);
    let guard = m
        .send(Acquire::new("first"))
        .await
        .expect("running")
        .expect("granted");
    assert!(
        waits(&master) > before,
        "no WAIT behind the first grant\n{}\n{}",
        master.info("replication"),
        log.text()
    );
    assert!(
        guard.confirmed(),
        "the first grant was not confirmed\n{}\n{}",
        master.info("replication"),
        log.text()
    );
    guard.release().await.expect("released");
}

/// A replica frozen (SIGSTOP) after the manager counted it: the next grant's
/// `WAIT` runs out, the replica stops counting, and the grant is made without
/// it: held, but `confirmed()` says false. A manager that refuses such grants
/// gives them back and answers `NotReplicated`, leaving the lock free.
#[actix_rt::test]
async fn a_grant_no_replica_confirmed_says_so_or_is_refused() {
    let master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let sync = Duration::from_millis(300);
    let keeps = LockManager::start(support::config(&master).sync_replicas(1, sync))
        .await
        .expect("started");
    let refuses = LockManager::start(
        support::config(&master)
            .sync_replicas(1, sync)
            .refuse_unconfirmed_grants(true),
    )
    .await
    .expect("started");
    let confirmed = keeps
        .send(Acquire::new("u:confirmed"))
        .await
        .expect("running")
        .expect("granted");
    assert!(confirmed.confirmed(), "a replica answered");

    replica.pause();
    let began = Instant::now();
    let kept = keeps
        .send(Acquire::new("u:kept").wait(Duration::from_secs(10)))
        .await
        .expect("running")
        .expect("granted without the replica");
    assert!(!kept.confirmed(), "no replica could confirm it");
    assert!(support::exists(&master, "u:kept"));
    eprintln!("unconfirmed grant after {:?}", began.elapsed());

    let refused = refuses
        .send(Acquire::new("u:refused").wait(Duration::from_secs(1)))
        .await
        .expect("running");
    assert!(
        matches!(refused, Err(LockError::NotReplicated { .. })),
        "{refused:?}"
    );
    // The last grant is given back behind the answer.
    let given_back = eventually(Duration::from_secs(5), || {
        !support::exists(&master, "u:refused")
    })
    .await;
    assert!(
        given_back,
        "{:?}",
        raw::<Vec<String>>(&master, &["HKEYS", "u:refused"])
    );
    replica.resume();
    kept.release().await.expect("released");
    confirmed.release().await.expect("released");
}
