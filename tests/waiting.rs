//! Waiting: who wakes when. Waiters are woken by the holder's unlock message (not
//! by polling), local waiters share one Redis attempt at a time, deadlines are kept,
//! and a waiter whose caller went away never ends up holding the lock.

#[path = "scenarios/waiting.rs"]
mod scenarios;
mod support;

use support::Target;

/// A waiter in another manager acquires promptly after the release: far below the
/// holder's remaining TTL (30 s) and the waiter's fallback poll (set to 30 s), so
/// only the pub/sub unlock message can have woken it.
#[actix_rt::test]
async fn waiter_in_another_manager_is_woken_by_the_unlock_message() {
    scenarios::waiter_in_another_manager_is_woken_by_the_unlock_message(&Target::standalone())
        .await;
}

/// With N local waiters, each handoff costs the same few script calls whether N is
/// 2 or 16: only the head waiter asks Redis, and only after the local release.
#[actix_rt::test]
async fn local_waiters_cost_constant_round_trips_per_handoff() {
    scenarios::local_waiters_cost_constant_round_trips_per_handoff(&Target::standalone()).await;
}

/// Spread over two managers, a handoff may cost the other manager's head one
/// failed attempt, but the cost still does not grow with the number of waiters.
#[actix_rt::test]
async fn waiters_in_two_managers_cost_constant_round_trips_per_handoff() {
    scenarios::waiters_in_two_managers_cost_constant_round_trips_per_handoff(&Target::standalone())
        .await;
}

/// A waiter whose deadline passes gets `Timeout`, on time, and the lock is untouched.
#[actix_rt::test]
async fn waiter_times_out_at_its_deadline() {
    scenarios::waiter_times_out_at_its_deadline(&Target::standalone()).await;
}

/// A zero wait makes one attempt: `try_acquire` gives `None` while held elsewhere
/// and a guard once free.
#[actix_rt::test]
async fn try_acquire_makes_one_attempt() {
    scenarios::try_acquire_makes_one_attempt(&Target::standalone()).await;
}

/// Waiters whose callers stop waiting (the `send` future dropped) at every moment
/// around a release never leave the lock held: afterwards it is free.
#[actix_rt::test]
async fn dropped_waiters_never_leave_the_lock_held() {
    scenarios::dropped_waiters_never_leave_the_lock_held(&Target::standalone()).await;
}
