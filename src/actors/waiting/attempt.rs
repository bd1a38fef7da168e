//! The attempt part of the waiting kit: a waiting actor asks Redis once at a
//! time, however many callers wait, so that a release does not turn into a
//! stampede of calls from one process. [`Attempt`] keeps what that takes:
//! whether a call is in flight, whether a reason to ask again (a message, a
//! resubscription, a newcomer) arrived while it was, and the run of transient
//! failures that sets how long to back off before the next call.
//!
//! A wake that arrives during a call is not lost and not acted on twice: it
//! marks the attempt, and the actor asks once more when the call's answer is
//! in, since that answer may predate what the wake announced.

use std::time::Duration;

use crate::config::Config;
use crate::durations::backoff;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Attempt {
    /// A call is in flight.
    in_flight: bool,
    /// A wake arrived while it was: ask again once it is answered.
    again: bool,
    /// Transient failures in a row, for the backoff.
    failures: u32,
    /// The error the last call met, while the calls keep failing (answered to a
    /// waiter whose deadline passes meanwhile, by the actors that keep one error
    /// for all their waiters). Boxed: rare, and a lock actor carries its
    /// attempt for as long as its lock is held.
    last_error: Option<Box<redis::RedisError>>,
}

impl Attempt {
    /// Whether a call is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// A reason to ask arrived: answers `true` when a call may start now, or
    /// `false` when one is in flight (it is marked to ask again).
    pub(crate) fn wake(&mut self) -> bool {
        if self.in_flight {
            self.again = true;
            return false;
        }
        true
    }

    /// A call starts: earlier wakes are answered by it.
    pub(crate) fn start(&mut self) {
        self.in_flight = true;
        self.again = false;
    }

    /// The call's answer is in.
    pub(crate) fn finish(&mut self) {
        self.in_flight = false;
    }

    /// Whether a wake arrived during the last call (the answer may be stale).
    pub(crate) fn again(&self) -> bool {
        self.again
    }

    /// Forgets a wake that the next call answers anyway (a subscription made:
    /// the read that follows sees what any earlier message announced).
    pub(crate) fn settle(&mut self) {
        self.again = false;
    }

    /// The call succeeded: the run of failures ends.
    pub(crate) fn succeeded(&mut self) {
        self.failures = 0;
        self.last_error = None;
    }

    /// The call failed transiently with `error`: answers how long to wait
    /// before the next one (doubling from `Config::reconnect_min` up to
    /// `Config::reconnect_max`).
    pub(crate) fn failed(&mut self, config: &Config, error: redis::RedisError) -> Duration {
        let delay = backoff(config.reconnect_min, config.reconnect_max, self.failures);
        self.failures = self.failures.saturating_add(1);
        self.last_error = Some(Box::new(error));
        delay
    }

    /// The error of the last call, while the calls keep failing.
    pub(crate) fn last_error(&self) -> Option<&redis::RedisError> {
        self.last_error.as_deref()
    }

    /// After a restart: the old context's call is gone.
    #[allow(dead_code)]
    pub(crate) fn reset(&mut self) {
        *self = Attempt::default();
    }

    /// After a restart, for an actor that keeps the failure run across it: the
    /// call in flight and any wake for it are gone, the failures are not.
    pub(crate) fn drop_call(&mut self) {
        self.in_flight = false;
        self.again = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake during a call asks for one more; a start answers it.
    #[test]
    fn a_wake_in_flight_asks_again_once() {
        let mut a = Attempt::default();
        assert!(a.wake());
        a.start();
        assert!(!a.wake());
        a.finish();
        assert!(a.again());
        a.start();
        assert!(!a.again());
    }

    /// The backoff grows with the run of failures and a success ends the run.
    #[test]
    fn failures_back_off_until_a_success() {
        let config = Config::from_url("redis://127.0.0.1:1").expect("a valid URL");
        let mut a = Attempt::default();
        let err = || redis::RedisError::from((redis::ErrorKind::Io, "down"));
        let first = a.failed(&config, err());
        let mut later = first;
        for _ in 0..6 {
            later = a.failed(&config, err());
        }
        assert!(later > first);
        assert!(later <= config.reconnect_max);
        assert!(a.last_error().is_some());
        a.succeeded();
        assert!(a.last_error().is_none());
        assert!(a.failed(&config, err()) <= config.reconnect_min);
    }
}
