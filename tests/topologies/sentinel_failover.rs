//! Sentinel failovers caught in the middle of a call: a release, a start-up and
//! a grant whose master is frozen while Sentinel promotes its replica. Each ends
//! on the new master, or with an error, never with a lock nobody holds.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockManager};
use support::{RedisServer, Sentinel, MASTER_NAME};

/// A release that a failover catches is retried on the new master: the
/// command's child exits while the master it locked on is dead, the command keeps
/// its release going until Sentinel has promoted the replica and exits 0, and a
/// waiter in another process gets the lock right after, not a whole 30 s lease
/// later (a 2 s budget would end before the failover does, and every waiter
/// would wait out the lease).
#[actix_rt::test]
async fn a_release_caught_by_a_failover_is_retried_on_the_new_master() {
    let _heavy = support::heavy();
    use tokio::io::AsyncBufReadExt;
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    let bin = env!("CARGO_BIN_EXE_lockwarden");
    // The child says it runs, then ends once the test has killed the master.
    let dir = tempfile::tempdir().expect("temp dir");
    let go = dir.path().join("go");
    let script = format!(
        "echo running; while [ ! -e '{}' ]; do sleep 0.05; done",
        go.display()
    );
    let mut holder = tokio::process::Command::new(bin)
        .args(["--sentinel", &urls[0], "--master-name", MASTER_NAME])
        .args(["run", "caught", "--", "sh", "-c", &script])
        .env_remove("REDIS_URL")
        .env_remove("LOCKWARDEN_WATCHDOG_LEASE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run lockwarden");
    let mut lines = tokio::io::BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("the child started within 20 s")
        .expect("stdout");
    assert_eq!(first.as_deref(), Some("running"));
    // The grant reached the replica, so the new master will know the lock.
    assert!(
        support::eventually(Duration::from_secs(5), || support::exists(
            &replica, "caught"
        ))
        .await,
        "the lock never reached the replica"
    );
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str)).expect("config");
    let m = LockManager::start(config).await.expect("started");
    let waiter = actix_rt::spawn({
        let m = m.clone();
        async move {
            let g = m
                .send(Acquire::new("caught").wait(Duration::from_secs(25)))
                .await;
            (g, Instant::now())
        }
    });
    master.kill();
    let killed = Instant::now();
    std::fs::write(&go, b"").expect("tell the child to end");
    let promoted = crate::kept::promoted(sentinels[0].url(), replica.port(), killed);

    let out = tokio::time::timeout(Duration::from_secs(40), holder.wait_with_output())
        .await
        .expect("the command exited")
        .expect("the command ran");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let (granted, at) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter was answered")
        .expect("task");
    let granted = granted
        .expect("running")
        .unwrap_or_else(|e| panic!("the waiter did not get the lock: {e}\n{stderr}"));
    let blind = at - killed;
    let promoted = promoted.join().expect("watcher");
    eprintln!(
        "lock granted again {blind:?} after the master was killed \
         (Sentinel named the new master after {promoted:?})"
    );
    // The failover takes 2-4 s here; a whole lease would be 30 s. Measured: the
    // grant comes 0.2-0.5 s after Sentinel names the new master.
    let promoted = promoted.expect("Sentinel promoted the replica within 30 s");
    assert!(
        blind < promoted + Duration::from_secs(3),
        "the lock stayed blind for {blind:?}, the failover took {promoted:?}\n{stderr}"
    );
    granted.release().await.expect("released on the new master");
}

/// Processes started while a failover is under way (issue 26): with a `--wait`
/// longer than the failover, the command waits for the new master (and says so)
/// and gets the lock, exit 0; a master name no Sentinel monitors is still refused
/// at once, exit 2, with words that say so. (Before, both exited 2 within 5 ms
/// with "Master with given name not found in sentinel".)
#[actix_rt::test]
async fn a_process_started_during_a_failover_waits_for_the_new_master() {
    let _heavy = support::heavy();
    let mut master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let bin = env!("CARGO_BIN_EXE_lockwarden");
    let command = |name: &str, args: &[&str]| {
        let mut cmd = tokio::process::Command::new(bin);
        for s in &sentinels {
            cmd.args(["--sentinel", &s.url()]);
        }
        cmd.args(["--master-name", name])
            .args(args)
            .env_remove("REDIS_URL")
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    master.kill();
    let killed = Instant::now();
    let during = command(
        MASTER_NAME,
        &["run", "started-during", "--wait", "30s", "--", "true"],
    )
    .output();
    let typo = command(
        "no-such-master",
        &["run", "typo", "--wait", "30s", "--", "true"],
    )
    .output();
    let (during, typo) = futures::join!(
        tokio::time::timeout(Duration::from_secs(40), during),
        tokio::time::timeout(Duration::from_secs(40), async {
            let out = typo.await;
            (out, killed.elapsed())
        })
    );
    let during = during.expect("exited in time").expect("ran");
    let took = killed.elapsed();
    let (typo, typo_took) = typo.expect("exited in time");
    let typo = typo.expect("ran");
    let err = String::from_utf8_lossy(&during.stderr);
    assert_eq!(during.status.code(), Some(0), "{err}");
    assert!(err.contains("failover in progress"), "{err}");
    let typo_err = String::from_utf8_lossy(&typo.stderr);
    assert_eq!(typo.status.code(), Some(2), "{typo_err}");
    assert!(typo_err.contains("no Sentinel monitors"), "{typo_err}");
    assert!(
        typo_took < Duration::from_secs(5),
        "{typo_took:?}: {typo_err}"
    );
    eprintln!("started during the failover: granted and done {took:?} after the kill; the typo was refused after {typo_took:?}");
}

/// A master frozen through a failover answers, when it resumes, the grant
/// that waited in its socket as if it were still the master (Sentinel demotes
/// it a moment later). Replica confirmation is off here, so no `WAIT` stands
/// in the way, as with the default when the master has no replica left: only
/// the doubt cast on a master that went silent keeps that grant from the
/// caller. The caller's grant must end up on the master the Sentinels name
/// (taken from the demoted one, it would vanish when that one resyncs as a
/// replica, with the caller holding nothing while it thinks it holds the lock).
#[actix_rt::test]
async fn a_grant_answered_by_a_master_frozen_through_a_failover_is_not_handed_out() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    // A response timeout longer than the failover, so that the call frozen in
    // the old master's socket is still waiting when it resumes.
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
        .expect("config")
        .no_replica_sync()
        .response_timeout(Duration::from_secs(20));
    let m = LockManager::start(config).await.expect("started");
    let warm = m
        .send(Acquire::new("warm"))
        .await
        .expect("running")
        .expect("granted by the first master");
    warm.release().await.expect("released");

    master.pause();
    let pending = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("x").wait(Duration::from_secs(60)))
                .await
        }
    });
    // Resume the old master the moment the replica is promoted: the grant in
    // its socket is answered before Sentinel tells it that it was demoted.
    let promoted = support::eventually(Duration::from_secs(30), || {
        // The replica may refuse a moment, or drop a new connection, while it
        // turns master: ask again.
        let role: redis::RedisResult<Vec<redis::Value>> = replica
            .client()
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .and_then(|mut c| redis::cmd("ROLE").query(&mut c));
        matches!(role.as_deref(), Ok([redis::Value::BulkString(r), ..]) if r == b"master")
    })
    .await;
    master.resume();
    assert!(promoted, "no failover within 30 s\n{}", sentinels[0].log());
    let guard = pending
        .await
        .expect("joined")
        .expect("running")
        .expect("granted in the end");
    let settled = support::eventually(Duration::from_secs(30), || {
        sentinels
            .iter()
            .all(|s| s.master_port() == Some(replica.port()))
    })
    .await;
    assert!(
        settled,
        "the Sentinels did not settle on the promoted replica"
    );
    assert!(
        support::exists(&replica, "x"),
        "the grant the caller holds is not on the master the Sentinels name: it came from the \
         demoted master"
    );
    guard.release().await.expect("released");
}

/// A Sentinel that missed the failover (it watched a master that was already
/// gone and never met the others) keeps naming the dead master, down-flagged.
/// When the new master then loses its replica, the manager asks the Sentinels
/// whether it still is the master: the two that saw the failover say so under
/// the newer configuration epoch, and the stale one is not heeded. Locks go on
/// on the new master (unconfirmed, with no replica left) instead of being
/// refused until the stale Sentinel catches up, which it never does.
#[actix_rt::test]
async fn a_sentinel_that_missed_the_failover_does_not_block_the_new_master() {
    let _heavy = support::heavy();
    let mut master = RedisServer::start();
    let mut replicas = [
        RedisServer::start_replica_of(&master),
        RedisServer::start_replica_of(&master),
    ];
    let mut gone = RedisServer::start();
    let stale = Sentinel::start(&gone, 2);
    gone.kill();
    let sentinels: Vec<Sentinel> = (0..2).map(|_| Sentinel::start(&master, 2)).collect();
    // The stale Sentinel first: it answers as readily as the others.
    let urls: Vec<String> = std::iter::once(&stale)
        .chain(&sentinels)
        .map(Sentinel::url)
        .collect();
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
        .expect("config")
        .watchdog_lease(Duration::from_secs(5));
    let m = LockManager::start(config)
        .await
        .expect("started through the Sentinels");
    let grant = |name: &'static str| {
        let m = m.clone();
        async move {
            let began = Instant::now();
            let asked = m.send(Acquire::new(name).wait(Duration::from_secs(15)));
            let granted = asked.await.expect("running");
            (granted, began.elapsed())
        }
    };
    let (first, _) = grant("before").await;
    first
        .expect("granted on the first master")
        .release()
        .await
        .expect("released");

    master.kill();
    let began = Instant::now();
    let promoted = loop {
        let named = sentinels[0].master_port();
        if let Some(i) = replicas.iter().position(|r| Some(r.port()) == named) {
            break i;
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no failover within 30 s\n{}",
            sentinels[0].log()
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    };
    let other = 1 - promoted;
    // Sentinel points the other replica at the new master; once it is there,
    // the manager's grants wait for it.
    assert!(
        support::eventually(Duration::from_secs(20), || {
            replicas[promoted]
                .info("replication")
                .contains("connected_slaves:1")
        })
        .await,
        "the other replica never followed the new master\n{}",
        sentinels[0].log()
    );
    let waits = |server: &RedisServer| server.commandstats().get("wait").copied().unwrap_or(0);
    let counted = Instant::now();
    loop {
        let before = waits(&replicas[promoted]);
        let (moved, _) = grant("on-the-new-master").await;
        moved
            .expect("granted on the new master")
            .release()
            .await
            .expect("released");
        if waits(&replicas[promoted]) > before {
            break;
        }
        assert!(
            counted.elapsed() < Duration::from_secs(15),
            "the manager never counted the new master's replica"
        );
        actix_rt::time::sleep(Duration::from_millis(200)).await;
    }

    replicas[other].kill();
    let (after, took) = grant("after").await;
    let guard = after.unwrap_or_else(|e| {
        panic!(
            "not granted {took:?} after the new master lost its replica: {e}\n{}",
            stale.log()
        )
    });
    guard.release().await.expect("released on the new master");
    // Granted at all is the point: with the stale Sentinel heeded, the grant
    // never comes (its 15 s wait runs out). How soon is not asserted: 1.1 s
    // when the Sentinels had closed the failover before the replica died, but
    // the one leading it shows `failover_in_progress` until every replica is
    // reconfigured or its failover-timeout (5 s here) runs out, and until then
    // the master that lost its replicas is rightly not trusted (2 of 10 runs
    // took 5.7 and 8.2 s, the log saying so each second).
    eprintln!(
        "granted {took:?} after the new master lost its replica, a stale Sentinel listed first"
    );
}
