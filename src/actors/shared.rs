//! [`Shared`]: what a lock manager shares with its lock actors.
//!
//! One value per manager, behind an `Arc`: the client id that names its holders,
//! the settings, the Redis node and its coalescer, the subscriber, the counters and
//! the renewal table, this process's long lock waits. Lock actors hold it strongly (a held lock keeps what it needs
//! to be released); the renewer holds only the table, weakly, so it stops once the
//! manager and every lock actor are gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Addr, Message};

use super::renewer::RenewTable;
use super::subscriber::Subscriber;
use super::waiting::{LocalWaits, Unsettled};
use crate::config::Config;
use crate::node::{Coalescer, Node};
use crate::stats::Counters;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Shared {
    /// This manager's random id: the first half of every owner field.
    pub(crate) client_id: String,
    /// The settings.
    pub(crate) config: Arc<Config>,
    /// The Redis deployment: command connection, pub/sub source, key groups.
    pub(crate) node: Node,
    /// The exclusive lock's acquire and release calls go through this, so that
    /// those of many locks that are ready together share one script call.
    pub(crate) coalescer: Coalescer,
    /// The pub/sub actor.
    pub(crate) subscriber: Addr<Subscriber>,
    /// Health counters.
    pub(crate) counters: Arc<Counters>,
    /// The watchdog holdings of all lock actors, swept by the renewer.
    pub(crate) renewals: Arc<RenewTable>,
    /// The lock waits past `Config::deadlock_timeout`, for deadlock checks
    /// that need no Redis (`actors/waiting/deadlock.rs`).
    pub(crate) local_waits: LocalWaits,
    /// The synchronizer changes that count once (give-backs, undos) not yet
    /// answered: `Settle` waits for them (`actors/waiting/once.rs`).
    pub(crate) unsettled: Arc<Unsettled>,
    /// Dropped with the last holder of this: tells the subscriber to stop.
    pub(crate) _alive: tokio::sync::watch::Sender<()>,
    /// Set once, by the manager's `Shutdown`: from then on every actor of this
    /// manager refuses new waiters with `LockError::ShuttingDown` (an atomic
    /// rather than a message, so that a request racing the shutdown is refused
    /// wherever it lands).
    pub(crate) shutting_down: AtomicBool,
}

impl Shared {
    /// Whether the manager is shutting down (see `shutting_down`).
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }
}

/// The manager is shutting down: a lock, semaphore or latch actor answers every
/// waiter with `LockError::ShuttingDown`, and a lock actor gives back what its
/// owners hold (the release scripts, owner-checked and confirmed as usual).
/// Answers the number of holdings given back once their releases are answered.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "usize")]
pub(crate) struct ShutDown;

/// `delay`, or less if one of `deadlines` comes sooner: when an actor whose
/// waiters have deadlines (the synchronizers') must look again.
pub(crate) fn until_first(delay: Duration, deadlines: impl Iterator<Item = Instant>) -> Duration {
    let now = Instant::now();
    deadlines
        .map(|d| d.saturating_duration_since(now))
        .fold(delay, Duration::min)
}
