//! Lock changes reported to their caller with no replica's confirmation, while
//! confirmation is on: counted, logged at most once a second, and (for a grant,
//! when the configuration says so) refused.
//!
//! With replica confirmation on, a change goes without a `WAIT` when no replica
//! can answer now (none attached, every one frozen or cut off: `node/replicas/`
//! counts them), and a change that only hopes goes without one while replicas
//! are short. Such a change is kept, which keeps locks available while the
//! replicas are away, but a failover in that window can forget it. So each one
//! bumps `lockwarden_unconfirmed_changes_total{op}` and is logged, rate-limited
//! (a busy manager makes thousands a second). With
//! `Config::refuse_unconfirmed_grants` a grant is refused instead, as Redisson
//! does: the caller sees `NotReplicated` and the lock actor gives the grant back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use tracing::warn;

use super::{Confirmation, Confirmed};

/// The gap between two warnings, in ms.
const EVERY_MS: u64 = 1_000;

/// When the last warning went out (ms since [`epoch`]), and how many changes
/// went unlogged since.
static LAST: AtomicU64 = AtomicU64::new(0);
static SINCE: AtomicU64 = AtomicU64::new(0);

/// A fixed instant of this process, for the rate limit.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A change of `op` on `lock` was answered to its caller unconfirmed.
pub(crate) fn record(op: &'static str, lock: &str) {
    crate::stats::record::unconfirmed(op);
    let since = SINCE.fetch_add(1, Ordering::AcqRel) + 1;
    // The clock is read at the 1st, 2nd, 4th ... 64th change since the last
    // warning and at every 64th after: a manager without replicas comes here
    // on every grant and release, and the warning may come a few changes late.
    if !since.is_power_of_two() && !since.is_multiple_of(64) {
        return;
    }
    // +EVERY_MS so that the first one is logged at once.
    let now = epoch().elapsed().as_millis() as u64 + EVERY_MS;
    let last = LAST.load(Ordering::Acquire);
    if now < last + EVERY_MS
        || LAST
            .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    SINCE.fetch_sub(since, Ordering::AcqRel);
    warn!(
        op,
        lock,
        changes = since,
        "lock changes were reported done with no replica's confirmation (no replica could \
         answer): a failover now could forget them (lockwarden_unconfirmed_changes_total counts \
         them; this is logged at most once a second)"
    );
}

impl Confirmation {
    /// Refuses a grant that no replica could confirm instead of keeping it
    /// (`Config::refuse_unconfirmed_grants`).
    pub(crate) fn refusing(mut self, refuse: bool) -> Confirmation {
        self.refuse = refuse;
        self
    }

    /// A change answered with no replica asked, for want of any that could
    /// answer.
    pub(super) fn no_replica(&self) -> Confirmed {
        if self.sync.min == 0 {
            // Confirmation off, the master only watched (`doubts_only`).
            return Confirmed::NotAsked;
        }
        Confirmed::NoReplica {
            refuse: self.refuse,
            wanted: self.sync.min,
        }
    }
}
