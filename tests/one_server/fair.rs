//! The fair lock: waiters are served in the order they first queued, across
//! managers (as across processes); a waiter that dies stops holding up the queue
//! within the configured place lease; one that gives up leaves the queue; and the
//! Redis layout is Redisson's (queue list, deadline zset, one channel per waiter).

#[path = "../scenarios/fair.rs"]
mod scenarios;
use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, LockError, Owner, ReleaseOutcome};
use scenarios::{queue, queue_up, wait_queued};
use support::{hold, Target};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

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
