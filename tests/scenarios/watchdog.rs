//! The bodies of `tests/one_server/watchdog.rs`'s tests, written against [`Target`] so that
//! `tests/topologies/on_cluster.rs` runs them on a cluster too. Each scenario's doc is on its body here;
//! `each!` at the end lists them once for both runs.

use std::time::{Duration, Instant};

use lockwarden::{Acquire, LockError, LockManager, LostReason};

use crate::support::{eventually, hold, Target};

/// The watchdog lease of these scenarios.
pub const LEASE: Duration = Duration::from_millis(600);

/// Held with no lease for over four watchdog leases, the lock is still there (and
/// its TTL is never above one lease); once released, it is gone.
pub async fn watchdog_keeps_a_held_lock_alive_for_many_leases(t: &Target) {
    let m = t.manager(|c| c.watchdog_lease(LEASE)).await;
    let guard = hold(&m, "long-job", |a| a).await;
    let start = Instant::now();
    while start.elapsed() < LEASE * 4 + LEASE / 2 {
        let field: i64 = t.raw(&["HEXISTS", "long-job", guard.owner_field()]);
        assert_eq!(
            field,
            1,
            "lock vanished after {:?} while held",
            start.elapsed()
        );
        let pttl: i64 = t.raw(&["PTTL", "long-job"]);
        assert!(pttl > 0 && pttl <= LEASE.as_millis() as i64, "pttl {pttl}");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(guard.is_lost().is_none());
    guard.release().await.expect("released");
    let exists: i64 = t.raw(&["EXISTS", "long-job"]);
    assert_eq!(exists, 0);
}

/// A holder whose whole runtime dies (as a crashed process would) stops renewing:
/// the lock frees within about one lease, and another manager gets it.
pub async fn lock_of_a_dead_holder_frees_within_one_lease(t: &Target) {
    let config = t.config().watchdog_lease(LEASE);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
    let holder = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let m = LockManager::start(config).await.expect("start");
            let guard = m
                .send(Acquire::new("crashy"))
                .await
                .expect("running")
                .expect("acquired");
            ready_tx.send(()).expect("test is listening");
            let _ = crash_rx.await;
            // No release, no drop: the runtime just goes away with the lock held.
            std::mem::forget(guard);
        });
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("holder acquired");
    // Renewed while the holder lives:
    actix_rt::time::sleep(LEASE * 2).await;
    let exists: i64 = t.raw(&["EXISTS", "crashy"]);
    assert_eq!(exists, 1, "the live holder's lock must be renewed");

    crash_tx.send(()).expect("holder waiting");
    holder.join().expect("holder thread");
    let died = Instant::now();
    let freed = eventually(LEASE * 2, || !t.exists("crashy")).await;
    assert!(
        freed,
        "lock of a dead holder still there {:?} after death",
        died.elapsed()
    );
    assert!(
        died.elapsed() <= LEASE + Duration::from_millis(300),
        "freed late: {:?}",
        died.elapsed()
    );

    let other = t.manager(|c| c).await;
    let g = hold(&other, "crashy", |a| a.wait(Duration::from_secs(1))).await;
    g.release().await.expect("released");
}

/// An explicit lease is not renewed: the key expires after it, the guard reports
/// `LeaseExpired`, and its release then says the lock was lost.
pub async fn explicit_lease_expires_and_is_not_renewed(t: &Target) {
    let m = t.manager(|c| c.watchdog_lease(LEASE)).await;
    let lease = Duration::from_millis(300);
    let start = Instant::now();
    let guard = hold(&m, "leased", |a| a.lease(lease)).await;
    assert_eq!(guard.lease(), Some(lease));
    // Never extended past its lease:
    while t.raw::<i64>(&["EXISTS", "leased"]) == 1 {
        let pttl: i64 = t.raw(&["PTTL", "leased"]);
        assert!(
            pttl <= lease.as_millis() as i64,
            "pttl {pttl} grew past the lease"
        );
        assert!(start.elapsed() < lease * 3, "explicit lease was renewed");
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        start.elapsed() >= lease - Duration::from_millis(20),
        "expired early: {:?}",
        start.elapsed()
    );
    let reason = tokio::time::timeout(Duration::from_secs(1), guard.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(reason, LostReason::LeaseExpired);
    let err = guard.release().await.expect_err("release after expiry");
    assert!(
        matches!(err, LockError::Lost(LostReason::LeaseExpired)),
        "got {err:?}"
    );
}

/// A force-unlock is noticed by the holder's next renewal: `lost()` resolves with
/// `OwnerGone` and its release reports the loss instead of pretending success.
pub async fn holder_is_told_when_its_lock_is_force_unlocked(t: &Target) {
    let m = t.manager(|c| c.watchdog_lease(LEASE)).await;
    let guard = hold(&m, "victim", |a| a).await;
    let admin = t.manager(|c| c).await;
    let deleted = admin
        .send(lockwarden::ForceUnlock::new("victim"))
        .await
        .expect("running")
        .expect("ok");
    assert!(deleted);
    let reason = tokio::time::timeout(LEASE, guard.lost())
        .await
        .expect("noticed within one lease");
    assert_eq!(reason, LostReason::OwnerGone);
    let err = guard.release().await.expect_err("release of a lost lock");
    assert!(
        matches!(err, LockError::Lost(LostReason::OwnerGone)),
        "got {err:?}"
    );
    let stats = m.send(lockwarden::GetStats).await.expect("running");
    assert_eq!(stats.lost, 1);
}

/// A renewal period not shorter than the lease is refused at start.
pub async fn renewal_period_must_be_shorter_than_the_lease(t: &Target) {
    let bad = t.config().watchdog_lease(LEASE).renew_interval(LEASE);
    let err = LockManager::start(bad).await.expect_err("must be refused");
    assert!(matches!(err, LockError::InvalidConfig(_)), "got {err:?}");
}

/// The watchdog renews a manager's locks in batches: 400 locks held over four
/// leases stay held, every one renewed each period, for a few script calls per
/// period instead of one per lock.
pub async fn many_held_locks_are_renewed_in_few_calls(t: &Target) {
    const LOCKS: usize = 400;
    // Four hash tags: on a cluster a renewal call holds the locks of one slot
    // only (a script may not cross slots), so the locks live in four slots
    // wherever the cluster puts them, and the bound below is per slot.
    let name = |i: usize| format!("{{many{}}}:{i}", i % 4);
    let names: Vec<String> = (0..LOCKS).map(name).collect();
    let slots = t.slots(&names) as f64;
    let m = t.manager(|c| c.watchdog_lease(LEASE)).await;
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(hold(&m, &name(i), |a| a).await);
    }
    let before = t.commandstats();
    let start = Instant::now();
    // The window is what is measured: four leases, twelve renewal periods.
    actix_rt::time::sleep(LEASE * 4).await;
    let after = t.commandstats();
    let window = start.elapsed();
    let delta = |cmd: &str| after.get(cmd).unwrap_or(&0) - before.get(cmd).unwrap_or(&0);
    // One pipelined round trip per node: this test's runtime also runs the
    // manager, so a long blocking check would itself starve the watchdog.
    let mut check = Vec::with_capacity(LOCKS);
    for (i, g) in guards.iter().enumerate() {
        assert!(g.is_lost().is_none(), "lock {i} lost");
        check.push((name(i), g.owner_field().to_string()));
    }
    let held = t.hexists_all(&check);
    let expired: Vec<usize> = (0..LOCKS).filter(|&i| !held[i]).collect();
    assert!(expired.is_empty(), "expired while held: {expired:?}");
    let periods = window.as_secs_f64() / (LEASE.as_secs_f64() / 3.0);
    let renewed = delta("pexpire") as f64 / LOCKS as f64;
    assert!(
        renewed >= periods - 2.0,
        "each lock renewed {renewed:.1} times in {periods:.1} periods"
    );
    let calls = delta("evalsha") as f64;
    assert!(
        calls <= 15.0 * (periods + 1.0) * slots,
        "{calls} script calls for {LOCKS} locks in {slots} slots over {periods:.1} periods: not batched"
    );
    for g in guards {
        g.release().await.expect("released");
    }
    let stats = m.send(lockwarden::GetStats).await.expect("running");
    assert_eq!((stats.lost, stats.renewals_failed), (0, 0));
}

/// A released watchdog holding is no longer renewed: when the same owner takes
/// the lock again with an explicit lease, that lease is not extended by a
/// renewal left over from the first holding.
pub async fn released_watchdog_holding_is_no_longer_renewed(t: &Target) {
    let m = t.manager(|c| c.watchdog_lease(LEASE)).await;
    let owner = lockwarden::Owner::new();
    let first = hold(&m, "again", |a| a.owner(owner)).await;
    let first_field = first.owner_field().to_string();
    first.release().await.expect("released");
    let lease = Duration::from_millis(300);
    let start = Instant::now();
    let second = hold(&m, "again", |a| a.owner(owner).lease(lease)).await;
    assert_eq!(second.owner_field(), first_field);
    let gone = eventually(LEASE * 3, || !t.exists("again")).await;
    assert!(
        gone,
        "explicit lease still renewed after {:?}",
        start.elapsed()
    );
    let reason = tokio::time::timeout(LEASE, second.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(reason, LostReason::LeaseExpired);
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/watchdog.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            watchdog_keeps_a_held_lock_alive_for_many_leases,
            lock_of_a_dead_holder_frees_within_one_lease,
            explicit_lease_expires_and_is_not_renewed,
            holder_is_told_when_its_lock_is_force_unlocked,
            renewal_period_must_be_shorter_than_the_lease,
            many_held_locks_are_renewed_in_few_calls,
            released_watchdog_holding_is_no_longer_renewed,
        }
    };
}
pub(crate) use each;
