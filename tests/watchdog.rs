//! Leases: the watchdog keeps a lock with no explicit lease alive for as long as it
//! is held and lets it expire after its holder dies; an explicit lease is never
//! renewed; a holder is told when its lock is lost.

#[path = "scenarios/watchdog.rs"]
mod scenarios;
mod support;

use support::Target;

/// Held with no lease for over four watchdog leases, the lock is still there (and
/// its TTL is never above one lease); once released, it is gone.
#[actix_rt::test]
async fn watchdog_keeps_a_held_lock_alive_for_many_leases() {
    scenarios::watchdog_keeps_a_held_lock_alive_for_many_leases(&Target::standalone()).await;
}

/// A holder whose whole runtime dies (as a crashed process would) stops renewing:
/// the lock frees within about one lease, and another manager gets it.
#[actix_rt::test]
async fn lock_of_a_dead_holder_frees_within_one_lease() {
    scenarios::lock_of_a_dead_holder_frees_within_one_lease(&Target::standalone()).await;
}

/// An explicit lease is not renewed: the key expires after it, the guard reports
/// `LeaseExpired`, and its release then says the lock was lost.
#[actix_rt::test]
async fn explicit_lease_expires_and_is_not_renewed() {
    scenarios::explicit_lease_expires_and_is_not_renewed(&Target::standalone()).await;
}

/// A force-unlock is noticed by the holder's next renewal: `lost()` resolves with
/// `OwnerGone` and its release reports the loss instead of pretending success.
#[actix_rt::test]
async fn holder_is_told_when_its_lock_is_force_unlocked() {
    scenarios::holder_is_told_when_its_lock_is_force_unlocked(&Target::standalone()).await;
}

/// A renewal period not shorter than the lease is refused at start.
#[actix_rt::test]
async fn renewal_period_must_be_shorter_than_the_lease() {
    scenarios::renewal_period_must_be_shorter_than_the_lease(&Target::standalone()).await;
}

/// The watchdog renews a manager's locks in batches: 400 locks held over four
/// leases stay held, every one renewed each period, for a few script calls per
/// period instead of one per lock.
#[actix_rt::test]
async fn many_held_locks_are_renewed_in_few_calls() {
    scenarios::many_held_locks_are_renewed_in_few_calls(&Target::standalone()).await;
}

/// A released watchdog holding is no longer renewed: when the same owner takes
/// the lock again with an explicit lease, that lease is not extended by a
/// renewal left over from the first holding.
#[actix_rt::test]
async fn released_watchdog_holding_is_no_longer_renewed() {
    scenarios::released_watchdog_holding_is_no_longer_renewed(&Target::standalone()).await;
}
