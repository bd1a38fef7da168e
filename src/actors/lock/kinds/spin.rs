//! The spin lock (Redisson `getSpinLock`): the exclusive lock's key, scripts and
//! renewal, with waiters that never listen for unlock messages. A busy answer is
//! followed by another attempt after a delay that doubles from
//! [`Config::spin_backoff`](crate::Config::spin_backoff)'s first value up to its
//! longest (never later than the holder's lease says the lock frees by itself).
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

use super::exclusive::Exclusive;
use super::{Attempt, Giveback, KindRules};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{AcquireReply, ReleaseReply};

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Spin;

impl KindRules for Spin {
    fn channel(&self, name: &str) -> String {
        keys::channel(name)
    }

    fn listens(&self) -> bool {
        false
    }

    fn hears_own_unlocks(&self) -> bool {
        false
    }

    fn renewal(&self, kind: AcquireKind) -> Renewal {
        Exclusive.renewal(kind)
    }

    fn acquire(
        &self,
        shared: &Shared,
        attempt: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        Exclusive.acquire(shared, attempt)
    }

    fn release(
        &self,
        shared: &Shared,
        giveback: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>> {
        Exclusive.release(shared, giveback)
    }
}
