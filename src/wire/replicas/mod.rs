//! Replica confirmation: a lock-changing script and a `WAIT` in one round trip,
//! and what a shortfall means for each kind of script.
//!
//! Redis replicates asynchronously: a grant the master answered may not have
//! reached any replica when the master dies, and the replica promoted in its place
//! lets a second holder in. So by default (`Config::sync_replicas`,
//! `config/replicas.rs`) every script that changes a lock is sent in a pipeline
//! with `WAIT <n> <timeout>` behind it, on the same connection, so the two share a
//! round trip and the `WAIT` covers the script's write (it counts the replicas that
//! acknowledged everything this connection wrote so far; a batch of many lock
//! changes is one script, so one `WAIT`). `n` is the configured minimum, or the
//! number of replicas that can answer now when that is smaller (`node/replicas/`
//! counts them): with none, no `WAIT` is sent at all. What a shortfall means
//! depends on the script ([`Need`]): a grant, a renewal, a release, a fenced write
//! or a force-unlock that too few replicas confirmed is not reported as done (the
//! answer becomes [`LockError::NotReplicated`](crate::LockError::NotReplicated),
//! retryable: the lock actor undoes a grant and redoes a release, owner-checked and
//! under the same request id, until it is confirmed or the lease is over); a
//! change that cannot be redone without counting twice (a semaphore's permits
//! given back, a latch counted down) stands and is logged. A shortfall also has
//! the replicas counted again at once, so a frozen or vanished one stops being
//! waited for after about one timeout.
//!
//! A `WAIT` blocks the whole connection it is sent on: Redis reads nothing more
//! from that client until the `WAIT` answers, and the command connection is one
//! socket shared by every lock of the manager. While replicas confirm, a `WAIT`
//! lasts a replica round trip; when they are missing (a failover to a master left
//! with no replica, a frozen replica), each lasts its whole timeout, and calls
//! pipelined behind a few of them outlast the response timeout: a release was seen
//! answered "timed out" again and again for 5 s. So each connection has a budget
//! ([`Confirmation`]): at most `k` `WAIT`s on it at once, where `k` whole `WAIT`s
//! (each its timeout plus the [`WAIT_SLACK`](crate::config::WAIT_SLACK) Redis may take beyond it) leave at
//! least one more before the response timeout, so that nothing queued behind
//! them times out. And once a `WAIT` found too few replicas, the
//! connection knows they are *short* until a `WAIT` finds enough again: then a
//! call that only hopes (a release) is sent without a `WAIT` at all (its change
//! stands; logged), and a call that must be confirmed waits for the count of
//! replicas that shortfall asked for (`node/replicas/look.rs`: a replica it finds frozen is
//! not waited for again), then takes a free place in the budget to ask again,
//! or, with none free, is refused `NotReplicated` at once without being sent
//! (nothing written). Calls already waiting for a place when the
//! connection turns short stop waiting and go the same way. A round trip with a
//! `WAIT` that failed (a timeout: its `WAIT` may still be blocking) also counts as
//! short.
//!
//! One whole `WAIT` at a time queues a busy manager's changes one by one, so a
//! connection to one server also has a fast lane ([`Confirmation::fast`]):
//! while replicas answer, several changes at once carry a short `WAIT`
//! (`FAST_WAIT`, 50 ms), sized so that all of them running out still leave room for
//! one whole `WAIT` and one more before the response timeout. One that runs out
//! closes the lane and its change asks again, `CLIENT ID` and a whole `WAIT`,
//! counted only on the very connection the script ran on.
//!
//! Still, `WAIT`s on one connection run one after the other: Redis reads the
//! next script only once the `WAIT` before it answered. So a manager on one
//! server spreads its confirmed changes over a few connections, its lanes
//! (`lanes.rs`), each with a budget and fast places of its own.
//!
//! A master with AOF on can also be asked to have written the change to its own
//! disk: `WAITAOF 1 0 <timeout>` (Redis 7.2+) behind the `WAIT` ([`Confirm`]),
//! so a lock survives the master's restart from its AOF as well as a failover.
//! It is sent only with `appendfsync always`, where Redis fsyncs before it
//! answers and `WAITAOF` returns at once; under `everysec` it would hold every
//! lock change, and the shared connection, until the next fsync (up to a second),
//! and the operator chose to lose up to a second of writes anyway. Replicas are
//! still counted by `WAIT` (received), not by `WAITAOF`'s second number, which
//! counts only replicas running with AOF of their own. Chosen once, from the
//! master's `INFO` when the manager starts (`node/replicas/start.rs`).

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{select, BoxFuture, Either};
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tracing::{info, warn};

mod fast;
mod kept;
mod lanes;
mod replies;
mod send;
mod unconfirmed;

use fast::Fast;
pub(crate) use fast::Moves;
use kept::Keeper;
pub(crate) use kept::{keep_if_unconfirmed, Again, Redo};
use lanes::budget;
pub(crate) use lanes::Lanes;
use replies::confirmed;
pub(crate) use replies::{confirm_with, judge, unmark, Confirm, Confirmed};
use send::push_waits;
pub(crate) use send::send;
pub(crate) use unconfirmed::record as record_unconfirmed;

use crate::config::ReplicaSync;

/// How much a script's answer depends on its write reaching replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// It writes nothing (inspect): no `WAIT`.
    ReadOnly,
    /// Its write stands whatever the replicas say, as doing it again would
    /// count twice (a semaphore's permits given back, a latch counted down) or
    /// it matters little (the client registry, a fair waiter's place refresh):
    /// a shortfall is logged, the answer stands.
    BestEffort,
    /// Its answer is only true once replicated (a grant, a renewal, a release, a
    /// fenced write, a force-unlock): a shortfall turns the answer into a
    /// retryable error, and the caller undoes or redoes the change.
    Must,
}

/// What the wire half reads of a master's replicas, and asks of whoever
/// counts them: the port that the node layer's `ReplicaWatch`
/// (`node/replicas/watch.rs`) implements, as the one way the count, the doubt
/// of the master and the request to look at the replicas again travel between
/// the two halves. The wire half writes none of them; the node layer, whose
/// counting tasks write them, tells the [`Confirmation`] when the count
/// changed ([`Confirmation::count_changed`]) or the master fell in doubt
/// ([`Confirmation::master_fell_in_doubt`]).
pub(crate) trait ReplicaCount: Send + Sync + std::fmt::Debug {
    /// How many of the master's replicas can answer now, as last counted: a
    /// `WAIT` asks for `min(sync.min, live)`, and none at all when that is 0.
    fn live(&self) -> u32;

    /// Whether a replica was ever counted: a master that never had one has no
    /// failover to lose a change to, so nothing is kept for it (`kept.rs`).
    fn had_replicas(&self) -> bool;

    /// Whether the master went silent and has not been vouched for since: it
    /// may have been demoted meanwhile, so no change it answers is confirmed.
    fn master_doubted(&self) -> bool;

    /// How many doubts of the master were raised so far: a call whose reply
    /// came back across one is not taken as confirmed.
    fn doubts(&self) -> u64;

    /// A `WAIT` came back short: the replicas are to be counted again now.
    fn look_again(&self);

    /// Resolves once a look that started after every request so far has
    /// finished, or `bound` passed.
    fn looked(&self, bound: Duration) -> BoxFuture<'_, ()>;
}

/// Replica confirmation on one connection: what is required, the count of
/// replicas that can answer now (a [`ReplicaCount`], kept current by
/// `node/replicas/`), and the budget of `WAIT`s that may block it at once (see
/// the module documentation). Shared by every clone of the connection.
#[derive(Debug)]
pub(crate) struct Confirmation {
    /// How many replicas must confirm, and how long the master waits for them.
    sync: ReplicaSync,
    /// The master's replicas as counted, its doubt, and the looks at them.
    count: Arc<dyn ReplicaCount>,
    /// Places for `WAIT`s at once, one budget per lane ([`Confirmation::lanes`]):
    /// a `WAIT` blocks only the lane it went on.
    places: Vec<Semaphore>,
    /// Where the next call starts looking for a lane.
    next: AtomicUsize,
    /// The last `WAIT` found too few replicas (or failed).
    short: AtomicBool,
    /// How many replicas the last `WAIT` counted.
    acked: AtomicU32,
    /// Wakes the calls waiting for a place when the connection turns short
    /// or the master falls in doubt.
    turned_short: Notify,
    /// `WAITAOF 1 0` follows the `WAIT` ([`Confirm::WaitAndAof`]).
    aof: bool,
    /// The fast path, on a connection to one server ([`Confirmation::fast`]).
    fast: Option<Fast>,
    /// A grant no replica could confirm is refused, not kept
    /// (`Config::refuse_unconfirmed_grants`).
    refuse: bool,
    /// Releases no replica confirmed, kept to be sent again (`kept.rs`).
    keeper: Arc<Keeper>,
    /// How many releases the confirmations of this connection keep (one
    /// master's, or every master's of a cluster connection, shared through
    /// [`Confirmation::sharing_kept`]): a manager on its way out waits for
    /// them (`Settle`).
    kept: Arc<AtomicUsize>,
}

/// How a call goes out on a connection that asks replicas to confirm.
enum Way<'a> {
    /// With a `WAIT`, in a place of the budget.
    Wait(SemaphorePermit<'a>),
    /// Without a `WAIT` (a call that only hopes, while replicas are short).
    Alone,
    /// Not at all (a call that must be confirmed, while replicas are short and
    /// no place is free).
    Refused,
}

impl Confirmation {
    /// Confirmation by `sync`, with the commands `confirm` names, on a
    /// connection whose calls time out after `response_timeout` (longer than
    /// `sync.timeout`, `Config::validate`), its replicas counted by `count`.
    pub(crate) fn new(
        sync: ReplicaSync,
        response_timeout: Duration,
        confirm: Confirm,
        count: Arc<dyn ReplicaCount>,
    ) -> Confirmation {
        Confirmation {
            sync,
            count,
            places: vec![Semaphore::new(budget(sync.timeout, response_timeout))],
            next: AtomicUsize::new(0),
            short: AtomicBool::new(false),
            acked: AtomicU32::new(0),
            turned_short: Notify::new(),
            aof: confirm == Confirm::WaitAndAof,
            fast: None,
            refuse: false,
            keeper: Arc::default(),
            kept: Arc::default(),
        }
    }

    /// The same, counting its kept releases in `kept`, shared with the other
    /// masters' confirmations of one cluster connection.
    pub(crate) fn sharing_kept(mut self, kept: Arc<AtomicUsize>) -> Confirmation {
        self.kept = kept;
        self
    }

    /// How many replicas a `WAIT` asks for now.
    fn required(&self) -> u32 {
        self.sync.min.min(self.count.live())
    }

    /// How many replicas the configuration asks to confirm each change.
    pub(crate) fn wanted(&self) -> u32 {
        self.sync.min
    }

    /// How many replicas can answer, as last counted.
    pub(crate) fn live(&self) -> u32 {
        self.count.live()
    }

    /// Whether the last `WAIT` found too few replicas: the next look at them
    /// should also doubt the ones that did not answer it.
    pub(crate) fn is_short(&self) -> bool {
        self.short.load(Ordering::Acquire)
    }

    /// Whether this connection asks replicas to confirm, and its master had
    /// one at some point (so a failover could promote it).
    pub(crate) fn wants_replicas(&self) -> bool {
        self.sync.min > 0 && self.count.had_replicas()
    }

    /// How many replicas the last `WAIT` counted, if it came back short.
    pub(crate) fn short_by(&self) -> Option<u32> {
        self.is_short().then(|| self.acked.load(Ordering::Acquire))
    }

    /// The count of replicas changed (told by the node layer's
    /// `ReplicaWatch`, which wrote it): a new count is a new situation, so the
    /// connection is no longer taken as short and calls ask again.
    pub(crate) fn count_changed(&self) {
        self.short.store(false, Ordering::Release);
        self.reopen_fast();
    }

    /// The master fell in doubt (told by the node layer's `ReplicaWatch`):
    /// calls waiting for a place give up waiting, as when short, and go the
    /// way of a doubted master.
    pub(crate) fn master_fell_in_doubt(&self) {
        self.turned_short.notify_waiters();
    }

    /// Whether the master is in doubt ([`ReplicaCount::master_doubted`]).
    pub(crate) fn master_doubted(&self) -> bool {
        self.count.master_doubted()
    }

    /// The way a call with `need` (not read-only) goes out now, on `lane`.
    async fn way(&self, need: Need, lane: usize) -> Way<'_> {
        if need == Need::Must && self.is_short() {
            // The shortfall asked for a look at the replicas, a few
            // milliseconds away: one it finds frozen stops counting, and this
            // call need not wait out a whole WAIT for it (`node/replicas/look.rs`).
            self.count.looked(self.sync.timeout).await;
        }
        let places = &self.places[lane];
        // Listen before looking, so that turning short in between is heard.
        let mut turned = pin!(self.turned_short.notified());
        turned.as_mut().enable();
        if !self.is_short() {
            if let Ok(place) = places.try_acquire() {
                return Way::Wait(place);
            }
            if let Either::Left((Ok(place), _)) = select(pin!(places.acquire()), turned).await {
                if !self.is_short() {
                    return Way::Wait(place);
                }
            }
        }
        match need {
            Need::Must => match places.try_acquire() {
                // A grant may ask again whether the replicas are back.
                Ok(place) => Way::Wait(place),
                Err(_) => Way::Refused,
            },
            _ => Way::Alone,
        }
    }

    /// What a `WAIT` found, heard as a call would: for a test of how the
    /// count and its looks steer the calls (`node/replicas/look.rs`).
    #[cfg(test)]
    pub(crate) fn heard(&self, confirmed: &Confirmed) {
        self.record(confirmed);
    }

    /// What a call with `need` would send now: `Some(n)`, a `WAIT` for n
    /// replicas; `None`, no `WAIT` (or nothing at all).
    #[cfg(test)]
    pub(crate) async fn would_wait(&self, need: Need) -> Option<u32> {
        match (self.way(need, 0).await, self.required()) {
            (Way::Wait(_), n) if n > 0 => Some(n),
            _ => None,
        }
    }

    /// Remembers what a `WAIT` found.
    fn record(&self, confirmed: &Confirmed) {
        let (acked, failed) = match confirmed {
            Confirmed::NotAsked | Confirmed::NoReplica { .. } => return,
            Confirmed::Enough => {
                self.reopen_fast();
                if self.short.swap(false, Ordering::AcqRel) {
                    info!(
                        wanted = self.sync.min,
                        "replicas confirm lock changes again"
                    );
                }
                return;
            }
            Confirmed::Short { acked, .. } => (*acked, None),
            Confirmed::Failed(e) => (0, Some(e)),
        };
        self.acked.store(acked, Ordering::Release);
        // The replicas that did not answer may be gone or frozen: have them
        // counted again now rather than at the next periodic look.
        self.count.look_again();
        if !self.short.swap(true, Ordering::AcqRel) {
            match failed {
                Some(e) => warn!(
                    error = %e,
                    "a lock change with WAIT failed; until a WAIT confirms again or the replicas are counted anew, lock changes ask only within the WAIT budget"
                ),
                None => warn!(
                    acked,
                    wanted = self.required(),
                    "too few replicas confirm lock changes; until they do or are counted anew, lock changes ask only within the WAIT budget"
                ),
            }
            self.turned_short.notify_waiters();
        }
    }

    /// How many replicas the last `WAIT` counted, and how many must: the answer
    /// for a call refused or sent alone while replicas are short.
    fn shortfall(&self) -> (u32, u32) {
        (self.acked.load(Ordering::Acquire), self.required())
    }
}
