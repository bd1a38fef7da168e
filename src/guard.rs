//! [`LockGuard`], what a successful acquisition gives back, and the messages and
//! answers that go with it ([`Release`], [`ReleaseOutcome`], [`LockLost`]).
//!
//! A guard holds a recipient of its lock's actor, which keeps that actor alive for
//! as long as the guard lives. Releasing is a message to that actor; dropping a
//! guard that was not released only queues that message (it never blocks the
//! runtime), so a guard dropped on any path, including a panic unwinding, gives its
//! hold back. The guard names no actor type: the lock actor, which makes guards,
//! sits above this file.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use actix::{Message, Recipient};

use crate::error::{LockError, LostReason};
use crate::keys::Owner;
use crate::kind::AcquireKind;
use crate::reply::{ask_now, within, Giving, Reply};
use crate::signal::LostWatch;

/// Sent to the actor registered with [`Acquire::on_lost`](crate::Acquire::on_lost) when a lock it holds is
/// lost while held (the same moment [`LockGuard::lost`] resolves).
#[derive(actix::Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
#[non_exhaustive]
pub struct LockLost {
    /// The lock name.
    pub name: String,
    /// The owner that held it.
    pub owner: Owner,
    /// Its owner field.
    pub owner_field: String,
    /// Why it was lost.
    pub reason: LostReason,
}

/// Give back one hold (sent by a guard to its lock's actor, always with
/// `do_send`: see `reply.rs`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Release {
    /// The holding the guard belongs to.
    pub(crate) epoch: u64,
    /// Where the outcome goes.
    pub(crate) reply: Reply<Result<ReleaseOutcome, LockError>>,
}

/// What a release did: a lock guard's, or a semaphore guard's
/// ([`SemaphoreGuard`](crate::SemaphoreGuard), [`PermitGuard`](crate::PermitGuard)),
/// which answers `Released` or `Pending`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// That was the owner's last hold (of this kind). An exclusive, fair or write
    /// lock is now free and a waiter was woken (a writer that still holds read
    /// holds keeps reading); after a read hold, other readers may still hold it.
    /// Of a semaphore guard: its permits are back in Redis.
    Released,
    /// The owner re-entered the lock and still holds it this many times.
    StillHeld {
        /// Holds the owner has left.
        holds: u32,
    },
    /// Redis did not answer within the call's bound ([`Config::release_wait`](crate::Config::release_wait),
    /// or [`LockGuard::release_within`]): the release goes on in the
    /// background, retried until Redis answers (a frozen server, a failover),
    /// and its outcome is logged; counted in `lockwarden_releases_pending_total`
    /// (`of="lock"`, or `of="permits"` for a semaphore guard).
    /// The lock is free once it lands, or when its lease runs out at worst;
    /// a semaphore's permits are back once it lands (sent under one op id, a
    /// give-back counts once however often it is sent).
    /// The caller's work under the lock is over either way, so a request path
    /// can answer.
    Pending {
        /// How long the call waited.
        waited: Duration,
    },
}

/// Proof of one hold of a lock, given by a successful acquisition.
///
/// Release it with [`release`](LockGuard::release) to learn the outcome; dropping
/// it releases in the background. [`fencing_token`](LockGuard::fencing_token) is a
/// number that grows with every acquisition of this lock: pass it to the resource
/// you protect so that it can refuse a stale holder.
///
/// A guard belongs to the lock actor of its name and kind, and to one holding of
/// its owner there: a read guard can only give back a read hold, a fair guard only
/// a hold of the fair lock.
///
/// A guard held past its manager's [`Shutdown`](crate::Shutdown) no longer holds
/// its lock: the shutdown gave it back in Redis (another process may hold it
/// now), [`lost`](LockGuard::lost) resolves with
/// [`LostReason::ShutDown`], and releasing or
/// dropping the guard changes nothing. Stop the work a guard protects before
/// shutting down.
///
/// A guard that is not kept is released at once, so the compiler warns about one
/// left unused:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// async fn oops(m: actix::Addr<lockwarden::LockManager>) -> Result<(), Box<dyn std::error::Error>> {
///     m.send(lockwarden::Acquire::new("orders:42")).await??; // dropped: released at once
///     Ok(())
/// }
/// ```
#[must_use = "a guard that is not kept releases its lock at once: bind it (`let guard = ...`) for as long as you need the lock"]
pub struct LockGuard {
    /// The lock's actor; keeps it alive while the guard lives.
    lock: Recipient<Release>,
    /// The lock name.
    name: Arc<str>,
    /// What it holds.
    kind: AcquireKind,
    /// The owner holding it.
    owner: Owner,
    /// The owner field in the lock hash.
    owner_field: Arc<str>,
    /// The fencing token of this acquisition.
    token: u64,
    /// The explicit lease, or `None` for watchdog mode.
    lease: Option<Duration>,
    /// Which holding of the lock this guard belongs to.
    epoch: u64,
    /// Set once the guard was released (by `release` or drop).
    released: AtomicBool,
    /// Becomes `Some` when the lock is lost while held.
    lost: LostWatch,
    /// Its place in the unit of work of the task it was granted to
    /// (`src/unit.rs`): its end takes it out.
    unit: Option<crate::unit::Unit>,
    /// How long `release` waits for its answer ([`Config::release_wait`](crate::Config::release_wait)).
    release_wait: Duration,
    /// False when no replica confirmed the grant although confirmation was on.
    confirmed: bool,
}

impl LockGuard {
    #[allow(clippy::too_many_arguments)] // one private constructor, called in one place
    pub(crate) fn new(
        lock: Recipient<Release>,
        name: Arc<str>,
        kind: AcquireKind,
        owner: Owner,
        owner_field: Arc<str>,
        token: u64,
        lease: Option<Duration>,
        epoch: u64,
        lost: LostWatch,
    ) -> LockGuard {
        LockGuard {
            lock,
            name,
            kind,
            owner,
            owner_field,
            token,
            lease,
            epoch,
            released: AtomicBool::new(false),
            lost,
            unit: None,
            release_wait: crate::config::DEFAULT_RELEASE_WAIT,
            confirmed: true,
        }
    }

    /// The guard of a grant that a replica confirmed (`true`) or that went
    /// unconfirmed while confirmation was on (`false`).
    pub(crate) fn confirmed_by_replica(mut self, confirmed: bool) -> LockGuard {
        self.confirmed = confirmed;
        self
    }

    /// Whether this grant was confirmed as replica confirmation asks
    /// ([`Config::sync_replicas`](crate::Config::sync_replicas)). `false` when
    /// confirmation is on but no replica could answer when the lock was granted
    /// (none attached, every one frozen, cut off or lagging): the lock is held,
    /// but a failover before a replica receives the grant can let another
    /// holder in (this holder is then told, through
    /// [`LockGuard::lost`](LockGuard::lost)). Such grants are also counted in
    /// `lockwarden_unconfirmed_changes_total{op="grant"}`;
    /// [`Config::refuse_unconfirmed_grants`](crate::Config::refuse_unconfirmed_grants)
    /// refuses them instead. `true` when replicas confirmed it, and when
    /// confirmation is off (nothing was asked:
    /// [`GetReplicaConfirmation`](crate::GetReplicaConfirmation) says so).
    pub fn confirmed(&self) -> bool {
        self.confirmed
    }

    /// Sets how long `release` waits (the manager's [`Config::release_wait`](crate::Config::release_wait)).
    pub(crate) fn set_release_wait(&mut self, wait: Duration) {
        self.release_wait = wait;
    }

    /// Counts this hold in the unit of work of `task` while the guard lives.
    pub(crate) fn join_unit(&mut self, task: tokio::task::Id) {
        self.unit = Some(crate::unit::Unit::join(task, self.owner_field.clone()));
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What this guard holds: an exclusive or fair lock, or a read or write hold.
    pub fn kind(&self) -> AcquireKind {
        self.kind
    }

    /// The owner that holds the lock through this guard.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// The field naming this holder in the lock hash: `<client id>:<owner>`, with
    /// `:write` after it for a write hold.
    pub fn owner_field(&self) -> &str {
        &self.owner_field
    }

    /// The fencing token of this acquisition: larger than that of every earlier
    /// acquisition of this lock, by any client.
    ///
    /// Every lockwarden lock is a fenced lock: what Redisson's `RFencedLock` gives
    /// from `lockAndGetToken` and `tryLockAndGetToken` is this number, on every
    /// kind of lock, from the same counter (`redisson_lock_token:{<name>}`, whose
    /// value is what Redisson's `getToken()` reads). A resource protected by the
    /// lock should refuse a write whose token is below the newest it has seen;
    /// docs/faults.md says how the tokens stay increasing across restarts and
    /// failovers.
    #[doc(alias = "RFencedLock")]
    #[doc(alias = "lockAndGetToken")]
    #[doc(alias = "tryLockAndGetToken")]
    #[doc(alias = "fenced lock")]
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The explicit lease this guard was acquired with, or `None` when the watchdog
    /// renews it.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// Why the lock was lost, if it was lost while held; `None` while it is held.
    pub fn is_lost(&self) -> Option<LostReason> {
        self.lost.lost()
    }

    /// Resolves when the lock is lost while held, with the reason. It does not
    /// resolve while the lock is held; after a release it never resolves.
    pub async fn lost(&self) -> LostReason {
        match self.lost.ended().await {
            Some(reason) => reason,
            None => {
                if self.released.load(Ordering::Acquire) {
                    // Released: the lock was never lost, so this never resolves.
                    std::future::pending::<()>().await;
                }
                LostReason::ManagerStopped
            }
        }
    }

    /// Gives back this hold. Reports whether the lock is now free or the owner
    /// still holds it through other guards; fails with [`LockError::Lost`] if the
    /// lock was lost meanwhile, and [`LockError::NotHeld`] if Redis shows this
    /// owner no longer holds it.
    ///
    /// It takes the guard, so a released guard cannot be used again (its token
    /// read, or a second release tried):
    ///
    /// ```compile_fail
    /// async fn twice(guard: lockwarden::LockGuard) {
    ///     let _ = guard.release().await;
    ///     let _ = guard.fencing_token(); // moved: does not compile
    /// }
    /// ```
    ///
    /// It answers within [`Config::release_wait`](crate::Config::release_wait)
    /// (2.5 s by default) whatever Redis does: past it, with
    /// [`ReleaseOutcome::Pending`], and the release goes on in the background.
    pub async fn release(self) -> Result<ReleaseOutcome, LockError> {
        let bound = self.release_wait;
        self.release_within(bound).await
    }

    /// [`release`](LockGuard::release), answering within `bound` instead of the
    /// configured [`Config::release_wait`](crate::Config::release_wait).
    pub async fn release_within(self, bound: Duration) -> Result<ReleaseOutcome, LockError> {
        // Marked first: whatever happens to this future, the guard's drop (at the
        // end of this call, or when the future is dropped) sends nothing more.
        self.released.store(true, Ordering::Release);
        let epoch = self.epoch;
        let answer = ask_now(&self.lock, |reply| Release { epoch, reply });
        let giving = Giving {
            of: "lock",
            name: self.name.clone(),
            if_it_fails: "the lease frees the lock when it runs out",
        };
        let outcome = within(bound, giving, answer).await?;
        Ok(outcome.unwrap_or(ReleaseOutcome::Pending { waited: bound }))
    }
}

impl LockGuard {
    /// Gives back this hold without taking the guard (a RedLock's holds that are
    /// left once the RedLock is lost): the release is queued at once, so a
    /// [`Settle`](crate::Settle) sent after this call waits for it. `None` if the
    /// guard was released (or given back) already.
    pub(crate) fn give_back(
        &self,
    ) -> Option<impl std::future::Future<Output = Result<ReleaseOutcome, LockError>> + Send + 'static>
    {
        if self.released.swap(true, Ordering::AcqRel) {
            return None;
        }
        let epoch = self.epoch;
        Some(crate::reply::ask_now(&self.lock, move |reply| Release {
            epoch,
            reply,
        }))
    }

    /// Whether it was released or given back (nothing more is sent for it).
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            // Only queues a message: a drop must never block the runtime.
            self.lock.do_send(Release {
                epoch: self.epoch,
                reply: Reply::nobody(),
            });
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is left out on purpose: it is a capability for the resource.
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("released", &self.released.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
