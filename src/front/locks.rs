//! [`Locks`]: the manager's everyday calls as methods on its address, without the
//! double `??` of an actix `send`.
//!
//! `manager.send(Acquire::new(n)).await??` answers twice: the outer error is the
//! mailbox's (the manager stopped), the inner one the lock's. Both end up as a
//! [`LockError`] here ([`LockError::Stopped`] for the first), so
//! `manager.acquire(Acquire::new(n)).await?` is all a caller writes. The message
//! forms stay first-class: these methods only send them.

use std::future::Future;
use std::time::Duration;

use actix::Addr;

use super::acquire::Acquire;
use super::fenced::FencedWrite;
use super::handle::{Handle, LockHandle};
use super::latch::{Latch, LatchHandle};
use super::manager::LockManager;
use super::ping::Ping;
use super::semaphore::{Semaphore, SemaphoreHandle};
use super::shutdown::Shutdown;
use crate::error::LockError;
use crate::guard::LockGuard;

/// The manager's everyday calls as methods on its address: each sends the message
/// form and answers one [`LockError`] ([`LockError::Stopped`] when the manager is
/// gone), so one `?` does where `send(..).await??` needed two.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> Result<(), lockwarden::LockError> {
/// use std::time::Duration;
/// use lockwarden::{Acquire, Locks};
/// let guard = manager.acquire(Acquire::new("orders:42").wait(Duration::from_secs(5))).await?;
/// guard.release().await?;
/// let orders = manager.handle("orders:42").await?;
/// # Ok(()) }
/// ```
///
/// With the `actix-web` feature a [`LockError`] is an actix-web `ResponseError`,
/// so in a handler the same `?` answers the request with its status (503 for a
/// wait that ran out, 409 for a stale fencing token ...: the table is in the
/// README, "With actix-web", and `examples/web.rs` shows the handlers).
pub trait Locks {
    /// Sends `request` and answers with its guard or the one error that stopped it.
    fn acquire(&self, request: Acquire) -> impl Future<Output = Result<LockGuard, LockError>>;

    /// A [`LockHandle`] on the exclusive lock `name` (checked now, once).
    fn handle(
        &self,
        name: impl Into<String>,
    ) -> impl Future<Output = Result<LockHandle, LockError>>;

    /// A [`SemaphoreHandle`] on the semaphore `name` (checked now, once).
    fn semaphore(
        &self,
        name: impl Into<String>,
    ) -> impl Future<Output = Result<SemaphoreHandle, LockError>>;

    /// A [`LatchHandle`] on the count-down latch `name` (checked now, once).
    fn latch(
        &self,
        name: impl Into<String>,
    ) -> impl Future<Output = Result<LatchHandle, LockError>>;

    /// Whether the manager reaches Redis now: the round trip of one `PING` on its
    /// command connection, or why there was none within `within` (see [`Ping`]).
    fn ping(&self, within: Duration) -> impl Future<Output = Result<Duration, LockError>>;

    /// Sends `write` and answers the command's reply, or why it was refused
    /// ([`LockError::StaleToken`] when a later holder wrote first; see
    /// [`FencedWrite`]).
    fn fenced_write(
        &self,
        write: FencedWrite,
    ) -> impl Future<Output = Result<redis::Value, LockError>>;

    /// Hands over before the process exits: waiters are answered
    /// [`LockError::ShuttingDown`], held locks are given back in Redis and
    /// leaders deposed, within
    /// [`Config::shutdown_timeout`](crate::Config::shutdown_timeout) (3 s by
    /// default); answers whether all of it was done in time (see [`Shutdown`]:
    /// a guard held past it no longer holds its lock). Call it after
    /// actix-web's `HttpServer::run().await`. `false` also when the manager is
    /// gone already.
    fn shutdown(&self) -> impl Future<Output = bool>;
}

impl Locks for Addr<LockManager> {
    fn acquire(&self, request: Acquire) -> impl Future<Output = Result<LockGuard, LockError>> {
        let sent = self.send(request);
        async move { sent.await? }
    }

    fn handle(
        &self,
        name: impl Into<String>,
    ) -> impl Future<Output = Result<LockHandle, LockError>> {
        let sent = self.send(Handle::new(name));
        async move { sent.await? }
    }

    fn semaphore(
        &self,
        name: impl Into<String>,
    ) -> impl Future<Output = Result<SemaphoreHandle, LockError>> {
        let sent = self.send(Semaphore::new(name));
        async move { sent.await? }
    }

    fn latch(
        &self,
        name: impl Into<String>,
    ) -> impl Future<Output = Result<LatchHandle, LockError>> {
        let sent = self.send(Latch::new(name));
        async move { sent.await? }
    }

    fn ping(&self, within: Duration) -> impl Future<Output = Result<Duration, LockError>> {
        let sent = self.send(Ping::new().within(within));
        async move { sent.await? }
    }

    fn fenced_write(
        &self,
        write: FencedWrite,
    ) -> impl Future<Output = Result<redis::Value, LockError>> {
        let sent = self.send(write);
        async move { sent.await? }
    }

    fn shutdown(&self) -> impl Future<Output = bool> {
        let sent = self.send(Shutdown::new());
        async move { sent.await.unwrap_or(false) }
    }
}
