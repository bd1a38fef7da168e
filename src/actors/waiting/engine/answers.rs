//! What the engine makes of an attempt's answer: a take (the waiter leaves
//! the queue with what it won, and the policy says what follows), a short
//! answer (wait for a wake, or answer a waiter that tries once), a refusal
//! (that waiter alone is answered with it and leaves), a Redis error (retried
//! while it is transient and the waiter lasts, else answered), and, for a
//! policy whose answer is for everyone, the latch's open door.
//!
//! Apart from `mod.rs` because this is the half of the loop that reads Redis,
//! while `mod.rs` keeps the queue, the channels and the timer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::{Effect, Engine, Found, Policy, Scope, Taken, Then};
use crate::error::{redis_is_transient, LockError};
use crate::wire::Place;

impl<P: Policy> Engine<P> {
    /// What follows an answer.
    pub(super) fn then(&mut self, then: Then) {
        match then {
            Then::Pump => self.pump(),
            Then::Wait(_) if self.attempt.again() => self.pump(),
            Then::Wait(hint) => self.arm(hint),
            Then::Held(hint) => {
                self.answer_once();
                self.then(Then::Wait(hint));
            }
        }
    }

    /// An attempt answered.
    pub(super) fn answered(
        &mut self,
        asked: u64,
        reply: redis::RedisResult<P::Reply>,
        sent: Instant,
    ) {
        self.attempt.finish();
        self.asked_at = None;
        let found = reply.map(|r| self.policy.classify(r));
        match P::SCOPE {
            Scope::All => self.answered_all(asked, found, sent),
            Scope::Asker => self.answered_asker(asked, found, sent),
        }
    }

    /// An answer for everyone waiting (a latch's read).
    fn answered_all(
        &mut self,
        asked: u64,
        found: redis::RedisResult<Found<P::Won>>,
        sent: Instant,
    ) {
        match found {
            Ok(Found::Taken { .. }) => {
                self.attempt.succeeded();
                self.open(sent);
            }
            Ok(Found::Short { .. }) => {
                self.attempt.succeeded();
                self.then(Then::Wait(None));
            }
            Ok(Found::Refused(refusal)) => {
                self.attempt.succeeded();
                self.refused(asked, refusal);
            }
            Err(e) => {
                warn!(name = %self.policy.name(), error = %e, "{} attempt failed", P::LABEL);
                if redis_is_transient(&e) {
                    let delay = self.attempt.failed(&self.config, e);
                    self.arm_in(delay);
                } else {
                    // It will repeat: everyone hears it now.
                    let gone = self.waiters.answer_all(|| Err(LockError::from(e.clone())));
                    let error = LockError::from(e);
                    gone.iter()
                        .for_each(|m| self.policy.not_granted(&m.want, &error));
                    self.leave(gone);
                }
            }
        }
    }

    /// The wait is over for everyone.
    pub(super) fn open(&mut self, sent: Instant) {
        while let Some(waiter) = self.waiters.pop_front() {
            let won = None;
            self.effects
                .push(Effect::Grant(Box::new(Taken { waiter, sent, won })));
        }
    }

    /// An answer for the waiter `asked`.
    fn answered_asker(
        &mut self,
        asked: u64,
        found: redis::RedisResult<Found<P::Won>>,
        sent: Instant,
    ) {
        let Some(w) = self.waiters.get_mut(asked) else {
            // It left meanwhile and its take is being undone: the next asks
            // (once what the take did is checked, if it may have run).
            self.orphan_answered(&found);
            return self.pump();
        };
        self.orphan = None;
        w.want.asking = false;
        match found {
            Ok(Found::Taken { left, won }) => {
                self.attempt.succeeded();
                self.taken(asked, left, won, sent);
            }
            Ok(Found::Short {
                retry_in,
                missing,
                first,
            }) => {
                self.attempt.succeeded();
                self.told_first(asked, first);
                self.short(asked, retry_in, missing);
            }
            Ok(Found::Refused(refusal)) => {
                self.attempt.succeeded();
                self.refused(asked, refusal);
            }
            Err(e) => {
                if self.policy.checks_lost() {
                    let want = w.want.want.clone();
                    self.lost(want, &e);
                } else {
                    w.want.lost = true;
                }
                self.failed(asked, e);
            }
        }
    }

    /// The take of `asked` succeeded.
    fn taken(&mut self, asked: u64, left: u64, won: P::Won, sent: Instant) {
        self.effects.push(Effect::KeyFound);
        let Some(mut waiter) = self.waiters.remove(asked) else {
            return;
        };
        waiter.want.lost = false;
        if let Some(name) = self.policy.own_channel(&waiter.want) {
            self.drop_channel(&name);
        }
        let then = self
            .policy
            .after_grant(left, &waiter.want.want, &mut self.waiters);
        let won = Some(won);
        self.effects
            .push(Effect::Grant(Box::new(Taken { waiter, sent, won })));
        self.then(then);
    }

    /// A short answer named `first` at the head of the Redis queue: a waiter
    /// of ours there other than `asked` is told so.
    fn told_first(&mut self, asked: u64, first: Option<Arc<str>>) {
        let Some(first) = first else {
            return;
        };
        let mine = self
            .waiters
            .get(asked)
            .and_then(|w| self.policy.place(&w.want));
        if mine.as_deref() != Some(&*first) {
            let head = vec![(first, Place::Head)];
            self.policy.placed(head, &mut self.waiters);
        }
    }

    /// Too few for `asked` now.
    fn short(&mut self, asked: u64, retry_in: Option<Duration>, missing: bool) {
        let lasting = self.waiters.lasting();
        let Some(w) = self.waiters.get_mut(asked) else {
            return;
        };
        if !missing {
            self.effects.push(Effect::KeyFound);
        } else if !w.once {
            let waited = w.since.elapsed();
            self.effects.push(Effect::KeyMissing {
                waiting: lasting,
                waited,
            });
        }
        if w.once {
            if let Some(w) = self.waiters.remove(asked) {
                let mark = w.want.clone();
                self.time_out(w);
                self.leave(vec![mark]);
            }
            return self.pump();
        }
        let then = self.policy.short(&mut w.want.want, retry_in);
        self.then(then);
        self.listens(asked);
    }

    /// Waiter `asked` waits after a short answer: its channel is asked for
    /// now if it is not live (a lock's waiter listens only once refused), and
    /// its `Subscribed` makes the queue look again, so a release between the
    /// answer and the subscription is not missed. One already live costs
    /// nothing more: the waiter waits for a message (or the timer). One that
    /// asks again at once (the queue looked and picked it) needs none now.
    fn listens(&mut self, asked: u64) {
        let Some(w) = self.waiters.get(asked).filter(|w| !w.want.asking) else {
            return;
        };
        if let Some(name) = self.policy.channel(w) {
            self.listening(name);
        }
    }

    /// Redis refused `asked` for good: it is answered with `refusal` and
    /// leaves (its own channel, its place); the next may ask at once, since
    /// the refusal was its own.
    fn refused(&mut self, asked: u64, refusal: LockError) {
        let name = self.policy.name();
        debug!(%name, error = %refusal, "{} attempt refused", P::LABEL);
        if let Some(mut w) = self.waiters.remove(asked) {
            // Its attempt took nothing: nothing to undo, nothing to check.
            w.want.asking = false;
            w.want.lost = false;
            let mark = w.want.clone();
            self.policy.not_granted(&mark.want, &refusal);
            let _ = w.answer(Err(refusal));
            self.leave(vec![mark]);
        }
        self.pump();
    }

    /// The attempt of `asked` failed (it is marked `lost`).
    fn failed(&mut self, asked: u64, e: redis::RedisError) {
        let (name, label) = (self.policy.name(), P::LABEL);
        let Some(w) = self.waiters.get_mut(asked) else {
            return;
        };
        if redis_is_transient(&e) && !w.once {
            warn!(%name, error = %e, "{label} attempt failed; retrying");
            w.last_error = Some(e.clone().into());
            let delay = self.attempt.failed(&self.config, e);
            self.arm_in(delay);
            // What the attempt may have taken is checked now, not when the
            // retry is due: a grant too few replicas confirmed is real on the
            // master, and must not stay held while its caller waits.
            self.checking();
            return;
        }
        warn!(%name, error = %e, "{label} attempt failed");
        if let Some(w) = self.waiters.remove(asked) {
            // A refused take changed nothing; one whose answer is lost (or
            // unconfirmed by replicas) may have: undone either way.
            let mark = w.want.clone();
            let error = LockError::from(e);
            self.policy.not_granted(&mark.want, &error);
            let _ = w.answer(Err(error));
            self.leave(vec![mark]);
        }
        self.pump();
    }
}
