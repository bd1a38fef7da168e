//! The check of a lost attempt, for a policy whose scripts remember no op id
//! ([`Policy::checks_lost`]: the lock). Such an attempt whose answer is lost
//! may have taken a hold that nobody is told of, and sending it again would
//! take another. So nobody asks until the runner has found out what it did
//! ([`Effect::Check`]: the lock reads its owner's hold count and gives back a
//! hold that no guard accounts for) and said so ([`Event::Checked`]). Nothing
//! is granted from an unknown outcome: its fencing token is unknown too.
//!
//! A policy with op ids needs none of this: its take is sent again under the
//! same op id, which its script answers from memory, or undone under it.

use tracing::{debug, warn};

#[cfg(doc)]
use super::Event;
use super::{Effect, Engine, Policy};
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

impl<P: Policy> Engine<P> {
    /// An attempt for `want` failed without an answer that says what it did.
    /// A connection refused before the call went out did nothing.
    pub(super) fn lost(&mut self, want: P::Want, e: &redis::RedisError) {
        if !e.is_connection_refusal() {
            self.check = Check::Due(want);
        }
    }

    /// Whether a lost attempt stands in the way of the next one; a check that
    /// is due goes out now.
    pub(super) fn checking(&mut self) -> bool {
        match std::mem::take(&mut self.check) {
            Check::Clear => false,
            Check::Due(want) => {
                self.effects.push(Effect::Check { want: want.clone() });
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
