//! What a kind of lock does differently, one file per kind, behind one trait.
//!
//! The lock actor (`super`) is the same skeleton for every kind: waiter queue,
//! attempt in flight, holdings, timers, supervision. Where kinds differ it asks its
//! [`KindRules`], found by [`rules`], the one place that maps a [`Kind`] to its
//! file:
//! - which scripts acquire and release (`exclusive`: through the coalescer;
//!   `fair`; `rw`: read and write sides);
//! - which channel a waiter listens on, and whether each waiter has a place and a
//!   channel of its own (the fair lock: then waiters try when they are due rather
//!   than head first, and the fair file also keeps their places in the Redis queue);
//! - whether waiters listen for unlock messages at all (the spin lock's poll
//!   with a backoff instead);
//! - whether the lock hears its own unlock messages back;
//! - which script the watchdog renews a holding with.
//!
//! A new kind of lock is a new file here that implements [`KindRules`], a [`Kind`]
//! variant, and one arm in [`rules`].

mod exclusive;
pub(super) mod fair;
mod rw;
mod spin;

use std::sync::Arc;

use futures::future::LocalBoxFuture;
use redis::RedisResult;

use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::kind::{AcquireKind, Kind};
use crate::wire::{AcquireReply, ReleaseReply, TransferReply};

/// One acquisition attempt, as every kind's acquire script needs it.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    /// The lock name.
    pub(super) name: Arc<str>,
    /// What it takes (a kind this lock serves).
    pub(super) kind: AcquireKind,
    /// The hash field that will hold it.
    pub(super) field: Arc<str>,
    /// The lease to set, in ms.
    pub(super) lease_ms: u64,
    /// Fair lock: take a place in the queue when the lock cannot be taken now.
    pub(super) queue: bool,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(super) token_ttl_ms: u64,
    /// Its owner was made for this acquisition (no `Acquire::owner`), so it
    /// cannot hold the lock, and an earlier attempt of it found the key a lock
    /// (a first attempt checks both, which also refuses a key of another type):
    /// no re-entry check is needed.
    pub(super) new_owner: bool,
    /// `false`: a non-reentrant acquisition, refused by the script if its
    /// owner holds the lock already (the exclusive and fair scripts).
    pub(super) reentrant: bool,
    /// The lock-delay after a lapsed lease, in ms (0: none); the exclusive and
    /// spin scripts.
    pub(super) delay_ms: u64,
}

/// One release of a hold, as every kind's release script needs it.
#[derive(Debug, Clone)]
pub(super) struct Giveback {
    /// The lock name.
    pub(super) name: Arc<str>,
    /// What is given back.
    pub(super) kind: AcquireKind,
    /// The holder's hash field.
    pub(super) field: Arc<str>,
    /// The lease to set again when holds remain, in ms.
    pub(super) lease_ms: u64,
    /// Names this release in the latch key; a retry keeps it.
    pub(super) request_id: Arc<str>,
    /// An earlier attempt with this request id may have run.
    pub(super) retry: bool,
}

/// What differs between kinds of lock; see the module documentation.
pub(super) trait KindRules: Sync {
    /// The channel this lock's waiters listen on; for a kind with a channel per
    /// waiter, the prefix of every waiter's channel.
    fn channel(&self, name: &str) -> String;

    /// The channel to subscribe to for the waiter with hash field `field` after a
    /// busy answer.
    fn waiter_channel(&self, name: &str, _field: &str) -> String {
        self.channel(name)
    }

    /// Whether each waiter has its own place in a Redis queue and its own channel
    /// (then waiters try when they are due, not head first).
    fn per_waiter(&self) -> bool {
        false
    }

    /// Whether waiters subscribe to [`KindRules::waiter_channel`] after a busy
    /// answer. A kind that does not (the spin lock) asks again after the spin
    /// backoff instead.
    fn listens(&self) -> bool {
        true
    }

    /// Whether an unlock message this actor published itself comes back to it on
    /// a channel it listens to, and can be skipped (the local release already
    /// handed over).
    fn hears_own_unlocks(&self) -> bool {
        true
    }

    /// Whether processes take turns on this lock (`turn.rs`): a holder hands the
    /// lock to a local waiter with [`KindRules::transfer`] for a while, then
    /// releases it and yields to the other processes that heard; a waiter woken
    /// by another process's message asks after a random delay. The exclusive lock
    /// only; the fair lock is FIFO across processes already.
    fn takes_turns(&self) -> bool {
        false
    }

    /// Gives back the last hold of `giveback` and grants `to` in one call,
    /// without freeing the lock; with `count`, also counts who listens on the
    /// unlock channel. Only called where [`KindRules::takes_turns`].
    fn transfer(
        &self,
        _shared: &Shared,
        _giveback: Giveback,
        _to: Attempt,
        _count: bool,
    ) -> LocalBoxFuture<'static, RedisResult<TransferReply>> {
        Box::pin(futures::future::ready(Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "lockwarden: this kind of lock cannot be handed over",
        )))))
    }

    /// How the watchdog renews a holding of `kind`.
    fn renewal(&self, kind: AcquireKind) -> Renewal;

    /// Runs one acquisition attempt.
    fn acquire(
        &self,
        shared: &Shared,
        attempt: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>>;

    /// Gives back one hold.
    fn release(
        &self,
        shared: &Shared,
        giveback: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>>;
}

/// The rules of `kind`: the one place a kind is mapped to its file.
pub(super) fn rules(kind: Kind) -> &'static dyn KindRules {
    match kind {
        Kind::Exclusive => &exclusive::Exclusive,
        Kind::Fair => &fair::Fair,
        Kind::ReadWrite => &rw::ReadWrite,
        Kind::Spin => &spin::Spin,
    }
}
