//! The check of a lost attempt, for a policy whose scripts remember no op id
//! ([`Policy::checks_lost`]: the lock). Such an attempt whose answer is lost
//! may have taken a hold that nobody is told of, and sending it again would
//! take another. So nobody asks until the runner has found out what it did
//! ([`Effect::Check`]: the lock reads its owner's hold count and gives back a
//! hold that no guard accounts for) and said so ([`Event::Checked`]). Nothing
//! is granted from an unknown outcome: its fencing token is unknown too.
//!
//! The same holds for a take whose waiter left while it was out: its undo is
//! sent at once (`Effect::Undo`, right behind it), but an answer that says it
//! took may mean the undo went out first, and an undo that failed
//! ([`Event::UndoFailed`]) is not known to have run: either way the take is
//! checked as a lost one is. A busy or refused answer took nothing.
//!
//! A policy with op ids needs none of this: its take is sent again under the
//! same op id, which its script answers from memory, or undone under it.

use tracing::{debug, warn};

#[cfg(doc)]
use super::Event;
use super::{Effect, Engine, Found, Mark, Policy};
use crate::error::redis_is_transient;

/// Where the check of a lost attempt stands.
#[derive(Debug, Default)]
pub(super) enum Check<W> {
    /// Nothing to check.
    #[default]
    Clear,
    /// A take of this want may have run unseen: checked before the next
    /// attempt.
    Due(W),
    /// Its check is out.
    Out(W),
}

impl<W> Check<W> {
    /// The runner restarted: a check that was out is gone with its call, and
    /// is due again.
    pub(super) fn restart(&mut self) {
        *self = match std::mem::take(self) {
            Check::Out(want) | Check::Due(want) => Check::Due(want),
            Check::Clear => Check::Clear,
        };
    }
}

impl<P: Policy> Engine<P> {
    /// An attempt for `want` failed without an answer that says what it did.
    /// A connection refused before the call went out did nothing.
    pub(super) fn lost(&mut self, want: P::Want, e: &redis::RedisError) {
        if !e.is_connection_refusal() {
            self.check = Check::Due(want);
        }
    }

    /// The waiter whose attempt is out left with `want`: its answer says
    /// whether the take needs a check.
    pub(super) fn orphaned(&mut self, want: &P::Want) {
        if self.policy.checks_lost() {
            self.orphan = Some(want.clone());
        }
    }

    /// The answer to the attempt of a waiter that left: a take, or no answer,
    /// may have taken what its undo did not give back.
    pub(super) fn orphan_answered(&mut self, found: &redis::RedisResult<Found<P::Won>>) {
        let Some(want) = self.orphan.take() else {
            return;
        };
        match found {
            // Its undo may have gone out before it.
            Ok(Found::Taken { .. }) => self.check = Check::Due(want),
            Err(e) => self.lost(want, e),
            // A short answer may have placed it in a Redis queue after its
            // leave went out: it leaves again.
            Ok(Found::Short { .. }) => {
                if let Some(place) = self.policy.place(&Mark::of(want)) {
                    self.effects.push(Effect::Leave(vec![place]));
                }
            }
            Ok(Found::Refused(_)) => {}
        }
    }

    /// The runner's own attempt for `waiter` ([`Engine::ask_head`]) ended
    /// with nothing granted to it; `unknown`: it may have taken, and is
    /// checked before anyone asks again.
    pub(super) fn withdrawn(&mut self, waiter: u64, unknown: bool) {
        self.attempt.finish();
        self.asked_at = None;
        let want = match self.waiters.get_mut(waiter) {
            Some(w) => {
                w.want.asking = false;
                Some(w.want.want.clone())
            }
            None => self.orphan.take(),
        };
        self.orphan = None;
        if let Some(want) = want.filter(|_| unknown && self.policy.checks_lost()) {
            self.check = Check::Due(want);
        }
        self.pump();
    }

    /// The undo of a take for `want` failed; the queue looks again.
    pub(super) fn undo_failed(&mut self, want: P::Want) {
        if self.policy.checks_lost() {
            warn!(name = %self.policy.name(), "could not undo a {} take; checking it", P::LABEL);
            self.check = Check::Due(want);
        }
        self.pump();
    }

    /// Whether a lost attempt stands in the way of the next one; a check that
    /// is due goes out now.
    pub(super) fn checking(&mut self) -> bool {
        match std::mem::take(&mut self.check) {
            Check::Clear => false,
            Check::Due(want) => {
                self.effects.push(Effect::Check {
                    want: Box::new(want.clone()),
                });
                self.check = Check::Out(want);
                true
            }
            out @ Check::Out(_) => {
                self.check = out;
                true
            }
        }
    }

    /// Whether a check is due or out (the timer stays while it is).
    pub(super) fn check_pending(&self) -> bool {
        !matches!(self.check, Check::Clear)
    }

    /// The runner's check is done.
    pub(super) fn checked(&mut self, done: redis::RedisResult<()>) {
        let Check::Out(want) = std::mem::take(&mut self.check) else {
            return;
        };
        let name = self.policy.name();
        match done {
            Ok(()) => debug!(%name, "{} checked a lost attempt", P::LABEL),
            Err(e) if redis_is_transient(&e) => {
                // Not yet: this is what stands in the way now, for a waiter
                // whose deadline passes meanwhile.
                debug!(%name, error = %e, "cannot check a lost attempt yet");
                let delay = self.attempt.failed(&self.config, e);
                self.check = Check::Due(want);
                return self.arm_in(delay);
            }
            // Not its kind of key any more: no take of ours to give back.
            Err(e) => warn!(%name, error = %e, "could not check a lost attempt"),
        }
        self.pump();
    }
}
