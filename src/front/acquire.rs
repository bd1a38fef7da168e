//! [`Acquire`], the manager's main message, and how its answer reaches the caller.
//!
//! The manager checks the request, makes a waiter of it and queues it at the lock's
//! actor without waiting on Redis itself (so one slow lock cannot hold up another).
//! The reply ([`AcquireResponse`]) hands the lock actor the caller's own answer
//! channel: the answer goes straight to the caller, and a caller that stops
//! waiting (drops the `send` future, or its actor stops) takes its waiter out of
//! the queue at once, as the lock actor is woken when the channel closes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use tokio::sync::oneshot;
use tracing::info_span;

use super::manager::LockManager;
use crate::actors::lock::{Enqueue, LockActor, Request};
use crate::error::LockError;
use crate::guard::{LockGuard, LockLost};
use crate::keys::{self, Owner};
use crate::kind::{impl_kind_setters, AcquireKind};

/// Acquire a lock. Answers with a [`LockGuard`] or the reason there is none.
///
/// Defaults: the exclusive lock, wait until acquired, watchdog lease, a new owner of
/// its own. [`fair`](Acquire::fair), [`read`](Acquire::read) and
/// [`write`](Acquire::write) take the other kinds, with the same options.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lockwarden::Acquire;
/// let guard = manager
///     .send(Acquire::new("orders:42").wait(Duration::from_secs(5)))
///     .await??;
/// println!("token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Acquire {
    /// The lock name.
    name: String,
    /// What to take.
    kind: AcquireKind,
    /// How long to wait; `None` waits until acquired.
    wait: Option<Duration>,
    /// Explicit lease; `None` lets the watchdog renew.
    lease: Option<Duration>,
    /// Owner for reentrancy; `None` makes a new one.
    owner: Option<Owner>,
    /// Who to tell if the lock is lost while held.
    on_lost: Option<Recipient<LockLost>>,
    /// `false`: refuse a second acquisition by an owner that holds it.
    reentrant: bool,
    /// Owner fields this wait also counts for in deadlock checks.
    behalf: Vec<String>,
    /// The task it was made in, whose held locks it also waits for
    /// (`src/unit.rs`); `None` outside a task or when detached.
    task: Option<tokio::task::Id>,
    /// A [`Leader`](crate::Leader)'s campaign: its wait is recorded as a
    /// candidate's, which operators' views show apart from waiters.
    candidate: bool,
}

impl Acquire {
    /// Acquire the lock `name`.
    pub fn new(name: impl Into<String>) -> Acquire {
        Acquire {
            name: name.into(),
            kind: AcquireKind::Exclusive,
            wait: None,
            lease: None,
            owner: None,
            on_lost: None,
            reentrant: true,
            behalf: Vec::new(),
            task: crate::unit::current(),
            candidate: false,
        }
    }

    /// Give up with [`LockError::Timeout`] after this long; zero makes exactly one
    /// attempt. Defaults to waiting until acquired.
    pub fn wait(mut self, wait: Duration) -> Acquire {
        self.wait = Some(wait);
        self
    }

    /// Hold the lock for at most this long, without renewal (1 ms up to
    /// [`Config::max_lease`](crate::Config::max_lease)). Defaults to watchdog mode: the configured watchdog
    /// lease, renewed while held.
    pub fn lease(mut self, lease: Duration) -> Acquire {
        self.lease = Some(lease);
        self
    }

    /// Acquire as this owner: a second acquisition by an owner that holds the lock
    /// re-enters it. Defaults to a new owner of its own.
    ///
    /// Deadlock detection does not need it: a wait made in a tokio task (an
    /// actix-web handler, a spawned job, a [`with_lock`](crate::LockHandle::with_lock)
    /// closure) counts as a wait of every lock that task holds through a guard
    /// it was granted, whatever their owners, so two handlers that take two
    /// locks in opposite orders, written the obvious way, form a cycle that is
    /// found and broken ([`LockError::Deadlock`] for one of them). See
    /// [`detached`](Acquire::detached) to leave one out.
    pub fn owner(mut self, owner: Owner) -> Acquire {
        self.owner = Some(owner);
        self
    }

    /// Take it as a non-reentrant lock (Redisson's `getNonReentrantLock`, and
    /// with [`fair`](Acquire::fair) its `getNonReentrantFairLock`): if this
    /// acquisition's owner already holds the lock, it is refused at once with
    /// [`LockError::ReentryRefused`] instead of taking a second hold, so a task can
    /// never wait for itself or count holds it did not mean to. Same Redis layout
    /// as the reentrant lock, so the two (and Redisson's) exclude each other. For
    /// the exclusive, fair and spin locks; a read or write acquisition is refused
    /// with [`LockError::InvalidRequest`]. Defaults to reentrant.
    #[doc(alias = "getNonReentrantLock")]
    #[doc(alias = "getNonReentrantFairLock")]
    pub fn non_reentrant(mut self) -> Acquire {
        self.reentrant = false;
        self
    }

    /// Count this wait also as a wait of the holder whose owner field is
    /// `owner_field` (`<client id>:<n>`, as [`LockGuard::owner_field`] gives it,
    /// in this process or another), for deadlock detection: that holder cannot
    /// go on until this acquisition ends. It is how a child process of a holder
    /// says so (`lockwarden run` passes `LOCKWARDEN_HOLDER` to its command, and a
    /// nested `lockwarden run` calls this with it): two nested pipelines that
    /// take two locks in opposite orders then form a cycle that is found and
    /// broken, and a child that asks for a lock its parent holds is told
    /// [`LockError::Deadlock`] instead of waiting for ever. Can be given more
    /// than once (a holder's holder). Nothing else changes: the lock is taken
    /// for this acquisition's own owner. Defaults to none.
    pub fn on_behalf_of(mut self, owner_field: impl Into<String>) -> Acquire {
        let field = owner_field.into();
        let field = field
            .strip_suffix(":write")
            .map_or(field.clone(), str::to_string);
        if !self.behalf.contains(&field) {
            self.behalf.push(field);
        }
        self
    }

    /// Leave this acquisition out of its task's unit of work: its wait does not
    /// count as a wait of the locks its task holds, and its guard does not count
    /// for the task's later waits. For a guard handed to another task that
    /// releases it (then this task's later waits do not keep it from going on).
    /// Defaults to the task's unit: see [`owner`](Acquire::owner).
    pub fn detached(mut self) -> Acquire {
        self.task = None;
        self
    }

    /// Also send [`LockLost`] to this actor if the lock is lost while held (the
    /// guard's [`lost`](LockGuard::lost) resolves either way). Defaults to nobody.
    pub fn on_lost(mut self, recipient: Recipient<LockLost>) -> Acquire {
        self.on_lost = Some(recipient);
        self
    }

    /// Marks the acquisition as an election candidate's campaign, which waits
    /// for as long as the candidate runs (`lockwarden status` and `top` show
    /// it as a candidate). Not a candidate by default.
    pub(crate) fn candidate(mut self) -> Acquire {
        self.candidate = true;
        self
    }
}

impl_kind_setters!(Acquire, "Take");

impl Message for Acquire {
    type Result = Result<LockGuard, LockError>;
}

static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

/// Why a non-reentrant read or write acquisition is refused.
pub(super) const RW_ALWAYS_REENTRANT: &str = "the read-write lock is always reentrant (Redisson has no non-reentrant one); non_reentrant() is for the exclusive, fair and spin locks";

impl Handler<Acquire> for LockManager {
    type Result = AcquireResponse;

    fn handle(&mut self, msg: Acquire, ctx: &mut Context<Self>) -> AcquireResponse {
        if let Err(e) = self.check_name(&msg.name).and(self.check_lease(msg.lease)) {
            return AcquireResponse(Response::Ready(Err(e)));
        }
        if !msg.reentrant && !msg.kind.may_refuse_reentry() {
            return AcquireResponse(Response::Ready(Err(LockError::InvalidRequest(
                RW_ALWAYS_REENTRANT,
            ))));
        }
        if self.shared().is_shutting_down() {
            return AcquireResponse(Response::Ready(Err(LockError::ShuttingDown)));
        }
        let new_owner = msg.owner.is_none();
        let owner = msg.owner.unwrap_or_default();
        let since = Instant::now();
        let id = NEXT_WAITER.fetch_add(1, Ordering::Relaxed);
        let field = keys::owner_field(&self.shared().client_id, owner);
        // The locks its task holds wait for this acquisition too.
        let mut behalf = msg.behalf;
        for held in msg.task.map(crate::unit::holders).unwrap_or_default() {
            if held != field && !behalf.contains(&held) {
                behalf.push(held);
            }
        }
        let request = Request {
            id,
            kind: msg.kind,
            owner,
            new_owner,
            reentrant: msg.reentrant,
            field: Arc::from(msg.kind.hold_field(field)),
            behalf,
            lease: msg.lease,
            wait: msg.wait,
            since,
            on_lost: msg.on_lost,
            span: info_span!("acquire", lock = %msg.name, kind = %msg.kind, owner = owner.id()),
            candidate: msg.candidate,
            task: msg.task,
        };
        let entry = self.lock_actor(&msg.name, msg.kind.actor_kind(), ctx);
        // Counted now, sent by the response right after this (with the
        // caller's own answer channel): nothing else reaches the lock
        // actor from here in between.
        entry.sent += 1;
        AcquireResponse(Response::Queue {
            lock: entry.addr.clone(),
            request,
        })
    }
}

/// The manager's reply to [`Acquire`]: the waiter goes to its lock actor with
/// the caller's own answer channel, so that the lock actor answers the caller
/// directly (no task relays it). The lock actor also learns at once when the
/// caller stops waiting (drops the `send` future, or its actor stops): the
/// waiter then leaves the lock's queue instead of being served to nobody
/// (`reply::on_asker_gone`, armed by the lock actor).
#[doc(hidden)]
#[derive(Debug)]
pub struct AcquireResponse(Response);

/// What [`AcquireResponse`] does.
#[derive(Debug)]
enum Response {
    /// Refused before reaching a lock actor.
    Ready(Result<LockGuard, LockError>),
    /// To queue at this lock actor.
    Queue {
        lock: Addr<LockActor>,
        request: Request,
    },
}

impl MessageResponse<LockManager, Acquire> for AcquireResponse {
    fn handle(
        self,
        _ctx: &mut Context<LockManager>,
        tx: Option<OneshotSender<Result<LockGuard, LockError>>>,
    ) {
        match self.0 {
            Response::Ready(res) => {
                if let Some(tx) = tx {
                    let _ = tx.send(res);
                }
            }
            Response::Queue { lock, request } => {
                // `do_send` leaves nobody to answer: a channel whose receiver
                // is gone already, which the lock actor reads as a caller
                // that left (it still counts the message, for the idle
                // handshake).
                let tx = tx.unwrap_or_else(|| oneshot::channel().0);
                lock.do_send(Enqueue(request, tx));
            }
        }
    }
}
