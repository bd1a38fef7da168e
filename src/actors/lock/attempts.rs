//! A lock actor's acquisition attempts, kept by one owner: which waiter's
//! attempt is in flight (at most one per lock), whether something woke the lock
//! meanwhile, an attempt whose reply was lost and the check of it, and the run of
//! Redis errors (for the backoff, and for what a waiter whose deadline passes is
//! told). `acquire.rs` decides when to try and what each answer means; this file
//! keeps the books, so every change to them is one of the methods below, named
//! after the event that causes it.
//!
//! The call itself (in flight, woken meanwhile, the failure run, its backoff and
//! last error) is the waiting kit's [`Attempt`], as in the semaphore and latch
//! actors; what only a lock has is kept beside it: which waiter the call is
//! for, an attempt whose reply was lost and its check, whether the key was seen
//! a lock hash, and an abandoned acquisition's give-back.

use std::sync::Arc;
use std::time::Duration;

use super::Waiter;
use crate::actors::waiting::Attempt;
use crate::config::Config;
use crate::keys::Owner;
use crate::kind::AcquireKind;

/// The acquisition attempt in flight: enough to grant its waiter, or to undo the
/// grant if the waiter left meanwhile. (`kinds::Attempt` is the same attempt
/// laid out for the kind's script.)
#[derive(Debug)]
pub(super) struct InFlight {
    /// The waiter it is made for.
    pub(super) waiter: u64,
    pub(super) kind: AcquireKind,
    pub(super) owner: Owner,
    /// The owner's field in the lock hash.
    pub(super) field: Arc<str>,
    pub(super) lease: Option<Duration>,
    /// Fair lock: the attempt takes a place in the queue if it cannot take the lock.
    pub(super) queue: bool,
}

/// An acquisition attempt whose reply was lost: it may or may not have taken a
/// hold, which is checked before anyone of this lock tries again.
#[derive(Debug, Clone)]
pub(super) struct Unresolved {
    pub(super) kind: AcquireKind,
    pub(super) owner: Owner,
    pub(super) field: Arc<str>,
}

impl Unresolved {
    /// The attempt made for this waiter.
    pub(super) fn of(w: &Waiter) -> Box<Unresolved> {
        Box::new(Unresolved {
            kind: w.want.req.kind,
            owner: w.want.req.owner,
            field: w.want.req.field.clone(),
        })
    }
}

/// The attempt state of one lock actor. Small: every lock actor carries it, and
/// the rare parts (a lost attempt, an error) are boxed.
#[derive(Debug, Default)]
pub(super) struct Attempts {
    /// The call (the kit's part): in flight exactly while `waiter` is set, an
    /// unlock message (or a resync) that came meanwhile (if the attempt finds
    /// the lock busy, the next one goes at once, not later), and the run of
    /// Redis errors: the backoff, and the error that waiters whose deadline
    /// passes get instead of a bare "timed out".
    call: Attempt,
    /// The waiter whose attempt is in flight.
    waiter: Option<u64>,
    /// An attempt whose reply was lost, to be checked before the next one.
    unresolved: Option<Box<Unresolved>>,
    /// That check is in flight.
    checking: bool,
    /// An attempt found the key a lock hash (granted, or busy after the full
    /// check): a new owner's first attempt may then skip the re-entry check
    /// (`acquire.lua`'s new-owner flag).
    saw_lock: bool,
    /// The attempt in flight is an acquisition script (not a handover), so an
    /// owner-checked release of its field undoes whatever it did.
    acquiring: bool,
    /// Its waiter left while it was in flight and a give-back was sent right
    /// behind it ([`Attempts::abandon`]): a grant it answers is undone already,
    /// and is granted to nobody.
    abandoned: bool,
}

impl Attempts {
    /// An attempt, or the check of a lost one, is in flight: nobody else tries.
    pub(super) fn in_progress(&self) -> bool {
        self.waiter.is_some() || self.checking
    }

    /// An attempt's reply was lost and what it did is not known yet.
    pub(super) fn has_unresolved(&self) -> bool {
        self.unresolved.is_some()
    }

    /// Nothing sent to Redis to acquire is unsettled: no attempt in flight, none
    /// with a lost reply, no check of one.
    pub(super) fn is_quiet(&self) -> bool {
        self.waiter.is_none() && self.unresolved.is_none() && !self.checking
    }

    /// The waiter whose attempt is in flight.
    pub(super) fn in_flight(&self) -> Option<u64> {
        self.waiter
    }

    /// Whether an attempt has found the key a lock hash.
    pub(super) fn saw_lock(&self) -> bool {
        self.saw_lock
    }

    /// The error that stands in the way now, if Redis failed.
    pub(super) fn last_error(&self) -> Option<&redis::RedisError> {
        self.call.last_error()
    }

    /// The attempt of waiter `id` is sent.
    pub(super) fn sent(&mut self, id: u64) {
        self.waiter = Some(id);
        self.call.start();
        self.acquiring = false;
        self.abandoned = false;
    }

    /// The attempt just sent is an acquisition script (a handover is not).
    pub(super) fn sent_acquisition(&mut self) {
        self.acquiring = true;
    }

    /// The waiter `id` left: answers whether its acquisition is the one in
    /// flight and not given back yet, and if so counts it given back (the
    /// caller sends the give-back).
    pub(super) fn abandon(&mut self, id: u64) -> bool {
        let now = self.waiter == Some(id) && self.acquiring && !self.abandoned;
        self.abandoned |= now;
        now
    }

    /// Whether the attempt in flight was given back after its waiter left;
    /// asked once its answer is in, before [`Attempts::answered`].
    pub(super) fn was_abandoned(&self) -> bool {
        self.abandoned
    }

    /// The attempt in flight is over (answered, or decided by a handover);
    /// answers whether something woke the lock meanwhile.
    pub(super) fn answered(&mut self) -> bool {
        self.waiter = None;
        self.call.finish();
        self.acquiring = false;
        self.abandoned = false;
        let woken = self.call.again();
        self.call.settle();
        woken
    }

    /// Redis answered the attempt as a lock script does (`saw_lock`: the key is
    /// a lock hash): a run of errors is over.
    pub(super) fn redis_answered(&mut self, saw_lock: bool) {
        self.call.succeeded();
        self.saw_lock |= saw_lock;
    }

    /// The attempt's reply was lost: it may have taken a hold.
    pub(super) fn lost(&mut self, attempt: InFlight) {
        self.unresolved = Some(Box::new(Unresolved {
            kind: attempt.kind,
            owner: attempt.owner,
            field: attempt.field,
        }));
    }

    /// A give-back sent behind an abandoned attempt failed: what that attempt
    /// did is checked as for a lost reply, once nothing is in flight.
    pub(super) fn unsettled(&mut self, what: Box<Unresolved>) {
        self.unresolved = Some(what);
    }

    /// Redis failed the attempt or its check with `e`, transiently: answers
    /// the delay before the next try, doubling with each failure in a row,
    /// capped and jittered (`Config::reconnect_backoff`).
    pub(super) fn failed(&mut self, config: &Config, e: redis::RedisError) -> Duration {
        self.call.failed(config, e)
    }

    /// Something suggests the lock may be free. Answers whether an attempt is in
    /// flight (it is then followed by another at once if it finds the lock busy);
    /// if not, the caller lets a waiter try now.
    pub(super) fn wake(&mut self) -> bool {
        !self.call.wake()
    }

    /// Starts checking the attempt whose reply was lost: what it was, or `None`
    /// if there is none.
    pub(super) fn check(&mut self) -> Option<Box<Unresolved>> {
        let unresolved = self.unresolved.clone()?;
        self.checking = true;
        Some(unresolved)
    }

    /// The check is over: `settled` when the lost attempt is dealt with (its
    /// hold given back, or none found); otherwise it is checked again later.
    pub(super) fn checked(&mut self, settled: bool) {
        self.checking = false;
        if settled {
            self.unresolved = None;
        }
    }

    /// The actor restarts: every call in flight belonged to the old context and
    /// is gone, so an attempt in flight has an unknown outcome now (`lost_of`
    /// makes it one for its waiter, if that waiter is still queued).
    pub(super) fn restarting(&mut self, lost_of: impl FnOnce(u64) -> Option<Box<Unresolved>>) {
        if let Some(id) = self.waiter.take() {
            self.unresolved = lost_of(id);
        }
        self.call.drop_call();
        self.acquiring = false;
        self.abandoned = false;
        self.checking = false;
    }
}

/// What giving back an abandoned attempt needs of its waiter.
pub(super) struct Abandoning {
    /// The waiter.
    pub(super) id: u64,
    /// What it asked for.
    pub(super) kind: AcquireKind,
    /// Its owner.
    pub(super) owner: Owner,
    /// Its hash field.
    pub(super) field: Arc<str>,
    /// Its lease (`None`: the watchdog's).
    pub(super) lease: Option<Duration>,
    /// A re-entry by its owner is allowed.
    pub(super) reentrant: bool,
}

impl Abandoning {
    /// What giving back the attempt of `w` needs.
    pub(super) fn of(w: &Waiter) -> Abandoning {
        Abandoning {
            id: w.want.req.id,
            kind: w.want.req.kind,
            owner: w.want.req.owner,
            field: w.want.req.field.clone(),
            lease: w.want.req.lease,
            reentrant: w.want.req.reentrant,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake during an attempt is answered once, by the next one; the waiter
    /// the attempt is for is known while it is in flight, and only then.
    #[test]
    fn a_wake_in_flight_is_told_once_when_the_attempt_is_answered() {
        let mut a = Attempts::default();
        assert!(!a.wake(), "nothing in flight: try now");
        a.sent(7);
        assert_eq!(a.in_flight(), Some(7));
        assert!(a.in_progress() && !a.is_quiet());
        assert!(a.wake(), "in flight: marked");
        assert!(a.answered(), "woken meanwhile");
        assert!(a.is_quiet());
        a.sent(8);
        assert!(!a.answered(), "told once");
    }

    /// Redis errors in a row back off longer and stand as the last error until
    /// Redis answers again; a restart keeps the run.
    #[test]
    fn errors_back_off_until_redis_answers() {
        let config = Config::from_url("redis://127.0.0.1:1").expect("a valid URL");
        let err = || redis::RedisError::from((redis::ErrorKind::Io, "down"));
        let mut a = Attempts::default();
        a.sent(1);
        let first = a.failed(&config, err());
        a.restarting(|_| None);
        assert!(a.is_quiet());
        let mut later = first;
        for _ in 0..6 {
            later = a.failed(&config, err());
        }
        assert!(later > first && later <= config.reconnect_max);
        assert!(a.last_error().is_some());
        a.redis_answered(true);
        assert!(a.last_error().is_none() && a.saw_lock());
    }
}
