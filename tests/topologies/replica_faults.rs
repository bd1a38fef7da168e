//! Replica confirmation when a replica is in trouble but the master is not:
//! frozen (SIGSTOP, its link kept) or slower than the fast path's short `WAIT`.
//! A frozen one costs about one confirmation timeout, once; a slow one costs
//! nothing but time. (A killed replica, and the failovers, are in
//! `replicas.rs`.)

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockError, LockManager};
use support::{eventually, holder_on, RedisServer, Sentinel, MASTER_NAME};

/// A replica frozen with SIGSTOP (its link kept): the first grant after the
/// freeze is not confirmed and is answered `NotReplicated` (a zero wait) and
/// undone; within about one confirmation timeout the frozen replica stops
/// counting, so a waiter gets the lock and a held lock keeps being renewed (it
/// is not reported lost); once the replica is back, it confirms grants again.
#[actix_rt::test]
async fn a_frozen_replica_costs_about_one_confirmation_timeout() {
    let _heavy = support::heavy();
    let (log, _logging) = support::Captured::install();
    let master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let config = Config::from_url(&master.url())
        .expect("url")
        .watchdog_lease(Duration::from_millis(1500))
        .sync_replicas(1, Duration::from_millis(200));
    let m = LockManager::start(config).await.expect("started");
    let held = m
        .send(Acquire::new("renewed"))
        .await
        .expect("running")
        .expect("granted while the replica is up");
    assert!(
        holder_on(&replica, "renewed").is_some(),
        "{}\n{}",
        log.text(),
        master.info("replication")
    );

    replica.pause();
    let began = Instant::now();
    let now = m
        .send(Acquire::new("refused").wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(
        matches!(
            now,
            Err(LockError::NotReplicated {
                acked: 0,
                wanted: 1
            })
        ),
        "{now:?}"
    );
    assert!(now.as_ref().is_err_and(LockError::is_retryable));
    let undone = eventually(Duration::from_secs(5), || {
        holder_on(&master, "refused").is_none()
    })
    .await;
    assert!(undone, "the unconfirmed grant was not undone on the master");

    let granted = m
        .send(Acquire::new("refused").wait(Duration::from_secs(5)))
        .await
        .expect("running")
        .expect("granted once the frozen replica stopped counting");
    let blind = began.elapsed();
    granted.release().await.expect("released");
    // Two more leases: the renewals go on without the frozen replica.
    actix_rt::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        held.is_lost(),
        None,
        "a held lock was lost to a frozen replica"
    );

    replica.resume();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let g = m
            .send(Acquire::new("confirmed").wait(Duration::from_secs(2)))
            .await
            .expect("running")
            .expect("granted");
        let on_replica = holder_on(&replica, "confirmed").is_some();
        g.release().await.expect("released");
        if on_replica {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not confirm grants again"
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    held.release().await.expect("held to the end");
    eprintln!("a frozen replica held grants back for {blind:?}");
}

/// Under Sentinel, a waiter that gets a lock released just after a replica
/// froze has it about one confirmation timeout later: its grant's `WAIT` runs
/// out, the replica stops counting once the Sentinels vouch for the master,
/// and the grant is redone without a `WAIT`. Issue 36's goal is the timeout
/// plus 1 s; its probe of 8 `lockwarden run` loops was blind two timeouts
/// (2.1 s with 1 s) until a change on a short connection waited for the count
/// its shortfall asked for (`node/replicas/look.rs`, whose unit test pins that
/// step; this in-process run did not show the second `WAIT` without it).
#[actix_rt::test]
async fn a_waiter_pays_one_wait_for_a_replica_frozen_under_it() {
    let _heavy = support::heavy();
    let master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    // A long timeout sets one WAIT (2 s) well apart from two (4 s).
    let timeout = Duration::from_secs(2);
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
        .expect("config")
        .response_timeout(Duration::from_secs(6))
        .sync_replicas(1, timeout);
    let holder = LockManager::start(config.clone()).await.expect("started");
    let waiter = LockManager::start(config).await.expect("started");
    let held = holder
        .send(Acquire::new("handed"))
        .await
        .expect("running")
        .expect("granted while the replica is up");
    let waiting = actix_rt::spawn(async move {
        waiter
            .send(Acquire::new("handed").wait(Duration::from_secs(15)))
            .await
    });
    // The waiter has found the lock taken and listens for its release.
    let listening = eventually(Duration::from_secs(5), || {
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redisson_lock__channel:{handed}")
            .query::<(String, i64)>(&mut master.conn())
            .is_ok_and(|(_, n)| n > 0)
    })
    .await;
    assert!(listening, "the waiter did not subscribe");

    replica.pause();
    let began = Instant::now();
    // Its script runs and tells the waiter; its WAIT runs out meanwhile.
    let released = actix_rt::spawn(async move { held.release().await });
    let granted = waiting
        .await
        .expect("joined")
        .expect("running")
        .expect("granted once the frozen replica stopped counting");
    let took = began.elapsed();
    granted.release().await.expect("released");
    let _ = released.await;
    replica.resume();
    assert!(
        took < timeout * 7 / 4,
        "granted {took:?} after the freeze: more than one WAIT for the frozen replica"
    );
}

/// A replica slower than the fast path's short WAIT (its link to the master
/// delayed 40 ms each way) still confirms every change: the short WAIT runs
/// out, the call asks again with `CLIENT ID` and the whole timeout on the same
/// connection, and the grant is on the replica when it returns. None is
/// refused or left unconfirmed, and the slowness doubts no replica.
#[actix_rt::test]
async fn a_replica_slower_than_the_short_wait_still_confirms() {
    let _heavy = support::heavy();
    let master = RedisServer::start();
    let link = support::Proxy::start(master.port());
    let replica = RedisServer::start_replica_through(&master, link.port());
    let m = LockManager::start(Config::from_url(&master.url()).expect("url"))
        .await
        .expect("started");
    link.set(support::Mode::Delay(Duration::from_millis(40)));
    let waits = master.commandstats().get("wait").copied().unwrap_or(0);
    for i in 0..5 {
        let name = format!("slow:{i}");
        let guard = m
            .send(Acquire::new(&name).wait(Duration::ZERO))
            .await
            .expect("running")
            .unwrap_or_else(|e| panic!("{name}: a slow replica refused a grant: {e}"));
        assert!(
            holder_on(&replica, &name).is_some(),
            "{name} is not on the replica when the grant returns"
        );
        guard.release().await.expect("released");
    }
    let asked = master.commandstats().get("wait").copied().unwrap_or(0) - waits;
    // A short WAIT and a whole one for (nearly) each of the 10 changes: the
    // 80 ms round trip to the replica outlasts the 50 ms short WAIT.
    assert!(
        asked > 15,
        "{asked} WAITs for 10 changes: the short WAIT was not asked again"
    );
}
