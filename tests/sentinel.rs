//! A master with a replica and three Sentinels: the manager finds the master
//! through the Sentinels and follows a failover.

mod support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockError, LockManager};
use support::{RedisServer, Sentinel, MASTER_NAME};

/// The master is SIGKILLed with a lock held and a waiter waiting: once Sentinel
/// promotes the replica, new acquisitions work on the new master and nothing
/// hangs past its deadline.
#[actix_rt::test]
async fn the_manager_follows_a_failover() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
        .expect("config")
        .watchdog_lease(Duration::from_secs(3));
    let m = LockManager::start(config)
        .await
        .expect("started through Sentinel");
    let held = m
        .send(Acquire::new("before"))
        .await
        .expect("running")
        .expect("acquired on the first master");
    let waiter = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("before").wait(Duration::from_secs(4)))
                .await
        }
    });

    master.kill();
    // Sentinel notices after 1 s and promotes the replica.
    let began = Instant::now();
    while sentinels[0].master_port() != Some(replica.port()) {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no failover within 30 s\n{}",
            sentinels[0].log()
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let failed_over = began.elapsed();

    // The waiter is answered by its deadline, whatever the outcome.
    let answer = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was answered")
        .expect("task")
        .expect("running");
    if let Err(e) = &answer {
        assert!(
            matches!(e, LockError::Timeout { .. }) || e.is_retryable(),
            "{e:?}"
        );
    }
    // A new lock is granted by the new master within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        match m
            .send(Acquire::new("after").wait(Duration::from_secs(2)))
            .await
            .expect("running")
        {
            Ok(g) => break g,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "still failing after the failover: {e}"
                );
                assert!(e.is_retryable(), "{e:?}");
            }
        }
    };
    let on_new: i64 = redis::cmd("EXISTS")
        .arg("after")
        .query(&mut replica.conn())
        .expect("EXISTS on the promoted replica");
    assert_eq!(on_new, 1, "the lock is not on the new master");
    eprintln!("failover took {failed_over:?}; acquired on the new master");
    after.release().await.expect("released on the new master");
    drop(held);
    drop(answer);
}

/// An unknown master name, or no reachable Sentinel, is a clear error at start.
#[actix_rt::test]
async fn an_unknown_master_or_no_sentinel_is_refused_at_start() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(&master, 1);
    let wrong = Config::sentinel("no-such-master", [sentinel.url().as_str()]).expect("config");
    assert!(LockManager::start(wrong).await.is_err());
    let closed = format!("redis://127.0.0.1:{}", support::free_port());
    let none = Config::sentinel(MASTER_NAME, [closed.as_str()])
        .expect("config")
        .connection_timeout(Duration::from_millis(500));
    assert!(LockManager::start(none).await.is_err());
    assert!(matches!(
        Config::sentinel(MASTER_NAME, []),
        Err(LockError::InvalidConfig(_))
    ));
    assert!(matches!(
        Config::sentinel("", [sentinel.url().as_str()]),
        Err(LockError::InvalidConfig(_))
    ));
}

/// The command finds the master through Sentinel: `--sentinel URL --master-name
/// NAME`; a Sentinel without a master name is bad input (exit 2).
#[test]
fn the_command_runs_through_sentinel() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(&master, 1);
    let bin = env!("CARGO_BIN_EXE_lockwarden");
    let out = std::process::Command::new(bin)
        .args(["--sentinel", &sentinel.url(), "--master-name", MASTER_NAME])
        .args(["run", "nightly", "--", "sh", "-c", "echo $LOCKWARDEN_TOKEN"])
        .env_remove("REDIS_URL")
        .output()
        .expect("run lockwarden");
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8_lossy(&out.stdout);
    assert!(token.trim().parse::<u64>().is_ok_and(|t| t > 0), "{token}");
    let bad = std::process::Command::new(bin)
        .args(["--sentinel", &sentinel.url(), "status", "nightly"])
        .output()
        .expect("run lockwarden");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--master-name"));
}

/// Unnamed client connections on `server` other than the one asking (the
/// Sentinels name theirs): a lock manager's command and pub/sub connections.
fn unnamed_clients(server: &RedisServer) -> usize {
    let list: String = support::raw(server, &["CLIENT", "LIST"]);
    list.lines()
        .filter(|l| l.contains(" name= ") && !l.contains("cmd=client|list"))
        .count()
}

/// A master that freezes (SIGSTOP: its connections stay open and silent, so no
/// call fails to tell the manager) is replaced by Sentinel while nothing is in
/// flight: the manager hears Sentinel's `+switch-master` and moves its command
/// and pub/sub connections to the new master by itself, so its next
/// acquisition, a single attempt, is granted there (without the announcement it
/// waited out the response timeout on the frozen master and failed). The
/// listeners on the Sentinels end when the manager does.
#[actix_rt::test]
async fn a_switch_announced_by_sentinel_is_followed_before_any_call() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    // Idle lock actors (which share the connection) go soon after the manager.
    let config = Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
        .expect("config")
        .idle_timeout(Duration::from_millis(500));
    let m = LockManager::start(config).await.expect("started");
    let warm = m
        .send(Acquire::new("warm"))
        .await
        .expect("running")
        .expect("granted by the first master");
    warm.release().await.expect("released");

    master.pause();
    let began = Instant::now();
    while sentinels
        .iter()
        .any(|s| s.master_port() != Some(replica.port()))
    {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no failover within 30 s\n{}",
            sentinels[0].log()
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let moved =
        support::eventually(Duration::from_secs(10), || unnamed_clients(&replica) >= 2).await;
    assert!(
        moved,
        "the manager's connections did not move to the new master: {}",
        support::raw::<String>(&replica, &["CLIENT", "LIST"])
    );
    let after = m
        .send(Acquire::new("after").wait(Duration::ZERO))
        .await
        .expect("running")
        .expect("the first attempt after the failover is granted by the new master");
    assert!(support::exists(&replica, "after"));
    after.release().await.expect("released");

    // The listeners end with the manager.
    let listening = |s: &Sentinel| {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(
                &mut redis::Client::open(s.url())
                    .expect("url")
                    .get_connection()
                    .expect("sentinel"),
            )
            .expect("CLIENT LIST on a Sentinel");
        list.lines()
            .filter(|l| l.contains(" name= ") && l.contains("cmd=subscribe"))
            .count()
    };
    assert_eq!(listening(&sentinels[1]), 1, "no listener on the Sentinel");
    drop(m);
    let stopped = Instant::now();
    let ended = support::eventually(Duration::from_secs(30), || {
        sentinels.iter().all(|s| listening(s) == 0)
    })
    .await;
    assert!(ended, "a listener outlived its manager");
    eprintln!("listeners ended {:?} after the manager", stopped.elapsed());
    master.resume();
}
