//! lockwarden on a real Redis Cluster: three masters made by `redis-cli --cluster
//! create`, shared by the scenarios of one test (a cluster takes seconds to form).
//! (The failovers are in `cluster_failover.rs`, on a cluster with replicas; the
//! behaviour tests of a single server run on a cluster in `on_cluster.rs`.)
//!
//! Waiters are given a fallback retry interval far longer than the bounds the
//! tests wait for, so a waiter answered in time was woken by a sharded unlock
//! message (SPUBLISH → SSUBSCRIBE on the shard), not by its timer.

use crate::support;

use std::time::{Duration, Instant};

use futures::future::join_all;
use lockwarden::{Acquire, Admin, Config, LockError, LockManager, Locks};
use support::{Cluster, RedisServer};

/// Long enough that no test bound below is ever met by a fallback retry.
const NO_TIMER: Duration = Duration::from_secs(60);

fn config(cluster: &Cluster) -> Config {
    cluster.config().max_retry_interval(NO_TIMER)
}

async fn manager(
    cluster: &Cluster,
    tune: impl FnOnce(Config) -> Config,
) -> actix::Addr<LockManager> {
    LockManager::start(tune(config(cluster)))
        .await
        .unwrap_or_else(|e| panic!("manager did not start on the cluster: {e}"))
}

/// Sum of `INFO errorstats` counts of `kind` (e.g. `CROSSSLOT`) over the nodes.
fn errors(cluster: &Cluster, kind: &str) -> u64 {
    cluster
        .nodes
        .iter()
        .filter(|n| n.pid().is_some())
        .map(|n| {
            n.info("errorstats")
                .lines()
                .find_map(|l| l.strip_prefix(&format!("errorstat_{kind}:count=")))
                .and_then(|c| c.trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// The scenarios that leave the cluster as they found it, in turn on one cluster.
#[actix_rt::test]
async fn on_a_three_master_cluster() {
    let _heavy = support::heavy();
    let cluster = Cluster::start(3, 0);
    eprintln!("cluster up");
    let started = Instant::now();
    waiters_in_another_manager_wake_on_every_shard(&cluster).await;
    eprintln!("wake-ups: done at {:?}", started.elapsed());
    thousands_of_locks_never_cross_a_slot(&cluster).await;
    eprintln!("many locks: done at {:?}", started.elapsed());
    fair_and_read_write_locks_work(&cluster).await;
    eprintln!("fair/rw: done at {:?}", started.elapsed());
    a_foreign_client_wakes_lockwarden_waiters(&cluster).await;
    eprintln!("foreign: done at {:?}", started.elapsed());
    list_sees_every_master(&cluster).await;
    eprintln!("list: done at {:?}", started.elapsed());
    a_held_lock_survives_its_slot_moving(&cluster).await;
    eprintln!("resharding: done at {:?}", started.elapsed());
    the_command_runs_on_the_cluster(&cluster).await;
    eprintln!("command: done at {:?}", started.elapsed());
}

/// `lockwarden --cluster URL,URL`: `run` takes a lock on the cluster, `list` finds
/// a lock wherever its slot lives; `--cluster` with `--sentinel` is bad input.
async fn the_command_runs_on_the_cluster(cluster: &Cluster) {
    let m = manager(cluster, |c| c).await;
    let held = m
        .send(Acquire::new("cli:held"))
        .await
        .expect("running")
        .expect("held");
    let seeds = cluster.seeds()[..2].join(",");
    let bin = env!("CARGO_BIN_EXE_lockwarden");
    let lockwarden = |args: &[&str]| {
        std::process::Command::new(bin)
            .arg("--cluster")
            .arg(&seeds)
            .args(args)
            .env_remove("REDIS_URL")
            .output()
            .expect("run lockwarden")
    };
    let ran = lockwarden(&["run", "cli:job", "--", "sh", "-c", "echo $LOCKWARDEN_TOKEN"]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let token = String::from_utf8_lossy(&ran.stdout);
    assert!(token.trim().parse::<u64>().is_ok_and(|t| t > 0), "{token}");

    let listed = lockwarden(&["list", "--pattern", "cli:*"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("cli:held"), "{listed}");
    assert!(
        !listed.contains("cli:job"),
        "the job's lock was released: {listed}"
    );

    let bad = lockwarden(&[
        "--sentinel",
        "redis://127.0.0.1:1",
        "--master-name",
        "m",
        "status",
        "x",
    ]);
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    held.release().await.expect("released");
}

/// Holders in one manager, waiters in another, on names spread over every
/// master: each release wakes its waiter through the shard's channel.
async fn waiters_in_another_manager_wake_on_every_shard(cluster: &Cluster) {
    let a = manager(cluster, |c| c).await;
    let b = manager(cluster, |c| c).await;
    let names: Vec<String> = (0..12).map(|i| format!("wake:{i}")).collect();
    let owners: std::collections::HashSet<usize> =
        names.iter().map(|n| cluster.owner_of(n)).collect();
    assert_eq!(owners.len(), 3, "the names cover every master");
    let spublish_before = cluster.calls("spublish");
    for name in &names {
        let held = a
            .send(Acquire::new(name.as_str()))
            .await
            .expect("running")
            .expect("free lock acquired");
        let waiter = actix_rt::spawn({
            let b = b.clone();
            let name = name.clone();
            async move {
                b.send(Acquire::new(name).wait(Duration::from_secs(20)))
                    .await
            }
        });
        // Mutual exclusion: the other manager cannot take it meanwhile.
        let refused = b
            .send(Acquire::new(name.as_str()).wait(Duration::ZERO))
            .await
            .expect("running");
        assert!(
            matches!(refused, Err(LockError::Timeout { .. })),
            "{refused:?}"
        );
        let token = held.fencing_token();
        let released = Instant::now();
        held.release().await.expect("released");
        let next = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("{name}: the waiter was not woken within 5 s"))
            .expect("task")
            .expect("running")
            .expect("the waiter got the lock");
        assert!(released.elapsed() < Duration::from_secs(5));
        assert!(next.fencing_token() > token, "tokens go up");
        next.release().await.expect("released");
    }
    assert!(
        cluster.calls("spublish") >= spublish_before + names.len() as u64,
        "unlock messages went out with SPUBLISH"
    );
    assert_eq!(
        cluster.calls("publish"),
        0,
        "no plain PUBLISH on a Redis 7 cluster"
    );
}

/// The first lines of what the library logged at warn or above, to show why a
/// test failed.
fn warnings(log: &support::Captured) -> String {
    let text = log.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .take(20)
        .collect();
    lines.join("\n")
}

/// Two thousand watchdog locks spread over all slots, acquired at once (the
/// coalescer batches them), renewed a few times (the renewer batches them) and
/// released: every batch stays inside one slot, so no node ever answers CROSSSLOT.
async fn thousands_of_locks_never_cross_a_slot(cluster: &Cluster) {
    let (log, _logging) = support::Captured::install();
    // A lease well short of the default 30 s, so that the locks must be renewed
    // within the test, yet long enough that a loaded 2-core machine running a
    // debug build renews 2,000 of them in time (1.5 s lost some there).
    let m = manager(cluster, |c| c.watchdog_lease(Duration::from_secs(3))).await;
    let names: Vec<String> = (0..2000).map(|i| format!("many:{i}")).collect();
    let began = Instant::now();
    let guards = join_all(names.iter().map(|n| m.send(Acquire::new(n.as_str())))).await;
    eprintln!("acquired {} locks in {:?}", names.len(), began.elapsed());
    let guards: Vec<_> = guards
        .into_iter()
        .map(|g| g.expect("running").expect("acquired"))
        .collect();
    // Past a lease later every lock is still there: the renewals (one a second,
    // the first within a second of the grant) went through.
    let renewals_before = cluster.calls("pexpire");
    actix_rt::time::sleep(Duration::from_millis(4000)).await;
    let lost = guards.iter().filter(|g| g.is_lost().is_some()).count();
    assert!(
        lost == 0,
        "no lock lost while renewed; {lost} were\n{}",
        warnings(&log)
    );
    assert!(
        cluster.calls("pexpire") >= renewals_before + 2 * names.len() as u64,
        "every lock was renewed at least twice"
    );
    let released = join_all(guards.into_iter().map(|g| g.release())).await;
    let failed: Vec<_> = released.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "every release succeeded; {} failed, the first: {:?}\n{}",
        failed.len(),
        failed.first(),
        warnings(&log)
    );
    assert_eq!(errors(cluster, "CROSSSLOT"), 0, "no call crossed a slot");
    let left: Vec<String> = join_all(cluster.nodes.iter().map(|n| async move {
        redis::cmd("KEYS")
            .arg("many:*")
            .query::<Vec<String>>(&mut n.conn())
            .expect("KEYS")
    }))
    .await
    .concat();
    assert!(left.is_empty(), "nothing leaked: {left:?}");
}

/// The fair queue and the read-write lock on the cluster: a fair waiter is woken
/// on its own channel, a writer waits for the reader.
async fn fair_and_read_write_locks_work(cluster: &Cluster) {
    let a = manager(cluster, |c| c).await;
    let b = manager(cluster, |c| c).await;

    let fair = a
        .send(Acquire::new("fair:x").fair())
        .await
        .expect("running")
        .expect("fair");
    let waiter = actix_rt::spawn({
        let b = b.clone();
        async move {
            b.send(Acquire::new("fair:x").fair().wait(Duration::from_secs(20)))
                .await
        }
    });
    // The waiter is queued before the release (its place is in Redis).
    let queued = support::eventually(Duration::from_secs(5), || {
        let n = &cluster.nodes[cluster.owner_of("redisson_lock_queue:{fair:x}")];
        redis::cmd("LLEN")
            .arg("redisson_lock_queue:{fair:x}")
            .query::<u64>(&mut n.conn())
            .map(|l| l == 1)
            .unwrap_or(false)
    })
    .await;
    assert!(queued, "the fair waiter took its place");
    fair.release().await.expect("released");
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the fair waiter was woken within 5 s")
        .expect("task")
        .expect("running")
        .expect("granted");
    next.release().await.expect("released");

    let reader = a
        .send(Acquire::new("rw:x").read())
        .await
        .expect("running")
        .expect("read");
    let writer = actix_rt::spawn({
        let b = b.clone();
        async move {
            b.send(Acquire::new("rw:x").write().wait(Duration::from_secs(20)))
                .await
        }
    });
    let second_reader = a
        .send(Acquire::new("rw:x").read().wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(second_reader.is_ok(), "readers share: {second_reader:?}");
    second_reader
        .expect("read")
        .release()
        .await
        .expect("released");
    reader.release().await.expect("released");
    let written = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer was woken within 5 s")
        .expect("task")
        .expect("running")
        .expect("write granted");
    written.release().await.expect("released");
}

/// A client of the same layout that is not lockwarden (here raw commands, as a
/// Redisson client would send them on Redis 7): its release, a DEL and an
/// SPUBLISH of `0` on the lock's channel, wakes a lockwarden waiter at once.
async fn a_foreign_client_wakes_lockwarden_waiters(cluster: &Cluster) {
    let m = manager(cluster, |c| c).await;
    let name = "foreign:x";
    let owner = &cluster.nodes[cluster.owner_of(name)];
    let _: () = redis::cmd("HSET")
        .arg(name)
        .arg("some-java-client:1")
        .arg(1)
        .query(&mut owner.conn())
        .expect("HSET");
    let _: () = redis::cmd("PEXPIRE")
        .arg(name)
        .arg(60_000)
        .query(&mut owner.conn())
        .expect("PEXPIRE");
    let waiter = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new(name).wait(Duration::from_secs(20)))
                .await
        }
    });
    // Let the waiter subscribe and find the lock taken.
    let subscribed = support::eventually(Duration::from_secs(5), || {
        redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg("redisson_lock__channel:{foreign:x}")
            .query::<(String, u64)>(&mut owner.conn())
            .map(|(_, n)| n == 1)
            .unwrap_or(false)
    })
    .await;
    assert!(subscribed, "the waiter subscribed on the owner's shard");
    let _: () = redis::cmd("DEL")
        .arg(name)
        .query(&mut owner.conn())
        .expect("DEL");
    let _: u64 = redis::cmd("SPUBLISH")
        .arg("redisson_lock__channel:{foreign:x}")
        .arg("0")
        .query(&mut owner.conn())
        .expect("SPUBLISH");
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the foreign release within 5 s")
        .expect("task")
        .expect("running")
        .expect("granted");
    got.release().await.expect("released");
}

/// `Admin::list` walks every master, not just the one a connection lands on.
async fn list_sees_every_master(cluster: &Cluster) {
    let m = manager(cluster, |c| c).await;
    let names: Vec<String> = (0..9).map(|i| format!("listed:{i}")).collect();
    let guards: Vec<_> = join_all(names.iter().map(|n| m.send(Acquire::new(n.as_str()))))
        .await
        .into_iter()
        .map(|g| g.expect("running").expect("acquired"))
        .collect();
    let admin = Admin::connect(&config(cluster))
        .await
        .expect("admin on the cluster");
    let listed: Vec<String> = admin
        .list("listed:*")
        .await
        .expect("listed")
        .into_iter()
        .map(|l| l.name)
        .collect();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, expected);
    for g in guards {
        g.release().await.expect("released");
    }

    // Semaphores and a latch on every master, by their kind; the waiting of one
    // is counted on its shard (SHARDNUMSUB).
    let sems: Vec<String> = (0..6).map(|i| format!("listed:sem{i}")).collect();
    for name in &sems {
        let sem = m.semaphore(name).await.expect("handle");
        assert!(sem.try_set_permits(1).await.expect("set"));
    }
    let latch = m.latch("listed:latch").await.expect("handle");
    assert!(latch.try_set_count(1).await.expect("set"));
    let busy = m.semaphore("listed:sem0").await.expect("handle");
    let waiter =
        actix_rt::spawn(async move { busy.acquire_within(2, Duration::from_secs(30)).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    let found = loop {
        let found = admin.synchronizers("listed:*").await.expect("listed");
        if found
            .iter()
            .any(|s| s.name == "listed:sem0" && s.waiting == 1)
            || Instant::now() > deadline
        {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let kinds: Vec<(&str, &str, u64)> = found
        .iter()
        .map(|s| (s.name.as_str(), s.kind.as_str(), s.waiting))
        .collect();
    let mut expected: Vec<(&str, &str, u64)> = sems
        .iter()
        .map(|n| (n.as_str(), "semaphore", u64::from(n == "listed:sem0")))
        .collect();
    expected.insert(0, ("listed:latch", "latch", 0));
    assert_eq!(kinds, expected);
    assert_eq!(latch.count_down().await.expect("opened"), 0);
    m.semaphore("listed:sem0")
        .await
        .expect("handle")
        .add_permits(1)
        .await
        .expect("added");
    waiter
        .await
        .expect("task")
        .expect("granted")
        .release()
        .await
        .expect("released");
}

/// A watchdog lock whose slot migrates to another master (SETSLOT IMPORTING /
/// MIGRATING, MIGRATE, SETSLOT NODE) stays held and renewed; the old owner drops
/// the waiter's sharded subscription (SUNSUBSCRIBE), the waiter's manager
/// subscribes again on the new owner, and the release still wakes it.
async fn a_held_lock_survives_its_slot_moving(cluster: &Cluster) {
    let a = manager(cluster, |c| c.watchdog_lease(Duration::from_millis(900))).await;
    let b = manager(cluster, |c| c).await;
    let name = "moving:x";
    let channel = "redisson_lock__channel:{moving:x}";
    let (held, waiter, from) = cluster.held_and_waited_for(&a, &b, name).await;

    let to = (from + 1) % cluster.masters;
    cluster.move_slot_of(name, from, to);
    assert_eq!(cluster.owner_of(name), to, "the slot moved");

    // The waiter's subscription follows the slot.
    let resubscribed = support::eventually(Duration::from_secs(10), || {
        redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query::<(String, u64)>(&mut cluster.nodes[to].conn())
            .map(|(_, n)| n == 1)
            .unwrap_or(false)
    })
    .await;
    assert!(resubscribed, "the waiter subscribed again on the new owner");
    // Two leases later the lock is still held (renewed on its new master), and
    // the waiter still waits: nothing was granted twice.
    actix_rt::time::sleep(Duration::from_millis(1800)).await;
    assert!(held.is_lost().is_none(), "the holder kept its lock");
    assert!(!waiter.is_finished(), "the waiter did not get a held lock");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(name)
        .query(&mut cluster.nodes[to].conn())
        .expect("PTTL");
    assert!(ttl > 0, "the lock lives on the new owner, with its lease");
    held.release().await.expect("released on the new owner");
    let next = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was woken within 5 s of the release")
        .expect("task")
        .expect("running")
        .expect("granted");
    next.release().await.expect("released");
    cluster.move_slot_of(name, to, from);
}

/// Bad seeds fail at start with a clear error, never a hang.
#[actix_rt::test]
async fn bad_cluster_seeds_fail_at_start() {
    let empty: [&str; 0] = [];
    assert!(matches!(
        Config::cluster(empty),
        Err(LockError::InvalidConfig(_))
    ));
    assert!(matches!(
        Config::cluster(["redis://127.0.0.1:7000", "not a url"]),
        Err(LockError::InvalidConfig(_))
    ));

    let nobody = format!("redis://127.0.0.1:{}", support::free_port());
    let began = Instant::now();
    let err = LockManager::start(Config::cluster([nobody.as_str()]).expect("parses"))
        .await
        .expect_err("nobody listens there");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "failed fast: {:?}",
        began.elapsed()
    );
    assert!(
        err.is_retryable() || matches!(err, LockError::Redis(_)),
        "{err:?}"
    );

    let standalone = RedisServer::start();
    let err = LockManager::start(Config::cluster([standalone.url().as_str()]).expect("parses"))
        .await
        .expect_err("a standalone server is not a cluster");
    assert!(err.to_string().contains("cluster mode"), "says why: {err}");
}
