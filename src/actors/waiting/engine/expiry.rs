//! What a waiter is told when its deadline passes, and who tells it.
//!
//! A waiter whose last attempt met a Redis error is told that error; so is
//! every waiter while the attempts keep failing, and, for a policy with a
//! [`Policy::silence`], while the attempt out has gone unanswered that long
//! (Redis frozen, a network cut): "the lock is held" would be a guess, and a
//! wrong one. Otherwise the policy answers ([`Policy::expired`]), except for a
//! policy that [`Policy::names_holder`]: its waiters are handed to the runner
//! unanswered ([`Effect::TimedOut`]), which reads who holds once for all of
//! them and names the holder in their timeout. Either way they leave at once
//! (their places, their channels, an undo of a take that may have run).

use std::time::{Duration, Instant};

use super::{Effect, Engine, Mark, Policy};

impl<P: Policy> Engine<P> {
    /// Answers the waiters that left or whose deadline passed; answers
    /// whether there were any.
    pub(super) fn sweep(&mut self) -> bool {
        // Nothing to answer without a leaver or a deadline (a wait with no
        // limit, the most common one): seen without reading the clock or
        // rebuilding the queue, as this runs on every event.
        if !self
            .waiters
            .iter()
            .any(|w| w.deadline.is_some() || w.is_gone())
        {
            return false;
        }
        let last = self.attempt.last_error().cloned().or_else(|| self.silent());
        let mut gone = Vec::new();
        if last.is_none() && self.policy.names_holder() {
            gone = self.timeouts_for_runner();
        }
        let policy = &self.policy;
        let swept = self.waiters.sweep(
            |waited| policy.expired(waited, last.as_ref()),
            |mark, e| policy.not_granted(&mark.want, e),
        );
        gone.extend(swept);
        let any = !gone.is_empty();
        self.leave(gone);
        any
    }

    /// The error a deadline that passes now is told when the attempt out has
    /// had no answer for the policy's [`Policy::silence`] or longer.
    fn silent(&self) -> Option<redis::RedisError> {
        let limit = self.policy.silence()?;
        let quiet = self.asked_at?.elapsed();
        (self.attempt.in_flight() && quiet >= limit).then(|| silence(P::LABEL, quiet))
    }

    /// Takes out, unanswered, the waiters whose deadline passed with nothing
    /// to tell them but a timeout, for the runner to name the holder in it
    /// ([`Effect::TimedOut`], with the time each waited); answers their marks.
    fn timeouts_for_runner(&mut self) -> Vec<Mark<P::Want>> {
        let now = Instant::now();
        let timed_out = self.waiters.take_where(|w| {
            let due = w.deadline.is_some_and(|d| d <= now);
            due && !w.once && w.last_error.is_none() && !w.is_gone()
        });
        if timed_out.is_empty() {
            return Vec::new();
        }
        let marks = timed_out.iter().map(|w| w.want.clone()).collect();
        let waited = timed_out.into_iter().map(|w| {
            let waited = now.saturating_duration_since(w.since);
            (w, waited)
        });
        self.effects.push(Effect::TimedOut(waited.collect()));
        marks
    }
}

/// "Redis did not answer" for `quiet`, to a waiter whose deadline passed.
fn silence(label: &str, quiet: Duration) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "Redis did not answer the {label} attempt for {} ms before the wait ran out (is it reachable?)",
            quiet.as_millis()
        ),
    ))
}
