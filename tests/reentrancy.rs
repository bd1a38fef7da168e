//! Reentrancy and release: hold counts per owner, what a second release or a
//! release by a non-owner gets, and that neither changes the lock.

#[path = "scenarios/reentrancy.rs"]
mod scenarios;
mod support;

use support::Target;

/// The same owner acquires twice: the hold count in Redis goes to 2 and back, each
/// acquisition gets a larger token, and the lock frees only at zero.
#[actix_rt::test]
async fn hold_count_goes_up_and_down_and_frees_at_zero() {
    scenarios::hold_count_goes_up_and_down_and_frees_at_zero(&Target::standalone()).await;
}

/// Without an explicit owner every acquisition is its own owner, so a second one in
/// the same manager does not re-enter.
#[actix_rt::test]
async fn acquisitions_without_an_owner_do_not_reenter() {
    scenarios::acquisitions_without_an_owner_do_not_reenter(&Target::standalone()).await;
}

/// Releasing one guard of a re-entered lock gives back that hold only and leaves
/// the other alone. (A second release of the same guard does not compile:
/// `release` takes the guard; see the doctest on `LockGuard::release`.)
#[actix_rt::test]
async fn releasing_one_guard_leaves_the_other_holds_alone() {
    scenarios::releasing_one_guard_leaves_the_other_holds_alone(&Target::standalone()).await;
}

/// A holder whose lease ran out and whose lock was then taken by someone else gets
/// an error on release, and the new holder's lock is left intact.
#[actix_rt::test]
async fn release_by_an_owner_that_no_longer_holds_fails_and_leaves_the_lock() {
    scenarios::release_by_an_owner_that_no_longer_holds_fails_and_leaves_the_lock(
        &Target::standalone(),
    )
    .await;
}

/// A guard dropped without release gives its hold back in the background.
#[actix_rt::test]
async fn dropping_a_guard_releases_it() {
    scenarios::dropping_a_guard_releases_it(&Target::standalone()).await;
}
