//! The [`LockManager`] actor, the front door: one per process.
//!
//! The manager owns what every lock of the process shares (see
//! [`Shared`]: the client id, the config, the Redis
//! node, the coalescer, the subscriber, the renewal table) and the registry from
//! (lock name, kind) to lock actor: the exclusive, fair and read-write locks of one
//! name are three actors, so a guard of one kind can never act on another's
//! holdings. Its messages live beside it, one file each: [`Acquire`](crate::Acquire)
//! (`acquire`), [`Handle`](crate::Handle) (`handle`), [`Inspect`](crate::Inspect)
//! and [`ForceUnlock`](crate::ForceUnlock) (`inspect`); here are the registry,
//! [`GetStats`] and the idle handshake with lock actors.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::{debug, info};

use crate::actors::lock::{Idle, LockActor, ManagerGone};
use crate::actors::registry::Registration;
use crate::actors::renewer::{RenewTable, Renewer};
use crate::actors::shared::Shared;
use crate::actors::subscriber::Subscriber;
use crate::config::Config;
use crate::error::LockError;
use crate::keys;
use crate::kind::Kind;
use crate::node::ReplicaConfirmation;
use crate::node::{self, Coalescer, Purpose};
use crate::stats::Stats;

/// The registry entry of one running lock actor.
#[derive(Debug)]
pub(super) struct Entry {
    /// The actor.
    pub(super) addr: Addr<LockActor>,
    /// Enqueue messages sent to it, compared with what it saw in the idle handshake.
    pub(super) sent: u64,
}

/// The lock manager actor; start one per process with [`LockManager::start`].
#[derive(Debug)]
pub struct LockManager {
    /// What lock actors share.
    shared: Arc<Shared>,
    /// (Lock name, kind) -> its running actor.
    locks: HashMap<(Arc<str>, Kind), Entry>,
    /// Name -> running semaphore and latch actors.
    synchronizers: super::synchronizers::Synchronizers,
}

impl LockManager {
    /// Connects to Redis and starts the manager and its subscriber. Inside an actix
    /// system (`#[actix::main]`, `#[actix_rt::test]`) the actors run on it; from a
    /// plain tokio runtime (`#[tokio::main]`) they run on an actix system of their
    /// own, on one thread kept for the life of the process. Fails if the
    /// configuration is inconsistent or Redis cannot be reached within the
    /// connection timeout; a standalone server that answers but cannot be used (a
    /// wrong or missing password, a database or host name that does not exist, TLS
    /// against a plain port, a port that is not Redis) fails it at once, with a
    /// [`LockError::Redis`] that names the cause and the fix (docs/operations.md,
    /// "Start-up errors", lists them).
    pub async fn start(config: Config) -> Result<Addr<LockManager>, LockError> {
        if actix_rt::System::try_current().is_none() {
            return Self::start_on_own_system(config).await;
        }
        Self::start_here(config).await
    }

    /// Outside an actix system (a plain tokio runtime, `#[tokio::main]`), the
    /// manager and its actors run on an actix system of their own, on a thread
    /// started here and kept for the life of the process. Actix actors need a
    /// local task set, which a tokio runtime does not provide; their addresses,
    /// guards and handles are `Send`, so the application's tasks use them from any
    /// thread as usual.
    async fn start_on_own_system(config: Config) -> Result<Addr<LockManager>, LockError> {
        let (started, answer) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("lockwarden".into())
            .spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let res = LockManager::start_here(config).await;
                    let running = res.is_ok();
                    let _ = started.send(res);
                    if running {
                        // The manager's actors live on this system: keep it, even
                        // once the manager's address is dropped, for the guards
                        // and lock actors that outlive it.
                        std::future::pending::<()>().await;
                    }
                });
            })
            .map_err(|e| {
                LockError::InvalidConfig(format!("cannot start a thread for the lock manager: {e}"))
            })?;
        answer.await.map_err(|_| LockError::Stopped)?
    }

    /// Starts the manager on the current actix system.
    async fn start_here(config: Config) -> Result<Addr<LockManager>, LockError> {
        let node = node::connect(&config, Purpose::Locks).await?;
        let coalescer = Coalescer::start(
            node.conn(),
            node.topology(),
            config.batch_max_ops,
            config.batch_in_flight,
        );
        let config = Arc::new(config);
        let counters = Arc::new(Default::default());
        let client_id = uuid::Uuid::new_v4().to_string();
        info!(%client_id, "lock manager started");
        let renewals = Arc::new(RenewTable::default());
        // Written in the background: the entry is for operators, and its key has a
        // slot of its own, which on a cluster may live on a master that is down
        // while the locks this process wants are not (starting waited ~2 s for it
        // then). It usually lands before the first grant; a failure is only logged,
        // and the renewer writes it again every renewal period.
        let registration = Arc::new(Registration::new(&client_id, &config));
        actix::spawn({
            let (registration, conn) = (Arc::clone(&registration), node.conn());
            async move { registration.refresh(conn).await }
        });
        let renewer = Renewer::new(
            Arc::downgrade(&renewals),
            node.clone(),
            &config,
            Arc::clone(&counters),
            registration,
        )
        .start();
        let (alive, manager_alive) = tokio::sync::watch::channel(());
        let subscriber = {
            let (source, config, counters) = (node.pubsub(), config.clone(), Arc::clone(&counters));
            let reconnected = renewer.recipient();
            Supervisor::start(move |_| {
                Subscriber::new(source, config, counters, reconnected, manager_alive)
            })
        };
        let shared = Arc::new(Shared {
            client_id,
            config,
            node,
            coalescer,
            subscriber,
            counters,
            renewals,
            local_waits: Default::default(),
            unsettled: Default::default(),
            _alive: alive,
            shutting_down: Default::default(),
        });
        Ok(LockManager {
            shared,
            locks: HashMap::new(),
            synchronizers: Default::default(),
        }
        .start())
    }

    /// The running lock actors.
    pub(super) fn lock_actors(&self) -> impl Iterator<Item = Addr<LockActor>> + '_ {
        self.locks.values().map(|e| e.addr.clone())
    }

    /// What lock actors share (for the manager's messages, each in its own file).
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The registry of synchronizer actors, and what they share.
    pub(super) fn synchronizers(
        &mut self,
    ) -> (&mut super::synchronizers::Synchronizers, &Arc<Shared>) {
        (&mut self.synchronizers, &self.shared)
    }

    /// Checks a name against the configured rules.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), LockError> {
        keys::validate_name(name, self.shared.config.max_name_len).map_err(LockError::from)
    }

    /// Checks an explicit lease ([`super::admin::check_lease`]).
    pub(super) fn check_lease(&self, lease: Option<Duration>) -> Result<(), LockError> {
        lease.map_or(Ok(()), |l| {
            super::admin::check_lease(&self.shared.config, l)
        })
    }

    /// The actor of `name` and `kind`, started if there is none.
    pub(super) fn lock_actor(
        &mut self,
        name: &str,
        kind: Kind,
        ctx: &mut Context<Self>,
    ) -> &mut Entry {
        let shared = &self.shared;
        self.locks
            .entry((Arc::from(name), kind))
            .or_insert_with_key(|(name, kind)| {
                let manager = ctx.address().recipient().downgrade();
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

    /// Every address of the manager is gone: its idle lock actors stop now, so
    /// that its connections close once the last guard is released (each lock
    /// actor keeps what the manager shares, connections included).
    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        for entry in self.locks.values() {
            entry.addr.do_send(ManagerGone);
        }
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

/// Ask how replica confirmation stands on the manager's connection: on, off
/// or reduced, and how many replicas can confirm now.
#[derive(Message, Clone, Copy, Debug, Default)]
#[rtype(result = "ReplicaConfirmation")]
pub struct GetReplicaConfirmation;

impl Handler<GetReplicaConfirmation> for LockManager {
    type Result = MessageResult<GetReplicaConfirmation>;

    fn handle(&mut self, _msg: GetReplicaConfirmation, _ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(self.shared.node.replica_confirmation(&self.shared.config))
    }
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

/// Test hook: the actor of a lock name and kind, if one runs.
#[cfg(test)]
#[derive(Message, Debug)]
#[rtype(result = "Option<Addr<LockActor>>")]
pub(crate) struct ActorOf(pub(crate) &'static str, pub(crate) Kind);

#[cfg(test)]
impl Handler<ActorOf> for LockManager {
    type Result = Option<Addr<LockActor>>;

    fn handle(&mut self, msg: ActorOf, _ctx: &mut Context<Self>) -> Self::Result {
        self.locks
            .get(&(Arc::from(msg.0), msg.1))
            .map(|e| e.addr.clone())
    }
}

/// Declares the message that makes a handle on one synchronizer by name, and the
/// manager's handler of it: the name is checked once (by the rules of a lock
/// name), the name's actor is found in (or started into) the registry by
/// `$registry`, and the handle holds the name, that actor and the manager's
/// connection. One way to make every kind of handle; `$handle` is a struct with
/// exactly the fields `name`, `actor` and `shared`.
macro_rules! handle_message {
    ($(#[$doc:meta])* $message:ident => $handle:ident, $registry:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $message {
            /// The synchronizer's name (its Redis key).
            name: String,
        }

        impl $message {
            /// A handle on the synchronizer `name`.
            pub fn new(name: impl Into<String>) -> $message {
                $message { name: name.into() }
            }
        }

        impl actix::Message for $message {
            type Result = Result<$handle, $crate::error::LockError>;
        }

        impl actix::Handler<$message> for $crate::front::manager::LockManager {
            type Result = Result<$handle, $crate::error::LockError>;

            fn handle(&mut self, msg: $message, _ctx: &mut actix::Context<Self>) -> Self::Result {
                self.check_name(&msg.name)?;
                let (registry, shared) = self.synchronizers();
                let shared = shared.clone();
                let actor = registry.$registry(&msg.name, &shared);
                Ok($handle {
                    name: std::sync::Arc::from(msg.name),
                    actor,
                    shared,
                })
            }
        }
    };
}
pub(crate) use handle_message;
