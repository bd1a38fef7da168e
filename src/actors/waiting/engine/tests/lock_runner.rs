//! What the lock's runner needs of the engine beside the rules
//! (`lock_rules.rs`, `lock_leavers.rs`): a waiter that listens only once
//! refused subscribes after a busy answer that keeps it waiting, and asks
//! again once it listens (but not again while its channel is live and nothing
//! was heard); the policy is told when a channel is live; the runner can ask
//! whether anything it sent is unsettled (a process about to exit waits for
//! that); and after a restart of the runner the attempt that was out is
//! checked before anyone asks again and every channel is subscribed anew;
//! a waiter the runner fails leaves as any leaver does; a hand-over that
//! granted nobody lets the queue go on; a channel the holder keeps listening
//! on outlives the last waiter. Tested with `Picky` (`picky.rs`) and nothing
//! else.

use super::picky::{arrive, checks, head_asking, unsubscribes, Picky};
use super::*;

/// A busy answer that says the lock is held keeps a waiting waiter waiting:
/// it subscribes now (it listens from its first refusal on) and asks again
/// once the subscription is made, so a release in between is not missed.
#[test]
fn a_held_answer_subscribes_the_waiter_then_it_asks_again() {
    let (mut e, _a, id) = head_asking(Picky {
        held: true,
        ..Picky::default()
    });
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(subscribes(&fx), vec!["picky".to_owned()]);
    assert!(asks(&fx).is_empty(), "not before the subscription is made");
    let fx = e.handle(Event::Subscribed("picky".to_owned()));
    assert_eq!(e.policy().subscribed_to, vec!["picky".to_owned()]);
    let (id, _) = asks(&fx).pop().expect("it asks again once it listens");
    let fx = e.handle(answered(id, Ok(None)));
    assert!(
        subscribes(&fx).is_empty() && asks(&fx).is_empty(),
        "listening already: it waits for a message"
    );
    let heard = Event::Heard {
        channel: "picky".to_owned(),
        wake_all: false,
    };
    assert_eq!(asks(&e.handle(heard)).len(), 1, "and asks when one comes");
}

/// The engine is quiet when nothing it sent is unsettled: not while an
/// attempt is out, nor while a lost one waits for its check.
#[test]
fn it_is_quiet_only_with_nothing_out_or_to_check() {
    assert!(engine(Picky::default()).is_quiet(), "nothing sent yet");
    let (mut e, _a, id) = head_asking(Picky {
        checks: true,
        ..Picky::default()
    });
    assert!(!e.is_quiet(), "an attempt is out");
    let fx = e.handle(answered(id, Err(transient())));
    assert_eq!(checks(&fx), 1, "its answer was lost: it is checked");
    assert!(!e.is_quiet(), "the check is out");
    e.handle(Event::Checked(Ok(())));
    assert!(!e.is_quiet(), "the waiter asks again");
}

/// After a restart of the runner, the attempt that was out is checked before
/// anyone asks again (its answer is gone with the old context), and the
/// channel the waiters listened on is subscribed anew.
#[test]
fn a_restart_checks_the_attempt_out_and_subscribes_anew() {
    let (mut e, _a, id) = head_asking(Picky {
        checks: true,
        held: true,
        ..Picky::default()
    });
    e.handle(answered(id, Ok(None)));
    let fx = e.handle(Event::Subscribed("picky".to_owned()));
    assert_eq!(asks(&fx).len(), 1, "it asks again, listening");
    assert!(!e.is_quiet(), "its attempt is out");
    let fx = e.restart();
    assert_eq!(checks(&fx), 1, "the attempt out is checked first");
    assert!(asks(&fx).is_empty(), "nobody asks meanwhile");
    let fx = e.handle(Event::Checked(Ok(())));
    assert_eq!(
        subscribes(&fx),
        vec!["picky".to_owned()],
        "its channel is subscribed anew"
    );
    assert!(asks(&fx).is_empty(), "not before it is made");
    let fx = e.handle(Event::Subscribed("picky".to_owned()));
    assert_eq!(asks(&fx).len(), 1, "then it asks");
}

/// The runner may change the policy between events (a lock's kind told of a
/// resync or of a chore's outcome): a look after makes it count.
#[test]
fn a_policy_changed_between_events_counts_at_the_next_look() {
    let mut e = engine(Picky::default());
    e.policy_mut().0.pick = Some(Pick::Nobody);
    let (_a, fx) = arrive(&mut e, None);
    assert!(asks(&fx).is_empty(), "nobody may ask yet");
    let (policy, waiters) = e.policy_mut();
    policy.pick = None;
    assert_eq!(waiters.iter().count(), 1, "the waiter is there to mark");
    assert_eq!(
        asks(&e.handle(Event::Look)).len(),
        1,
        "the look lets it ask"
    );
}

/// A waiter the runner fails (a lock's wait found in a deadlock) is answered
/// with that error and leaves as any leaver does: its attempt out is undone,
/// and its answer, if it says it took, is checked.
#[tokio::test]
async fn a_failed_waiter_is_answered_and_its_attempt_undone() {
    let (mut e, a, id) = head_asking(Picky {
        checks: true,
        ..Picky::default()
    });
    let error = LockError::ShuttingDown;
    let fx = e.handle(Event::Fail { waiter: id, error });
    assert_eq!(undos(&fx).len(), 1, "its attempt out is undone at once");
    let told = a.await.expect("answered");
    assert!(matches!(told, Err(LockError::ShuttingDown)), "{told:?}");
    assert!(!e.is_quiet(), "its answer is still to come");
    let fx = e.handle(answered(id, Ok(Some(7))));
    assert_eq!(
        checks(&fx),
        1,
        "a take that answers after it left is checked"
    );
}

/// A hand-over (the head asked in the runner's own call) that granted nobody
/// lets the queue go on: the head asks itself; one whose outcome is unknown
/// is checked first.
#[test]
fn a_hand_over_that_granted_nobody_lets_the_head_ask() {
    let mut e = engine(Picky {
        checks: true,
        pick: Some(Pick::Nobody),
        ..Picky::default()
    });
    let (_a, fx) = arrive(&mut e, None);
    assert!(asks(&fx).is_empty());
    e.policy_mut().0.pick = None;
    let ask = e.ask_head(|_| true).expect("the head is handed the lock");
    assert!(e.ask_head(|_| true).is_none(), "one call at a time");
    let fx = e.handle(Event::Withdrawn {
        waiter: ask.waiter,
        unknown: false,
    });
    let (id, _) = asks(&fx).pop().expect("it asks itself");
    let fx = e.handle(answered(id, Ok(None)));
    assert!(asks(&fx).is_empty(), "busy: it waits");
    e.policy_mut().0.pick = Some(Pick::Nobody);
    let ask = e.ask_head(|_| true).expect("handed again");
    let fx = e.handle(Event::Withdrawn {
        waiter: ask.waiter,
        unknown: true,
    });
    assert_eq!(checks(&fx), 1, "it may hold: checked before anyone asks");
}

/// A channel listened on while the policy keeps listening (a holder taking
/// turns) stays when the last waiter is granted; otherwise it ends with it.
#[test]
fn a_channel_the_holder_keeps_listening_on_outlives_the_last_waiter() {
    for keeps in [true, false] {
        let (mut e, _a, id) = head_asking(Picky {
            held: true,
            keeps,
            ..Picky::default()
        });
        e.handle(answered(id, Ok(None)));
        let fx = e.handle(Event::Subscribed("picky".to_owned()));
        let (id, _) = asks(&fx).pop().expect("it asks again once it listens");
        let fx = e.handle(answered(id, Ok(Some(1))));
        let gone = unsubscribes(&fx);
        match keeps {
            true => assert!(gone.is_empty(), "kept: {gone:?}"),
            false => assert_eq!(gone, vec!["picky".to_owned()]),
        }
        assert_eq!(
            e.is_empty(),
            !keeps,
            "an engine with a live channel is not empty"
        );
    }
}

/// A try that goes first (a re-entry by a holder here) is not refused for
/// the waiters queued before it: they wait for that holder.
#[tokio::test]
async fn a_try_that_goes_first_is_not_refused_behind_others() {
    let mut e = engine(Picky {
        pick: Some(Pick::Nobody),
        front: true,
        ..Picky::default()
    });
    let (_a, _) = arrive(&mut e, None);
    let (reply, mut answer) = oneshot::channel();
    let join = Event::Join {
        id: 42,
        since: Instant::now(),
        deadline: None,
        once: true,
        want: false,
        reply,
    };
    let _ = e.handle(join);
    assert!(answer.try_recv().is_err(), "not answered yet");
    assert_eq!(e.waiters().next().map(|w| w.id), Some(42), "it is first");
}
