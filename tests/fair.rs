//! The fair lock: waiters are served in the order they first queued, across
//! managers (as across processes); a waiter that dies stops holding up the queue
//! within the configured place lease; one that gives up leaves the queue; and the
//! Redis layout is Redisson's (queue list, deadline zset, one channel per waiter).

#[path = "scenarios/fair.rs"]
mod scenarios;
mod support;

use std::time::Duration;

use lockwarden::{Acquire, LockError, Owner, ReleaseOutcome};
use scenarios::{queue, queue_up, wait_queued};
use support::{hold, Target};

/// Six waiters over three managers, queued in a known interleaved order (two per
/// manager), acquire in exactly that order, one at a time.
#[actix_rt::test]
async fn waiters_from_three_managers_acquire_in_queue_order() {
    scenarios::waiters_from_three_managers_acquire_in_queue_order(&Target::standalone()).await;
}

/// A queued waiter whose whole runtime dies (as a crashed process would) is
/// skipped once its place lapses (600 ms, refreshed every 200 ms while alive), not
/// after the holder's 30 s lease or Redisson's 5 minutes: the waiter behind it gets
/// the lock right after.
#[actix_rt::test]
async fn a_dead_waiter_is_skipped_within_the_place_lease() {
    scenarios::a_dead_waiter_is_skipped_within_the_place_lease(&Target::standalone()).await;
}

/// A waiter whose deadline passes, and one whose caller goes away, both leave the
/// queue and the deadline zset; the holder is untouched.
#[actix_rt::test]
async fn waiters_that_give_up_leave_the_queue() {
    scenarios::waiters_that_give_up_leave_the_queue(&Target::standalone()).await;
}

/// The layout is Redisson's: the hash at the name, the queue and deadline keys
/// under the name's hash tag with deadlines on the server's clock, and a waiter's
/// own channel `redisson_lock__channel:{f}:<owner field>`, on which a foreign
/// holder's Redisson-style unlock (DEL + PUBLISH to the head) wakes it at once.
#[actix_rt::test]
async fn keys_and_channels_match_the_protocol() {
    scenarios::keys_and_channels_match_the_protocol(&Target::standalone()).await;
}

/// A force unlock wakes the waiter at the head of the queue at once (its fallback
/// poll is 30 s); re-entry by the holder does not queue; a try-once waiter is
/// answered at once and takes no place.
#[actix_rt::test]
async fn force_unlock_wakes_the_head_and_reentry_and_try_once_do_not_queue() {
    scenarios::force_unlock_wakes_the_head_and_reentry_and_try_once_do_not_queue(
        &Target::standalone(),
    )
    .await;
}

/// Three managers with four tasks each, five rounds per task on the fair lock:
/// never two holders inside at once (checked in this process and in Redis), tokens
/// strictly increasing, and the queue empty at the end.
#[actix_rt::test]
async fn fair_lock_excludes_under_contention() {
    scenarios::fair_lock_excludes_under_contention(&Target::standalone()).await;
}

/// Out of memory under `noeviction`, the fair lock's holder still renews and
/// releases (holds > 1 and the last one) and a queued waiter keeps its place
/// (refreshes and retries) and is served at its turn; only a new place is refused,
/// with Redis's OOM error.
#[actix_rt::test]
async fn a_full_redis_refuses_new_places_only() {
    let t = Target::standalone();
    let Target::Server(server) = &t else {
        unreachable!("a standalone target")
    };
    let lease = Duration::from_millis(600);
    let m = t.manager(|c| c.watchdog_lease(lease)).await;
    let other = t.manager(|c| c.fair_waiter_lease(lease)).await;
    let owner = Owner::new();
    let a = hold(&m, "f", |r| r.fair().owner(owner)).await;
    let b = hold(&m, "f", |r| r.fair().owner(owner)).await;
    let waiting = queue_up(&other, Owner::new());
    wait_queued(&t, 1).await;

    support::fill_until_oom(server);
    let late = t.manager(|c| c).await;
    let refused = late
        .send(Acquire::new("f").fair().wait(Duration::from_secs(1)))
        .await
        .expect("running");
    assert!(
        matches!(&refused, Err(LockError::Redis(e)) if e.to_string().contains("OOM")),
        "{refused:?}"
    );
    actix_rt::time::sleep(lease * 2).await;
    assert!(a.is_lost().is_none(), "renewal failed under OOM");
    assert_eq!(queue(&t).len(), 1, "the waiter lost its place under OOM");

    assert_eq!(
        a.release().await.expect("release under OOM"),
        ReleaseOutcome::StillHeld { holds: 1 }
    );
    assert_eq!(
        b.release().await.expect("last release under OOM"),
        ReleaseOutcome::Released
    );
    let g = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("served")
        .expect("task")
        .expect("acquired");
    g.release().await.expect("release under OOM");
}
