//! The exclusive reentrant lock (Redisson `getLock`): one owner at a time, no order
//! among waiters, every waiter listening on the lock's one unlock channel.
//!
//! Its acquire and release go through the manager's coalescer, so that those of
//! many locks that are ready at the same moment share one script call; the
//! watchdog renews its holdings many per call.

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;

use super::{Attempt, Giveback, KindRules};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, ReleaseReply, TransferReply};

/// See the module documentation.
#[derive(Debug)]
pub(super) struct Exclusive;

impl KindRules for Exclusive {
    fn channel(&self, name: &str) -> String {
        keys::channel(name)
    }

    fn takes_turns(&self) -> bool {
        true
    }

    fn transfer(
        &self,
        shared: &Shared,
        g: Giveback,
        to: Attempt,
        count: bool,
    ) -> LocalBoxFuture<'static, RedisResult<TransferReply>> {
        let via = shared.coalescer.clone();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        async move {
            let call = wire::Transfer {
                release: release_of(&g, latch_ttl_ms),
                to: &to.field,
                lease_ms: to.lease_ms,
                token_ttl_ms: to.token_ttl_ms,
                count,
                delay_ms: to.delay_ms,
            };
            via.call(&call).await
        }
        .boxed_local()
    }

    fn renewal(&self, _kind: AcquireKind) -> Renewal {
        Renewal::Hash
    }

    fn acquire(
        &self,
        shared: &Shared,
        a: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        let via = shared.coalescer.clone();
        async move {
            let call = wire::Acquire {
                name: &a.name,
                field: &a.field,
                lease_ms: a.lease_ms,
                token_ttl_ms: a.token_ttl_ms,
                new_owner: a.new_owner,
                reentrant: a.reentrant,
                delay_ms: a.delay_ms,
            };
            via.call(&call).await
        }
        .boxed_local()
    }

    fn release(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>> {
        let via = shared.coalescer.clone();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        async move { via.call(&release_of(&g, latch_ttl_ms)).await }.boxed_local()
    }
}

/// The release script call for `g`.
fn release_of(g: &Giveback, latch_ttl_ms: u64) -> wire::Release<'_> {
    wire::Release {
        name: &g.name,
        field: &g.field,
        lease_ms: g.lease_ms,
        request_id: &g.request_id,
        latch_ttl_ms,
        retry: g.retry,
    }
}
