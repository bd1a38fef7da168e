//! Failovers inside a Redis Cluster, on one cluster of three masters with a replica
//! each (a cluster takes seconds to form): a manual failover, then a SIGKILLed
//! master, each while locks are held and waited for on the master that goes, then
//! a master frozen through its failover while a release is on the wire.
//!
//! Waiters are given a fallback retry interval far longer than the bounds the
//! tests wait for, so a waiter answered in time was woken by a sharded unlock
//! message (or by the resync after its subscription's node went away), not by its
//! timer.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, LockError, LockManager};
use support::Cluster;

/// Long enough that no test bound below is ever met by a fallback retry.
const NO_TIMER: Duration = Duration::from_secs(60);

async fn manager(
    cluster: &Cluster,
    tune: impl FnOnce(lockwarden::Config) -> lockwarden::Config,
) -> actix::Addr<LockManager> {
    LockManager::start(tune(cluster.config().max_retry_interval(NO_TIMER)))
        .await
        .unwrap_or_else(|e| panic!("manager did not start on the cluster: {e}"))
}

/// The failovers, in turn on one cluster of three masters with a replica each:
/// first a manual one (`CLUSTER FAILOVER` on a replica), then a SIGKILLed master.
#[actix_rt::test]
async fn failovers_with_locks_held_and_waited_for() {
    let _heavy = support::heavy();
    let mut cluster = Cluster::start(3, 1);
    a_manual_failover_keeps_locks_and_wakes_waiters(&mut cluster).await;
    cluster.wait_ok(Duration::from_secs(30));
    a_master_killed_with_locks_held_and_waited_for(&mut cluster).await;
    cluster.wait_ok(Duration::from_secs(30));
    a_release_answered_by_a_demoted_master_is_redone_on_the_new_one(&mut cluster).await;
    cluster.wait_ok(Duration::from_secs(30));
    crate::cluster_kept::a_release_no_replica_confirmed_is_redone_after_the_masters_death(
        &mut cluster,
    )
    .await;
}

/// The replica of the master serving `key`'s slot (an index into `nodes`).
fn replica_serving(cluster: &Cluster, key: &str) -> usize {
    let master = cluster.owner_of(key);
    let port = format!("master_port:{}", cluster.nodes[master].port());
    (0..cluster.nodes.len())
        .find(|&i| {
            i != master
                && cluster.nodes[i].pid().is_some()
                && cluster.nodes[i].info("replication").contains(&port)
        })
        .expect("the master has a replica")
}

/// Whether `channel` has `n` sharded subscribers on node `node`.
fn shard_subscribers(cluster: &Cluster, node: usize, channel: &str) -> u64 {
    redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query::<(String, u64)>(&mut cluster.nodes[node].conn())
        .map(|(_, n)| n)
        .unwrap_or(0)
}

/// `CLUSTER FAILOVER` on the replica of a master holding a watchdog lock and a
/// lock on an explicit lease, both waited for: the replica is promoted with
/// everything the master had (a manual failover waits for the replica to catch
/// up), so both holders keep their locks (the watchdog one renewed on the new
/// master, neither told lost), a waiter whose deadline passes meanwhile gets
/// `Timeout` on time, each release (on the new master) wakes its waiter through
/// the shard's channel, and the tokens keep going up.
async fn a_manual_failover_keeps_locks_and_wakes_waiters(cluster: &mut Cluster) {
    let lease = Duration::from_secs(3);
    let a = manager(cluster, |c| c.watchdog_lease(lease)).await;
    let b = manager(cluster, |c| c).await;
    let c = manager(cluster, |c| c).await;
    // One hash tag: both locks live on the master that fails over.
    let (watched, leased) = ("{manual}:w", "{manual}:e");
    let held_w = a
        .send(Acquire::new(watched))
        .await
        .expect("running")
        .expect("held");
    let held_e = a
        .send(Acquire::new(leased).lease(Duration::from_secs(30)))
        .await
        .expect("running")
        .expect("held");
    let (token_w, token_e) = (held_w.fencing_token(), held_e.fencing_token());
    let wait = |m: &actix::Addr<LockManager>, name: &'static str, wait: Duration| {
        let m = m.clone();
        actix_rt::spawn(async move { m.send(Acquire::new(name).wait(wait)).await })
    };
    let waiter_w = wait(&b, watched, Duration::from_secs(60));
    let waiter_e = wait(&b, leased, Duration::from_secs(60));
    let short = Duration::from_secs(4);
    let short_waiter = wait(&c, leased, short);
    let short_began = Instant::now();

    let master = cluster.owner_of(watched);
    let replica = replica_serving(cluster, watched);
    let subscribed = support::eventually(Duration::from_secs(5), || {
        shard_subscribers(cluster, master, "redisson_lock__channel:{manual}:w") == 1
            && shard_subscribers(cluster, master, "redisson_lock__channel:{manual}:e") == 2
    })
    .await;
    assert!(subscribed, "the waiters subscribed on the master");

    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut cluster.nodes[replica].conn())
        .expect("CLUSTER FAILOVER");
    let began = Instant::now();
    let promoted = support::eventually(Duration::from_secs(30), || {
        cluster.owner_of(watched) == replica
    })
    .await;
    assert!(promoted, "the replica took over within 30 s");
    eprintln!("manual failover took {:?}", began.elapsed());

    // Nothing hangs past its deadline, failover or not.
    let timed_out = tokio::time::timeout(short + Duration::from_secs(5), short_waiter)
        .await
        .expect("the short waiter answered within 5 s of its deadline")
        .expect("task")
        .expect("running");
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert!(short_began.elapsed() >= short, "not before its deadline");

    // A lease after the promotion, the watchdog lock is still held: it was
    // renewed on the new master. Neither holder was told it lost its lock.
    actix_rt::time::sleep(lease + lease / 2).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(watched)
        .query(&mut cluster.nodes[replica].conn())
        .expect("PTTL");
    assert!(ttl > 0, "the promoted replica has the watchdog lock: {ttl}");
    assert!(
        held_w.is_lost().is_none(),
        "the watchdog holder kept its lock"
    );
    assert!(
        held_e.is_lost().is_none(),
        "the leased holder kept its lock"
    );
    assert!(
        !waiter_w.is_finished() && !waiter_e.is_finished(),
        "nobody got a held lock"
    );

    // The waiters are still subscribed in the shard: a manual failover does not
    // make the demoted master drop its sharded subscriptions (it stays in the
    // shard, as a replica), and Redis delivers a message published on any node
    // of a shard to subscribers on all of its nodes.
    let in_shard = |channel: &str| {
        shard_subscribers(cluster, master, channel) + shard_subscribers(cluster, replica, channel)
    };
    assert_eq!(in_shard("redisson_lock__channel:{manual}:w"), 1);
    assert_eq!(in_shard("redisson_lock__channel:{manual}:e"), 1);

    // Each release, on the new master, wakes its waiter through the shard.
    for (held, waiter, token) in [(held_w, waiter_w, token_w), (held_e, waiter_e, token_e)] {
        let name = held.name().to_string();
        let released = Instant::now();
        held.release().await.expect("released on the new master");
        let next = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| panic!("{name}: the waiter was not woken within 10 s"))
            .expect("task")
            .expect("running")
            .expect("granted after the failover");
        eprintln!(
            "{name}: waiter woken {:?} after the release",
            released.elapsed()
        );
        assert!(next.fencing_token() > token, "{name}: tokens go up");
        let last = next.fencing_token();
        next.release().await.expect("released");
        let again = a
            .send(Acquire::new(name.as_str()))
            .await
            .expect("running")
            .expect("free lock acquired");
        assert!(again.fencing_token() > last, "{name}: tokens go up");
        again.release().await.expect("released");
    }
}

/// A master SIGKILLed while one of its locks is held and waited for: its replica
/// is promoted, the holder keeps (or is told it lost) its lock, the release on the
/// new master wakes the waiter through the shard's channel (subscribed again on
/// the new owner), the tokens still go up, and nothing hangs past its deadline.
async fn a_master_killed_with_locks_held_and_waited_for(cluster: &mut Cluster) {
    // A lease well beyond the failover (2-3 s here): with 3 s, a failover slowed
    // by the machine's load let the lock expire on the new master between the
    // checks below and the release (NotHeld), which is a lost lock, not a kept one.
    let a = manager(cluster, |c| c.watchdog_lease(Duration::from_secs(10))).await;
    let b = manager(cluster, |c| c).await;
    let name = "failover:x";
    let (held, waiter, from) = cluster.held_and_waited_for(&a, &b, name).await;
    let token = held.fencing_token();
    // Let the replica catch up with the grant (replication is asynchronous; what
    // a failover loses without it is the holder's `lost()`, tested elsewhere).
    // WAIT counts the replicas that have what *its own connection* wrote, so it
    // goes behind a write of the same slot on one connection: the replication
    // stream is in order, so the grant is on the replica once that write is.
    let (acked,): (i64,) = redis::pipe()
        .cmd("INCR")
        .arg("{failover:x}:probe")
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query(&mut cluster.nodes[from].conn())
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica has the grant");

    // Locks on the healthy masters, for processes that start while one is dead.
    let healthy: Vec<String> = (0..)
        .map(|i| format!("healthy:{i}"))
        .filter(|n| cluster.owner_of(n) != from)
        .take(4)
        .collect();

    cluster.nodes[from].kill();
    let killed = Instant::now();
    // A process that starts now, before the failover, and wants a lock whose slot
    // is on a healthy master gets it at once: nothing on the start path waits
    // for a key of another slot (the client registry entry's slot may be on the
    // dead master; starting waited about 2 s for it there, in 1 of 3 starts).
    for lock in &healthy {
        let began = Instant::now();
        let fresh = manager(cluster, |c| c).await;
        let g = fresh
            .send(Acquire::new(lock.as_str()).wait(Duration::from_secs(5)))
            .await
            .expect("running")
            .unwrap_or_else(|e| panic!("{lock} on a healthy master: {e}"));
        let took = began.elapsed();
        eprintln!("started and granted {lock} {took:?} after start, one master dead");
        assert!(took < Duration::from_secs(1), "{lock}: {took:?}");
        g.release().await.expect("released");
    }
    let promoted = support::eventually(Duration::from_secs(30), || {
        cluster.owner_of_slot_is_running(name)
    })
    .await;
    assert!(promoted, "a replica took over the slot within 30 s");
    eprintln!("failover took {:?}", killed.elapsed());

    // The holder kept its lock: renewals go to the new master.
    let still: redis::RedisResult<i64> = redis::cmd("PTTL")
        .arg(name)
        .query(&mut cluster.nodes[cluster.owner_of(name)].conn());
    assert!(
        still.expect("PTTL") > 0,
        "the promoted replica has the lock"
    );
    assert!(held.is_lost().is_none(), "the holder was not told lost");
    assert!(!waiter.is_finished(), "nobody else got the lock meanwhile");

    // Its release reaches the new master and wakes the waiter on the new shard.
    let released = Instant::now();
    held.release().await.expect("released on the new master");
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was woken within 10 s of the release")
        .expect("task")
        .expect("running")
        .expect("granted after the failover");
    eprintln!("waiter woken {:?} after the release", released.elapsed());
    assert!(next.fencing_token() > token, "tokens never go backwards");
    next.release().await.expect("released");
}

/// Replica confirmation is on by default on a cluster too: a grant is confirmed
/// by its master's replica (a `WAIT` behind it). A master frozen the moment its
/// holder's release is on the wire, and resumed once its replica was promoted,
/// answers that release from its stale copy; no replica confirms it, so it is
/// redone, owner-checked, and MOVED takes it to the promoted master: another
/// manager gets the lock within moments of the resume, not at the end of the
/// 30 s lease (which is what happened with confirmation off on a cluster: the
/// chaos suite showed 14 s blind), and it holds it on the promoted master.
async fn a_release_answered_by_a_demoted_master_is_redone_on_the_new_one(cluster: &mut Cluster) {
    let (log, _logging) = support::Captured::install();
    // A shard whose master still has a running replica (the previous failover
    // left one shard without).
    let name = (0..)
        .map(|i| format!("demoted:{i}"))
        .find(|n| {
            let master = cluster.owner_of(n);
            let port = format!("master_port:{}", cluster.nodes[master].port());
            (0..cluster.nodes.len()).any(|i| {
                i != master
                    && cluster.nodes[i].pid().is_some()
                    && cluster.nodes[i].info("replication").contains(&port)
            })
        })
        .expect("a shard with a replica");
    let name = name.as_str();
    // A response timeout longer than the failover keeps the release in flight
    // on the frozen master until it resumes and answers it.
    let a = manager(cluster, |c| c.response_timeout(Duration::from_secs(8))).await;
    let b = manager(cluster, |c| c).await;
    let from = cluster.owner_of(name);
    let replica = replica_serving(cluster, name);
    let waits = cluster.calls("wait");
    let held = a
        .send(Acquire::new(name))
        .await
        .expect("running")
        .expect("granted");
    assert!(
        cluster.calls("wait") > waits,
        "the grant was confirmed with WAIT\n{}",
        log.text()
    );
    let on_replica = |node: &support::RedisServer| -> Option<String> {
        // READONLY: a cluster replica answers MOVED to reads otherwise.
        let (fields,): (Vec<String>,) = redis::pipe()
            .cmd("READONLY")
            .ignore()
            .cmd("HKEYS")
            .arg(name)
            .query(&mut node.conn())
            .unwrap_or_default();
        fields.into_iter().find(|f| f.contains(':'))
    };
    let first = on_replica(&cluster.nodes[replica]).expect("the grant is on the replica");
    let token = held.fencing_token();

    cluster.nodes[from].pause();
    let release = actix_rt::spawn(held.release());
    let began = Instant::now();
    let promoted = support::eventually(Duration::from_secs(30), || {
        cluster.nodes[replica]
            .info("replication")
            .contains("role:master")
    })
    .await;
    assert!(promoted, "the replica was promoted within 30 s");
    eprintln!("promoted {:?} after the freeze", began.elapsed());
    cluster.nodes[from].resume();
    let resumed = Instant::now();
    let next = b
        .send(Acquire::new(name).wait(Duration::from_secs(10)))
        .await
        .expect("running")
        .unwrap_or_else(|e| {
            panic!(
                "the promoted master kept the released lock: {e}\n{}",
                log.text()
            )
        });
    let blind = resumed.elapsed();
    let now = on_replica(&cluster.nodes[replica]);
    assert!(
        now.as_ref().is_some_and(|field| *field != first),
        "B holds the lock, but the promoted master has {now:?} (A's hold: {first})\n{}",
        log.text()
    );
    assert!(next.fencing_token() > token, "tokens never go backwards");
    let released = release.await.expect("task");
    assert!(released.is_ok(), "{released:?}");
    assert!(
        blind < Duration::from_secs(5),
        "the lock was blind {blind:?} after the old master resumed"
    );
    eprintln!("free on the new master {blind:?} after the old master resumed");
    next.release().await.expect("released");
}
