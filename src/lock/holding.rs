//! What this manager knows about the lock while one of its owners holds it.
//!
//! Redis is the truth about who holds a lock; this is the local cache that lets the
//! actor renew it, report its loss, and hand it to the next local waiter without
//! asking Redis first. Each holding gets an epoch: guards carry it, so a guard from a
//! holding that was lost can never act on a later holding of the same owner.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::LostReason;
use crate::keys::Owner;

/// The live holding of the lock by one local owner.
#[derive(Debug)]
pub(crate) struct Holding {
    /// Distinguishes this holding from earlier ones of the same lock.
    pub(crate) epoch: u64,
    /// The holding owner.
    pub(crate) owner: Owner,
    /// Its owner field.
    pub(crate) field: Arc<str>,
    /// Guards of this holding not yet released (equals the Redis hold count unless
    /// something outside this manager changed it).
    pub(crate) guards: u32,
    /// Whether the watchdog renews it (some guard was taken without a lease).
    pub(crate) watchdog: bool,
    /// The lease last set in Redis, used again when a release leaves holds.
    pub(crate) lease: Duration,
    /// Until when the lock is surely held: the send time of the last successful
    /// acquisition or renewal plus its lease, on this process's monotonic clock.
    pub(crate) valid_until: Instant,
    /// Tells the guards when the lock is lost.
    pub(crate) lost_tx: watch::Sender<Option<LostReason>>,
}

impl Holding {
    pub(crate) fn new(epoch: u64, owner: Owner, field: Arc<str>, lease: Duration) -> Holding {
        Holding {
            epoch,
            owner,
            field,
            guards: 0,
            watchdog: false,
            lease,
            valid_until: Instant::now(),
            lost_tx: watch::Sender::new(None),
        }
    }
}

/// Holdings that were lost while guards of them are still alive: their release
/// must answer "lost" without touching Redis, where the lock may belong to someone
/// else by now.
#[derive(Debug, Default)]
pub(crate) struct LostHoldings {
    /// epoch -> (why, guards not yet released)
    by_epoch: HashMap<u64, (LostReason, u32)>,
}

impl LostHoldings {
    pub(crate) fn insert(&mut self, epoch: u64, reason: LostReason, guards: u32) {
        if guards > 0 {
            self.by_epoch.insert(epoch, (reason, guards));
        }
    }

    /// Accounts for one released guard of a lost holding; returns why it was lost.
    pub(crate) fn release_one(&mut self, epoch: u64) -> Option<LostReason> {
        let (reason, guards) = self.by_epoch.get_mut(&epoch)?;
        let reason = *reason;
        *guards -= 1;
        if *guards == 0 {
            self.by_epoch.remove(&epoch);
        }
        Some(reason)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_epoch.is_empty()
    }
}
