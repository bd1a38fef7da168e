//! A master with a replica and three Sentinels: the manager finds the master
//! through the Sentinels and follows a failover.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockError, LockManager};
use support::{RedisServer, Sentinel, MASTER_NAME};

/// The master is SIGKILLed with a lock held and a waiter waiting: once Sentinel
/// promotes the replica, new acquisitions work on the new master and nothing
/// hangs past its deadline.
#[actix_rt::test]
async fn the_manager_follows_a_failover() {
    let _heavy = support::heavy();
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
    let _heavy = support::heavy();
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
    let _heavy = support::heavy();
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
    // The command connection's three lanes (the default: replica confirmation
    // is on by default), the subscriber's, and the replica counter's own (it
    // moves only once the lanes were swapped in): with fewer counted, the
    // acquisition below could still go out on the frozen master's connection
    // and be told "the master moved, try again" as the command connection
    // followed (the lanes connect to the new master before they are swapped in).
    let moved =
        support::eventually(Duration::from_secs(10), || unnamed_clients(&replica) >= 5).await;
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

/// Runs a command on `server` as a client that knows `password`.
fn raw_auth<T: redis::FromRedisValue>(server: &RedisServer, password: &str, args: &[&str]) -> T {
    let url = format!("redis://:{password}@127.0.0.1:{}/", server.port());
    let mut conn = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("connect with the password");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut conn)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Sentinels with a password of their own (in their URLs) in front of a master
/// and replica with another (`Config::master_credentials`): the manager finds the
/// master, locks on it, hears the failover announcement and locks on the
/// promoted replica. Without the master's password, or with a wrong Sentinel
/// password, the start fails with an error that says so, and nothing is written.
#[actix_rt::test]
async fn sentinels_and_a_master_with_passwords() {
    let _heavy = support::heavy();
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let _: () = support::raw(&replica, &["CONFIG", "SET", "masterauth", "mpw"]);
    let _: () = support::raw(&master, &["CONFIG", "SET", "masterauth", "mpw"]);
    let _: () = support::raw(&master, &["CONFIG", "SET", "requirepass", "mpw"]);
    let _: () = support::raw(&replica, &["CONFIG", "SET", "requirepass", "mpw"]);
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start_with_auth(&master, 2, Some("spw"), Some("mpw")))
        .collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    assert!(urls[0].contains(":spw@"), "{}", urls[0]);
    let config = || Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str)).expect("config");

    let no_master_password =
        LockManager::start(config().connection_timeout(Duration::from_secs(1))).await;
    let why = no_master_password
        .expect_err("started without the master's password")
        .to_string();
    assert!(why.to_lowercase().contains("auth"), "{why}");
    // Named with the setting the master's password goes in, not a URL.
    assert!(
        why.contains("NOAUTH") && why.contains("master_credentials"),
        "{why}"
    );
    let wrong = [sentinels[0].url().replace("spw", "nope")];
    let wrong_sentinel = Config::sentinel(MASTER_NAME, wrong.iter().map(String::as_str))
        .expect("config")
        .master_credentials(None, "mpw");
    let why = LockManager::start(wrong_sentinel)
        .await
        .expect_err("a wrong Sentinel password")
        .to_string();
    assert!(
        why.to_lowercase().contains("pass") || why.to_lowercase().contains("auth"),
        "{why}"
    );
    let keys: i64 = raw_auth(&master, "mpw", &["DBSIZE"]);
    assert_eq!(keys, 0, "a refused start wrote something");

    let m = LockManager::start(config().master_credentials(None, "mpw"))
        .await
        .expect("started with both passwords");
    let first = m
        .send(Acquire::new("guarded"))
        .await
        .expect("running")
        .expect("granted by the master");
    let held: i64 = raw_auth(&master, "mpw", &["EXISTS", "guarded"]);
    assert_eq!(held, 1);
    first.release().await.expect("released");
    // The command takes the master's password from the environment.
    let bin = env!("CARGO_BIN_EXE_lockwarden");
    let run = |password: Option<&str>| {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["--sentinel", &urls[0], "--master-name", MASTER_NAME])
            .args(["run", "nightly", "--", "true"])
            .env_remove("REDIS_URL")
            .env_remove("LOCKWARDEN_MASTER_PASSWORD");
        if let Some(pw) = password {
            cmd.env("LOCKWARDEN_MASTER_PASSWORD", pw);
        }
        cmd.output().expect("run lockwarden")
    };
    let ok = run(Some("mpw"));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let refused = run(None);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!said.contains("spw"), "a password was shown: {said}");

    master.kill();
    let began = Instant::now();
    while sentinels[0].master_port() != Some(replica.port()) {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no failover within 30 s\n{}",
            sentinels[0].log()
        );
        actix_rt::time::sleep(Duration::from_millis(100)).await;
    }
    let after = m
        .send(Acquire::new("guarded").wait(Duration::from_secs(10)))
        .await
        .expect("running")
        .expect("granted by the promoted replica");
    let on_new: i64 = raw_auth(&replica, "mpw", &["EXISTS", "guarded"]);
    assert_eq!(on_new, 1, "the lock is not on the new master");
    after.release().await.expect("released on the new master");
    assert!(matches!(
        Config::from_url("redis://127.0.0.1:1")
            .expect("url")
            .master_credentials(None, "x")
            .validate(),
        Err(LockError::InvalidConfig(_))
    ));
}
