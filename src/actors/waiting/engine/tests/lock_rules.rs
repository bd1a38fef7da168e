//! The engine's rules that the lock needs and no semaphore or latch uses:
//! who asks decided from more than the queue (a yield holds everyone back, a
//! local holder blocks the queue), a take that hands its waiter what it won
//! (a fencing token), a waiter that listens only once it was refused (an
//! uncontended take is one call, no subscription), a lost attempt checked
//! before anyone asks again (a script with no op id to answer a repeat from),
//! a refusal for good (a re-entry refused) that answers its waiter alone, a
//! timeout that names the holder or says Redis was silent, a busy answer that
//! answers every try at once, a wake after a delay, a channel kept for a
//! holder whoever waits, a grant whose dropping gives it back, and a waiter
//! marked as its attempt goes out.
//! Tested with `Picky`, a policy of the lock's shape, and nothing else.

use super::*;

/// A policy of the lock's shape. Its reply: `Some(token)`, taken; `None`,
/// busy. Its want: whether the waiter was refused once (then it listens).
#[derive(Debug, Default)]
struct Picky {
    /// What `next` answers while set; the head otherwise.
    pick: Option<Pick>,
    /// It checks a lost attempt rather than sending it again.
    checks: bool,
    /// Every answer reads as a refusal (a re-entry refused) while set.
    refuse: bool,
    /// Each waiter holds a place in a Redis queue (the fair lock's).
    places: bool,
    /// Its timeouts name the holder (the runner answers them).
    names: bool,
    /// How long an attempt may go unanswered before a deadline says so.
    silence: Option<Duration>,
    /// A busy answer says it is held (try-once waiters are answered).
    held: bool,
    /// A message wakes the queue after this delay.
    wake_after: Option<Duration>,
    /// A channel it listens on whoever waits (a holder taking turns).
    keep: Option<&'static str>,
    /// A grant dropped gives its take back (a lock's guard).
    drops: bool,
    /// Each waiter takes a place with its first attempt that waits: marked
    /// at the attempt (`Picky::asking`), left if it leaves.
    places_at_ask: bool,
    /// Attempts sent so far, counted at the attempt.
    sent: u32,
}

impl Policy for Picky {
    type Want = bool;
    type Grant = u64;
    type Won = u64;
    type Reply = Option<u64>;
    const LABEL: &'static str = "picky";

    fn name(&self) -> &str {
        "picky"
    }

    fn wants(&self, _want: &bool) -> u64 {
        1
    }

    fn next(&mut self, waiters: &Waiters<Self>, _now: Instant) -> Pick {
        let head = waiters.front().map_or(Pick::Nobody, |w| Pick::Waiter(w.id));
        self.pick.unwrap_or(head)
    }

    fn channel(&self, w: &Waiter<Self>) -> Option<String> {
        w.want.want.then(|| "picky".to_owned())
    }

    fn asking(&mut self, _want: &mut bool, once: bool) {
        self.sent += 1;
        if self.places_at_ask && !once {
            self.places = true;
        }
    }

    fn grant_gives_back(&self) -> bool {
        self.drops
    }

    fn kept_channel(&self) -> Option<String> {
        self.keep.map(str::to_owned)
    }

    fn names_holder(&self) -> bool {
        self.names
    }

    fn silence(&self) -> Option<Duration> {
        self.silence
    }

    /// A wait that ran out while Redis failed (or was silent) says so.
    fn expired(
        &self,
        waited: Duration,
        last: Option<&redis::RedisError>,
    ) -> Result<u64, LockError> {
        match last {
            Some(e) => Err(LockError::from(e.clone())),
            None => Err(timeout(waited)),
        }
    }

    fn place(&self, _mark: &Mark<bool>) -> Option<Arc<str>> {
        self.places.then(|| Arc::from("picky-place"))
    }

    fn classify(&self, reply: Option<u64>) -> Found<u64> {
        if self.refuse {
            return Found::Refused(LockError::ReentryRefused);
        }
        match reply {
            Some(token) => Found::Taken {
                left: 0,
                won: token,
            },
            None => Found::Short {
                retry_in: None,
                missing: false,
            },
        }
    }

    /// Refused once: it listens from now on, and asks again once it does.
    fn short(&mut self, refused: &mut bool, _retry_in: Option<Duration>) -> Then {
        *refused = true;
        match self.held {
            true => Then::Held(None),
            false => Then::Pump,
        }
    }

    fn heard(&mut self, _channel: &str, _wake_all: bool, _waiters: &mut Waiters<Self>) -> Heard {
        self.wake_after.map_or(Heard::Wake, Heard::WakeAfter)
    }

    fn checks_lost(&self) -> bool {
        self.checks
    }
}

/// A `Picky` waiter arrives; answers where its answer comes and the effects.
fn arrive(e: &mut Engine<Picky>, wait: Option<Duration>) -> (Answer<u64>, Vec<Effect<Picky>>) {
    let (reply, answer) = oneshot::channel();
    let want = false;
    (answer, e.handle(Event::Arrive { want, wait, reply }))
}

/// The checks of a lost attempt among `effects`.
fn checks(effects: &[Effect<Picky>]) -> usize {
    let checks = effects.iter().filter(|f| matches!(f, Effect::Check { .. }));
    checks.count()
}

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
    assert!(e.deliver(taken, won).is_ok());
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

/// A lost answer is checked before anyone asks again, and the waiter is not
/// marked for an undo: the check gives back whatever the attempt took, once.
#[tokio::test]
async fn a_lost_answer_is_checked_before_anyone_asks_again() {
    let mut e = engine(Picky {
        checks: true,
        ..Picky::default()
    });
    let (a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (_b, _) = arrive(&mut e, None);
    let fx = e.handle(answered(id, Err(transient())));
    assert!(asks(&fx).is_empty() && undos(&fx).is_empty());
    let fx = e.handle(Event::Timer);
    assert_eq!(checks(&fx), 1, "the check goes out first");
    assert!(asks(&fx).is_empty(), "and nobody asks meanwhile");
    drop(a);
    let fx = e.handle(Event::Left);
    assert!(undos(&fx).is_empty(), "the check covers a leaver");
    assert!(
        asks(&fx).is_empty() && checks(&fx) == 0,
        "one check at a time"
    );
    let fx = e.handle(Event::Checked(Err(transient())));
    assert!(
        asks(&fx).is_empty(),
        "a check that could not tell is not done"
    );
    let fx = e.handle(Event::Timer);
    assert_eq!(checks(&fx), 1, "so it goes out again");
    let fx = e.handle(Event::Checked(Ok(())));
    assert_eq!(asks(&fx).len(), 1, "once checked, the next waiter asks");
}

/// A connection refused before the call went out did nothing: no check.
#[test]
fn a_refused_connection_needs_no_check() {
    let mut e = engine(Picky {
        checks: true,
        ..Picky::default()
    });
    let (_a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let _ = e.handle(answered(id, Err(redis::RedisError::from(refused))));
    let fx = e.handle(Event::Timer);
    assert_eq!(checks(&fx), 0);
    assert_eq!(asks(&fx).len(), 1, "the same waiter asks again");
}

/// The places left among `effects`.
fn left_places(effects: &[Effect<Picky>]) -> Vec<Arc<str>> {
    let left = effects.iter().filter_map(|f| match f {
        Effect::Leave(ids) => Some(ids.clone()),
        _ => None,
    });
    left.flatten().collect()
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

/// A waiter that leaves while its attempt is out has its take undone at once
/// (right behind the attempt); an answer that says it took is checked all the
/// same before anyone asks again, as the undo may have gone out first, and
/// nobody is granted it.
#[tokio::test]
async fn a_take_for_a_leaver_is_undone_then_checked() {
    let mut e = engine(Picky {
        checks: true,
        ..Picky::default()
    });
    let (a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (_b, _) = arrive(&mut e, None);
    drop(a);
    let fx = e.handle(Event::Left);
    assert_eq!(undos(&fx).len(), 1, "undone at once, behind the attempt");
    let fx = e.handle(answered(id, Ok(Some(7))));
    assert!(!fx.iter().any(|f| matches!(f, Effect::Grant(_))));
    assert_eq!(checks(&fx), 1, "the take is checked");
    assert!(asks(&fx).is_empty(), "before anyone asks again");
    let fx = e.handle(Event::Checked(Ok(())));
    assert_eq!(asks(&fx).len(), 1, "then the next waiter asks");
}

/// A busy answer to a leaver's attempt took nothing: no check, and the next
/// waiter asks at once; an attempt of a leaver that got no answer is checked
/// first (a check that cannot tell yet backs off).
#[test]
fn a_leavers_busy_answer_needs_no_check_and_a_lost_one_does() {
    for (reply, checked) in [(Ok(None), false), (Err(transient()), true)] {
        let mut e = engine(Picky {
            checks: true,
            ..Picky::default()
        });
        let (a, fx) = arrive(&mut e, None);
        let (id, _) = asks(&fx).pop().expect("the head asks at once");
        let (_b, _) = arrive(&mut e, None);
        drop(a);
        let _ = e.handle(Event::Left);
        let fx = e.handle(answered(id, reply));
        assert_eq!(checks(&fx) == 1, checked);
        assert_eq!(asks(&fx).is_empty(), checked, "a check goes first");
    }
}

/// An undo that failed is not known to have run: what the take did is checked
/// before anyone asks again.
#[test]
fn a_failed_undo_is_checked() {
    let mut e = engine(Picky {
        checks: true,
        ..Picky::default()
    });
    let (a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (_b, _) = arrive(&mut e, None);
    drop(a);
    let _ = e.handle(Event::Left);
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(asks(&fx).len(), 1, "the next waiter asks");
    let (next, _) = asks(&fx).pop().expect("asked");
    let _ = e.handle(answered(next, Ok(None)));
    let fx = e.handle(Event::UndoFailed(false));
    assert_eq!(checks(&fx), 1, "the failed undo's take is checked");
    assert!(asks(&fx).is_empty());
}

/// A waiter whose deadline passes with nothing but a timeout to tell it is
/// handed to the runner unanswered, to name the holder in it, and leaves
/// (its place) at once; the others stay.
#[test]
fn a_timeout_goes_to_the_runner_to_name_the_holder() {
    let mut e = engine(Picky {
        names: true,
        places: true,
        ..Picky::default()
    });
    e.policy.pick = Some(Pick::Nobody);
    let (mut short, _) = arrive(&mut e, Some(Duration::from_millis(10)));
    let (_long, _) = arrive(&mut e, None);
    std::thread::sleep(Duration::from_millis(20));
    let fx = e.handle(Event::Timer);
    let timed_out: Vec<_> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::TimedOut(ws) => Some(ws.iter().map(|(w, waited)| (w.id, *waited))),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(timed_out.len(), 1, "the one whose deadline passed");
    assert!(timed_out[0].1 >= Duration::from_millis(10));
    assert!(
        short.try_recv().is_err(),
        "unanswered: the runner answers it"
    );
    assert_eq!(left_places(&fx), vec![Arc::from("picky-place")]);
    assert_eq!(e.waiters().count(), 1, "the other one stays");
}

/// A deadline that passes while the attempt out has gone unanswered past the
/// policy's silence is told Redis did not answer, not that it waited in vain;
/// one that passes just after an attempt went out is a plain timeout.
#[tokio::test]
async fn a_deadline_in_a_silence_says_redis_did_not_answer() {
    for (silence, said) in [(Duration::ZERO, true), (Duration::from_secs(60), false)] {
        let mut e = engine(Picky {
            names: true,
            silence: Some(silence),
            ..Picky::default()
        });
        let (asker, fx) = arrive(&mut e, Some(Duration::from_millis(10)));
        assert_eq!(asks(&fx).len(), 1, "its attempt is out");
        std::thread::sleep(Duration::from_millis(20));
        let fx = e.handle(Event::Timer);
        let handed = fx.iter().any(|f| matches!(f, Effect::TimedOut(_)));
        assert_eq!(handed, !said, "a plain timeout goes to the runner");
        if said {
            let answer = asker.await.expect("answered");
            let e = answer.expect_err("not granted").to_string();
            assert!(e.contains("did not answer"), "{e}");
        }
    }
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

/// The unsubscriptions among `effects`.
fn unsubscribes(effects: &[Effect<Picky>]) -> Vec<String> {
    let gone = effects.iter().filter_map(|f| match f {
        Effect::Unsubscribe(name) => Some(name.clone()),
        _ => None,
    });
    gone.collect()
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

/// A grant that finds its caller gone comes back to the runner; when dropping
/// it gives the take back (a lock's guard releases its hold), nothing is
/// undone besides, so the take is not given back twice.
#[tokio::test]
async fn a_grant_that_gives_back_when_dropped_is_not_undone() {
    for drops in [false, true] {
        let mut e = engine(Picky {
            drops,
            ..Picky::default()
        });
        let (a, fx) = arrive(&mut e, None);
        let (id, _) = asks(&fx).pop().expect("the head asks at once");
        drop(a);
        let mut fx = e.handle(answered(id, Ok(Some(7))));
        let at = fx.iter().position(|f| matches!(f, Effect::Grant(_)));
        let Effect::Grant(mut taken) = fx.swap_remove(at.expect("granted")) else {
            unreachable!("found a grant");
        };
        let won = taken.won.take().expect("won");
        assert_eq!(e.deliver(taken, won), Err(7), "the grant comes back");
        assert_eq!(undos(&e.take_effects()).len(), usize::from(!drops));
    }
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
