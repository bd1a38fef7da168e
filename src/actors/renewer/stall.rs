//! Telling "this process did not run" from "Redis could not be reached" when a
//! watchdog holding's lease runs out.
//!
//! Both look the same from the table: no renewal succeeded before `valid_until`.
//! But a process that was stopped (SIGSTOP, a paused VM, a thread blocked for
//! seconds) never *sent* the renewals, while Redis may have been up all along;
//! telling its operator "Redis could not be reached" sends them to look at the
//! wrong machine. The renewer runs at least every tick (a thirtieth of the lease),
//! so a gap between two of its runs much longer than that means it did not run:
//! [`Stalls`] remembers the latest such gap, and a holding whose lease ran out
//! inside it was lost to the pause ([`LostReason::Paused`]).

use std::time::{Duration, Instant};

use crate::error::LostReason;

/// When the renewer last ran, and the latest stretch it did not run for.
#[derive(Debug)]
pub(super) struct Stalls {
    /// A gap between two runs at least this long is a stall: a whole renewal
    /// period, in which the renewals of every holding fell due and none was sent.
    threshold: Duration,
    /// When the renewer last ran (a tick, an answer, a deadline, a reconnect).
    last: Instant,
    /// The latest stall: from the run before it to the run after it.
    latest: Option<(Instant, Instant)>,
}

impl Stalls {
    /// Starts watching at `now`, with stalls of at least `threshold`.
    pub(super) fn new(threshold: Duration, now: Instant) -> Stalls {
        Stalls {
            threshold,
            last: now,
            latest: None,
        }
    }

    /// The renewer runs at `now`: a gap since its last run of at least the
    /// threshold is recorded as the latest stall.
    pub(super) fn ran(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last);
        if gap >= self.threshold {
            tracing::warn!(
                stalled_ms = gap.as_millis(),
                "the watchdog did not run for a whole renewal period (process stopped or blocked)"
            );
            self.latest = Some((self.last, now));
        }
        self.last = self.last.max(now);
    }

    /// Why a holding whose lease ran out here at `valid_until` is lost: the
    /// pause, if that moment fell inside the latest stall (no renewal could be
    /// sent in time), else `otherwise`.
    pub(super) fn reason(&self, valid_until: Instant, otherwise: LostReason) -> LostReason {
        match self.latest {
            Some((from, to)) if from < valid_until && valid_until <= to => {
                LostReason::Paused { stalled: to - from }
            }
            _ => otherwise,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_that_ran_out_inside_a_stall_was_lost_to_it() {
        let t0 = Instant::now();
        let s = |ms| t0 + Duration::from_millis(ms);
        let mut stalls = Stalls::new(Duration::from_millis(300), t0);
        stalls.ran(s(30));
        stalls.ran(s(60));
        // Short gaps are not stalls.
        assert_eq!(
            stalls.reason(s(50), LostReason::Unreachable),
            LostReason::Unreachable
        );
        stalls.ran(s(2060));
        let paused = LostReason::Paused {
            stalled: Duration::from_millis(2000),
        };
        assert_eq!(stalls.reason(s(1000), LostReason::Unreachable), paused);
        assert_eq!(stalls.reason(s(2060), LostReason::OwnerGone), paused);
        // A lease that ran out before or after the stall: not the pause's doing.
        assert_eq!(
            stalls.reason(s(60), LostReason::Unreachable),
            LostReason::Unreachable
        );
        assert_eq!(
            stalls.reason(s(2100), LostReason::OwnerGone),
            LostReason::OwnerGone
        );
        assert_eq!(
            paused.to_string(),
            "the process did not run for 2.0 s and the lease ran out meanwhile: \
             stopped, a paused VM or a blocked thread"
        );
    }
}
