//! The bodies of `tests/one_server/lock_delay.rs`'s tests (`Config::lock_delay`, Consul's
//! lock-delay), written against [`Target`] so that `tests/topologies/on_cluster.rs` runs them
//! on a cluster too. Each scenario's doc is on its body here; `each!` at the end
//! lists them once for both runs.

use std::time::{Duration, Instant};

use lockwarden::{Acquire, ForceUnlock, LockError, Owner};

use crate::support::{eventually, hold, Target};

/// Redisson's lock script (`RedissonLock.tryLockInnerAsync`): nil when it took the
/// lock, else the PTTL a Redisson client would wait.
const REDISSON_TRY_LOCK: &str = "\
if (redis.call('exists', KEYS[1]) == 0) then \
  redis.call('hincrby', KEYS[1], ARGV[2], 1); \
  redis.call('pexpire', KEYS[1], ARGV[1]); \
  return nil; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
  redis.call('hincrby', KEYS[1], ARGV[2], 1); \
  redis.call('pexpire', KEYS[1], ARGV[1]); \
  return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// The server's clock in ms, on the node serving `key`.
fn server_ms(t: &Target, key: &str) -> u64 {
    let (secs, micros): (u64, u64) = crate::support::raw(t.node_for(key), &["TIME"]);
    secs * 1000 + micros / 1000
}

/// When the lease of the hold marked in `name`'s hash ends (server ms).
fn lease_end(t: &Target, name: &str) -> u64 {
    let mark: String = t.raw(&["HGET", name, "lockwarden:delay"]);
    mark.split(',')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a lease end")
}

/// A lock whose holder's lease ran out unreleased (a 300 ms lease, never renewed:
/// the holder "froze") is granted to nobody for the delay (1 s) after the lease
/// ended. Fencing tokens follow the server's clock in µs, so the two grants'
/// tokens show how far apart they were on the server. In the delay, a Redisson
/// client trying the lock is told to wait too.
pub async fn a_lapsed_lock_is_granted_only_after_the_delay(t: &Target) {
    let name = "ld:lapse";
    let frozen = t.manager(|c| c.lock_delay(Duration::from_secs(1))).await;
    let other = t.manager(|c| c).await;
    let first = hold(&frozen, name, |a| a.lease(Duration::from_millis(300))).await;
    let began = Instant::now();
    let waiting = actix_rt::spawn(async move {
        other
            .send(Acquire::new(name).wait(Duration::from_secs(10)))
            .await
            .expect("running")
    });
    // In the delay: the lease has ended, the hash is still there.
    let end = lease_end(t, name);
    let in_delay = eventually(Duration::from_secs(5), || server_ms(t, name) > end + 100).await;
    assert!(in_delay, "the lease never ended");
    let mut conn = t.conn_for(name).await;
    let redisson: Option<i64> = redis::Script::new(REDISSON_TRY_LOCK)
        .key(name)
        .arg(30_000)
        .arg("0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f:1")
        .invoke_async(&mut conn)
        .await
        .expect("Redisson's script runs");
    assert!(
        redisson.is_some_and(|pttl| pttl > 0),
        "a Redisson client got the lock in the delay: {redisson:?}"
    );
    // The frozen holder wakes and lets go: its lock is already lost, and its
    // release does not cut the delay short.
    let first_token = first.fencing_token();
    let released = first.release().await;
    assert!(released.is_err(), "a lapsed hold released: {released:?}");
    assert!(
        t.exists(name),
        "the lapsed holder's release ended the delay"
    );

    let second = waiting
        .await
        .expect("task")
        .expect("granted after the delay");
    let apart_us = second.fencing_token() - first_token;
    assert!(
        apart_us >= 1_300_000,
        "granted {apart_us} µs after the first grant: inside the lease plus the delay"
    );
    assert!(
        began.elapsed() < Duration::from_secs(6),
        "took {:?}",
        began.elapsed()
    );
    second.release().await.expect("released");
}

/// Only a lapse is delayed: a released lock, a force-unlocked one and one never
/// held are taken at once by another manager, even with a 10 s delay configured.
/// While held, the hash carries the mark and outlives the lease by the delay.
pub async fn a_release_or_force_unlock_is_not_delayed(t: &Target) {
    let name = "ld:clean";
    let delayed = t.manager(|c| c.lock_delay(Duration::from_secs(10))).await;
    let other = t.manager(|c| c).await;
    let try_once = |n: &'static str| {
        let other = other.clone();
        async move {
            other
                .send(Acquire::new(n).wait(Duration::ZERO))
                .await
                .expect("running")
        }
    };
    let held = hold(&delayed, name, |a| a).await;
    let ttl: i64 = t.raw(&["PTTL", name]);
    assert!(
        ttl > 30_000,
        "TTL {ttl} ms: the watchdog lease plus the delay"
    );
    assert!(t
        .raw::<Option<String>>(&["HGET", name, "lockwarden:delay"])
        .is_some());
    held.release().await.expect("released");
    let got = try_once(name)
        .await
        .expect("a released lock is not delayed");
    got.release().await.expect("released");

    let _held = hold(&delayed, name, |a| a).await;
    let unlocked = other
        .send(ForceUnlock::new(name))
        .await
        .expect("running")
        .expect("force unlock");
    assert!(unlocked);
    let got = try_once(name)
        .await
        .expect("a force-unlocked lock is not delayed");
    got.release().await.expect("released");

    let got = try_once("ld:never")
        .await
        .expect("a lock never held is not delayed");
    got.release().await.expect("released");
}

/// A holder whose lease ended cannot take the lock back in the delay by asking
/// again as the same owner (it would re-enter a lock it lost); it gets it after.
pub async fn a_lapsed_holder_cannot_reenter_in_the_delay(t: &Target) {
    let name = "ld:reenter";
    let m = t
        .manager(|c| c.lock_delay(Duration::from_millis(800)))
        .await;
    let me = Owner::new();
    let first = hold(&m, name, |a| a.owner(me).lease(Duration::from_millis(200))).await;
    let end = lease_end(t, name);
    let ended = eventually(Duration::from_secs(5), || server_ms(t, name) > end + 50).await;
    assert!(ended, "the lease never ended");
    let again = m
        .send(Acquire::new(name).owner(me).wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(
        matches!(again, Err(LockError::Timeout { .. })),
        "re-entered a lapsed lock: {again:?}"
    );
    let count: String = t.raw(&["HGET", name, first.owner_field()]);
    assert_eq!(count, "1", "the refused re-entry took no hold");
    let later = m
        .send(Acquire::new(name).owner(me).wait(Duration::from_secs(5)))
        .await
        .expect("running")
        .expect("taken again after the delay");
    drop(first);
    later.release().await.expect("released");
}

/// Without a lock-delay nothing changes: no mark in the hash, and a lapsed lock
/// goes to the next waiter soon after its lease ends.
pub async fn without_a_delay_a_lapsed_lock_is_taken_at_once(t: &Target) {
    let name = "ld:none";
    let m = t.manager(|c| c).await;
    let other = t.manager(|c| c).await;
    let first = hold(&m, name, |a| a.lease(Duration::from_millis(300))).await;
    assert!(t
        .raw::<Option<String>>(&["HGET", name, "lockwarden:delay"])
        .is_none());
    let second = other
        .send(Acquire::new(name).wait(Duration::from_secs(10)))
        .await
        .expect("running")
        .expect("granted");
    let apart_us = second.fencing_token() - first.fencing_token();
    assert!(
        (300_000..1_300_000).contains(&apart_us),
        "granted {apart_us} µs after the first grant"
    );
    drop(first);
    second.release().await.expect("released");
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/lock_delay.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            a_lapsed_lock_is_granted_only_after_the_delay,
            a_release_or_force_unlock_is_not_delayed,
            a_lapsed_holder_cannot_reenter_in_the_delay,
            without_a_delay_a_lapsed_lock_is_taken_at_once,
        }
    };
}
pub(crate) use each;
