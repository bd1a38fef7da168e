//! [`LatchHandle`], a distributed count-down latch in Redisson's `RCountDownLatch`
//! layout, and the [`Latch`] message that makes one.
//!
//! The latch is one string key, its name, holding the count (absent: zero, open).
//! `try_set_count` sets it if there is none and publishes `1`; each `count_down`
//! takes one, and the one that reaches zero deletes the key and publishes `0` on
//! `redisson_countdownlatch__channel__{name}`, which opens every waiter of every
//! process at once. Waiting goes through the name's actor (`actors/latch.rs`), which
//! also reads the count after a resubscription and on its fallback timer, so a
//! missed message delays a waiter but never strands it.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::actors::latch::{AwaitZero, Latch as Policy};
use crate::actors::shared::Shared;
use crate::actors::waiting::{self, SyncActor};
use crate::error::LockError;
use crate::reply::{within, Giving};
use crate::sync_view::SynchronizerKind;
use crate::wire::{self, CountedDown, LatchCountDown, LatchSet};

super::manager::handle_message! {
    /// Get a [`LatchHandle`] on the count-down latch `name` (checked now, once, by the
    /// rules of a lock name).
    Latch => LatchHandle, latch
}

/// A handle on one count-down latch: cheap to clone, usable from any thread.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> Result<(), lockwarden::LockError> {
/// use std::time::Duration;
/// use lockwarden::Locks;
/// let batch = manager.latch("nightly-batch").await?;
/// batch.try_set_count(8).await?; // eight jobs to go
/// // ... each job, anywhere, calls batch.count_down() when done ...
/// let all_done = batch.wait_zero(Duration::from_secs(600)).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LatchHandle {
    /// The latch's name.
    name: Arc<str>,
    /// Its actor in this process (waiters, subscription).
    actor: Addr<SyncActor<Policy>>,
    /// The manager's connection.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LatchHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatchHandle")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LatchHandle {
    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the count if the latch has none (it is open), and tells waiters a new
    /// count began. Answers whether it set it. The count must be 1 to
    /// `i64::MAX` (Redisson reads it as a Java `long`); anything else is refused
    /// with nothing changed.
    pub async fn try_set_count(&self, count: u64) -> Result<bool, LockError> {
        let reason = if count == 0 {
            "must be at least 1 (a latch at zero is open: it has no key)"
        } else if i64::try_from(count).is_err() {
            "is over i64::MAX, the largest count Redis and Redisson hold"
        } else {
            let mut conn = self.shared.node.conn();
            let call = LatchSet {
                name: &self.name,
                count,
            };
            let set = wire::call(&mut conn, &call).await?;
            if set {
                wire::label(&mut conn, &self.name, Some(SynchronizerKind::Latch)).await;
            }
            return Ok(set);
        };
        Err(LockError::InvalidAmount {
            what: "count",
            amount: count,
            reason,
        })
    }

    /// Takes one from the count and answers what is left; the call that reaches
    /// zero opens the latch for every waiter. On an open latch it does nothing
    /// and answers 0.
    ///
    /// It counts once: sent under one op id, it is sent again through a
    /// dropped connection or a Redis that does not answer, and a copy that
    /// runs twice counts nothing the second time. It answers within
    /// [`Config::release_wait`](crate::Config::release_wait) (2.5 s by
    /// default) whatever Redis does, so a request path stays bounded while
    /// Redis is frozen or fails over: past it, with [`LockError::InFlight`],
    /// while the count-down goes on behind the call (counted in
    /// `lockwarden_releases_pending_total{of="count-down"}`, its outcome
    /// logged), sent again until half of
    /// [`Config::latch_ttl`](crate::Config::latch_ttl) after it was first sent.
    /// It may still apply, once: do not count down again for it.
    pub async fn count_down(&self) -> Result<u64, LockError> {
        self.count_down_within(self.shared.config.release_wait)
            .await
    }

    /// [`count_down`](LatchHandle::count_down), answering within `bound`
    /// instead of the configured
    /// [`Config::release_wait`](crate::Config::release_wait) (a bound past half
    /// the latch TTL waits for the count-down's own end).
    pub async fn count_down_within(&self, bound: Duration) -> Result<u64, LockError> {
        let (shared, name) = (self.shared.clone(), self.name.clone());
        let giving = Giving {
            of: "count-down",
            name: self.name.clone(),
            if_it_fails: "a count-down in flight applies once if Redis still has it: do not \
                          count down again for it",
        };
        match within(bound, giving, count_down(shared, name)).await? {
            Some(left) => Ok(left),
            None => Err(LockError::InFlight {
                what: format!("counting down latch {:?}", self.name),
                waited: bound,
            }),
        }
    }

    /// Whether the latch has a count now. Redisson's meaning is kept: a latch with
    /// no key is open, whether it was never set or has counted down to zero (the
    /// key is deleted then), so [`wait_zero`](LatchHandle::wait_zero) returns at
    /// once for a mistyped name too. Ask this first to tell "not set yet" from
    /// "done" where the caller knows the latch must have been set.
    pub async fn exists(&self) -> Result<bool, LockError> {
        let mut conn = self.shared.node.conn();
        Ok(wire::key_exists(&mut conn, &self.name).await?)
    }

    /// The count now (0: open).
    pub async fn count(&self) -> Result<u64, LockError> {
        let mut conn = self.shared.node.conn();
        Ok(wire::read_number(&mut conn, &self.name).await?)
    }

    /// Waits until the count is zero, at most `timeout`: `true` once it is (at
    /// once if it is already), `false` when the time ran out. A Redis error that
    /// kept the latch from being read until the end is answered instead of
    /// `false`.
    pub async fn wait_zero(&self, timeout: Duration) -> Result<bool, LockError> {
        self.actor
            .send(AwaitZero {
                wait: Some(timeout),
            })
            .await?
    }

    /// Waits until the count is zero, for as long as it takes.
    pub async fn wait_open(&self) -> Result<(), LockError> {
        self.actor.send(AwaitZero { wait: None }).await??;
        Ok(())
    }
}

/// Counts latch `name` down once (under one op id, through transient errors
/// within its window) and answers what is left; drops the kind label with the
/// key at zero. Counted as unsettled meanwhile, so that a `Settle` before the
/// process exits waits for a count-down that goes on behind its caller.
async fn count_down(shared: Arc<Shared>, name: Arc<str>) -> Result<u64, LockError> {
    let _counted = shared.unsettled.enter();
    let op = waiting::op_id();
    let once = waiting::once(&shared.config, &op);
    let what = || format!("counting down latch {name:?}");
    let counted = waiting::send_once(&shared.config, what, || {
        let mut conn = shared.node.conn();
        let name = name.clone();
        async move {
            let call = LatchCountDown { name: &name, once };
            wire::call(&mut conn, &call).await
        }
    })
    .await?;
    match counted {
        CountedDown::Left(0) => {
            // The key is gone: its kind label goes too.
            let mut conn = shared.node.conn();
            wire::label(&mut conn, &name, None).await;
            Ok(0)
        }
        CountedDown::Left(left) => Ok(left),
        CountedDown::WasOpen => Ok(0),
    }
}
