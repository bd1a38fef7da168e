//! The fair semaphore (issue 39) on a real Redis: waiters of separate
//! `lockwarden run --semaphore --fair` processes are granted in the order they
//! queued, with never more commands running than permits; a waiter killed in
//! the queue is skipped once its place lapses; a waiter that gives up leaves
//! the queue at once; a head that wants more than is free holds up those behind
//! it; `status` lists the queue; the documented ACL is enough; the head is told
//! on its shard on a cluster; and bad input is refused with nothing written.
#![cfg(feature = "cli")]

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{LockError, Locks, Semaphore, SemaphoreHandle};
use support::{data_keys, eventually, lockwarden_at, manager, raw, RedisServer};
use tokio::process::Child;

/// Upper bound for anything to happen: far above what each step needs.
const LIMIT: Duration = Duration::from_secs(60);

/// The queue of semaphore `name`.
fn queue_key(name: &str) -> String {
    format!("lockwarden_semaphore_queue:{{{name}}}")
}

/// How many wait in the queue of semaphore `name`.
fn queued(server: &RedisServer, name: &str) -> i64 {
    raw(server, &["LLEN", &queue_key(name)])
}

/// A fair handle on `name` through a new manager.
async fn fair_handle(
    server: &RedisServer,
    name: &str,
    tune: impl FnOnce(lockwarden::Config) -> lockwarden::Config,
) -> SemaphoreHandle {
    let m = manager(server, tune).await;
    m.send(Semaphore::new(name).fair(true))
        .await
        .expect("manager answers")
        .expect("handle")
}

/// `lockwarden run NAME --semaphore --fair -- sh -c SCRIPT`.
fn spawn_fair(server: &RedisServer, name: &str, script: &str) -> Child {
    lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
        .args([
            "run",
            name,
            "--semaphore",
            "--fair",
            "--",
            "sh",
            "-c",
            script,
        ])
        .kill_on_drop(true)
        .spawn()
        .expect("cannot start lockwarden")
}

/// Waits for `child` to exit 0.
async fn succeeds(child: Child) {
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("lockwarden did not exit in time")
        .expect("cannot wait for lockwarden");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until `n` wait in the queue of `name`.
async fn until_queued(server: &RedisServer, name: &str, n: i64) {
    let there = eventually(LIMIT, || queued(server, name) == n).await;
    assert!(there, "{n} never queued; {} do", queued(server, name));
}

/// Three `lockwarden run --semaphore --fair` processes that queue one after the
/// other on a 1-permit semaphore held by the test run their commands in that
/// order once it is released, one at a time, and leave the permit and an empty
/// queue behind.
#[actix_rt::test]
async fn three_processes_are_granted_in_the_order_they_queued() {
    let server = RedisServer::start();
    let sem = fair_handle(&server, "q", |c| c).await;
    assert!(sem.try_set_permits(1).await.expect("set"));
    let held = sem.acquire(1).await.expect("the test holds the permit");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let mut children = Vec::new();
    for n in 1..=3 {
        let script = format!(
            "echo s{n} >> {0}; sleep 0.2; echo e{n} >> {0}",
            log.display()
        );
        children.push(spawn_fair(&server, "q", &script));
        until_queued(&server, "q", n).await;
    }
    // `status` lists the queue, head first, with each place's lease.
    let status = lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
        .args(["status", "q"])
        .output()
        .await
        .expect("status runs");
    let shown = String::from_utf8_lossy(&status.stdout);
    for n in 1..=3 {
        assert!(shown.contains(&format!("queued #{n}: ")), "{shown}");
    }
    let ids: Vec<String> = raw(&server, &["LRANGE", &queue_key("q"), "0", "-1"]);
    assert_eq!(sem.queued().await.expect("queue read"), ids);
    held.release().await.expect("released");
    for child in children {
        succeeds(child).await;
    }
    let lines = std::fs::read_to_string(&log).expect("log written");
    let got: Vec<&str> = lines.lines().collect();
    assert_eq!(
        got,
        ["s1", "e1", "s2", "e2", "s3", "e3"],
        "granted in queue order, one at a time"
    );
    assert_eq!(raw::<String>(&server, &["GET", "q"]), "1", "permit back");
    assert_eq!(queued(&server, "q"), 0);
}

/// A process killed (SIGKILL) while it waits at the head of the queue holds it
/// up only until its place lapses (`fair_waiter_lease`, 5 s by default): the
/// process queued behind it is then granted, well within a bound.
#[actix_rt::test]
async fn a_waiter_killed_in_the_queue_is_skipped_once_its_place_lapses() {
    let server = RedisServer::start();
    let sem = fair_handle(&server, "k", |c| c).await;
    assert!(sem.try_set_permits(1).await.expect("set"));
    let held = sem.acquire(1).await.expect("the test holds the permit");
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let mut doomed = spawn_fair(&server, "k", "echo doomed >> /dev/null");
    until_queued(&server, "k", 1).await;
    let script = format!("echo second >> {}", ran.display());
    let second = spawn_fair(&server, "k", &script);
    until_queued(&server, "k", 2).await;
    doomed.start_kill().expect("SIGKILL");
    doomed.wait().await.expect("reaped");
    let killed_at = Instant::now();
    held.release().await.expect("released");
    succeeds(second).await;
    let waited = killed_at.elapsed();
    eprintln!("the waiter behind the killed one was granted {waited:?} after the kill");
    assert_eq!(std::fs::read_to_string(&ran).expect("ran").trim(), "second");
    assert!(
        waited < Duration::from_secs(20),
        "the dead waiter held the queue up for {waited:?}"
    );
    assert_eq!(queued(&server, "k"), 0, "the dead waiter's place is gone");
    assert_eq!(raw::<String>(&server, &["GET", "k"]), "1", "permit back");
}

/// A waiter whose deadline passes leaves the queue at once (the place lease is
/// 60 s here, so a lapse cannot explain it), and the waiter behind it moves
/// up and is granted by the next release.
#[actix_rt::test]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = RedisServer::start();
    let tune = |c: lockwarden::Config| c.fair_waiter_lease(Duration::from_secs(60));
    let a = fair_handle(&server, "g", tune).await;
    let b = fair_handle(&server, "g", tune).await;
    assert!(a.try_set_permits(1).await.expect("set"));
    let held = a.acquire(1).await.expect("held");
    let impatient = a.acquire_within(1, Duration::from_millis(800));
    let patient = {
        let b = b.clone();
        actix_rt::spawn(async move { b.acquire_within(1, LIMIT).await })
    };
    let gave_up = impatient.await;
    assert!(
        matches!(gave_up, Err(LockError::Timeout { .. })),
        "{gave_up:?}"
    );
    let left = eventually(Duration::from_secs(5), || queued(&server, "g") <= 1).await;
    assert!(left, "the impatient waiter kept its place");
    held.release().await.expect("released");
    let guard = tokio::time::timeout(LIMIT, patient)
        .await
        .expect("the patient waiter was granted")
        .expect("task")
        .expect("granted");
    assert_eq!(queued(&server, "g"), 0);
    guard.release().await.expect("released");
}

/// A caller that stops waiting (its future dropped, as a timeout around it
/// or a `select!` does) leaves at once: a fair waiter's place goes (the place
/// lease is 60 s, so no lapse explains it), and on a plain semaphore no
/// orphaned waiter takes the permits added afterwards (before, actix ran the
/// dropped wait on to its grant, and the permit was lost).
#[actix_rt::test]
async fn a_caller_that_stops_waiting_leaves_at_once() {
    let server = RedisServer::start();
    let tune = |c: lockwarden::Config| c.fair_waiter_lease(Duration::from_secs(60));
    let fair = fair_handle(&server, "d", tune).await;
    assert!(fair.try_set_permits(0).await.expect("set"));
    let dropped = tokio::time::timeout(Duration::from_millis(500), fair.acquire(1)).await;
    assert!(dropped.is_err(), "nothing to take, yet it was granted");
    let left = eventually(Duration::from_secs(5), || queued(&server, "d") == 0).await;
    assert!(left, "the dropped waiter kept its place");

    let m = manager(&server, |c| c).await;
    let plain = m.semaphore("p").await.expect("handle");
    assert!(plain.try_set_permits(0).await.expect("set"));
    let dropped = tokio::time::timeout(Duration::from_millis(500), plain.acquire(1)).await;
    assert!(dropped.is_err(), "nothing to take, yet it was granted");
    assert_eq!(plain.add_permits(1).await.expect("added"), 1);
    // Past the fallback timer (5 s) an orphan would have retried by now.
    let kept = tokio::time::timeout(Duration::from_secs(7), async {
        loop {
            if raw::<String>(&server, &["GET", "p"]) != "1" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(kept.is_err(), "a caller that left took the permit");
}

/// `lockwarden run --semaphore --fair` interrupted (SIGINT) while it waits
/// leaves the queue before it exits, well inside the place lease (5 s).
#[actix_rt::test]
async fn an_interrupted_command_leaves_the_queue() {
    let server = RedisServer::start();
    let sem = fair_handle(&server, "i", |c| c).await;
    assert!(sem.try_set_permits(0).await.expect("set"));
    let child = spawn_fair(&server, "i", "true");
    until_queued(&server, "i", 1).await;
    let pid = child.id().expect("running") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT");
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("exited")
        .expect("waited");
    assert!(!out.status.success());
    let left = eventually(Duration::from_secs(2), || queued(&server, "i") == 0).await;
    assert!(left, "the interrupted waiter kept its place");
}

/// Strict FIFO: a head that wants two permits while one is free holds up a
/// one-permit waiter behind it (the permit stays free); both are granted in
/// order once enough are back, and never more permits are taken than exist.
#[actix_rt::test]
async fn a_head_that_wants_more_holds_up_those_behind_it() {
    let server = RedisServer::start();
    let a = fair_handle(&server, "h", |c| c).await;
    let b = fair_handle(&server, "h", |c| c).await;
    assert!(a.try_set_permits(2).await.expect("set"));
    let mut held = a.acquire(2).await.expect("held");
    let big = {
        let a = a.clone();
        actix_rt::spawn(async move { a.acquire(2).await })
    };
    until_queued(&server, "h", 1).await;
    let small = {
        let b = b.clone();
        actix_rt::spawn(async move { b.acquire(1).await })
    };
    until_queued(&server, "h", 2).await;
    held.release_some(1).await.expect("one back");
    // The one free permit is not for the waiter behind the head: it stays
    // free while the head waits (checked past a refresh of the places).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!small.is_finished(), "the small waiter overtook the head");
    assert_eq!(raw::<String>(&server, &["GET", "h"]), "1");
    held.release().await.expect("all back");
    let big = tokio::time::timeout(LIMIT, big)
        .await
        .expect("the head was granted")
        .expect("task")
        .expect("granted");
    assert_eq!(raw::<String>(&server, &["GET", "h"]), "0");
    assert!(!small.is_finished(), "no permit for the small waiter yet");
    big.release().await.expect("released");
    let small = tokio::time::timeout(LIMIT, small)
        .await
        .expect("the small waiter was granted")
        .expect("task")
        .expect("granted");
    assert_eq!(raw::<String>(&server, &["GET", "h"]), "1");
    small.release().await.expect("released");
    assert_eq!(queued(&server, "h"), 0);
}

/// Zero permits, and `--fair` with `--expirable`, are refused with a typed
/// error (exit 2 on the command line) and nothing is written to Redis.
#[actix_rt::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let server = RedisServer::start();
    let sem = fair_handle(&server, "z", |c| c).await;
    let zero = sem.acquire(0).await;
    assert!(
        matches!(zero, Err(LockError::InvalidAmount { .. })),
        "{zero:?}"
    );
    let zero = sem.add_permits(0).await;
    assert!(
        matches!(zero, Err(LockError::InvalidAmount { .. })),
        "{zero:?}"
    );
    let out = lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
        .args([
            "run",
            "z",
            "--semaphore",
            "--fair",
            "--expirable",
            "--",
            "true",
        ])
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(data_keys(&server).is_empty(), "{:?}", data_keys(&server));
}

/// A user with exactly the rights docs/operations.md lists for a semaphore
/// and a fair semaphore (names under `pool:`).
fn documented_user(server: &RedisServer, less: Option<&str>) {
    let mut args: Vec<&str> = vec!["ACL", "SETUSER", "sync", "reset", "on", ">pw", "-@all"];
    let rights = [
        "+evalsha",
        "+script|load",
        "+get",
        "+set",
        "+exists",
        "+decr",
        "+decrby",
        "+incrby",
        "+del",
        "+time",
        "+pttl",
        "+pexpire",
        "+zadd",
        "+zrem",
        "+zrange",
        "+zrangebyscore",
        "+zremrangebyscore",
        "+zscore",
        "+publish",
        "+subscribe",
        "+unsubscribe",
        "~pool:*",
        "~{pool:*",
        "~redisson_sc:{pool:*",
        "&redisson_sc:{pool:*",
        "~lockwarden_kind:{pool:*",
        "~lockwarden_waiters:{pool:*",
        "~redisson_countdownlatch__channel__{pool:*",
        "&redisson_countdownlatch__channel__{pool:*",
        // The fair semaphore's line.
        "+type",
        "+lindex",
        "+lpop",
        "+lrem",
        "+rpush",
        "+lrange",
        "~lockwarden_semaphore_queue:{pool:*",
        "~lockwarden_semaphore_timeout:{pool:*",
        "~lockwarden_semaphore_channel:{pool:*",
        "&lockwarden_semaphore_channel:{pool:*",
    ];
    args.extend(rights.iter().filter(|r| Some(**r) != less));
    let _: () = raw(server, &args);
}

/// A fair handle on `name` through a manager logged in as the documented user.
async fn user_handle(server: &RedisServer, name: &str) -> SemaphoreHandle {
    let url = format!("redis://sync:pw@127.0.0.1:{}/", server.port());
    let config = lockwarden::Config::from_url(&url).expect("url");
    let m = lockwarden::LockManager::start(config)
        .await
        .unwrap_or_else(|e| panic!("manager as sync did not start: {e}"));
    m.send(Semaphore::new(name).fair(true))
        .await
        .expect("manager answers")
        .expect("handle")
}

/// With exactly the documented rights a fair semaphore works (take, queue,
/// refresh, release to the head); with `RPUSH` taken away, a waiter that must
/// queue gets a typed `NoPermission` and the queue is not written.
#[actix_rt::test]
async fn the_documented_acl_is_enough_and_a_right_less_is_typed() {
    let server = RedisServer::start();
    documented_user(&server, None);
    let a = user_handle(&server, "pool:f").await;
    let b = user_handle(&server, "pool:f").await;
    assert!(a.try_set_permits(1).await.expect("set"));
    let held = a.acquire(1).await.expect("taken");
    let waiting = {
        let b = b.clone();
        actix_rt::spawn(async move { b.acquire_within(1, LIMIT).await })
    };
    until_queued(&server, "pool:f", 1).await;
    held.release().await.expect("released");
    let next = tokio::time::timeout(LIMIT, waiting)
        .await
        .expect("granted in time")
        .expect("task")
        .expect("granted");
    next.release().await.expect("released");

    let server = RedisServer::start();
    documented_user(&server, Some("+rpush"));
    let a = user_handle(&server, "pool:g").await;
    assert!(a.try_set_permits(0).await.expect("set"));
    let refused = a.acquire_within(1, Duration::from_secs(5)).await;
    assert!(
        matches!(refused, Err(LockError::NoPermission { .. })),
        "{refused:?}"
    );
    assert!(!support::exists(&server, &queue_key("pool:g")));
    assert!(!support::exists(
        &server,
        "lockwarden_semaphore_timeout:{pool:g}"
    ));
}

/// On a Redis Cluster (sharded pub/sub on Redis 7+) the queue's keys and the
/// waiter's channel share the name's slot, and a release reaches the head on
/// its sharded channel: granted within a bound that neither a refresh (every
/// 20 s here) nor the fallback timer (30 s) could explain.
#[actix_rt::test]
async fn on_a_cluster_the_head_is_told_on_its_shard() {
    let _heavy = support::heavy();
    let cluster = support::Cluster::start(3, 0);
    let tune = |c: lockwarden::Config| {
        c.fair_waiter_lease(Duration::from_secs(60))
            .max_retry_interval(Duration::from_secs(30))
    };
    let start = || async {
        let m = lockwarden::LockManager::start(tune(cluster.config()))
            .await
            .expect("manager on the cluster");
        m.send(Semaphore::new("c").fair(true))
            .await
            .expect("manager answers")
            .expect("handle")
    };
    let (a, b) = (start().await, start().await);
    assert!(a.try_set_permits(1).await.expect("set"));
    let held = a.acquire(1).await.expect("held");
    let waiting = {
        let b = b.clone();
        actix_rt::spawn(async move { b.acquire_within(1, LIMIT).await })
    };
    let queued = eventually(LIMIT, || {
        let owner = &cluster.nodes[cluster.owner_of(&queue_key("c"))];
        raw::<i64>(owner, &["LLEN", &queue_key("c")]) == 1
    })
    .await;
    assert!(queued, "never queued");
    held.release().await.expect("released");
    let next = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the head was told of the release")
        .expect("task")
        .expect("granted");
    next.release().await.expect("released");
}
