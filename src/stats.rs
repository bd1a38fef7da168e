//! Counters an application can read cheaply to watch the lock manager's health,
//! and the same events recorded through the `metrics` facade.
//!
//! They are plain atomics bumped on the paths that already do the work, so keeping
//! them costs nothing measurable; [`Stats`] is a copy taken on request. Each bump
//! also records to the `metrics` facade (module `record`: the metric names and
//! labels, in one place), which the application wires to Prometheus, OpenTelemetry
//! or anything else by installing a recorder. With none installed a record is a
//! load and a call to a no-op: every label is a static string (`by_kind_label!`,
//! from `kind.rs`, and `by_reason!` pick a literal), so nothing is formatted or
//! allocated.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::LostReason;

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
        metrics::counter!("lockwarden_releases_total").increment(1);
    }
    pub(crate) fn lost(&self, reason: LostReason, lock: Option<&str>) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        record::lost(reason, lock);
    }
    pub(crate) fn renewal_failed(&self) {
        self.renewals_failed.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn reconnect(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("lockwarden_reconnects_total").increment(1);
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

/// The metrics recorded through the `metrics` facade, beside the counters above
/// (docs/operations.md, "Metrics", lists them). Lock names are not labels of these:
/// a service that locks one name per order would make one time series per order.
/// `Config::metric_lock_names(true)` adds series of their own, named
/// `lockwarden_lock_*`, labelled by lock name (those allocate their labels).
pub(crate) mod record {
    use std::time::Duration;

    use crate::error::{LockError, LostReason};
    use crate::kind::{by_kind_label, AcquireKind};

    /// A waiter was granted the lock after waiting `waited` (from its request);
    /// `lock` is its name when the config opts in to per-lock series.
    pub(crate) fn acquired(kind: AcquireKind, waited: Duration, lock: Option<&str>) {
        by_kind_label!(
            kind,
            metrics::counter!("lockwarden_acquisitions_total", "outcome" => "acquired")
        )
        .increment(1);
        by_kind_label!(kind, metrics::histogram!("lockwarden_acquire_wait_seconds")).record(waited);
        if let Some(lock) = lock {
            // Opted in: allocating labels from a name is accepted here.
            let labels = [("lock", lock.to_string()), ("kind", kind.to_string())];
            metrics::counter!("lockwarden_lock_acquisitions_total", &labels).increment(1);
            metrics::histogram!("lockwarden_lock_wait_seconds", &labels).record(waited);
        }
    }

    /// A waiter was answered with `err` instead of a lock.
    pub(crate) fn failed(kind: AcquireKind, err: &LockError) {
        match err {
            LockError::Timeout { .. } => {
                by_kind_label!(
                    kind,
                    metrics::counter!("lockwarden_acquisitions_total", "outcome" => "timeout")
                )
            }
            LockError::Deadlock(_) => {
                by_kind_label!(
                    kind,
                    metrics::counter!("lockwarden_acquisitions_total", "outcome" => "deadlock")
                )
            }
            LockError::UpgradeRefused | LockError::ReentryRefused => {
                by_kind_label!(
                    kind,
                    metrics::counter!("lockwarden_acquisitions_total", "outcome" => "refused")
                )
            }
            _ => by_kind_label!(
                kind,
                metrics::counter!("lockwarden_acquisitions_total", "outcome" => "error")
            ),
        }
        .increment(1);
    }

    /// A wait was failed to break a deadlock.
    pub(crate) fn deadlock(kind: AcquireKind) {
        by_kind_label!(kind, metrics::counter!("lockwarden_deadlocks_total")).increment(1);
    }

    /// A holding ended (released or lost) after being held `held` (from its
    /// first grant, re-entries included).
    pub(crate) fn held(kind: AcquireKind, held: Duration, lock: Option<&str>) {
        by_kind_label!(kind, metrics::histogram!("lockwarden_hold_seconds")).record(held);
        if let Some(lock) = lock {
            let labels = [("lock", lock.to_string()), ("kind", kind.to_string())];
            metrics::histogram!("lockwarden_lock_hold_seconds", &labels).record(held);
        }
    }

    /// A held lock was lost (`lock`: its name, when opted in and known).
    pub(crate) fn lost(reason: LostReason, lock: Option<&str>) {
        if let Some(lock) = lock {
            let labels = [
                ("lock", lock.to_string()),
                ("reason", reason_label(reason).into()),
            ];
            metrics::counter!("lockwarden_lock_lost_total", &labels).increment(1);
        }
        match reason {
            LostReason::OwnerGone => {
                metrics::counter!("lockwarden_locks_lost_total", "reason" => "owner_gone")
            }
            LostReason::LeaseExpired => {
                metrics::counter!("lockwarden_locks_lost_total", "reason" => "lease_expired")
            }
            LostReason::Unreachable => {
                metrics::counter!("lockwarden_locks_lost_total", "reason" => "unreachable")
            }
            LostReason::ManagerStopped => {
                metrics::counter!("lockwarden_locks_lost_total", "reason" => "manager_stopped")
            }
            LostReason::Paused { .. } => {
                metrics::counter!("lockwarden_locks_lost_total", "reason" => "paused")
            }
            // A shutdown gives its locks back: counted as releases, not here
            // (the lock actor never reports it as a loss).
            LostReason::ShutDown => return,
        }
        .increment(1);
    }

    /// The `reason` label of a loss.
    fn reason_label(reason: LostReason) -> &'static str {
        match reason {
            LostReason::OwnerGone => "owner_gone",
            LostReason::LeaseExpired => "lease_expired",
            LostReason::Unreachable => "unreachable",
            LostReason::ManagerStopped => "manager_stopped",
            LostReason::Paused { .. } => "paused",
            LostReason::ShutDown => "shut_down",
        }
    }

    /// One renewal call answered: `renewed` holdings still held, `gone` no longer
    /// held; or it failed for `failed` holdings.
    pub(crate) fn renewals(renewed: usize, gone: usize, failed: usize) {
        let n = |c: usize| c as u64;
        if renewed > 0 {
            metrics::counter!("lockwarden_renewals_total", "outcome" => "renewed")
                .increment(n(renewed));
        }
        if gone > 0 {
            metrics::counter!("lockwarden_renewals_total", "outcome" => "gone").increment(n(gone));
        }
        if failed > 0 {
            metrics::counter!("lockwarden_renewals_total", "outcome" => "failed")
                .increment(n(failed));
            metrics::counter!("lockwarden_renewal_failures_total").increment(1);
        }
    }

    /// A renewal call was sent for `locks` holdings.
    pub(crate) fn renewal_batch(locks: usize) {
        metrics::histogram!("lockwarden_renewal_batch_locks").record(locks as f64);
    }

    /// A coalesced script call was sent carrying `ops` acquisitions and releases.
    pub(crate) fn batch(ops: usize) {
        metrics::histogram!("lockwarden_batch_ops").record(ops as f64);
    }

    /// A lock change of kind `op` (`grant`, `release`, `renew`, `handover`,
    /// `other`) was reported done although no replica confirmed it, with
    /// confirmation on.
    pub(crate) fn unconfirmed(op: &'static str) {
        // Literal labels make a static key; a label from a variable costs an
        // allocation on each call, and on a master without replicas every
        // grant and release of a busy manager comes here.
        let counter = match op {
            "grant" => metrics::counter!("lockwarden_unconfirmed_changes_total", "op" => "grant"),
            "release" => {
                metrics::counter!("lockwarden_unconfirmed_changes_total", "op" => "release")
            }
            other => metrics::counter!("lockwarden_unconfirmed_changes_total", "op" => other),
        };
        counter.increment(1);
    }

    /// The replicas counted as able to confirm lock changes, on the master
    /// last counted (0 with confirmation off).
    pub(crate) fn replicas_counted(live: u32) {
        metrics::gauge!("lockwarden_replicas_counted").set(f64::from(live));
    }

    /// A channel was subscribed again (after a reconnect, or its slot moved).
    pub(crate) fn resubscribed(channels: usize) {
        if channels == 0 {
            return;
        }
        metrics::counter!("lockwarden_resubscribes_total").increment(channels as u64);
    }
}
