//! The behaviour tests on a Redis Cluster: the scenarios of `exclusion.rs`,
//! `reentrancy.rs`, `waiting.rs`, `watchdog.rs`, `fair.rs`, `rwlock.rs`,
//! `spin.rs`, `non_reentrant.rs`, `fenced.rs`, `lock_delay.rs`, `deadlock.rs`, `handoff.rs` and `bad_input.rs` (kept once, in `tests/scenarios/`, written against
//! `support::Target`) run here in turn on one three-master cluster, since a
//! cluster takes seconds to form. Each file's `each!` lists its scenarios once, for
//! its standalone tests and for this run; each scenario's doc is on its body. The
//! few that cannot hold on a cluster are listed below with why.
//!
//! On the cluster the managers are seeded with two masters, raw checks go to the
//! master owning the key's slot, pub/sub checks use `SSUBSCRIBE`/`SPUBLISH` and
//! `PUBSUB SHARDNUMSUB` (lockwarden waits on sharded channels on Redis 7), and
//! command counts are summed over the masters.

use crate::support;

#[path = "../scenarios/bad_input.rs"]
mod bad_input;
#[path = "../scenarios/deadlock.rs"]
mod deadlock;
#[path = "../scenarios/exclusion.rs"]
mod exclusion;
#[path = "../scenarios/fair.rs"]
mod fair;
#[path = "../scenarios/fenced.rs"]
mod fenced;
#[path = "../scenarios/handoff.rs"]
mod handoff;
#[path = "../scenarios/lock_delay.rs"]
mod lock_delay;
#[path = "../scenarios/non_reentrant.rs"]
mod non_reentrant;
#[path = "../scenarios/reentrancy.rs"]
mod reentrancy;
#[path = "../scenarios/rwlock.rs"]
mod rwlock;
#[path = "../scenarios/spin.rs"]
mod spin;
#[path = "../scenarios/waiting.rs"]
mod waiting;
#[path = "../scenarios/watchdog.rs"]
mod watchdog;

use std::time::Instant;

use support::Target;

/// Runs scenarios in turn on `$target`, each announced with the time since
/// `$began` (a failing one is named by its panic's location; the last line before
/// it says which scenario ran).
macro_rules! run {
    ($target:expr, $began:expr, $module:ident; $($scenario:ident),+ $(,)?) => {
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
    let _heavy = support::heavy();
    let t = Target::cluster(3, 0);
    let began = Instant::now();
    // First: bad_input's scenarios count script calls and keys, which a manager of
    // a later scenario still giving back a lock in the background would disturb.
    bad_input::each!(run!(&t, began, bad_input));
    exclusion::each!(run!(&t, began, exclusion));
    reentrancy::each!(run!(&t, began, reentrancy));
    waiting::each!(run!(&t, began, waiting));
    watchdog::each!(run!(&t, began, watchdog));
    fair::each!(run!(&t, began, fair));
    rwlock::each!(run!(&t, began, rwlock));
    spin::each!(run!(&t, began, spin));
    non_reentrant::each!(run!(&t, began, non_reentrant));
    fenced::each!(run!(&t, began, fenced));
    lock_delay::each!(run!(&t, began, lock_delay));
    deadlock::each!(run!(&t, began, deadlock));
    handoff::each!(run!(&t, began, handoff));
    eprintln!("all scenarios passed in {:?}", began.elapsed());
}
