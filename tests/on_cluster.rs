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

#[path = "scenarios/bad_input.rs"]
mod bad_input;
#[path = "scenarios/exclusion.rs"]
mod exclusion;
#[path = "scenarios/fair.rs"]
mod fair;
#[path = "scenarios/reentrancy.rs"]
mod reentrancy;
#[path = "scenarios/rwlock.rs"]
mod rwlock;
#[path = "scenarios/waiting.rs"]
mod waiting;
#[path = "scenarios/watchdog.rs"]
mod watchdog;

use std::time::Instant;

use support::Target;

/// Runs scenarios in turn on `$target`, each announced with the time since
/// `$began` (a failing one is named by its panic's location; the last line before
/// it says which scenario ran).
macro_rules! run {
    ($target:expr, $began:expr, $($module:ident::$scenario:ident),+ $(,)?) => {
        $(
            eprintln!(
                "{}::{}: starting at {:?}",
                stringify!($module),
                stringify!($scenario),
                $began.elapsed()
            );
            $module::$scenario($target).await;
        )+
    };
}

/// Every scenario that holds on any deployment, in turn on one shared cluster.
///
/// Not run here, and why:
/// - `exclusion::fencing_tokens_survive_a_redis_restart_with_no_data` restarts
///   the one server empty; a cluster node restarted empty leaves the cluster.
/// - `bad_input::scripts_refuse_bad_arguments_before_writing` and
///   `a_handover_with_bad_arguments_changes_nothing` call the Lua files directly
///   on a connection: what they check is the scripts' own argument checks, the
///   same wherever the scripts run.
/// - `fair::a_full_redis_refuses_new_places_only` and
///   `rwlock::release_and_renew_work_when_redis_is_out_of_memory` fill the server
///   until it refuses writes; out of memory is one node's state, and filling one
///   master of a cluster is no different from filling a server.
#[actix_rt::test]
async fn behaviour_scenarios_on_a_three_master_cluster() {
    let t = Target::cluster(3, 0);
    let began = Instant::now();
    run!(
        &t,
        began,
        // First: these count script calls and keys, which a manager of a later
        // scenario still giving back a lock in the background would disturb.
        bad_input::bad_names_are_refused_before_reaching_redis,
        bad_input::bad_leases_are_refused,
        bad_input::bad_configs_are_refused_at_start,
        bad_input::keys_that_are_not_locks_are_left_alone,
        exclusion::two_managers_never_hold_the_same_lock_at_once,
        reentrancy::hold_count_goes_up_and_down_and_frees_at_zero,
        reentrancy::acquisitions_without_an_owner_do_not_reenter,
        reentrancy::releasing_one_guard_leaves_the_other_holds_alone,
        reentrancy::release_by_an_owner_that_no_longer_holds_fails_and_leaves_the_lock,
        reentrancy::dropping_a_guard_releases_it,
        waiting::waiter_in_another_manager_is_woken_by_the_unlock_message,
        waiting::local_waiters_cost_constant_round_trips_per_handoff,
        waiting::waiters_in_two_managers_cost_constant_round_trips_per_handoff,
        waiting::waiter_times_out_at_its_deadline,
        waiting::try_acquire_makes_one_attempt,
        waiting::dropped_waiters_never_leave_the_lock_held,
        watchdog::watchdog_keeps_a_held_lock_alive_for_many_leases,
        watchdog::lock_of_a_dead_holder_frees_within_one_lease,
        watchdog::explicit_lease_expires_and_is_not_renewed,
        watchdog::holder_is_told_when_its_lock_is_force_unlocked,
        watchdog::renewal_period_must_be_shorter_than_the_lease,
        watchdog::many_held_locks_are_renewed_in_few_calls,
        watchdog::released_watchdog_holding_is_no_longer_renewed,
        fair::waiters_from_three_managers_acquire_in_queue_order,
        fair::a_dead_waiter_is_skipped_within_the_place_lease,
        fair::waiters_that_give_up_leave_the_queue,
        fair::keys_and_channels_match_the_protocol,
        fair::force_unlock_wakes_the_head_and_reentry_and_try_once_do_not_queue,
        fair::fair_lock_excludes_under_contention,
        rwlock::readers_share_and_the_writer_gets_it_after_the_last_reader,
        rwlock::waiting_readers_all_wake_when_the_writer_releases,
        rwlock::a_writer_downgrades_and_keeps_reading,
        rwlock::an_upgrade_is_refused_at_once,
        rwlock::a_crashed_readers_holds_lapse_and_free_the_writer,
        rwlock::keys_channels_and_inspect_match_the_protocol,
        rwlock::readers_and_writers_exclude_under_contention,
    );
    eprintln!("all scenarios passed in {:?}", began.elapsed());
}
