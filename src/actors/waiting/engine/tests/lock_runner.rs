//! What the lock's runner needs of the engine beside the rules
//! (`lock_rules.rs`, `lock_leavers.rs`): a waiter that listens only once
//! refused subscribes after a busy answer that keeps it waiting, and asks
//! again once it listens (but not again while its channel is live and nothing
//! was heard); the policy is told when a channel is live; the runner can ask
//! whether anything it sent is unsettled (a process about to exit waits for
//! that); and after a restart of the runner the attempt that was out is
//! checked before anyone asks again and every channel is subscribed anew.
//! Tested with `Picky` (`picky.rs`) and nothing else.

use super::picky::{arrive, checks, head_asking, Picky};
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
