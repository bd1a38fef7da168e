//! Counters an application can read cheaply to watch the lock manager's health.
//!
//! They are plain atomics bumped on the paths that already do the work, so keeping
//! them costs nothing measurable; [`Stats`] is a copy taken on request.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the lock manager's counters since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Successful acquisitions (re-entries included).
    pub acquired: u64,
    /// Releases that Redis applied (a re-entered lock counts once per hold).
    pub released: u64,
    /// Held locks that were lost (expired, force-unlocked, unreachable).
    pub lost: u64,
    /// Watchdog renewals that failed with a Redis error.
    pub renewals_failed: u64,
    /// Times the pub/sub connection was re-established.
    pub reconnects: u64,
    /// Waiters that gave up at their deadline.
    pub timeouts: u64,
}

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    acquired: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
    renewals_failed: AtomicU64,
    reconnects: AtomicU64,
    timeouts: AtomicU64,
}

impl Counters {
    pub(crate) fn acquired(&self) {
        self.acquired.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn released(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn lost(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn renewal_failed(&self) {
        self.renewals_failed.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn reconnect(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn timeout(&self) {
        self.timeouts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            acquired: self.acquired.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            renewals_failed: self.renewals_failed.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
        }
    }
}
