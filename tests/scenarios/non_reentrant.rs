//! The bodies of `tests/one_server/non_reentrant.rs`'s tests (Redisson's non-reentrant lock
//! and non-reentrant fair lock), written against [`Target`] so that
//! `tests/topologies/on_cluster.rs` runs them on a cluster too. Each scenario's doc is on its
//! body here; `each!` at the end lists them once for both runs.

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Handle, LockError, Owner};

use crate::support::{hold, Target};

/// A Redisson client's owner field (`<client uuid>:<thread id>`), for holds
/// written by hand in Redisson's layout.
const JAVA: &str = "0f6c2a1e-7d3b-4e8a-b1c9-2a4d6e8f0b13:31";

/// An owner that holds a non-reentrant lock and asks for it again is refused at
/// once with `ReentryRefused` (not left waiting for itself), the lock keeps its
/// one hold, and the owner may take it again once it let go. Both the exclusive
/// and the fair lock.
pub async fn a_holder_asking_again_is_refused_at_once(t: &Target) {
    let m = t.manager(|c| c).await;
    let other = t.manager(|c| c).await;
    for fair in [false, true] {
        let name = if fair { "nr:fair" } else { "nr:plain" };
        let ask = move |me: Owner| {
            let a = Acquire::new(name).non_reentrant().owner(me);
            if fair {
                a.fair()
            } else {
                a
            }
        };
        let me = Owner::new();
        let first = hold(&m, name, |_| ask(me)).await;
        let began = Instant::now();
        let again = m
            .send(ask(me).wait(Duration::from_secs(10)))
            .await
            .expect("running");
        assert!(
            matches!(again, Err(LockError::ReentryRefused)),
            "fair {fair}: {again:?}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "fair {fair}: refused only after {:?}",
            began.elapsed()
        );
        let count: String = t.raw(&["HGET", name, first.owner_field()]);
        assert_eq!(count, "1", "fair {fair}: the refusal took no hold");
        if fair {
            let queued: i64 = t.raw(&["LLEN", &format!("redisson_lock_queue:{{{name}}}")]);
            assert_eq!(queued, 0, "the refused owner took no place in the queue");
        }
        // Another owner is still kept out.
        let other_try = other
            .send(Acquire::new(name).wait(Duration::ZERO))
            .await
            .expect("running");
        assert!(matches!(other_try, Err(LockError::Timeout { .. })));
        first.release().await.expect("released");
        assert!(!t.exists(name), "fair {fair}: freed at the one release");
        let later = hold(&m, name, |_| ask(me)).await;
        later.release().await.expect("released");
    }
    // A handle made non-reentrant makes every acquisition so.
    let handle = m
        .send(Handle::new("nr:handle").non_reentrant())
        .await
        .expect("running")
        .expect("a handle");
    let me = Owner::new();
    let held = handle.acquire_with(|a| a.owner(me)).await.expect("held");
    let again = handle
        .acquire_with(|a| a.owner(me).wait(Duration::from_secs(10)))
        .await;
    assert!(matches!(again, Err(LockError::ReentryRefused)), "{again:?}");
    held.release().await.expect("released");
}

/// The refusal does not depend on what the lock actor knows: an owner holding
/// the lock through the reentrant lock of the same name (another actor) that asks
/// for the non-reentrant one is refused by the acquire script itself, for the
/// exclusive and the fair script alike.
pub async fn the_script_refuses_a_reentry_the_actor_did_not_see(t: &Target) {
    let m = t.manager(|c| c).await;
    let me = Owner::new();
    let held = hold(&m, "nr:script", |a| a.owner(me)).await;
    for fair in [false, true] {
        let ask = Acquire::new("nr:script").non_reentrant().owner(me);
        // The fair lock's actor is another actor; the spin lock's too.
        let ask = if fair { ask.fair() } else { ask.spin() };
        let got = m
            .send(ask.wait(Duration::from_secs(5)))
            .await
            .expect("running");
        assert!(
            matches!(got, Err(LockError::ReentryRefused)),
            "fair {fair}: {got:?}"
        );
    }
    let count: String = t.raw(&["HGET", "nr:script", held.owner_field()]);
    assert_eq!(count, "1");
    held.release().await.expect("released");
}

/// A Redisson client holding the lock (its hash written by hand) keeps a
/// non-reentrant waiter out, and its unlock message wakes it; the waiter's hold
/// is Redisson's layout, which Redisson's non-reentrant lock reads the same way.
pub async fn a_redisson_holder_excludes_and_wakes_a_non_reentrant_waiter(t: &Target) {
    let name = "nr:java";
    let _: i64 = t.raw(&["HSET", name, JAVA, "1"]);
    let _: i64 = t.raw(&["PEXPIRE", name, "30000"]);
    let m = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let tried = m
        .send(Acquire::new(name).non_reentrant().wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(matches!(tried, Err(LockError::Timeout { .. })), "{tried:?}");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let waiting = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(
                Acquire::new(name)
                    .non_reentrant()
                    .wait(Duration::from_secs(20)),
            )
            .await
            .expect("running")
        }
    });
    let subscribed =
        crate::support::eventually(Duration::from_secs(10), || t.subscribers(&channel) == 1).await;
    assert!(subscribed, "the waiter never subscribed");
    // Redisson's unlock: DEL, then the unlock message.
    let _: i64 = t.raw(&["DEL", name]);
    t.publish(&channel, "0");
    let guard = waiting.await.expect("task").expect("woken and acquired");
    let count: String = t.raw(&["HGET", name, guard.owner_field()]);
    assert_eq!(count, "1");
    guard.release().await.expect("released");
    assert!(!t.exists(name));
}

/// `non_reentrant()` on a read or write acquisition is refused as a bad request
/// (the read-write lock has no non-reentrant form), and nothing is written.
pub async fn a_non_reentrant_read_write_lock_is_a_bad_request(t: &Target) {
    let m = t.manager(|c| c).await;
    for write in [false, true] {
        let ask = Acquire::new("nr:rw").non_reentrant();
        let ask = if write { ask.write() } else { ask.read() };
        let got = m.send(ask).await.expect("running");
        match got {
            Err(LockError::InvalidRequest(why)) => assert!(why.contains("read-write"), "{why}"),
            other => panic!("write {write}: {other:?}"),
        }
        let handle = Handle::new("nr:rw").non_reentrant();
        let handle = if write { handle.write() } else { handle.read() };
        let got = m.send(handle).await.expect("running");
        assert!(
            matches!(got, Err(LockError::InvalidRequest(_))),
            "write {write}: a handle {got:?}"
        );
    }
    assert!(!t.exists("nr:rw"));
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/non_reentrant.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            a_holder_asking_again_is_refused_at_once,
            the_script_refuses_a_reentry_the_actor_did_not_see,
            a_redisson_holder_excludes_and_wakes_a_non_reentrant_waiter,
            a_non_reentrant_read_write_lock_is_a_bad_request,
        }
    };
}
pub(crate) use each;
