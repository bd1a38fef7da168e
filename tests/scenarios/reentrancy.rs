//! The bodies of `tests/one_server/reentrancy.rs`'s tests, written against [`Target`] so that
//! `tests/topologies/on_cluster.rs` runs them on a cluster too. Each scenario's doc is on its body here;
//! `each!` at the end lists them once for both runs.

use std::time::Duration;

use lockwarden::{Acquire, LockError, Owner, ReleaseOutcome};

use crate::support::{eventually, hold, Target};

/// The same owner acquires twice: the hold count in Redis goes to 2 and back, each
/// acquisition gets a larger token, and the lock frees only at zero.
pub async fn hold_count_goes_up_and_down_and_frees_at_zero(t: &Target) {
    let m = t.manager(|c| c).await;
    let other = t.manager(|c| c).await;
    let me = Owner::new();
    let first = hold(&m, "account:7", |a| a.owner(me)).await;
    let second = hold(&m, "account:7", |a| a.owner(me)).await;
    assert!(second.fencing_token() > first.fencing_token());
    assert_eq!(first.owner_field(), second.owner_field());
    let count: String = t.raw(&["HGET", "account:7", first.owner_field()]);
    assert_eq!(count, "2");

    let field = first.owner_field().to_string();
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::StillHeld { holds: 1 }
    );
    let count: String = t.raw(&["HGET", "account:7", &field]);
    assert_eq!(count, "1");
    let attempt = other
        .send(Acquire::new("account:7").wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(
        matches!(attempt, Err(LockError::Timeout { .. })),
        "still held: {attempt:?}"
    );

    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert!(!t.exists("account:7"));
}

/// Without an explicit owner every acquisition is its own owner, so a second one in
/// the same manager does not re-enter.
pub async fn acquisitions_without_an_owner_do_not_reenter(t: &Target) {
    let m = t.manager(|c| c).await;
    let held = hold(&m, "solo", |a| a).await;
    let again = m
        .send(Acquire::new("solo").wait(Duration::from_millis(50)))
        .await
        .expect("running");
    assert!(
        matches!(again, Err(LockError::Timeout { .. })),
        "got {again:?}"
    );
    held.release().await.expect("released");
}

/// Releasing one guard of a re-entered lock gives back that hold only and leaves
/// the other alone. (A second release of the same guard does not compile:
/// `release` takes the guard; see the doctest on `LockGuard::release`.)
pub async fn releasing_one_guard_leaves_the_other_holds_alone(t: &Target) {
    let m = t.manager(|c| c).await;
    let me = Owner::new();
    let a = hold(&m, "twice", |r| r.owner(me)).await;
    let b = hold(&m, "twice", |r| r.owner(me)).await;
    let field = a.owner_field().to_string();
    a.release().await.expect("first release");
    let count: String = t.raw(&["HGET", "twice", &field]);
    assert_eq!(count, "1", "one release, one hold given back");
    b.release().await.expect("released");
}

/// A holder whose lease ran out and whose lock was then taken by someone else gets
/// an error on release, and the new holder's lock is left intact.
pub async fn release_by_an_owner_that_no_longer_holds_fails_and_leaves_the_lock(t: &Target) {
    let old = t.manager(|c| c).await;
    let new = t.manager(|c| c).await;
    let stale = hold(&old, "job", |a| a.lease(Duration::from_millis(100))).await;
    let current = hold(&new, "job", |a| a.wait(Duration::from_secs(5))).await;
    let err = stale.release().await.expect_err("stale release must fail");
    assert!(
        matches!(err, LockError::Lost(_) | LockError::NotHeld),
        "got {err:?}"
    );
    let count: String = t.raw(&["HGET", "job", current.owner_field()]);
    assert_eq!(count, "1", "the current holder's lock is intact");
    current.release().await.expect("released");
}

/// A guard dropped without release gives its hold back in the background.
pub async fn dropping_a_guard_releases_it(t: &Target) {
    let m = t.manager(|c| c).await;
    drop(hold(&m, "dropped", |a| a).await);
    let gone = eventually(Duration::from_secs(2), || !t.exists("dropped")).await;
    assert!(gone, "a dropped guard must release its lock");
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/reentrancy.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            hold_count_goes_up_and_down_and_frees_at_zero,
            acquisitions_without_an_owner_do_not_reenter,
            releasing_one_guard_leaves_the_other_holds_alone,
            release_by_an_owner_that_no_longer_holds_fails_and_leaves_the_lock,
            dropping_a_guard_releases_it,
        }
    };
}
pub(crate) use each;
