//! [`SemaphoreHandle`], a distributed counting semaphore in Redisson's `RSemaphore`
//! layout, the [`Semaphore`] message that makes one, and [`SemaphoreGuard`], the
//! permits an acquisition took.
//!
//! The semaphore is one string key, its name, holding the permits available; a
//! release publishes the new number on `redisson_sc:{name}`, so Java services using
//! Redisson share it. Waiting goes through the name's actor
//! (`actors/semaphore/`: only the head of the local queue asks Redis, woken by the
//! channel with a fallback timer); the other calls run one script or a GET on the
//! manager's command connection. Every amount is checked before anything is sent.
//!
//! Permits are not owned: Redisson's layout records no holder, so permits taken by
//! a process that dies are not given back by anyone (use
//! `try_set_permits`/`add_permits` to repair, or a lease-bound design).
//! [`SemaphoreHandle`]'s documentation says what that means for callers.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use crate::actors::semaphore::permits::GivePermits;
use crate::actors::semaphore::{take, TakePermits};
use crate::actors::shared::Shared;
use crate::actors::waiting;
use crate::error::LockError;
use crate::guard::ReleaseOutcome;
use crate::reply::{ask, ask_now, within, Giving, Reply};
use crate::sync_view::SynchronizerKind;
use crate::wire::{self, SemDrain, SemTrySet, MAX_PERMITS};

/// Get a [`SemaphoreHandle`] on the semaphore `name` (checked now, once, by the
/// rules of a lock name), plain or [fair](Semaphore::fair).
#[derive(Clone, Debug)]
pub struct Semaphore {
    /// The semaphore's name (its Redis key).
    name: String,
    /// Waiters queue in arrival order across processes.
    fair: bool,
}

impl Semaphore {
    /// A handle on the semaphore `name`.
    pub fn new(name: impl Into<String>) -> Semaphore {
        Semaphore {
            name: name.into(),
            fair: false,
        }
    }

    /// Whether the handle's waiters are served in the order they arrived,
    /// across every process that takes the semaphore fairly (FIFO). Defaults to
    /// off.
    ///
    /// A fair waiter takes a place in a queue in Redis
    /// (`lockwarden_semaphore_queue:{name}`, lockwarden's own: Redisson has no
    /// fair semaphore) and is granted only at its head, when enough permits
    /// are free. The order is strict, as `java.util.concurrent.Semaphore` with
    /// fairness: a head that wants more permits than are free holds up the
    /// waiters behind it, even those that want fewer. A waiter whose process
    /// dies is skipped once its place lapses
    /// ([`Config::fair_waiter_lease`](crate::Config::fair_waiter_lease), 5 s by
    /// default); one that gives up leaves the queue at once. A try-once call
    /// ([`try_acquire`](SemaphoreHandle::try_acquire)) is refused while anyone
    /// is queued.
    ///
    /// The permits are the plain semaphore's (the same key), so plain and fair
    /// holders share them. **Plain acquirers do not queue**: a non-fair handle
    /// on the same name, or a Java service using Redisson's `RSemaphore`, takes
    /// free permits whenever it asks and can overtake the queue. Make every
    /// taker of a name fair where the order matters.
    pub fn fair(mut self, fair: bool) -> Semaphore {
        self.fair = fair;
        self
    }
}

impl actix::Message for Semaphore {
    type Result = Result<SemaphoreHandle, LockError>;
}

impl Handler<Semaphore> for super::manager::LockManager {
    type Result = Result<SemaphoreHandle, LockError>;

    fn handle(&mut self, msg: Semaphore, _ctx: &mut Context<Self>) -> Self::Result {
        self.check_name(&msg.name)?;
        let (registry, shared) = self.synchronizers();
        let shared = shared.clone();
        let (taker, giver) = if msg.fair {
            let actor = registry.fair(&msg.name, &shared);
            (actor.clone().recipient(), actor.recipient())
        } else {
            let actor = registry.semaphore(&msg.name, &shared);
            (actor.clone().recipient(), actor.recipient())
        };
        Ok(SemaphoreHandle {
            name: Arc::from(msg.name),
            fair: msg.fair,
            taker,
            giver,
            shared,
        })
    }
}

/// A handle on one semaphore: cheap to clone, usable from any thread.
///
/// **A plain semaphore does not heal.** Nobody owns a permit (Redisson's layout
/// keeps only a number), so:
/// - a permit taken by a process that dies (SIGKILL, OOM, a crash before its
///   guard's release) is gone for good: the semaphore has one permit less until
///   someone calls [`add_permits`](Self::add_permits);
/// - a semaphore whose key does not exist (never set, deleted, or lost when
///   Redis restarted without its data) has no permits, and
///   [`acquire`](Self::acquire), which has no deadline, waits for ever.
///
/// Callers that may die should use the permit-expirable semaphore
/// ([`PermitSemaphore`](crate::PermitSemaphore)): its permits expire with
/// their lease, or are renewed by the watchdog while their process lives.
/// Either way, prefer [`acquire_within`](Self::acquire_within) on a request
/// path. To make such a wait visible, a waiter that finds the key missing logs
/// a warning at once (target `lockwarden`, level warn) and again every 30 s
/// while it waits, and a wait longer than a second is recorded in Redis for
/// operators (`lockwarden status NAME` names who waits: host, pid, label, since
/// when; `list` and `top` mark the missing key).
///
/// A fair handle ([`Semaphore::fair`]) serves its waiters in the order they
/// arrived across processes.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> Result<(), lockwarden::LockError> {
/// use lockwarden::Locks;
/// let api = manager.semaphore("partner-api").await?;
/// api.try_set_permits(3).await?; // only the first caller sets it
/// let permit = api.acquire(1).await?; // waits for a free permit
/// // ... call the partner API: at most 3 callers at once across the fleet ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SemaphoreHandle {
    /// The semaphore's name.
    name: Arc<str>,
    /// Its waiters queue in arrival order across processes ([`Semaphore::fair`]).
    fair: bool,
    /// Its actor in this process (waiters, subscription), which takes permits
    /// ...
    taker: Recipient<TakePermits>,
    /// ... and gives them back (the same actor).
    giver: Recipient<GivePermits>,
    /// The manager's connection.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SemaphoreHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreHandle")
            .field("name", &self.name)
            .field("fair", &self.fair)
            .finish_non_exhaustive()
    }
}

/// `try_set_permits` of either kind of semaphore (both keep the count in a
/// string at the name).
pub(super) async fn try_set(
    shared: &Shared,
    name: &str,
    permits: u32,
    kind: SynchronizerKind,
) -> Result<bool, LockError> {
    check_permits(permits, 0)?;
    let mut conn = shared.node.conn();
    let set = wire::call(&mut conn, &SemTrySet { name, permits }).await?;
    if set {
        wire::label(&mut conn, name, Some(kind)).await;
    }
    Ok(set)
}

/// `add_permits` of any kind of semaphore: through its actor, which wakes
/// local waiters too.
pub(super) async fn add(giver: &Recipient<GivePermits>, permits: u32) -> Result<u64, LockError> {
    check_permits(permits, 1)?;
    ask(giver, |reply| GivePermits { permits, reply }).await
}

/// Refuses an amount of permits outside 1..=[`MAX_PERMITS`] (`at_least` 0 lets
/// zero through, for setting an empty semaphore).
pub(super) fn check_permits(permits: u32, at_least: u32) -> Result<(), LockError> {
    let reason = if permits < at_least {
        "must be at least 1"
    } else if u64::from(permits) > MAX_PERMITS {
        "is over 2147483647, the most a semaphore holds (Redisson reads it as a Java int)"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidAmount {
        what: "permits",
        amount: u64::from(permits),
        reason,
    })
}

impl SemaphoreHandle {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this handle's waiters queue in arrival order across processes
    /// ([`Semaphore::fair`]).
    pub fn is_fair(&self) -> bool {
        self.fair
    }

    /// The fair waiters queued on this semaphore now, in every process, head
    /// first: each one's waiter id (`<client id>:<n>`, as `lockwarden who`
    /// and the waiting records name it). Empty when nobody waits fairly (plain
    /// waiters never queue). A handle of either kind reads it.
    pub async fn queued(&self) -> Result<Vec<String>, LockError> {
        let mut conn = self.shared.node.conn();
        let (_, queue) = wire::read_sem_queue(&mut conn, &self.name).await?;
        Ok(queue.into_iter().map(|(id, _)| id).collect())
    }

    /// Sets the number of permits if the semaphore has none yet (its key is
    /// absent), and wakes its waiters. Answers whether it set them: one caller of
    /// many racing to initialise wins. Zero is allowed (permits added later).
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool, LockError> {
        try_set(
            &self.shared,
            &self.name,
            permits,
            SynchronizerKind::Semaphore,
        )
        .await
    }

    /// Adds `permits` (at least 1) and wakes waiters; answers how many are
    /// available now. Refused, with nothing changed, if the total would pass
    /// 2147483647.
    pub async fn add_permits(&self, permits: u32) -> Result<u64, LockError> {
        add(&self.giver, permits).await
    }

    /// Gives back `permits` that no guard holds (Redisson's `release`: the
    /// semaphore does not know who took what, so this is the same as
    /// [`add_permits`](Self::add_permits)). Permits a guard holds go back through
    /// the guard ([`SemaphoreGuard::release`]), which cannot give back more than it
    /// took.
    pub async fn release(&self, permits: u32) -> Result<u64, LockError> {
        self.add_permits(permits).await
    }

    /// Takes `permits`, waiting for as long as it takes: for ever if the
    /// semaphore's key does not exist and nobody adds permits (logged at warn at
    /// once and every 30 s meanwhile; see the type's documentation).
    pub async fn acquire(&self, permits: u32) -> Result<SemaphoreGuard, LockError> {
        self.take(permits, None).await
    }

    /// Takes `permits`, waiting at most `wait` ([`LockError::Timeout`] then).
    pub async fn acquire_within(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<SemaphoreGuard, LockError> {
        self.take(permits, Some(wait)).await
    }

    /// One attempt: `Ok(None)` when fewer than `permits` are free, or when other
    /// waiters of this process queue for them already (for a fair handle, when
    /// anyone queues for them, in any process).
    pub async fn try_acquire(&self, permits: u32) -> Result<Option<SemaphoreGuard>, LockError> {
        match self.take(permits, Some(Duration::ZERO)).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn take(
        &self,
        permits: u32,
        wait: Option<Duration>,
    ) -> Result<SemaphoreGuard, LockError> {
        check_permits(permits, 1)?;
        take(&self.taker, permits, wait, None).await?;
        Ok(SemaphoreGuard {
            giver: self.giver.clone(),
            name: self.name.clone(),
            permits,
            release_wait: self.shared.config.release_wait,
        })
    }

    /// Whether the semaphore's key exists: `false` for one never set, deleted,
    /// or lost with Redis's data, on which [`acquire`](Self::acquire) would wait
    /// until someone adds permits.
    pub async fn exists(&self) -> Result<bool, LockError> {
        let mut conn = self.shared.node.conn();
        Ok(wire::key_exists(&mut conn, &self.name).await?)
    }

    /// How many permits are available now (0 for a semaphore never set).
    pub async fn available(&self) -> Result<u64, LockError> {
        let mut conn = self.shared.node.conn();
        Ok(wire::read_number(&mut conn, &self.name).await?)
    }

    /// Takes every available permit at once and answers how many that was. The
    /// permits are not held by any guard: give them back with
    /// [`release`](Self::release) if needed. Sent under one op id, so a drain
    /// retried after a lost reply takes nothing more
    /// ([`LockError::InFlight`] when Redis did not answer in time).
    pub async fn drain(&self) -> Result<u64, LockError> {
        let op = waiting::op_id();
        let once = waiting::once(&self.shared.config, &op);
        let what = || format!("draining semaphore {:?}", self.name);
        waiting::send_once(&self.shared.config, what, || {
            let mut conn = self.shared.node.conn();
            async move {
                let call = SemDrain {
                    name: &self.name,
                    once,
                };
                wire::call(&mut conn, &call).await
            }
        })
        .await
    }
}

/// Permits taken from a semaphore. Release them with
/// [`release`](SemaphoreGuard::release) to learn the outcome; dropping the guard
/// gives them back in the background.
///
/// A release answers within [`Config::release_wait`](crate::Config::release_wait)
/// (2.5 s by default) whatever Redis does, as a lock guard's does: past it,
/// with [`ReleaseOutcome::Pending`], while the permits go on being given back
/// behind the call.
#[must_use = "a permit guard that is not kept gives its permits back at once: bind it for as long as you need them"]
pub struct SemaphoreGuard {
    /// The semaphore's actor; keeps it alive while permits are held.
    giver: Recipient<GivePermits>,
    /// The semaphore's name.
    name: Arc<str>,
    /// Permits still held by this guard.
    permits: u32,
    /// How long a release waits for its answer ([`Config::release_wait`](crate::Config::release_wait)).
    release_wait: Duration,
}

impl std::fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish()
    }
}

impl SemaphoreGuard {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits this guard still holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives every permit this guard still holds back, waking waiters:
    /// [`ReleaseOutcome::Released`] once Redis has them back.
    ///
    /// It answers within [`Config::release_wait`](crate::Config::release_wait)
    /// (2.5 s by default) whatever Redis does, so a request path stays bounded
    /// while Redis is frozen or fails over: past it, with
    /// [`ReleaseOutcome::Pending`], counted in
    /// `lockwarden_releases_pending_total{of="permits"}`, and the give-back goes
    /// on behind the call. It is sent under one op id, so however often it is
    /// sent again it adds the permits once; its outcome is logged when it
    /// comes. A give-back Redis has still not answered half of
    /// [`Config::latch_ttl`](crate::Config::latch_ttl) after it was sent (5 s
    /// by default) is not sent again: it is logged at warn as in flight, and
    /// applies once if Redis still holds it when it resumes (do not add permits
    /// for it by hand).
    pub async fn release(self) -> Result<ReleaseOutcome, LockError> {
        let bound = self.release_wait;
        self.release_within(bound).await
    }

    /// [`release`](SemaphoreGuard::release), answering within `bound` instead
    /// of the configured [`Config::release_wait`](crate::Config::release_wait).
    pub async fn release_within(mut self, bound: Duration) -> Result<ReleaseOutcome, LockError> {
        // Counted out first: the guard's drop gives nothing more, whatever
        // becomes of this future.
        let permits = std::mem::take(&mut self.permits);
        self.give(permits, bound).await
    }

    /// Gives back some of the permits and keeps the rest, within the same
    /// bound as [`release`](SemaphoreGuard::release) (and with the same
    /// answers). Refused, with nothing changed, for zero or for more than the
    /// guard holds.
    pub async fn release_some(&mut self, permits: u32) -> Result<ReleaseOutcome, LockError> {
        let reason = if permits == 0 {
            "must be at least 1"
        } else if permits > self.permits {
            "is more than this guard holds"
        } else {
            // Counted out first: once asked, the permits go back even if this
            // future is dropped, and the guard's drop must not give them again.
            self.permits -= permits;
            let given = self.give(permits, self.release_wait).await;
            // Refused or never sent: still held. In flight (Redis may yet
            // apply it) they stay counted out, or the drop would add them twice.
            if matches!(&given, Err(e) if !matches!(e, LockError::InFlight { .. })) {
                self.permits += permits;
            }
            return given;
        };
        Err(LockError::InvalidAmount {
            what: "permits",
            amount: u64::from(permits),
            reason,
        })
    }

    /// Gives `permits` (already counted out of the guard) back through the
    /// actor, answering within `bound`.
    async fn give(&self, permits: u32, bound: Duration) -> Result<ReleaseOutcome, LockError> {
        if permits == 0 {
            return Ok(ReleaseOutcome::Released);
        }
        let answer = ask_now(&self.giver, |reply| GivePermits { permits, reply });
        let giving = Giving {
            of: "permits",
            name: self.name.clone(),
            if_it_fails: "a give-back in flight applies once if Redis still has it: do not add \
                          permits for it",
        };
        let given = within(bound, giving, answer).await?;
        Ok(match given {
            Some(_) => ReleaseOutcome::Released,
            None => ReleaseOutcome::Pending { waited: bound },
        })
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if self.permits > 0 {
            // Queued, never awaited: a drop must not block; the actor retries
            // transient failures and logs the rest.
            self.giver.do_send(GivePermits {
                permits: self.permits,
                reply: Reply::nobody(),
            });
        }
    }
}
