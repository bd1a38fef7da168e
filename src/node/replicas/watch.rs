//! [`ReplicaWatch`]: the one interface between the two halves of replica
//! confirmation, the node's that counts a master's replicas and the wire's that
//! sends each lock change with its `WAIT`.
//!
//! The wire half needs, at every confirmed call, how many replicas can answer
//! now, whether the master is in doubt, and a way to have the replicas counted
//! again at once when a `WAIT` came back short; the node half needs to hear
//! that request, and to tell the wire's budget when the count changed (a new
//! count ends a shortfall) or the master fell in doubt (calls waiting for a
//! place give up). All of it goes through this type: its atomics are private,
//! the wire half reads them through the [`ReplicaCount`] port it implements
//! (the wire layer cannot name a type of the layer above it), and the only
//! methods that write them are visible to this folder alone.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;

use super::look::Look;
use crate::wire::{Confirmation, ReplicaCount};

/// The count of one master's replicas that can confirm a lock change, the
/// doubt of that master, and the looks asked at them; one per [`Confirmation`]
/// (a single server, the master Sentinel names, or each cluster master).
///
/// Its writers, one place per deployment, all in this folder:
/// - a standalone server: the counting task of `single.rs`, from the server's
///   `INFO replication` once a second and after a short `WAIT`;
/// - Sentinel: the same task (it also doubts a master that goes silent and
///   trusts it again when the Sentinels vouch for it), which also hands the
///   Follower the hook it runs as it moves to a new master
///   (`single.rs`'s `OnMove`: that master's count, and an end to the doubt);
/// - a Redis Cluster: the cluster task of `cluster.rs`, each master's count
///   from its `INFO`, lowered only while the other masters vouch for it.
///
/// The start-up check (`start.rs`) only makes it, with the first count and,
/// under Sentinel, a master in doubt if it did not answer at start. The wire
/// half writes nothing: it reads through [`ReplicaCount`] and asks for a look
/// with [`ReplicaCount::look_again`]. One more number reaches the wire half
/// beside this type, written by no one here: the Sentinel connection's count
/// of moves ([`Moves`](crate::wire::Moves), raised by the Follower as it moves
/// or replaces a lane), a fact of the connection like its `CLIENT ID`, which
/// the fast lane reads to tell two servers apart.
#[derive(Debug)]
pub(crate) struct ReplicaWatch {
    /// How many of the master's replicas can answer now.
    live: AtomicU32,
    /// Whether a replica was ever counted.
    had_replicas: AtomicBool,
    /// The master went silent and has not been vouched for since.
    master_doubted: AtomicBool,
    /// Bumped at each doubt of the master.
    doubts: AtomicU64,
    /// The looks at the replicas asked for and finished (a cluster's masters
    /// share one, as one task counts them all).
    look: Arc<Look>,
    /// The confirmation this count serves, told of each change.
    budget: OnceLock<Weak<Confirmation>>,
}

impl ReplicaWatch {
    /// A count of `live` replicas, with its looks on `look`, and the master in
    /// doubt from the start when `doubted` (it did not answer at start).
    pub(super) fn new(live: u32, look: Arc<Look>, doubted: bool) -> Arc<ReplicaWatch> {
        crate::stats::record::replicas_counted(live);
        Arc::new(ReplicaWatch {
            live: AtomicU32::new(live),
            had_replicas: AtomicBool::new(live > 0),
            master_doubted: AtomicBool::new(doubted),
            doubts: AtomicU64::new(u64::from(doubted)),
            look,
            budget: OnceLock::new(),
        })
    }

    /// Makes the confirmation `build` makes on this count, and tells it of
    /// each change from now on.
    pub(super) fn serve(
        self: &Arc<ReplicaWatch>,
        build: impl FnOnce(Arc<dyn ReplicaCount>) -> Confirmation,
    ) -> Arc<Confirmation> {
        let confirmation = Arc::new(build(Arc::clone(self) as Arc<dyn ReplicaCount>));
        let _ = self.budget.set(Arc::downgrade(&confirmation));
        confirmation
    }

    /// The confirmation served, while the connection keeps it.
    fn budget(&self) -> Option<Arc<Confirmation>> {
        self.budget.get().and_then(Weak::upgrade)
    }

    /// The connection now sends to a new master (Sentinel's switch, or a
    /// cluster's slots served by another; `followed`: it already sends
    /// there): the releases kept unconfirmed go out now
    /// (`wire/replicas/kept.rs`).
    pub(crate) fn new_master(&self, followed: bool) {
        if let Some(confirmation) = self.budget() {
            confirmation.new_master(followed);
        }
    }

    /// Counts `live` replicas that can answer. A new count is a new
    /// situation: the connection is no longer taken as short, so calls ask
    /// again.
    pub(super) fn set_live(&self, live: u32) {
        if live > 0 {
            self.had_replicas.store(true, Ordering::Release);
        }
        if self.live.swap(live, Ordering::AcqRel) != live {
            crate::stats::record::replicas_counted(live);
            if let Some(budget) = self.budget() {
                budget.count_changed();
            }
        }
    }

    /// How many replicas can answer, as last counted.
    pub(super) fn live(&self) -> u32 {
        self.live.load(Ordering::Acquire)
    }

    /// How many replicas the configuration asks to confirm each change.
    pub(super) fn wanted(&self) -> u32 {
        self.budget().map_or(0, |b| b.wanted())
    }

    /// How many replicas the last `WAIT` counted, if it came back short: the
    /// next count also doubts the replicas that did not answer it.
    pub(super) fn short_by(&self) -> Option<u32> {
        self.budget()?.short_by()
    }

    /// The master stopped answering, or could not be reached, when its
    /// replicas were counted (under Sentinel): until the Sentinels vouch for
    /// it again ([`ReplicaWatch::trust_master`]) or the connection moves to
    /// the master they name, no change it answers is confirmed, with replicas
    /// or without. A master frozen through a failover answers as master when
    /// it resumes, until Sentinel demotes it a moment later; with a replica,
    /// the `WAIT` behind a change catches that, but a master left with none
    /// (the usual state right after a first failover) has no `WAIT`, and its
    /// grants and releases would be trusted: a lock held twice, or a release
    /// lost while the promoted master kept the grant. Answers whether this is
    /// a new doubt.
    pub(super) fn doubt_master(&self) -> bool {
        self.doubts.fetch_add(1, Ordering::AcqRel);
        let new = !self.master_doubted.swap(true, Ordering::AcqRel);
        if new {
            if let Some(budget) = self.budget() {
                budget.master_fell_in_doubt();
            }
        }
        new
    }

    /// The Sentinels name this master again with no failover under way, or
    /// the connection moved to the one they name: its answers count again.
    /// Answers whether it was doubted.
    pub(super) fn trust_master(&self) -> bool {
        self.master_doubted.swap(false, Ordering::AcqRel)
    }

    /// The looks at the replicas, which the counting task waits on and tells
    /// of each look it made.
    pub(super) fn look(&self) -> &Arc<Look> {
        &self.look
    }
}

impl ReplicaCount for ReplicaWatch {
    fn live(&self) -> u32 {
        ReplicaWatch::live(self)
    }

    fn had_replicas(&self) -> bool {
        self.had_replicas.load(Ordering::Acquire)
    }

    fn master_doubted(&self) -> bool {
        self.master_doubted.load(Ordering::Acquire)
    }

    fn doubts(&self) -> u64 {
        self.doubts.load(Ordering::Acquire)
    }

    fn look_again(&self) {
        self.look.ask();
    }

    fn looked(&self, bound: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.look.answered(bound))
    }
}
