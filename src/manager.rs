//! The [`LockManager`] actor, the front door, and its public messages.
//!
//! The manager owns what every lock of the process shares: the client id, the
//! config, one multiplexed command connection (concurrent scripts from all lock
//! actors are pipelined on its one socket, and it reconnects by itself), the
//! [`Subscriber`], and the registry from (lock name, kind) to lock actor: the
//! exclusive, fair and read-write locks of one name are three actors, so a guard of
//! one kind can never act on another's holdings. It validates every
//! request before anything reaches Redis, then forwards acquisitions to the lock's
//! actor, starting one on demand. It never waits on Redis for an acquisition itself,
//! so one slow lock cannot hold up another.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::dev::{MessageResponse, OneshotSender};
use actix::prelude::*;
use futures::future::{select, Either};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::oneshot;
use tracing::{debug, info, info_span};

use crate::config::Config;
use crate::error::LockError;
use crate::guard::{LockGuard, LockHandle, LockLost};
use crate::keys::{self, Owner};
use crate::lock::{AcquireKind, Cancel, Enqueue, Kind, LockActor, Waiter};
use crate::renewer::{RenewTable, Renewer};
use crate::scripts::Coalescer;
use crate::stats::{Counters, Stats};
use crate::subscriber::Subscriber;

/// What the manager shares with its lock actors.
#[derive(Debug)]
pub(crate) struct Shared {
    /// This manager's random id: the first half of every owner field.
    pub(crate) client_id: String,
    /// The settings.
    pub(crate) config: Arc<Config>,
    /// The command connection (cloning it shares the socket).
    pub(crate) conn: ConnectionManager,
    /// The exclusive lock's acquire and release calls go through this, so that
    /// those of many locks that are ready together share one script call.
    pub(crate) coalescer: Coalescer,
    /// The pub/sub actor.
    pub(crate) subscriber: Addr<Subscriber>,
    /// Health counters.
    pub(crate) counters: Arc<Counters>,
    /// The watchdog holdings of all lock actors, swept by the [`Renewer`].
    pub(crate) renewals: RenewTable,
}

/// The registry entry of one running lock actor.
#[derive(Debug)]
struct Entry {
    /// The actor.
    addr: Addr<LockActor>,
    /// Enqueue messages sent to it, compared with what it saw in the idle handshake.
    sent: u64,
}

/// The lock manager actor; start one per process with [`LockManager::start`].
#[derive(Debug)]
pub struct LockManager {
    /// What lock actors share.
    pub(crate) shared: Arc<Shared>,
    /// (Lock name, kind) -> its running actor.
    locks: HashMap<(Arc<str>, Kind), Entry>,
}

impl LockManager {
    /// Connects to Redis and starts the manager and its subscriber. Must be called
    /// inside a running actix system (`#[actix::main]`, `#[actix_rt::test]`).
    /// Fails if the configuration is inconsistent or Redis cannot be reached.
    pub async fn start(config: Config) -> Result<Addr<LockManager>, LockError> {
        config.validate()?;
        let cm_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connection_timeout))
            .set_min_delay(config.reconnect_min)
            .set_max_delay(config.reconnect_max);
        let conn = ConnectionManager::new_with_config(config.client.clone(), cm_config).await?;
        crate::server_checks::warn_if_locks_can_be_evicted(conn.clone()).await;
        let coalescer =
            Coalescer::start(conn.clone(), config.batch_max_ops, config.batch_in_flight);
        let config = Arc::new(config);
        let counters = Arc::new(Counters::default());
        let subscriber = {
            let (config, counters) = (config.clone(), counters.clone());
            Supervisor::start(move |_| Subscriber::new(config, counters))
        };
        let client_id = uuid::Uuid::new_v4().to_string();
        info!(%client_id, "lock manager started");
        let shared = Arc::new(Shared {
            client_id,
            config,
            conn,
            coalescer,
            subscriber,
            counters,
            renewals: RenewTable::default(),
        });
        Renewer::new(Arc::downgrade(&shared)).start();
        Ok(LockManager {
            shared,
            locks: HashMap::new(),
        }
        .start())
    }

    /// Checks a name against the configured rules.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        keys::validate_name(name, self.shared.config.max_name_len).map_err(LockError::from)
    }

    /// Checks an explicit lease: at least 1 ms (PEXPIRE 0 would delete the lock)
    /// and at most the configured maximum.
    fn check_lease(&self, lease: Option<Duration>) -> Result<(), LockError> {
        let Some(lease) = lease else { return Ok(()) };
        let reason = if lease < Duration::from_millis(1) {
            "must be at least 1 ms"
        } else if lease > self.shared.config.max_lease {
            "is over the configured maximum lease"
        } else {
            return Ok(());
        };
        Err(LockError::InvalidLease { lease, reason })
    }

    /// The actor of `name` and `kind`, started if there is none.
    fn lock_actor(&mut self, name: &str, kind: Kind, ctx: &mut Context<Self>) -> &mut Entry {
        let shared = &self.shared;
        self.locks
            .entry((Arc::from(name), kind))
            .or_insert_with_key(|(name, kind)| {
                let manager = ctx.address().downgrade();
                let (name, kind, shared) = (name.clone(), *kind, shared.clone());
                Entry {
                    // Supervised: a lock actor that stops to recover is restarted
                    // with its waiters; one that retires (idle) has no address left,
                    // so it stays stopped.
                    addr: Supervisor::start(move |_| LockActor::new(name, kind, shared, manager)),
                    sent: 0,
                }
            })
    }
}

impl Actor for LockManager {
    type Context = Context<Self>;
}

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
        }
    }

    /// Take this kind of lock. Defaults to [`AcquireKind::Exclusive`].
    pub fn kind(mut self, kind: AcquireKind) -> Acquire {
        self.kind = kind;
        self
    }

    /// Take the fair lock of this name: waiters are served in the order they first
    /// queued, across all processes (Redisson's fair lock).
    pub fn fair(self) -> Acquire {
        self.kind(AcquireKind::Fair)
    }

    /// Take a read hold of the read-write lock of this name: shared with other
    /// readers, and with the owner's own write hold (a downgrade).
    pub fn read(self) -> Acquire {
        self.kind(AcquireKind::Read)
    }

    /// Take the write lock of the read-write lock of this name. An owner that holds
    /// read holds of it (and not the write lock) is refused with
    /// [`LockError::UpgradeRefused`] at once.
    pub fn write(self) -> Acquire {
        self.kind(AcquireKind::Write)
    }

    /// Give up with [`LockError::Timeout`] after this long; zero makes exactly one
    /// attempt. Defaults to waiting until acquired.
    pub fn wait(mut self, wait: Duration) -> Acquire {
        self.wait = Some(wait);
        self
    }

    /// Hold the lock for at most this long, without renewal (1 ms up to
    /// [`Config::max_lease`]). Defaults to watchdog mode: the configured watchdog
    /// lease, renewed while held.
    pub fn lease(mut self, lease: Duration) -> Acquire {
        self.lease = Some(lease);
        self
    }

    /// Acquire as this owner: a second acquisition by an owner that holds the lock
    /// re-enters it. Defaults to a new owner of its own.
    pub fn owner(mut self, owner: Owner) -> Acquire {
        self.owner = Some(owner);
        self
    }
}

impl Acquire {
    /// Also send [`LockLost`] to this actor if the lock is lost while held (the
    /// guard's [`lost`](LockGuard::lost) resolves either way). Defaults to nobody.
    pub fn on_lost(mut self, recipient: Recipient<LockLost>) -> Acquire {
        self.on_lost = Some(recipient);
        self
    }
}

impl Message for Acquire {
    type Result = Result<LockGuard, LockError>;
}

static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

impl Handler<Acquire> for LockManager {
    type Result = AcquireResponse;

    fn handle(&mut self, msg: Acquire, ctx: &mut Context<Self>) -> AcquireResponse {
        if let Err(e) = self.check_name(&msg.name).and(self.check_lease(msg.lease)) {
            return AcquireResponse::Ready(Err(e));
        }
        let owner = msg.owner.unwrap_or_default();
        let since = Instant::now();
        let (reply, rx) = oneshot::channel();
        let id = NEXT_WAITER.fetch_add(1, Ordering::Relaxed);
        let field = keys::owner_field(&self.shared.client_id, owner);
        let waiter = Waiter {
            id,
            kind: msg.kind,
            owner,
            field: Arc::from(match msg.kind {
                AcquireKind::Write => keys::write_field(&field),
                _ => field,
            }),
            lease: msg.lease,
            // A zero wait is answered by its one attempt, not by a timer (which
            // would fire before the attempt returns). A wait too long to represent
            // is the same as no deadline.
            deadline: msg
                .wait
                .filter(|w| !w.is_zero())
                .and_then(|w| since.checked_add(w)),
            try_once: msg.wait.is_some_and(|w| w.is_zero()),
            since,
            on_lost: msg.on_lost,
            reply,
            span: info_span!("acquire", lock = %msg.name, kind = %msg.kind, owner = owner.id()),
            queued: false,
            due: true,
        };
        let entry = self.lock_actor(&msg.name, msg.kind.actor_kind(), ctx);
        entry.sent += 1;
        entry.addr.do_send(Enqueue(waiter));
        AcquireResponse::Waiting {
            rx,
            ticket: Ticket {
                lock: Some(entry.addr.clone()),
                waiter: id,
            },
        }
    }
}

/// Tells the lock actor that a waiter's caller went away, unless disarmed first.
#[doc(hidden)]
#[derive(Debug)]
pub struct Ticket {
    lock: Option<Addr<LockActor>>,
    waiter: u64,
}

impl Ticket {
    /// The waiter was answered: nothing to cancel.
    fn disarm(mut self) {
        self.lock = None;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            lock.do_send(Cancel {
                waiter: self.waiter,
            });
        }
    }
}

/// The manager's reply to [`Acquire`]. It watches the caller: if the caller stops
/// waiting (drops the `send` future, or its actor stops), the waiter leaves the
/// lock's queue at once instead of being served to nobody.
#[doc(hidden)]
#[derive(Debug)]
pub enum AcquireResponse {
    /// Refused before reaching a lock actor.
    Ready(Result<LockGuard, LockError>),
    /// Queued at the lock actor.
    Waiting {
        rx: oneshot::Receiver<Result<LockGuard, LockError>>,
        ticket: Ticket,
    },
}

impl MessageResponse<LockManager, Acquire> for AcquireResponse {
    fn handle(
        self,
        _ctx: &mut Context<LockManager>,
        tx: Option<OneshotSender<Result<LockGuard, LockError>>>,
    ) {
        match self {
            AcquireResponse::Ready(res) => {
                if let Some(tx) = tx {
                    let _ = tx.send(res);
                }
            }
            AcquireResponse::Waiting { rx, ticket } => {
                // `do_send` leaves nobody to answer: the ticket's drop cancels.
                let Some(mut tx) = tx else { return };
                actix_rt::spawn(async move {
                    let outcome = match select(rx, Box::pin(tx.closed())).await {
                        Either::Left((res, _)) => Some(res),
                        Either::Right(_) => None,
                    };
                    match outcome {
                        Some(res) => {
                            ticket.disarm();
                            // A guard that cannot be delivered any more is dropped,
                            // which releases it.
                            let _ = tx.send(res.unwrap_or(Err(LockError::Stopped)));
                        }
                        None => drop(ticket),
                    }
                });
            }
        }
    }
}

/// Get a [`LockHandle`] for one lock name (validated now, once) and kind.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<LockHandle, LockError>")]
pub struct Handle {
    /// The lock name.
    name: String,
    /// What the handle's acquisitions take.
    kind: AcquireKind,
}

impl Handle {
    /// A handle on the exclusive lock `name`.
    pub fn new(name: impl Into<String>) -> Handle {
        Handle {
            name: name.into(),
            kind: AcquireKind::Exclusive,
        }
    }

    /// A handle whose acquisitions take this kind. Defaults to
    /// [`AcquireKind::Exclusive`].
    pub fn kind(mut self, kind: AcquireKind) -> Handle {
        self.kind = kind;
        self
    }

    /// A handle on the fair lock of this name.
    pub fn fair(self) -> Handle {
        self.kind(AcquireKind::Fair)
    }

    /// A handle that takes read holds of the read-write lock of this name.
    pub fn read(self) -> Handle {
        self.kind(AcquireKind::Read)
    }

    /// A handle that takes the write lock of the read-write lock of this name.
    pub fn write(self) -> Handle {
        self.kind(AcquireKind::Write)
    }
}

impl Handler<Handle> for LockManager {
    type Result = Result<LockHandle, LockError>;

    fn handle(&mut self, msg: Handle, ctx: &mut Context<Self>) -> Self::Result {
        self.check_name(&msg.name)?;
        Ok(LockHandle::new(
            ctx.address(),
            Arc::from(msg.name),
            msg.kind,
        ))
    }
}

/// Read the manager's counters.
#[derive(Message, Clone, Copy, Debug, Default)]
#[rtype(result = "Stats")]
pub struct GetStats;

impl Handler<GetStats> for LockManager {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _msg: GetStats, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.shared.counters.snapshot())
    }
}

/// A lock actor has had nothing to do for a while and offers to stop. Answers
/// `true` (stop) when the manager has sent it nothing it has not seen; the entry is
/// then gone, so the next request for that name starts a fresh actor.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(crate) struct Idle {
    pub(crate) name: Arc<str>,
    pub(crate) kind: Kind,
    /// Which actor asks: a stale one (replaced in the registry) is told to stop.
    pub(crate) addr: Addr<LockActor>,
    pub(crate) received: u64,
}

impl Handler<Idle> for LockManager {
    type Result = bool;

    fn handle(&mut self, msg: Idle, _ctx: &mut Context<Self>) -> bool {
        let key = (msg.name, msg.kind);
        match self.locks.get(&key) {
            Some(entry) if entry.addr != msg.addr => true,
            Some(entry) if entry.sent == msg.received => {
                self.locks.remove(&key);
                debug!(lock = %key.0, kind = ?key.1, "retired idle lock actor");
                true
            }
            Some(_) => false,
            None => true,
        }
    }
}
