//! `Picky`, a policy of the lock's shape and nothing else, for the tests of
//! the engine's rules that the lock needs and no semaphore or latch uses
//! (`lock_rules.rs`, `lock_leavers.rs`), and what those tests read of the
//! effects. Each rule is a switch of `Picky`'s, off by default, so that a
//! test turns on only the one it is about.

use super::*;
use crate::wire::Place;

/// A policy of the lock's shape. Its reply: `Some(token)`, taken; `None`,
/// busy. Its want: whether the waiter was refused once (then it listens).
#[derive(Debug, Default)]
pub(super) struct Picky {
    /// What `next` answers while set; the head otherwise.
    pub(super) pick: Option<Pick>,
    /// It checks a lost attempt rather than sending it again.
    pub(super) checks: bool,
    /// Every answer reads as a refusal (a re-entry refused) while set.
    pub(super) refuse: bool,
    /// Each waiter holds a place in a Redis queue (the fair lock's).
    pub(super) places: bool,
    /// Its timeouts name the holder (the runner answers them).
    pub(super) names: bool,
    /// How long an attempt may go unanswered before a deadline says so.
    pub(super) silence: Option<Duration>,
    /// A busy answer says it is held (try-once waiters are answered).
    pub(super) held: bool,
    /// A message wakes the queue after this delay.
    pub(super) wake_after: Option<Duration>,
    /// A channel it listens on whoever waits (a yield).
    pub(super) keep: Option<&'static str>,
    /// A channel listened on already stays when nobody waits (a holder
    /// taking turns).
    pub(super) keeps: bool,
    /// A grant dropped gives its take back (a lock's guard).
    pub(super) drops: bool,
    /// Each waiter takes a place with its first attempt that waits: marked
    /// at the attempt (`Picky::asking`), left if it leaves.
    pub(super) places_at_ask: bool,
    /// Attempts sent so far, counted at the attempt.
    pub(super) sent: u32,
    /// A busy answer names this place at the head of the Redis queue.
    pub(super) first: Option<&'static str>,
    /// The places told they are at the head.
    pub(super) told: Vec<Arc<str>>,
    /// The errors its waiters were answered instead of a grant, as text.
    pub(super) refusals: std::cell::RefCell<Vec<String>>,
    /// A waiter that joins goes first (a re-entry by a holder here).
    pub(super) front: bool,
    /// The channels it was told are subscribed, in order.
    pub(super) subscribed_to: Vec<String>,
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

    fn next(&mut self, waiters: &mut Waiters<Self>, _now: Instant) -> Pick {
        let head = waiters.front().map_or(Pick::Nobody, |w| Pick::Waiter(w.id));
        self.pick.unwrap_or(head)
    }

    fn channel(&self, w: &Waiter<Self>) -> Option<String> {
        w.want.want.then(|| "picky".to_owned())
    }

    fn placed(&mut self, stands: Vec<(Arc<str>, Place)>, _waiters: &mut Waiters<Self>) {
        let heads = stands.into_iter().filter(|(_, p)| *p == Place::Head);
        self.told.extend(heads.map(|(id, _)| id));
    }

    fn goes_first(&self, _want: &bool) -> bool {
        self.front
    }

    fn not_granted(&self, _want: &bool, error: &LockError) {
        self.refusals.borrow_mut().push(error.to_string());
    }

    fn asking(&mut self, _want: &mut bool, once: bool, _now: Instant) {
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

    fn keeps_listening(&self, _channel: &str) -> bool {
        self.keeps
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

    fn classify(&mut self, reply: Option<u64>) -> Found<u64> {
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
                first: self.first.map(Arc::from),
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

    fn subscribed(&mut self, channel: &str, _waiters: &mut Waiters<Self>) {
        self.subscribed_to.push(channel.to_owned());
    }
}

/// A `Picky` waiter arrives; answers where its answer comes and the effects.
pub(super) fn arrive(
    e: &mut Engine<Picky>,
    wait: Option<Duration>,
) -> (Answer<u64>, Vec<Effect<Picky>>) {
    let (reply, answer) = oneshot::channel();
    let want = false;
    (answer, e.handle(Event::Arrive { want, wait, reply }))
}

/// An engine of `picky` whose first waiter (answered on the receiver) asks
/// as attempt `id`.
pub(super) fn head_asking(picky: Picky) -> (Engine<Picky>, Answer<u64>, u64) {
    let mut e = engine(picky);
    let (a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    (e, a, id)
}

/// The checks of a lost attempt among `effects`.
pub(super) fn checks(effects: &[Effect<Picky>]) -> usize {
    let checks = effects.iter().filter(|f| matches!(f, Effect::Check { .. }));
    checks.count()
}

/// The places left among `effects`.
pub(super) fn left_places(effects: &[Effect<Picky>]) -> Vec<Arc<str>> {
    let left = effects.iter().filter_map(|f| match f {
        Effect::Leave(ids) => Some(ids.clone()),
        _ => None,
    });
    left.flatten().collect()
}

/// The unsubscriptions among `effects`.
pub(super) fn unsubscribes(effects: &[Effect<Picky>]) -> Vec<String> {
    let gone = effects.iter().filter_map(|f| match f {
        Effect::Unsubscribe(name) => Some(name.clone()),
        _ => None,
    });
    gone.collect()
}
