//! The engine's rules that the lock needs and no semaphore or latch uses,
//! about who asks and what an answer means: who asks decided from more than
//! the queue (a yield holds everyone back, a local holder blocks the queue), a
//! take that hands its waiter what it won (a fencing token), a waiter that
//! listens only once it was refused (an uncontended take is one call, no
//! subscription), a refusal for good (a re-entry refused) that answers its
//! waiter alone, a busy answer that answers every try at once or names the
//! head of the Redis queue, a wake after a delay, a channel kept for a holder
//! whoever waits, a waiter marked as its attempt goes out, the head asking
//! in a call of the runner's (a hand-over), every answer that is not a
//! grant told to the policy (a lock counts them by outcome), and a waiter
//! the runner made joining, first when it re-enters. Tested with `Picky`
//! (`picky.rs`) and nothing else.

use super::picky::{arrive, checks, left_places, unsubscribes, Picky};
use super::*;

/// While the policy holds back, nobody asks and the timer rings when the
/// hold ends; then the head asks.
#[test]
fn a_hold_back_asks_nobody_and_rings_when_it_ends() {
    let mut e = engine(Picky::default());
    let hold = Duration::from_millis(300);
    e.policy.pick = Some(Pick::HoldBack(hold));
    let (_a, fx) = arrive(&mut e, None);
    assert!(asks(&fx).is_empty(), "nobody asks while it holds back");
    let armed = fx.iter().filter_map(|f| match f {
        Effect::Arm(d) => Some(*d),
        _ => None,
    });
    assert_eq!(
        armed.min(),
        Some(hold),
        "the timer rings when the hold ends"
    );
    e.policy.pick = None;
    let fx = e.handle(Event::Timer);
    assert_eq!(asks(&fx).len(), 1, "the head asks once the hold is over");
}

/// When nobody can win (a holder here keeps the queue out), a waiter that
/// tries once is answered "no" at once, without asking Redis; one that waits
/// stays, and asks once the way is clear.
#[tokio::test]
async fn a_blocked_queue_answers_a_try_at_once_and_keeps_the_waiters() {
    let mut e = engine(Picky::default());
    e.policy.pick = Some(Pick::Blocked);
    let (once, fx) = arrive(&mut e, Some(Duration::ZERO));
    assert!(asks(&fx).is_empty());
    assert!(matches!(once.await, Ok(Err(LockError::Timeout { .. }))));
    let (_waits, fx) = arrive(&mut e, None);
    assert!(asks(&fx).is_empty(), "nobody asks while blocked");
    assert_eq!(e.waiters().count(), 1, "the waiter that waits stays");
    e.policy.pick = None;
    let fx = e.handle(Event::Wake);
    assert_eq!(asks(&fx).len(), 1, "it asks once the way is clear");
}

/// An uncontended take is one attempt and no subscription, and what it won
/// (a lock's fencing token) reaches the runner with the waiter, which makes
/// its grant of it.
#[tokio::test]
async fn an_uncontended_take_is_one_call_and_carries_what_it_won() {
    let mut e = engine(Picky::default());
    let (a, fx) = arrive(&mut e, None);
    assert!(
        subscribes(&fx).is_empty(),
        "no subscription before a refusal"
    );
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let fx = e.handle(answered(id, Ok(Some(7))));
    assert!(subscribes(&fx).is_empty() && asks(&fx).is_empty());
    let taken = fx.into_iter().find_map(|f| match f {
        Effect::Grant(t) => Some(t),
        _ => None,
    });
    let mut taken = taken.expect("the take is granted");
    let won = taken.won.take().expect("its own answer gave it something");
    assert!(e.deliver(*taken, won).is_ok());
    assert!(matches!(a.await, Ok(Ok(7))));
}

/// A busy answer makes the waiter listen, and it asks again once it does: a
/// release between the busy answer and the subscription is not missed.
#[test]
fn a_busy_answer_listens_then_asks_again() {
    let mut e = engine(Picky::default());
    let (_a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(subscribes(&fx), vec!["picky".to_owned()]);
    assert!(asks(&fx).is_empty(), "not before the subscription is made");
    let fx = e.handle(Event::Subscribed("picky".to_owned()));
    assert_eq!(asks(&fx).len(), 1, "it asks again once it listens");
}

/// A refusal for good (a re-entry refused) answers the waiter that asked with
/// it, and only that one: it leaves its place, nothing is undone or checked
/// (the refused attempt took nothing), and the next waiter asks at once.
#[tokio::test]
async fn a_refusal_answers_its_waiter_and_the_next_asks() {
    let mut e = engine(Picky {
        checks: true,
        places: true,
        ..Picky::default()
    });
    let (refused, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (next, _) = arrive(&mut e, None);
    e.policy.refuse = true;
    let fx = e.handle(answered(id, Ok(Some(7))));
    assert!(matches!(refused.await, Ok(Err(LockError::ReentryRefused))));
    assert_eq!(left_places(&fx), vec![Arc::from("picky-place")]);
    assert!(undos(&fx).is_empty() && checks(&fx) == 0, "it took nothing");
    let (id, _) = asks(&fx).pop().expect("the next waiter asks at once");
    assert_eq!(e.waiters().count(), 1, "the refused waiter is gone");
    e.policy.refuse = false;
    let mut fx = e.handle(answered(id, Ok(Some(8))));
    let taken = fx.iter_mut().find_map(|f| match f {
        Effect::Grant(t) => t.won.take().map(|won| (won, t.waiter.id)),
        _ => None,
    });
    assert_eq!(taken, Some((8, id)), "the next one's own answer grants it");
    drop(next);
}

/// A refusal ends a run of Redis errors (Redis answered), and a waiter that
/// tries once is answered with the refusal, not a timeout.
#[tokio::test]
async fn a_refusal_answers_a_try_with_itself() {
    let mut e = engine(Picky {
        refuse: true,
        ..Picky::default()
    });
    let (once, fx) = arrive(&mut e, Some(Duration::ZERO));
    let (id, _) = asks(&fx).pop().expect("it asks once");
    let fx = e.handle(answered(id, Ok(None)));
    assert!(matches!(once.await, Ok(Err(LockError::ReentryRefused))));
    assert!(asks(&fx).is_empty() && e.waiters().count() == 0);
}

/// A busy answer that says the lock is held answers every waiter that tries
/// once at once (its one attempt would say the same), without asking Redis
/// again; a waiter that waits stays.
#[tokio::test]
async fn a_held_answer_answers_every_try() {
    let mut e = engine(Picky {
        held: true,
        ..Picky::default()
    });
    let (_waits, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (once, fx) = arrive(&mut e, Some(Duration::ZERO));
    assert!(asks(&fx).is_empty(), "one attempt at a time");
    let fx = e.handle(answered(id, Ok(None)));
    assert!(matches!(once.await, Ok(Err(LockError::Timeout { .. }))));
    assert!(asks(&fx).is_empty(), "nobody asks until a wake");
    assert_eq!(e.waiters().count(), 1, "the waiter that waits stays");
}

/// A message may wake the queue after a delay (a random start among
/// processes): the runner sleeps it, then the queue looks again.
#[test]
fn a_message_may_wake_after_a_delay() {
    let delay = Duration::from_micros(300);
    let mut e = engine(Picky {
        wake_after: Some(delay),
        ..Picky::default()
    });
    let (_a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let fx = e.handle(answered(id, Ok(None)));
    let fx = e.handle(Event::Subscribed(subscribes(&fx).pop().expect("listens")));
    let (id, _) = asks(&fx).pop().expect("it asks again once it listens");
    e.policy.held = true;
    let fx = e.handle(answered(id, Ok(None)));
    assert!(asks(&fx).is_empty(), "busy and listening: it waits");
    let fx = e.handle(Event::Heard {
        channel: "picky".to_owned(),
        wake_all: false,
    });
    let after = fx.iter().find_map(|f| match f {
        Effect::WakeAfter(d) => Some(*d),
        _ => None,
    });
    assert_eq!(after, Some(delay));
    assert!(asks(&fx).is_empty(), "not before the delay");
    let fx = e.handle(Event::Look);
    assert_eq!(asks(&fx).len(), 1, "then the head asks");
}

/// A channel the policy keeps (a lock's holder taking turns) is subscribed
/// to when the queue looks, even with nobody waiting, and outlives the last
/// waiter; once the policy lets it go, it ends when nobody waits.
#[tokio::test]
async fn a_kept_channel_outlives_the_waiters() {
    let mut e = engine(Picky {
        keep: Some("turns"),
        ..Picky::default()
    });
    let fx = e.handle(Event::Look);
    assert_eq!(subscribes(&fx), vec!["turns".to_owned()]);
    let _ = e.handle(Event::Subscribed("turns".to_owned()));
    let (a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(subscribes(&fx), vec!["picky".to_owned()]);
    let fx = e.handle(Event::Subscribed("picky".to_owned()));
    let (id, _) = asks(&fx).pop().expect("it asks again once it listens");
    drop(a);
    let _ = e.handle(Event::Left);
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(
        unsubscribes(&fx),
        vec!["picky".to_owned()],
        "only the waiter's"
    );
    e.policy.keep = None;
    let fx = e.handle(Event::Look);
    assert_eq!(unsubscribes(&fx), vec!["turns".to_owned()]);
}

/// A waiter is marked by the policy as its attempt goes out (a fair lock's
/// waiter takes its place in the Redis queue with it), once per attempt, and
/// a place so taken is left when the waiter leaves.
#[test]
fn a_waiter_is_marked_as_its_attempt_goes_out() {
    let mut e = engine(Picky {
        places_at_ask: true,
        held: true,
        ..Picky::default()
    });
    let (a, fx) = arrive(&mut e, None);
    assert_eq!(e.policy.sent, 1, "marked as its attempt went out");
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let _ = e.handle(answered(id, Ok(None)));
    drop(a);
    let fx = e.handle(Event::Left);
    assert_eq!(left_places(&fx), vec![Arc::from("picky-place")]);
    assert_eq!(e.policy.sent, 1, "nobody else asked");
}

/// A busy answer that names the head of the Redis queue tells the policy,
/// unless that place is the asker's own (it was just told "busy").
#[test]
fn a_busy_answer_tells_who_is_first_in_the_redis_queue() {
    for (first, told) in [("other", true), ("picky-place", false)] {
        let mut e = engine(Picky {
            places: true,
            held: true,
            first: Some(first),
            ..Picky::default()
        });
        let (_a, fx) = arrive(&mut e, None);
        let (id, _) = asks(&fx).pop().expect("the head asks at once");
        let _ = e.handle(answered(id, Ok(None)));
        let expected: Vec<Arc<str>> = told.then(|| Arc::from(first)).into_iter().collect();
        assert_eq!(e.policy.told, expected);
    }
}

/// The head may ask in a call of the runner's own (a lock's hand-over, while
/// a local holder keeps the queue from asking): only with nothing out, and
/// nobody else asks until its answer, which grants it as any attempt's does.
#[tokio::test]
async fn the_head_may_ask_in_a_hand_over() {
    let mut e = engine(Picky::default());
    e.policy.pick = Some(Pick::Nobody);
    let (a, fx) = arrive(&mut e, None);
    assert!(asks(&fx).is_empty(), "a holder here keeps it from asking");
    let (_b, _) = arrive(&mut e, None);
    assert!(e.ask_head(|_| false).is_none(), "the runner's choice");
    let ask = e
        .ask_head(|_| true)
        .expect("the head asks in the hand-over");
    assert!(e.ask_head(|_| true).is_none(), "one attempt at a time");
    e.policy.pick = None;
    let fx = e.handle(Event::Wake);
    assert!(asks(&fx).is_empty(), "nobody else asks meanwhile");
    let mut fx = e.handle(answered(ask.waiter, Ok(Some(9))));
    let at = fx.iter().position(|f| matches!(f, Effect::Grant(_)));
    let Effect::Grant(mut taken) = fx.swap_remove(at.expect("granted")) else {
        unreachable!("found a grant");
    };
    let won = taken.won.take().expect("won");
    assert!(e.deliver(*taken, won).is_ok());
    assert!(matches!(a.await, Ok(Ok(9))));
    assert_eq!(asks(&fx).len(), 1, "then the next asks for itself");
}

/// Every answer the engine gives instead of a grant is told to the policy (a
/// lock counts its acquisitions by outcome): a try behind others, a refusal,
/// a deadline that passed, a shutdown.
#[tokio::test]
async fn every_answer_but_a_grant_is_told_to_the_policy() {
    let mut e = engine(Picky {
        held: true,
        ..Picky::default()
    });
    let (_refused, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (_tried, _) = arrive(&mut e, Some(Duration::ZERO));
    e.policy.refuse = true;
    let _ = e.handle(answered(id, Ok(None)));
    e.policy.refuse = false;
    let (_late, fx) = arrive(&mut e, Some(Duration::from_millis(5)));
    let (id, _) = asks(&fx).pop().expect("it asks at once");
    let _ = e.handle(answered(id, Ok(None)));
    let (_last, _) = arrive(&mut e, None);
    std::thread::sleep(Duration::from_millis(10));
    let _ = e.handle(Event::Timer);
    let _ = e.handle(Event::Shutdown);
    let told = e.policy.refusals.borrow().clone();
    let expected = [
        timeout(Duration::ZERO).to_string(),
        LockError::ReentryRefused.to_string(),
    ];
    assert_eq!(told.len(), 4, "{told:?}");
    assert_eq!(told[..2], expected, "{told:?}");
    assert_eq!(told[3], LockError::ShuttingDown.to_string());
}

/// A waiter the runner made joins under its own id and arrival (a lock's
/// request's), and goes before those already waiting when the policy says so
/// (a re-entry by a holder here); it asks as the head.
#[tokio::test]
async fn a_waiter_joins_under_its_own_id_and_may_go_first() {
    let mut e = engine(Picky::default());
    e.policy.pick = Some(Pick::Nobody);
    let (_a, _) = arrive(&mut e, None);
    let since = Instant::now() - Duration::from_millis(5);
    let (reply, _answer) = oneshot::channel();
    e.policy.front = true;
    let _ = e.handle(Event::Join {
        id: 42,
        since,
        deadline: None,
        once: false,
        want: false,
        reply,
    });
    let head = e.waiters().next().expect("queued");
    assert_eq!((head.id, head.since), (42, since), "its own id and arrival");
    e.policy.pick = None;
    let fx = e.handle(Event::Wake);
    assert_eq!(asks(&fx).first().map(|a| a.0), Some(42), "it asks first");
}
