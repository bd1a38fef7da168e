//! The spin lock (Redisson `getSpinLock`): the exclusive lock's key, scripts and
//! renewal, with waiters that never listen for unlock messages. A busy answer is
//! followed by another attempt after a delay that doubles from
//! [`Config::spin_backoff`](crate::Config::spin_backoff)'s first value up to its
//! longest (never later than the holder's lease says the lock frees by itself).
//! That backoff is the kind's whole state ([`Spin`]).
//!
//! Why a kind of its own: some deployments refuse SUBSCRIBE (proxies, managed
//! services), and a very large number of locks waited on at once means as many
//! channels. The price is latency: a waiter learns of a release only at its next
//! attempt (docs/performance.md, "Spin lock: when to pick it").
//!
//! Its release still publishes the unlock message, as the exclusive lock's does,
//! where Redisson's spin lock publishes nothing: a pub/sub waiter of the same name
//! (lockwarden's or Redisson's `getLock`) then wakes at once instead of at its
//! fallback poll, and a spin waiter does not care. The publish runs inside the
//! release script, so a proxy that refuses pub/sub commands never sees it.

use futures::future::LocalBoxFuture;
use redis::RedisResult;

use super::exclusive::ExclusiveScripts;
use std::time::Duration;

use super::{Attempt, Giveback, Policy, Scripts};
use crate::actors::lock::waiters::Want;
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::Then;
use crate::config::Config;
use crate::durations::backoff;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{AcquireReply, ReleaseReply};

/// The spin lock's state: its backoff.
#[derive(Debug, Default)]
pub(in crate::actors::lock) struct Spin {
    /// Consecutive busy answers since the last grant (or since a wait began).
    busy: u32,
}

impl Policy for Spin {
    fn scripts(&self) -> &'static dyn Scripts {
        &SpinScripts
    }

    fn granted(&mut self, _waiting: usize) {
        self.busy = 0;
    }

    /// The backoff counts one wait's busy answers, not an earlier one's.
    fn wait_begins(&mut self) {
        self.busy = 0;
    }

    /// Asks again after the backoff, or when the holder's lease says the lock
    /// frees by itself, whichever is sooner (at once if something woke the
    /// lock meanwhile: a resync). It never listens.
    fn short(&mut self, _want: &mut Want, ttl: Option<Duration>, c: &Config) -> Then {
        let spin = self.next_delay(c);
        Then::Held(Some(ttl.map_or(spin, |t| t.min(spin))))
    }

    fn channel_of(&self, _want: &Want, _name: &str) -> Option<String> {
        None
    }
}

impl Spin {
    /// The delay before asking again after a busy answer, doubling with each
    /// consecutive one (`Config::spin_backoff`).
    fn next_delay(&mut self, config: &Config) -> Duration {
        let delay = backoff(config.spin_first, config.spin_longest, self.busy);
        self.busy = self.busy.saturating_add(1);
        delay
    }
}

/// The spin lock's scripts: the exclusive lock's, with no hand-over.
#[derive(Debug)]
pub(super) struct SpinScripts;

impl Scripts for SpinScripts {
    fn channel(&self, name: &str) -> String {
        keys::channel(name)
    }

    fn renewal(&self, kind: AcquireKind) -> Renewal {
        ExclusiveScripts.renewal(kind)
    }

    fn acquire(
        &self,
        shared: &Shared,
        attempt: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        ExclusiveScripts.acquire(shared, attempt)
    }

    fn release(
        &self,
        shared: &Shared,
        giveback: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>> {
        ExclusiveScripts.release(shared, giveback)
    }

    fn undo_abandoned(
        &self,
        shared: &Shared,
        giveback: Giveback,
    ) -> Option<LocalBoxFuture<'static, RedisResult<ReleaseReply>>> {
        ExclusiveScripts.undo_abandoned(shared, giveback)
    }
}
