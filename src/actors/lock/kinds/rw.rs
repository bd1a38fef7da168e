//! The read-write lock (Redisson `getReadWriteLock`): many readers or one writer,
//! both sides served by one actor per name so that each sees the other's local
//! holders. Every waiter listens on the lock's read-write channel; a write release
//! wakes all of them. Each holder is renewed by a call of its own, since a reader's
//! holds have timeout keys of their own.
//!
//! Its decisions are the defaults of [`Policy`] (the head waiter tries; a busy
//! answer is followed by listening), and its only state is which unlock messages
//! of its own are still to come.

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;

use super::decisions::Freed;
use super::echo::Echo;
use super::{AfterRelease, Attempt, Giveback, Policy, Scripts};
use crate::actors::lock::waiters::WaiterQueue;
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::Heard;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, ReleaseReply};

/// The read-write lock's state: its own unlock messages still to come.
#[derive(Debug, Default)]
pub(in crate::actors::lock) struct ReadWrite {
    /// Its own unlock messages still to come back.
    echo: Echo,
}

impl Policy for ReadWrite {
    fn scripts(&self) -> &'static dyn Scripts {
        &ReadWriteScripts
    }

    /// "Wake all" and "wake one" both mean: let the head waiter try. Each
    /// grant lets the next head try at once, so after a write release every
    /// local reader gets its turn, one short round trip apart.
    fn heard(&mut self, _channel: &str, _name: &str, _queue: &mut WaiterQueue) -> Heard {
        match self.echo.heard() {
            true => Heard::Nothing,
            false => Heard::Wake,
        }
    }

    fn subscribing(&mut self) {
        self.echo.forget();
    }

    fn resync(&mut self, _queue: &mut WaiterQueue) {
        self.echo.forget();
    }

    fn restarting(&mut self, _queue: &mut WaiterQueue) {
        self.echo.forget();
    }

    fn released(&mut self, freed: Freed) -> AfterRelease {
        if freed.published && freed.listening {
            self.echo.published();
        }
        AfterRelease::Nothing
    }
}

/// The read-write lock's scripts.
#[derive(Debug)]
pub(super) struct ReadWriteScripts;

impl Scripts for ReadWriteScripts {
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
        async move { rw_release(&mut conn, &g, latch_ttl_ms, false).await }.boxed_local()
    }

    /// One release undoes exactly what the acquisition did: an owner that
    /// holds a side of the lock is always let in again (its read beside its
    /// reads or its write, its write beside its write), one hold more then one
    /// less; an owner that holds nothing is either granted (then released) or
    /// refused (then its release changes nothing). Sent as the exclusive
    /// lock's is: one `EVAL`, never resent.
    fn undo_abandoned(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> Option<LocalBoxFuture<'static, RedisResult<ReleaseReply>>> {
        let mut conn = shared.node.conn();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        Some(async move { rw_release(&mut conn, &g, latch_ttl_ms, true).await }.boxed_local())
    }
}

/// Gives back one hold of `g`'s side; `once`: as one `EVAL`, never resent
/// ([`wire::call_once`]).
async fn rw_release(
    conn: &mut crate::node::Conn,
    g: &Giveback,
    latch_ttl_ms: u64,
    once: bool,
) -> RedisResult<ReleaseReply> {
    let (name, field, request_id) = (&*g.name, &*g.field, &*g.request_id);
    if g.kind == AcquireKind::Write {
        let call = wire::WriteRelease {
            name,
            field,
            lease_ms: g.lease_ms,
            request_id,
            latch_ttl_ms,
        };
        send(conn, &call, once).await
    } else {
        let call = wire::ReadRelease {
            name,
            field,
            request_id,
            latch_ttl_ms,
        };
        send(conn, &call, once).await
    }
}

/// Sends `call` as one `EVAL` never resent (`once`), or as any script call.
async fn send<S: wire::ScriptCall>(
    conn: &mut crate::node::Conn,
    call: &S,
    once: bool,
) -> RedisResult<S::Reply> {
    match once {
        true => wire::call_once(conn, call).await,
        false => wire::call(conn, call).await,
    }
}
