//! Two small duration helpers that every layer uses: a duration as a script's
//! millisecond argument, and the retry backoff. Kept apart from `config.rs`,
//! which is about the settings a user gives, because these change for other
//! reasons (the scripts' argument format, the retry policy).

use std::time::Duration;

/// Milliseconds of a duration for a script argument, saturating (callers have
/// already bounded it by the maximum lease).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Delay before retry number `attempt` (0-based): doubling from `first` up to
/// `longest`, with up to a quarter of random jitter so that many clients that lost
/// the same server do not return in step.
pub(crate) fn backoff(first: Duration, longest: Duration, attempt: u32) -> Duration {
    let base = first
        .checked_mul(1u32 << attempt.min(16))
        .unwrap_or(longest)
        .min(longest);
    let jitter = base.mul_f64(0.25 * crate::random::below(1000) as f64 / 1000.0);
    base.saturating_sub(jitter)
}
