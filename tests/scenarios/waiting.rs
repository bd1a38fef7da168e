//! The bodies of `tests/one_server/waiting.rs`'s tests, written against [`Target`] so that
//! `tests/topologies/on_cluster.rs` runs them on a cluster too. Each scenario's doc is on its body here;
//! `each!` at the end lists them once for both runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwarden::{Acquire, Handle, LockError};

use crate::support::{eventually, hold, Target};

/// A waiter in another manager acquires promptly after the release: far below the
/// holder's remaining TTL (30 s) and the waiter's fallback poll (set to 30 s), so
/// only the pub/sub unlock message can have woken it.
pub async fn waiter_in_another_manager_is_woken_by_the_unlock_message(t: &Target) {
    let holder = t.manager(|c| c).await;
    let waiter = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let guard = hold(&holder, "orders:1", |a| a).await;

    let waiting = actix_rt::spawn(async move {
        let g = waiter
            .send(Acquire::new("orders:1").wait(Duration::from_secs(20)))
            .await;
        (Instant::now(), g)
    });
    // The waiter has subscribed to the lock's channel once Redis counts it.
    let subscribed = eventually(Duration::from_secs(5), || {
        t.subscribers("redisson_lock__channel:{orders:1}") == 1
    })
    .await;
    assert!(subscribed, "waiter never subscribed");

    let released_at = Instant::now();
    guard.release().await.expect("released");
    let (acquired_at, got) = waiting.await.expect("task");
    let g = got.expect("running").expect("acquired");
    let handoff = acquired_at - released_at;
    assert!(
        handoff < Duration::from_secs(1),
        "woke after {handoff:?}: not by the message"
    );
    g.release().await.expect("released");
}

/// Runs `waiters` tasks over `managers` managers, each taking the lock `rounds`
/// times, and returns Redis script calls (EVAL + EVALSHA) per acquisition.
async fn script_calls_per_acquisition(
    t: &Target,
    managers: usize,
    waiters: usize,
    rounds: usize,
) -> f64 {
    let mut ms = Vec::new();
    for _ in 0..managers {
        ms.push(t.manager(|c| c).await);
    }
    let before = t.commandstats();
    let acquisitions = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let m = ms[i % managers].clone();
        let acquisitions = acquisitions.clone();
        tasks.push(actix_rt::spawn(async move {
            for _ in 0..rounds {
                let g = m
                    .send(Acquire::new("hot").wait(Duration::from_secs(30)))
                    .await
                    .expect("running")
                    .expect("acquired");
                acquisitions.fetch_add(1, Ordering::Relaxed);
                actix_rt::time::sleep(Duration::from_millis(1)).await;
                g.release().await.expect("released");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let after = t.commandstats();
    let scripts = |s: &std::collections::HashMap<String, u64>| {
        s.get("evalsha").copied().unwrap_or(0) + s.get("eval").copied().unwrap_or(0)
    };
    (scripts(&after) - scripts(&before)) as f64 / acquisitions.load(Ordering::Relaxed) as f64
}

/// With N local waiters, each handoff costs the same few script calls whether N is
/// 2 or 16: only the head waiter asks Redis, and only after the local release.
pub async fn local_waiters_cost_constant_round_trips_per_handoff(t: &Target) {
    let few = script_calls_per_acquisition(t, 1, 2, 20).await;
    let many = script_calls_per_acquisition(t, 1, 16, 5).await;
    eprintln!("one manager: script calls per acquisition {few:.2} (2 waiters) -> {many:.2} (16)");
    // Acquire + release is 2 calls; anything O(N) would be far above 3 at N = 16.
    assert!(
        many <= 2.5,
        "16 local waiters cost {many:.2} script calls per acquisition"
    );
    assert!(
        many <= few * 1.25 + 0.1,
        "cost grew with waiters: {few:.2} -> {many:.2}"
    );
}

/// Spread over two managers, a handoff may cost the other manager's head one
/// failed attempt, but the cost still does not grow with the number of waiters.
pub async fn waiters_in_two_managers_cost_constant_round_trips_per_handoff(t: &Target) {
    let few = script_calls_per_acquisition(t, 2, 4, 10).await;
    let many = script_calls_per_acquisition(t, 2, 16, 4).await;
    eprintln!("two managers: script calls per acquisition {few:.2} (4 waiters) -> {many:.2} (16)");
    assert!(
        many <= 4.0,
        "16 waiters over 2 managers cost {many:.2} script calls per acquisition"
    );
    assert!(
        many <= few * 1.5 + 0.2,
        "cost grew with waiters: {few:.2} -> {many:.2}"
    );
}

/// A waiter whose deadline passes gets `Timeout`, on time, and the lock is untouched.
pub async fn waiter_times_out_at_its_deadline(t: &Target) {
    let m = t.manager(|c| c).await;
    let other = t.manager(|c| c).await;
    let guard = hold(&m, "busy", |a| a).await;
    let start = Instant::now();
    let res = other
        .send(Acquire::new("busy").wait(Duration::from_millis(300)))
        .await
        .expect("running");
    let took = start.elapsed();
    match res {
        Err(LockError::Timeout { waited, .. }) => {
            assert!(waited >= Duration::from_millis(300), "waited {waited:?}")
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(
        took < Duration::from_millis(1300),
        "timeout answered late: {took:?}"
    );
    let count: String = t.raw(&["HGET", "busy", guard.owner_field()]);
    assert_eq!(count, "1");
    let stats = other.send(lockwarden::GetStats).await.expect("running");
    assert_eq!(stats.timeouts, 1);
    guard.release().await.expect("released");
}

/// A zero wait makes one attempt: `try_acquire` gives `None` while held elsewhere
/// and a guard once free.
pub async fn try_acquire_makes_one_attempt(t: &Target) {
    let m = t.manager(|c| c).await;
    let handle = m
        .send(Handle::new("once"))
        .await
        .expect("running")
        .expect("valid name");
    let first = handle
        .try_acquire()
        .await
        .expect("no error")
        .expect("free lock");
    let start = Instant::now();
    assert!(handle.try_acquire().await.expect("no error").is_none());
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "a zero wait must not wait"
    );
    first.release().await.expect("released");
    let again = handle.try_acquire().await.expect("no error");
    assert!(again.is_some());
    let info = handle.inspect().await.expect("inspect");
    assert!(info.is_held());
    assert_eq!(info.holders.len(), 1);
    assert!(info.holders[0].this_manager);
}

/// Waiters whose callers stop waiting (the `send` future dropped) at every moment
/// around a release never leave the lock held: afterwards it is free.
pub async fn dropped_waiters_never_leave_the_lock_held(t: &Target) {
    let holder = t.manager(|c| c).await;
    let waiters = t.manager(|c| c).await;
    for round in 0..30u64 {
        let guard = hold(&holder, "flaky", |a| a).await;
        let mut pending = Vec::new();
        for _ in 0..3 {
            let w = waiters.clone();
            pending.push(actix_rt::spawn(async move {
                w.send(Acquire::new("flaky").wait(Duration::from_secs(10)))
                    .await
            }));
        }
        actix_rt::time::sleep(Duration::from_millis(2)).await;
        guard.release().await.expect("released");
        // Give up at a different moment each round, around the handoff.
        actix_rt::time::sleep(Duration::from_micros(200 * (round % 10))).await;
        for p in pending {
            p.abort();
        }
        let free = eventually(Duration::from_secs(3), || !t.exists("flaky")).await;
        assert!(
            free,
            "round {round}: lock left held by a waiter that went away"
        );
    }
}

/// A release its caller gives up on after the first poll (a timeout around it,
/// a `select!` that took another branch) still frees the lock. actix drops,
/// unhandled, a message whose sender stopped waiting: the release was lost, the
/// guard counted as released (so its drop sent nothing), and the watchdog kept
/// renewing the abandoned hold for as long as the manager lived; a `--redlock`
/// process kept one server's lock this way and never got a majority.
pub async fn a_release_given_up_after_its_first_poll_still_frees_the_lock(t: &Target) {
    use futures::FutureExt;
    let holder = t.manager(|c| c).await;
    let other = t.manager(|c| c).await;
    let guard = hold(&holder, "abandoned:1", |a| a).await;
    // Polled once (the release is on its way), then dropped unanswered.
    assert!(
        guard.release().now_or_never().is_none(),
        "a release answers only after a round trip to Redis"
    );
    let next = other
        .send(Acquire::new("abandoned:1").wait(Duration::from_secs(10)))
        .await
        .expect("running")
        .expect("the abandoned release freed the lock");
    next.release().await.expect("released");
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/waiting.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            waiter_in_another_manager_is_woken_by_the_unlock_message,
            local_waiters_cost_constant_round_trips_per_handoff,
            waiters_in_two_managers_cost_constant_round_trips_per_handoff,
            waiter_times_out_at_its_deadline,
            try_acquire_makes_one_attempt,
            dropped_waiters_never_leave_the_lock_held,
            a_release_given_up_after_its_first_poll_still_frees_the_lock,
        }
    };
}
pub(crate) use each;
