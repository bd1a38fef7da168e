//! [`PermitSemaphoreHandle`], a semaphore whose permits carry an id and expire, in
//! Redisson's `RPermitExpirableSemaphore` layout, the [`PermitSemaphore`] message
//! that makes one, and [`PermitGuard`], the permits one take got.
//!
//! The available permits are a string at the name, as for the plain semaphore; the
//! permits taken are a sorted set `{name}:timeout` of permit id -> expiry. Two
//! deliberate differences from Redisson (docs/protocol.md): expiries are on the
//! Redis clock (Redisson computes them from each client's clock), and a permit
//! taken without a lease is renewed by the watchdog and expires a watchdog lease
//! after its holder stops renewing it (Redisson's never expires), so the permits
//! of a process that died come back within one lease. A holder learns through
//! [`PermitGuard::lost`] when its permits expired or were reclaimed.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::semaphore::{add, check_permits, try_set};
use crate::actors::semaphore::permits::{Granted, ReturnPermits};
use crate::actors::semaphore::{take, Expirable};
use crate::actors::shared::Shared;
use crate::actors::waiting::{self, SyncActor};
use crate::error::{LockError, LostReason};
use crate::guard::ReleaseOutcome;
use crate::reply::{ask_now, within, Giving, Reply};
use crate::signal::LostWatch;
use crate::sync_view::SynchronizerKind;
use crate::wire::{self, ExpirableAcquire, ExpirableTake};

super::manager::handle_message! {
    /// Get a [`PermitSemaphoreHandle`] on the permit-expirable semaphore `name`
    /// (checked now, once, by the rules of a lock name).
    PermitSemaphore => PermitSemaphoreHandle, expirable
}

/// A handle on one permit-expirable semaphore: cheap to clone, usable from any
/// thread.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> Result<(), lockwarden::LockError> {
/// use std::time::Duration;
/// let crawl = manager.send(lockwarden::PermitSemaphore::new("crawlers")).await??;
/// crawl.try_set_permits(4).await?;
/// let permit = crawl.acquire(1, None).await?; // renewed while held
/// // ... if this process dies, the permit comes back within one watchdog lease ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PermitSemaphoreHandle {
    name: Arc<str>,
    actor: Addr<SyncActor<Expirable>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PermitSemaphoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitSemaphoreHandle")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PermitSemaphoreHandle {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the number of permits if the semaphore has none yet; answers whether
    /// it did. Zero is allowed.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool, LockError> {
        try_set(
            &self.shared,
            &self.name,
            permits,
            SynchronizerKind::PermitSemaphore,
        )
        .await
    }

    /// Adds `permits` (at least 1) and wakes waiters; answers how many are
    /// available now.
    pub async fn add_permits(&self, permits: u32) -> Result<u64, LockError> {
        add(&self.actor.clone().recipient(), permits).await
    }

    /// Whether the semaphore's key exists (see
    /// [`SemaphoreHandle::exists`](crate::SemaphoreHandle::exists)).
    pub async fn exists(&self) -> Result<bool, LockError> {
        let mut conn = self.shared.node.conn();
        Ok(wire::key_exists(&mut conn, &self.name).await?)
    }

    /// How many permits are available now, after giving back every expired one.
    pub async fn available(&self) -> Result<u64, LockError> {
        let mut conn = self.shared.node.conn();
        // Taking no permits records nothing under the op id: a fresh one.
        let op = waiting::op_id();
        let call = ExpirableAcquire {
            name: &self.name,
            ids: &[],
            lease_ms: 1,
            once: waiting::once(&self.shared.config, &op),
        };
        match wire::call(&mut conn, &call).await? {
            ExpirableTake::Taken { left } => Ok(left),
            ExpirableTake::Short { available, .. } => Ok(available),
        }
    }

    /// Takes `permits`, waiting for as long as it takes. With a `lease` they
    /// expire that long after the grant (on the Redis clock); without one the
    /// watchdog renews them while the guard lives.
    pub async fn acquire(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> Result<PermitGuard, LockError> {
        self.take(permits, None, lease).await
    }

    /// As [`acquire`](Self::acquire), waiting at most `wait`
    /// ([`LockError::Timeout`] then).
    pub async fn acquire_within(
        &self,
        permits: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<PermitGuard, LockError> {
        self.take(permits, Some(wait), lease).await
    }

    /// One attempt: `Ok(None)` when fewer than `permits` are free, or when other
    /// waiters of this process queue for them already.
    pub async fn try_acquire(
        &self,
        permits: u32,
        lease: Option<Duration>,
    ) -> Result<Option<PermitGuard>, LockError> {
        match self.take(permits, Some(Duration::ZERO), lease).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn take(
        &self,
        permits: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<PermitGuard, LockError> {
        check_permits(permits, 1)?;
        if let Some(lease) = lease {
            super::admin::check_lease(&self.shared.config, lease)?;
        }
        let taker = self.actor.clone().recipient();
        let grant = take(&taker, permits, wait, lease).await?;
        let Granted { ids, epoch, lost } = grant.permits.ok_or(LockError::Stopped)?;
        Ok(PermitGuard {
            giver: self.actor.clone().recipient(),
            name: self.name.clone(),
            ids,
            epoch,
            lease,
            lost,
            released: false,
            release_wait: self.shared.config.release_wait,
        })
    }
}

/// Permits taken from a permit-expirable semaphore, each with its id. Release
/// them with [`release`](PermitGuard::release) to learn whether they were still
/// held; dropping the guard gives them back in the background.
#[must_use = "a permit guard that is not kept gives its permits back at once: bind it for as long as you need them"]
pub struct PermitGuard {
    giver: Recipient<ReturnPermits>,
    name: Arc<str>,
    ids: Vec<String>,
    epoch: u64,
    lease: Option<Duration>,
    lost: LostWatch,
    released: bool,
    /// How long a release waits for its answer ([`Config::release_wait`](crate::Config::release_wait)).
    release_wait: Duration,
}

impl std::fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PermitGuard")
            .field("name", &self.name)
            .field("permits", &self.ids.len())
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl PermitGuard {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The permits' ids (32 hex digits each, as Redisson spells them).
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// The lease they were taken with; `None` when the watchdog renews them.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// Why the permits were lost, if they were lost while held.
    pub fn is_lost(&self) -> Option<LostReason> {
        self.lost.lost()
    }

    /// Resolves when the permits are lost while held (`LeaseExpired`: the lease
    /// ran out; `OwnerGone`: a renewal found them expired or reclaimed;
    /// `Unreachable`: no renewal reached Redis within the lease). Never resolves
    /// after a release.
    pub async fn lost(&self) -> LostReason {
        match self.lost.ended().await {
            Some(reason) => reason,
            None if self.released => std::future::pending().await,
            None => LostReason::ManagerStopped,
        }
    }

    /// Gives the permits back: [`ReleaseOutcome::Released`] once Redis has
    /// them. Fails with [`LockError::Lost`] if they were lost while held
    /// (whatever was still taken is given back all the same).
    ///
    /// It answers within [`Config::release_wait`](crate::Config::release_wait)
    /// (2.5 s by default) whatever Redis does: past it, with
    /// [`ReleaseOutcome::Pending`] (counted in
    /// `lockwarden_releases_pending_total{of="permits"}`), and the give-back
    /// goes on behind the call under one op id, its outcome logged when it
    /// comes. Permits whose give-back never lands expire with their lease (a
    /// watchdog lease once nothing renews them).
    pub async fn release(self) -> Result<ReleaseOutcome, LockError> {
        let bound = self.release_wait;
        self.release_within(bound).await
    }

    /// [`release`](PermitGuard::release), answering within `bound` instead of
    /// the configured [`Config::release_wait`](crate::Config::release_wait).
    pub async fn release_within(mut self, bound: Duration) -> Result<ReleaseOutcome, LockError> {
        // Marked first: the drop sends nothing more, whatever becomes of this
        // future.
        self.released = true;
        let epoch = self.epoch;
        let answer = ask_now(&self.giver, |reply| ReturnPermits { epoch, reply });
        let giving = Giving {
            of: "permits",
            name: self.name.clone(),
            if_it_fails: "permits not given back expire with their lease",
        };
        let given = within(bound, giving, answer).await?;
        Ok(match given {
            Some(()) => ReleaseOutcome::Released,
            None => ReleaseOutcome::Pending { waited: bound },
        })
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if !self.released {
            self.giver.do_send(ReturnPermits {
                epoch: self.epoch,
                reply: Reply::nobody(),
            });
        }
    }
}
