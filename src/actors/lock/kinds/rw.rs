//! The read-write lock (Redisson `getReadWriteLock`): many readers or one writer,
//! both sides served by one actor per name so that each sees the other's local
//! holders. Every waiter listens on the lock's read-write channel; a write release
//! wakes all of them. Each holder is renewed by a call of its own, since a reader's
//! holds have timeout keys of their own.

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;

use super::{Attempt, Giveback, KindRules};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, ReleaseReply};

/// See the module documentation.
#[derive(Debug)]
pub(super) struct ReadWrite;

impl KindRules for ReadWrite {
    fn channel(&self, name: &str) -> String {
        keys::rw_channel(name)
    }

    fn renewal(&self, kind: AcquireKind) -> Renewal {
        Renewal::ReadWrite {
            write: kind == AcquireKind::Write,
        }
    }

    fn acquire(
        &self,
        shared: &Shared,
        a: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        let mut conn = shared.node.conn();
        async move {
            let (name, field, lease_ms) = (&*a.name, &*a.field, a.lease_ms);
            let token_ttl_ms = a.token_ttl_ms;
            if a.kind == AcquireKind::Write {
                let call = wire::WriteAcquire {
                    name,
                    field,
                    lease_ms,
                    token_ttl_ms,
                };
                wire::call(&mut conn, &call).await
            } else {
                let call = wire::ReadAcquire {
                    name,
                    field,
                    lease_ms,
                    token_ttl_ms,
                };
                wire::call(&mut conn, &call).await
            }
        }
        .boxed_local()
    }

    fn release(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>> {
        let mut conn = shared.node.conn();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        async move {
            let (name, field, request_id) = (&*g.name, &*g.field, &*g.request_id);
            if g.kind == AcquireKind::Write {
                let call = wire::WriteRelease {
                    name,
                    field,
                    lease_ms: g.lease_ms,
                    request_id,
                    latch_ttl_ms,
                };
                wire::call(&mut conn, &call).await
            } else {
                let call = wire::ReadRelease {
                    name,
                    field,
                    request_id,
                    latch_ttl_ms,
                };
                wire::call(&mut conn, &call).await
            }
        }
        .boxed_local()
    }
}
