//! [`LockHandle`], an addr-based handle on one lock name and kind, and [`Handle`],
//! the manager's message that makes one.
//!
//! A handle is the everyday shape for code that takes the same lock again and
//! again: the name is checked once, and each call is an [`Acquire`] (or an
//! [`Inspect`], a [`ForceUnlock`]) sent to the manager on the caller's behalf.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::Either;

use super::acquire::Acquire;
use super::inspect::{ForceUnlock, Inspect};
use super::manager::LockManager;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::keys::Owner;
use crate::kind::{impl_kind_setters, AcquireKind};
use crate::view::LockInfo;

/// Get a [`LockHandle`] for one lock name (validated now, once) and kind.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<LockHandle, LockError>")]
pub struct Handle {
    /// The lock name.
    name: String,
    /// What the handle's acquisitions take.
    kind: AcquireKind,
    /// `false`: every acquisition is non-reentrant.
    reentrant: bool,
}

impl Handle {
    /// A handle on the exclusive lock `name`.
    pub fn new(name: impl Into<String>) -> Handle {
        Handle {
            name: name.into(),
            kind: AcquireKind::Exclusive,
            reentrant: true,
        }
    }

    /// A handle whose acquisitions are non-reentrant
    /// ([`Acquire::non_reentrant`]): Redisson's `getNonReentrantLock`, and with
    /// [`fair`](Handle::fair) its `getNonReentrantFairLock`. A read or write
    /// handle is refused with [`LockError::InvalidRequest`]. Defaults to reentrant.
    #[doc(alias = "getNonReentrantLock")]
    #[doc(alias = "getNonReentrantFairLock")]
    pub fn non_reentrant(mut self) -> Handle {
        self.reentrant = false;
        self
    }
}

impl_kind_setters!(Handle, "A handle whose acquisitions take");

impl Handler<Handle> for LockManager {
    type Result = Result<LockHandle, LockError>;

    fn handle(&mut self, msg: Handle, ctx: &mut Context<Self>) -> Self::Result {
        self.check_name(&msg.name)?;
        if !msg.reentrant && !msg.kind.may_refuse_reentry() {
            return Err(LockError::InvalidRequest(
                super::acquire::RW_ALWAYS_REENTRANT,
            ));
        }
        Ok(LockHandle {
            manager: ctx.address(),
            name: Arc::from(msg.name),
            kind: msg.kind,
            reentrant: msg.reentrant,
        })
    }
}

/// A handle on one lock name and kind, for code that takes the same lock again and
/// again.
///
/// Cheap to clone; it holds the manager's address, the (already validated) name and
/// the kind its acquisitions take ([`Handle::fair`](crate::Handle::fair),
/// [`read`](crate::Handle::read), [`write`](crate::Handle::write)).
#[derive(Clone, Debug)]
pub struct LockHandle {
    /// The manager that serves it.
    manager: Addr<LockManager>,
    /// The lock name.
    name: Arc<str>,
    /// What its acquisitions take.
    kind: AcquireKind,
    /// `false`: its acquisitions are non-reentrant.
    reentrant: bool,
}

impl LockHandle {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What its acquisitions take.
    pub fn kind(&self) -> AcquireKind {
        self.kind
    }

    /// Waits until the lock is acquired, in watchdog mode, for a new owner.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_with(|a| a).await
    }

    /// Makes one attempt: `Ok(None)` when someone else holds the lock.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        match self.acquire_with(|a| a.wait(Duration::ZERO)).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acquires with options: `handle.acquire_with(|a| a.wait(d).lease(l).owner(o))`
    /// (the handle's kind, and non-reentrancy if it has it, are set first).
    pub async fn acquire_with(
        &self,
        options: impl FnOnce(Acquire) -> Acquire,
    ) -> Result<LockGuard, LockError> {
        let first = Acquire::new(&*self.name).kind(self.kind);
        let first = if self.reentrant {
            first
        } else {
            first.non_reentrant()
        };
        let msg = options(first);
        self.manager.send(msg).await?
    }

    /// Deletes the lock whoever holds it, whatever its kind, and wakes its waiters
    /// (a fair lock's head, all of a read-write lock's). Returns whether there was
    /// a lock to delete. Its holders learn of the loss at their next renewal.
    pub async fn force_unlock(&self) -> Result<bool, LockError> {
        self.manager.send(ForceUnlock::new(&*self.name)).await?
    }

    /// Who holds the lock now, with hold counts and the remaining TTL.
    pub async fn inspect(&self) -> Result<LockInfo, LockError> {
        self.manager.send(Inspect::new(&*self.name)).await?
    }

    /// Whether anyone holds the lock now (one round trip; Redisson's `isLocked`).
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        Ok(self.inspect().await?.is_held())
    }

    /// How long until the lock expires unless renewed; `None` when it is free or
    /// has no expiry (one round trip; Redisson's `remainTimeToLive`).
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>, LockError> {
        Ok(self.inspect().await?.ttl)
    }

    /// Whether `owner`, of this manager, holds the lock now (either side of a
    /// read-write lock; one round trip; Redisson's `isHeldByThread`).
    pub async fn is_held_by(&self, owner: Owner) -> Result<bool, LockError> {
        let id = owner.id().to_string();
        Ok(self.inspect().await?.holders.iter().any(|h| {
            let field = h
                .owner_field
                .strip_suffix(":write")
                .unwrap_or(&h.owner_field);
            h.this_manager && field.rsplit(':').next() == Some(id.as_str())
        }))
    }

    /// Runs `work` while holding the lock, and releases it on every path: when
    /// `work` ends, when it panics, and when this future is dropped. `work` gets
    /// the acquisition's fencing token. If the lock is lost while `work` runs,
    /// `work` is dropped (cancelled at its next `.await`) and the answer is
    /// [`LockError::Lost`]; a release that finds the lock no longer held is an
    /// error too, since `work` may then have run without the lock.
    ///
    /// ```no_run
    /// # async fn demo(orders: lockwarden::LockHandle) -> Result<(), lockwarden::LockError> {
    /// let total = orders
    ///     .with_lock(|token| async move {
    ///         // write to the protected resource, passing `token` along
    ///         token * 2
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<T, F, Fut>(&self, work: F) -> Result<T, LockError>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let out = {
            let work = std::pin::pin!(work(guard.fencing_token()));
            let lost = std::pin::pin!(guard.lost());
            match futures::future::select(work, lost).await {
                Either::Left((out, _)) => out,
                Either::Right((reason, _)) => return Err(LockError::Lost(reason)),
            }
        };
        guard.release().await?;
        Ok(out)
    }
}
