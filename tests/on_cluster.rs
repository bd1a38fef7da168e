//! The behaviour tests on a Redis Cluster: the scenarios of `exclusion.rs`,
//! `reentrancy.rs`, `waiting.rs`, `watchdog.rs`, `fair.rs`, `rwlock.rs` and
//! `bad_input.rs` (kept once, in `tests/scenarios/`, written against
//! `support::Target`) run here in turn on one three-master cluster, since a
//! cluster takes seconds to form. Each scenario's doc is on its standalone entry
//! point; the few that cannot hold on a cluster are listed below with why.
//!
//! On the cluster the managers are seeded with two masters, raw checks go to the
//! master owning the key's slot, pub/sub checks use `SSUBSCRIBE`/`SPUBLISH` and
//! `PUBSUB SHARDNUMSUB` (lockwarden waits on sharded channels on Redis 7), and
//! command counts are summed over the masters.

mod support;

#[path = "scenarios/exclusion.rs"]
mod exclusion;
#[path = "scenarios/reentrancy.rs"]
mod reentrancy;
#[path = "scenarios/waiting.rs"]
mod waiting;

use std::future::Future;
use std::time::Instant;

use support::Target;

/// Runs one scenario, saying how long it took (a failing one is named by its
/// panic's location; this line tells which ran before it).
async fn run<'a, F: Future<Output = ()> + 'a>(name: &str, began: Instant, scenario: F) {
    eprintln!("{name}: starting at {:?}", began.elapsed());
    scenario.await;
}

/// Every scenario that holds on any deployment, in turn on one shared cluster.
///
/// Not run here, and why:
/// - `exclusion::fencing_tokens_survive_a_redis_restart_with_no_data` restarts
///   the one server empty; a cluster node restarted empty leaves the cluster.
#[actix_rt::test]
async fn behaviour_scenarios_on_a_three_master_cluster() {
    let t = Target::cluster(3, 0);
    let began = Instant::now();
    let t = &t;

    run(
        "exclusion::two_managers",
        began,
        exclusion::two_managers_never_hold_the_same_lock_at_once(t),
    )
    .await;

    run(
        "reentrancy::hold_count",
        began,
        reentrancy::hold_count_goes_up_and_down_and_frees_at_zero(t),
    )
    .await;
    run(
        "reentrancy::no_owner",
        began,
        reentrancy::acquisitions_without_an_owner_do_not_reenter(t),
    )
    .await;
    run(
        "reentrancy::one_guard",
        began,
        reentrancy::releasing_one_guard_leaves_the_other_holds_alone(t),
    )
    .await;
    run(
        "reentrancy::stale_release",
        began,
        reentrancy::release_by_an_owner_that_no_longer_holds_fails_and_leaves_the_lock(t),
    )
    .await;
    run(
        "reentrancy::dropped_guard",
        began,
        reentrancy::dropping_a_guard_releases_it(t),
    )
    .await;

    run(
        "waiting::woken_by_message",
        began,
        waiting::waiter_in_another_manager_is_woken_by_the_unlock_message(t),
    )
    .await;
    run(
        "waiting::local_waiters",
        began,
        waiting::local_waiters_cost_constant_round_trips_per_handoff(t),
    )
    .await;
    run(
        "waiting::two_managers",
        began,
        waiting::waiters_in_two_managers_cost_constant_round_trips_per_handoff(t),
    )
    .await;
    run(
        "waiting::timeout",
        began,
        waiting::waiter_times_out_at_its_deadline(t),
    )
    .await;
    run(
        "waiting::try_acquire",
        began,
        waiting::try_acquire_makes_one_attempt(t),
    )
    .await;
    run(
        "waiting::dropped_waiters",
        began,
        waiting::dropped_waiters_never_leave_the_lock_held(t),
    )
    .await;

    eprintln!("all scenarios passed in {:?}", began.elapsed());
}
