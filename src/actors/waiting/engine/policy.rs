//! What a synchronizer tells the waiting engine about itself: the [`Policy`]
//! trait, and the small decisions its hooks answer with as data ([`Found`],
//! [`Pick`], [`Then`], [`Heard`], [`Scope`]).
//!
//! A policy holds only what makes its synchronizer different: whom it lets ask,
//! which channel a waiter listens on, what Redis's answer means, what a wake
//! marks. Its hooks change its own waiters' marks at most; every rule about
//! attempts, leavers and undos stays in the engine. The defaults are those of
//! a synchronizer whose head asks, one waiter at a time, and whose every wake
//! is worth an attempt.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Mark, Waiter, Waiters};
use crate::actors::waiting::{op_id, timeout};
use crate::error::LockError;
use crate::wire::Place;

/// Whom an attempt's answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The waiter that asked (a semaphore: its take).
    Asker,
    /// Everyone waiting (a latch: one read of the count opens them all).
    All,
}

/// What an answer from Redis says, once the policy read it; `W` is what a
/// take gives its waiter beside the grant itself ([`Policy::Won`]).
#[derive(Debug)]
pub(crate) enum Found<W> {
    /// Done: taken (or the latch is open); `left` permits remain.
    Taken {
        /// Permits left after the take (0 for a latch).
        left: u64,
        /// What Redis gave the waiter (a lock's fencing token and count).
        won: W,
    },
    /// Not now: too few permits (or a count above zero).
    Short {
        /// A hint to ask again this soon (a permit's lease runs out), at most
        /// the fallback interval.
        retry_in: Option<Duration>,
        /// The key does not exist at all.
        missing: bool,
        /// The place at the head of the Redis queue, when the answer names
        /// it (a fair lock's busy answer): a waiter of ours there, if not the
        /// one that asked, is told so ([`Policy::placed`]) and may ask at once.
        first: Option<Arc<str>>,
    },
    /// Refused for good, to the waiter that asked whatever the [`Scope`]
    /// (a lock's re-entry refused, a key of another type): it is answered
    /// with this error and leaves its place, and its attempt is known to have
    /// taken nothing, so there is nothing to undo or check. Carried by value,
    /// once: a `LockError` is not `Clone`.
    Refused(LockError),
}

/// Who asks when the queue looks again ([`Policy::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// This waiter (its local id) asks now.
    Waiter(u64),
    /// Nobody asks for this long (a spin lock yields to other processes): the
    /// timer rings then, or at the first deadline if sooner.
    HoldBack(Duration),
    /// Nobody asks now, and a waiter that tries once cannot win (a local
    /// holder keeps the queue out): each one not asking is answered now.
    Blocked,
    /// Nobody asks now.
    Nobody,
}

/// What follows an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Look at the queue again now (someone may ask at once).
    Pump,
    /// Wait for a wake, at most the fallback interval (or `Some` sooner); a
    /// wake that came during the attempt counts, and the head asks again.
    Wait(Option<Duration>),
    /// It is held (a lock's busy answer): each waiter that tries once and is
    /// not asking would hear the same, so it is answered now; then as `Wait`.
    Held(Option<Duration>),
}

/// What a message on a channel means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard {
    /// Something was freed: look at the queue again.
    Wake,
    /// The same, after this delay (a lock's random start after another
    /// process's release, so that processes do not all ask at once).
    WakeAfter(Duration),
    /// The wait is over for everyone, without asking (a latch's `0`).
    Open,
    /// Nothing for these waiters.
    Nothing,
}

/// A synchronizer's own decisions; see the module documentation.
pub(crate) trait Policy: Sized {
    /// What one waiter wants, in the synchronizer's terms.
    type Want: Clone + Debug + Unpin + 'static;
    /// What a waiter gets when its wait is over.
    type Grant: Debug + Unpin + 'static;
    /// What a successful take tells beside the take itself, for the runner
    /// to make the grant with (`()` for a semaphore or a latch; a lock's
    /// fencing token, hold count and replica confirmation).
    type Won: Debug + Unpin + 'static;
    /// What Redis answers an attempt, before [`Policy::classify`] reads it.
    type Reply: 'static;
    /// Whom an answer is for.
    const SCOPE: Scope = Scope::Asker;
    /// How the logs name it ("semaphore", "latch").
    const LABEL: &'static str;

    /// Its name (its key), for the logs.
    fn name(&self) -> &str;

    /// Whether a waiter that waits `wait` makes one attempt only (answered
    /// by that attempt, never expired).
    fn once(&self, wait: Option<Duration>) -> bool {
        wait == Some(Duration::ZERO)
    }

    /// The op id of the waiter with local id `local`: every attempt of that
    /// waiter carries it (`actors/waiting/once.rs`). `None`: its attempts
    /// change nothing in Redis, so there is nothing to undo.
    fn op(&self, _local: u64) -> Option<Arc<str>> {
        Some(op_id())
    }

    /// Whether a waiter that wants `want` goes before those already waiting
    /// ([`Event::Join`](super::Event::Join)): a lock's re-entry by its holder
    /// here, which must not wait behind those who wait for that holder.
    fn goes_first(&self, _want: &Self::Want) -> bool {
        false
    }

    /// How many permits a waiter wants, for its waiting record.
    fn wants(&self, want: &Self::Want) -> u64;

    /// The answer to a waiter whose deadline passed (`last`: the error the
    /// last attempts met, while they keep failing).
    fn expired(
        &self,
        waited: Duration,
        _last: Option<&redis::RedisError>,
    ) -> Result<Self::Grant, LockError> {
        Err(timeout(waited))
    }

    /// Whether a waiter whose deadline passes with nothing to tell it but a
    /// timeout is handed to the runner to answer, naming who holds
    /// ([`Effect::TimedOut`](super::Effect::TimedOut)), rather than answered
    /// by [`Policy::expired`]: a lock's timeout names its holder.
    fn names_holder(&self) -> bool {
        false
    }

    /// How long an attempt may go unanswered before a waiter whose deadline
    /// passes is told Redis did not answer, rather than that it waited in
    /// vain (`None`: never). An attempt answers in well under a millisecond.
    fn silence(&self) -> Option<Duration> {
        None
    }

    /// A waiter that wants `want` is answered `error` instead of a grant,
    /// by the engine (a lock counts its acquisitions by outcome).
    fn not_granted(&self, _want: &Self::Want, _error: &LockError) {}

    /// Whether a newcomer makes the queue look again (`first`: it found
    /// nobody waiting; `in_flight`: an attempt is out).
    fn asks_on_arrival(&self, _first: bool, _in_flight: bool) -> bool {
        true
    }

    /// Which waiter asks when the queue looks again, at `now`; the default
    /// is the head. `&mut`: a policy may keep books on who asked (a spin
    /// lock's backoff), and change its waiters' marks (a fair lock's waiter
    /// that a local holder keeps out is not due).
    fn next(&mut self, waiters: &mut Waiters<Self>, _now: Instant) -> Pick {
        waiters.front().map_or(Pick::Nobody, |w| Pick::Waiter(w.id))
    }

    /// The attempt of a waiter that wants `want` is about to go out (`once`:
    /// its only one): marks it, as what the attempt may do is known only to
    /// the policy (a fair lock's waiter takes a place in the Redis queue with
    /// it; a lock's retry may skip checks its first attempt made). The
    /// [`Ask`](super::Ask) carries the marks. `now`: when it goes out.
    fn asking(&mut self, _want: &mut Self::Want, _once: bool, _now: Instant) {}

    /// The channel `w` listens on before it asks (`None`: it does not wait).
    fn channel(&self, w: &Waiter<Self>) -> Option<String>;

    /// A second channel `w` listens on before it asks (a lock's waiter with a
    /// place in its handoff queue hears there that it holds the lock); kept
    /// as long as anyone waits, as the first is.
    fn also_listens(&self, _w: &Waiter<Self>) -> Option<String> {
        None
    }

    /// The channel that is `mark`'s alone, dropped when it leaves.
    fn own_channel(&self, _mark: &Mark<Self::Want>) -> Option<String> {
        None
    }

    /// The place in a Redis queue that `mark` holds, left when it leaves.
    fn place(&self, _mark: &Mark<Self::Want>) -> Option<Arc<str>> {
        None
    }

    /// A channel to listen on whoever waits, as long as the policy says so
    /// (a lock that yields to other processes hears their release): made
    /// when the queue looks, kept when nobody waits. The runner sends
    /// [`Event::Look`](super::Event::Look) when it changes.
    fn kept_channel(&self) -> Option<String> {
        None
    }

    /// Whether `channel`, listened on already, stays when nobody waits (a
    /// lock's holder taking turns keeps hearing the other processes'
    /// release); unlike [`Policy::kept_channel`], it is not made for this.
    fn keeps_listening(&self, _channel: &str) -> bool {
        false
    }

    /// Whether the subscription outlives the last waiter for a while
    /// (waiters come in bursts) rather than ending with it.
    fn lingers(&self) -> bool {
        false
    }

    /// Whether a grant that finds its caller gone is given back by the
    /// runner dropping it (`Calls::ungrant`: a lock's guard releases its hold
    /// when dropped, and may hand the lock to the next waiter) rather than
    /// undone under the waiter's op id.
    fn grant_gives_back(&self) -> bool {
        false
    }

    /// Whether an attempt whose answer is lost is checked by the runner
    /// before anyone asks again (`engine/check.rs`), rather than sent again
    /// under its op id: for a synchronizer whose scripts remember no op id
    /// (the lock). Its waiters are then never marked `lost`: the check gives
    /// back what the attempt took, once.
    fn checks_lost(&self) -> bool {
        false
    }

    /// Reads Redis's answer to an attempt (`&mut`: a policy may note what
    /// the answer showed, as a lock notes that its key is a lock hash).
    fn classify(&mut self, reply: Self::Reply) -> Found<Self::Won>;

    /// The take of a waiter that wanted `granted` succeeded with `left`
    /// permits left: what follows (a lock's new holder keeps out the waiters
    /// it excludes from now on).
    fn after_grant(
        &mut self,
        _left: u64,
        _granted: &Self::Want,
        _waiters: &mut Waiters<Self>,
    ) -> Then {
        Then::Pump
    }

    /// A lasting waiter's attempt came back short: marks it, and says what
    /// follows.
    fn short(&mut self, _want: &mut Self::Want, retry_in: Option<Duration>) -> Then {
        Then::Wait(retry_in)
    }

    /// A reason to look again came that is not a waiter's own (the fallback
    /// timer, a resubscription, a local give-back).
    fn woken(&mut self, _waiters: &mut Waiters<Self>) {}

    /// A message came on `channel` (`wake_all`: the subscriber read it as
    /// message `1` or a number).
    fn heard(&mut self, _channel: &str, _wake_all: bool, _waiters: &mut Waiters<Self>) -> Heard {
        Heard::Wake
    }

    /// The subscription to `channel` is made, before the queue looks again
    /// (a fair lock's waiter whose own channel it is may ask now).
    fn subscribed(&mut self, _channel: &str, _waiters: &mut Waiters<Self>) {}

    /// A refresh of the Redis queue said where each place stands.
    fn placed(&mut self, _stands: Vec<(Arc<str>, Place)>, _waiters: &mut Waiters<Self>) {}
}
