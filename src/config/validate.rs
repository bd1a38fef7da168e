//! [`Config::validate`]: the combinations of settings that cannot work, refused
//! before anything connects, each with a message that says what to change.
//!
//! Apart from the settings themselves (`config.rs`) because it changes for
//! another reason: a new rule about how settings fit together, not a new setting.
//! The replica and Sentinel settings check their own parts
//! (`validate_sync`, `validate_sentinel`, beside those settings).

use std::time::Duration;

use super::Config;
use crate::error::LockError;

/// Shortest watchdog lease accepted: renewed every third of it, a lease must leave
/// a renewal a few network round trips and a renewer tick to answer.
const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(100);

impl Config {
    /// Checks that the settings can work together.
    pub fn validate(&self) -> Result<(), LockError> {
        let bad = |why: String| Err(LockError::InvalidConfig(why));
        // A lease shorter than a few renewal round trips lapses before a renewal
        // can answer: the lock would be lost at once.
        if self.watchdog_lease < MIN_WATCHDOG_LEASE {
            return bad(format!(
                "watchdog lease {:?} is under the minimum of {:?}: it would run out before a renewal could answer",
                self.watchdog_lease, MIN_WATCHDOG_LEASE
            ));
        }
        if self.watchdog_lease > self.max_lease {
            return bad(format!(
                "watchdog lease {:?} is over the maximum lease {:?}",
                self.watchdog_lease, self.max_lease
            ));
        }
        let every = self.renew_every();
        if every.is_zero() || every >= self.watchdog_lease {
            return bad(format!(
                "renewal period {every:?} must be above zero and shorter than the watchdog lease {:?}",
                self.watchdog_lease
            ));
        }
        if self.max_name_len == 0 {
            return bad("maximum name length is zero".into());
        }
        for (what, d) in [
            ("response timeout", self.response_timeout),
            ("connection timeout", self.connection_timeout),
            ("release wait", self.release_wait),
            ("retry interval", self.max_retry_interval),
            ("first reconnect delay", self.reconnect_min),
            ("latch lifetime", self.latch_ttl),
            ("first spin delay", self.spin_first),
        ] {
            if d < Duration::from_millis(1) {
                return bad(format!("{what} {d:?} is under 1 ms"));
            }
        }
        if self.lock_delay > self.max_lease {
            return bad(format!(
                "lock-delay {:?} is over the maximum lease {:?}",
                self.lock_delay, self.max_lease
            ));
        }
        if self.spin_longest < self.spin_first {
            return bad(format!(
                "longest spin delay {:?} is shorter than the first {:?}",
                self.spin_longest, self.spin_first
            ));
        }
        if self.token_ttl < Duration::from_secs(1) {
            return bad(format!(
                "token counter lifetime {:?} is under 1 second",
                self.token_ttl
            ));
        }
        if let Some(d) = self
            .deadlock_timeout
            .filter(|d| *d < Duration::from_millis(10))
        {
            return bad(format!(
                "deadlock timeout {d:?} is under 10 ms (a check costs Redis round trips; \
                 no_deadlock_detection() turns it off)"
            ));
        }
        if self.fair_waiter_lease < Duration::from_millis(3) {
            return bad(format!(
                "fair waiter lease {:?} is under 3 ms",
                self.fair_waiter_lease
            ));
        }
        if !(1..=1024).contains(&self.batch_max_ops) {
            return bad(format!(
                "batch size {} is not between 1 and 1024",
                self.batch_max_ops
            ));
        }
        if self.batch_in_flight == 0 {
            return bad("batches in flight is zero".into());
        }
        if self.reconnect_max < self.reconnect_min {
            return bad("longest reconnect delay is shorter than the first".into());
        }
        if let Some(label) = &self.label {
            if label.len() > crate::client::MAX_LABEL_LEN {
                return bad(format!(
                    "label of {} bytes is over the maximum of {} bytes",
                    label.len(),
                    crate::client::MAX_LABEL_LEN
                ));
            }
        }
        self.validate_sentinel()?;
        self.validate_sync()?;
        Ok(())
    }
}
