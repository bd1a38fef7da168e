//! The latch's policy of the waiting engine, [`Latch`], run by the one
//! [`SyncActor`]: the waiters of one count-down latch in this process.
//!
//! A latch (Redisson's `RCountDownLatch` layout: a string key, the name itself,
//! holding the count; absent means zero) opens for every waiter at once. The count
//! down that reaches zero publishes `0` on `redisson_countdownlatch__channel__{name}`
//! and a new count publishes `1`. The actor subscribes while anyone waits and opens
//! for all of its waiters when `0` arrives, without asking Redis again: the message
//! proves the count reached zero even if a new count was set right after. Since a
//! message can be lost (a reconnect, a failover), the count is also read after the
//! subscription is confirmed, after every resync and on the fallback timer
//! (`Config::max_retry_interval`); one read at a time, however many wait. One
//! read answers everyone ([`Scope::All`]), changes nothing in Redis (no op id,
//! nothing to undo), and a wait that runs out while the reads fail answers
//! their error rather than `false`.
//!
//! A latch whose key does not exist is open (Redisson's layout: absent means a
//! count of zero), so a latch waiter cannot hang on a lost key the way a
//! semaphore waiter can; its waits that last are still recorded for operators
//! (`actors/waiting/records.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;

use super::shared::Shared;
use super::waiting::engine::{Ask, Event, Found, Heard, Policy, Scope, Waiter, Waiters};
use super::waiting::{Calls, SyncActor};
use crate::error::LockError;
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire;

/// Wait until the latch's count is zero, up to `wait` (`None`: for ever). Answers
/// `true` once it is, `false` when the wait ran out first.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, LockError>")]
pub(crate) struct AwaitZero {
    /// How long to wait.
    pub(crate) wait: Option<Duration>,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Latch {
    name: Arc<str>,
}

impl Latch {
    pub(crate) fn new(name: Arc<str>) -> Latch {
        Latch { name }
    }
}

impl Policy for Latch {
    /// Its waiters want nothing but the latch open.
    type Want = ();
    type Grant = bool;
    /// A read that finds zero gives nothing beside the open door.
    type Won = ();
    /// The count.
    type Reply = u64;
    const SCOPE: Scope = Scope::All;
    const LABEL: &'static str = "latch";

    fn name(&self) -> &str {
        &self.name
    }

    /// A zero wait is answered by the first sweep, not by a read of its own.
    fn once(&self, _wait: Option<Duration>) -> bool {
        false
    }

    fn op(&self, _local: u64) -> Option<Arc<str>> {
        None
    }

    fn wants(&self, _want: &()) -> u64 {
        1
    }

    /// A wait that ran out while Redis failed says so, not just "no".
    fn expired(
        &self,
        _waited: Duration,
        last: Option<&redis::RedisError>,
    ) -> Result<bool, LockError> {
        match last {
            Some(e) => Err(LockError::from(e.clone())),
            None => Ok(false),
        }
    }

    /// Subscribes, then reads the count: a count down to zero before the
    /// subscription is seen by that read, one after it by its message.
    fn channel(&self, _w: &Waiter<Self>) -> Option<String> {
        Some(keys::latch_channel(&self.name))
    }

    fn classify(&mut self, count: u64) -> Found<()> {
        if count == 0 {
            Found::Taken { left: 0, won: () }
        } else {
            Found::Short {
                retry_in: None,
                missing: false,
                first: None,
            }
        }
    }

    /// `0`: the count reached zero, everyone goes; `1`: a new count was set.
    fn heard(&mut self, _channel: &str, wake_all: bool, _waiters: &mut Waiters<Self>) -> Heard {
        if wake_all {
            Heard::Nothing
        } else {
            Heard::Open
        }
    }
}

impl Calls for Latch {
    type Extra = ();
    const KIND: SynchronizerKind = SynchronizerKind::Latch;

    fn ask(
        shared: &Shared,
        name: &Arc<str>,
        _ask: Ask<()>,
    ) -> LocalBoxFuture<'static, redis::RedisResult<u64>> {
        let (mut conn, name) = (shared.node.conn(), name.clone());
        async move { wire::read_number(&mut conn, &name).await }.boxed_local()
    }

    fn grant(
        _act: &mut SyncActor<Self>,
        _want: &(),
        _won: Option<()>,
        _sent: Instant,
        _ctx: &mut Context<SyncActor<Self>>,
    ) -> bool {
        true
    }
}

impl Handler<AwaitZero> for SyncActor<Latch> {
    type Result = ResponseFuture<Result<bool, LockError>>;

    /// Listening already, one read answers the newcomer (the count may be zero
    /// now) without waiting for the next message; otherwise it subscribes first.
    fn handle(&mut self, msg: AwaitZero, ctx: &mut Context<Self>) -> Self::Result {
        if self.shared.is_shutting_down() {
            return Box::pin(async { Err(LockError::ShuttingDown) });
        }
        let (reply, answer) = oneshot::channel();
        let wait = msg.wait;
        self.run(
            Event::Arrive {
                want: (),
                wait,
                reply,
            },
            ctx,
        );
        Box::pin(async move { answer.await.map_err(|_| LockError::Stopped)? })
    }
}
