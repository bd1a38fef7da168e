//! A master found through Redis Sentinel, followed across failovers.
//!
//! redis-rs finds the master through the Sentinels (`SentinelClient`), but a
//! connection it hands out stays bound to that address: after a failover it keeps
//! reconnecting to the old master, or talks to it once it comes back as a replica
//! (every write then answers READONLY). So the seam follows the master itself, once,
//! here: the [`Follower`] keeps a `ConnectionManager` to the master it last found,
//! and when a call on it fails with a connection error or answers READONLY, it asks
//! the Sentinels again and, if the master moved, swaps in a connection to the new
//! one. The call that met the error still fails (as any call on a dropping
//! connection does); callers already retry those until their deadline, and their
//! retry goes to the new master. The subscriber asks the Sentinels afresh every time
//! it opens a connection ([`Follower::master`]), and a connection it opened ends
//! when the Follower moves away from that master ([`Follower::moved_away`]), so the
//! subscriber follows too. A lock manager's Follower also listens to every
//! Sentinel's `+switch-master` announcement (`switch.rs`) and moves the moment a
//! failover is done, before any call fails.
//!
//! With replica confirmation on, the Follower holds one connection per lane
//! (`wire/replicas/lanes.rs`) to the master: every lane moves with it, and a
//! lane whose connection stopped answering while a fresh one answers is
//! replaced on its own.

mod dial;
mod switch;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::SentinelClient;
use redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::wire::Moves;
use dial::connect_lanes;

/// How many times a lookup is tried after a sign that the master moved, and the
/// pause between tries: 120 x 250 ms covers a failover of half a minute.
const LOOKUPS: u32 = 120;
const LOOKUP_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);

/// What the count of replicas (`node/replicas/single.rs`) hears as the
/// connection moves to a new master, so that the first calls there go by that
/// master's replicas, not the old one's.
pub(crate) trait CountOnMove: Send + Sync {
    /// Whether anyone still counts: if not, the new master is not asked.
    fn counting(&self) -> bool;

    /// The connection moved to a master whose `INFO replication` is `info`.
    fn moved(&self, info: &str);

    /// The connection sends to the new master now (told whether or not its
    /// `INFO` could be read): what was kept for a failover goes out there.
    fn followed(&self);
}

/// The hook a move runs.
type Counted = Arc<dyn CountOnMove>;

/// See the module documentation.
pub(crate) struct Follower {
    /// Asks the Sentinels where the master is.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connections to the master found last, one per lane (lane 0 for
    /// every call that asks no replica), and that master's address.
    current: RwLock<(Vec<ConnectionManager>, String)>,
    /// A client for that master, for connections of their own beside the
    /// shared one (`node/replicas/` must not wait behind a `WAIT` on it).
    master_client: RwLock<Client>,
    /// A lookup is under way (one at a time).
    looking: AtomicBool,
    /// Bumped before each move to a new master, so that grouped replica
    /// confirmation (`wire/replicas/`) never counts a `WAIT` on the new
    /// master as covering a script the old one ran (client ids of two servers
    /// may be equal).
    generation: Arc<AtomicU64>,
    /// Told when the connection moves to a new master: calls still waiting on
    /// the old one give up at once (they would wait out the old connection's
    /// reconnect attempts, seconds) so that their callers retry on the new one.
    moved: Arc<tokio::sync::Notify>,
    /// How the connections are made.
    settings: ConnectionManagerConfig,
    /// The longest a lock change's `WAIT` holds its lane: a lane that answers
    /// no PING for that long (beyond the usual pause) is silent.
    waits_up_to: std::time::Duration,
    /// The master's name and a client per Sentinel, for the listeners.
    name: String,
    sentinel_clients: Vec<Client>,
    /// Dropped with the Follower: the `+switch-master` listeners then end.
    gone: watch::Sender<()>,
    /// What the count of the command connection's replicas hears of a move
    /// (`node/replicas/single.rs`, handed in so that this file writes nothing
    /// of it): a move has it take the new master's count before the first
    /// call goes there ([`Follower::count_on_move`]).
    counted: RwLock<Option<Counted>>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("master", &self.address())
            .finish()
    }
}

impl Follower {
    /// Finds the master of `config` (a Sentinel setup) through its Sentinels and
    /// connects to it, with the credentials and TLS `config` gives (`dial.rs`),
    /// on `lanes` connections (at least one).
    pub(crate) async fn connect(
        config: &Config,
        settings: ConnectionManagerConfig,
        lanes: usize,
    ) -> RedisResult<Arc<Follower>> {
        let mut client = dial::sentinel_client(config)?;
        let sentinel_clients = dial::sentinel_clients(config)?;
        let master = client.async_get_client().await?;
        let address = master.get_connection_info().addr().to_string();
        let conn = connect_lanes(&master, &settings, lanes).await?;
        info!(master = %address, tls = config.master_uses_tls(), "found the master through Sentinel");
        Ok(Arc::new(Follower {
            sentinels: tokio::sync::Mutex::new(client),
            current: RwLock::new((conn, address)),
            master_client: RwLock::new(master),
            looking: AtomicBool::new(false),
            generation: Arc::default(),
            moved: Arc::new(tokio::sync::Notify::new()),
            settings,
            waits_up_to: config
                .replica_sync()
                .map_or(std::time::Duration::ZERO, |sync| sync.timeout),
            name: config
                .sentinel
                .as_ref()
                .map(|(name, _)| name.clone())
                .unwrap_or_default(),
            sentinel_clients,
            gone: watch::channel(()).0,
            counted: RwLock::new(None),
        }))
    }

    /// Starts listening for the Sentinels' `+switch-master` announcements
    /// (`switch.rs`) until this Follower is gone; reconnects to a Sentinel after
    /// `backoff` (first and longest pause), each attempt bounded by
    /// `connect_timeout`.
    pub(crate) fn listen_for_switches(
        self: &Arc<Self>,
        backoff: (std::time::Duration, std::time::Duration),
        connect_timeout: std::time::Duration,
    ) {
        let listen = switch::Listen {
            name: self.name.clone(),
            follower: Arc::downgrade(self),
            gone: self.gone.subscribe(),
            backoff,
            connect_timeout,
        };
        switch::start(&self.sentinel_clients, &listen);
    }

    /// Resolves once the connection has moved to a master other than the one at
    /// `from` (the address a pub/sub connection was opened to): the subscriber's
    /// connection there is then on the wrong server, even if it never drops (a
    /// frozen or cut-off old master). Holds the Follower only weakly.
    pub(crate) async fn moved_away(me: Weak<Self>, from: String) {
        // Only a move heard from now on counts: when the subscriber reached the
        // new master before this Follower did, its connection is the right one
        // although the addresses differ for a moment.
        loop {
            let Some(follower) = me.upgrade() else {
                // The manager is gone: nothing will reopen the connection.
                return std::future::pending().await;
            };
            let moved = Arc::clone(&follower.moved).notified_owned();
            drop(follower);
            moved.await;
            if me.upgrade().is_some_and(|f| f.address() != from) {
                return;
            }
        }
    }

    /// Resolves at the next move to another master.
    pub(in crate::node) async fn moves(&self) {
        Arc::clone(&self.moved).notified_owned().await;
    }

    /// Whether the Sentinels name the master in use as theirs with no failover
    /// under way: `Some(true)` if every Sentinel that answered with the newest
    /// configuration does, `Some(false)` if one of those names another master
    /// or is failing over (or down-flags it), `None` if none answered. Asked
    /// when the master lost replicas (`node/replicas/`), to tell a replica's
    /// trouble from a demotion.
    ///
    /// Only the answers of the newest `config-epoch` count: a failover raises
    /// the epoch, so a Sentinel still on an older one missed it (it was cut
    /// off, or started while the old master was already down and never met the
    /// others). It names the old master, down-flagged, for as long as it stays
    /// behind; heeding it would keep the new master in doubt for good, every
    /// lock change refused. A Sentinel that has seen the failover starts, or a
    /// newer one, always has the newest epoch, so it is never outvoted.
    pub(in crate::node) async fn still_master(&self) -> Option<bool> {
        let address = self.address();
        let asks = self.sentinel_clients.iter().map(|client| {
            let name = self.name.as_str();
            async move {
                let asked = async {
                    let mut conn = client.get_multiplexed_async_connection().await?;
                    redis::cmd("SENTINEL")
                        .arg("MASTER")
                        .arg(name)
                        .query_async::<std::collections::HashMap<String, String>>(&mut conn)
                        .await
                };
                match tokio::time::timeout(LOOKUP_PAUSE * 4, asked).await {
                    Ok(Ok(fields)) => Some(fields),
                    Ok(Err(e)) => {
                        debug!(error = %e, "a Sentinel did not answer SENTINEL MASTER");
                        None
                    }
                    Err(_) => None,
                }
            }
        });
        let answers: Vec<_> = futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect();
        let epoch = |fields: &std::collections::HashMap<String, String>| {
            let epoch = fields
                .get("config-epoch")
                .and_then(|e| e.parse::<u64>().ok());
            epoch.unwrap_or(0)
        };
        let newest = answers.iter().map(epoch).max()?;
        let mut current = answers.iter().filter(|fields| epoch(fields) == newest);
        Some(current.all(|fields| {
            let named = format!(
                "{}:{}",
                fields.get("ip").map_or("", String::as_str),
                fields.get("port").map_or("", String::as_str)
            );
            let flags = fields.get("flags").map_or("", String::as_str);
            named == address
                && !flags
                    .split(',')
                    .any(|f| matches!(f, "s_down" | "o_down" | "failover_in_progress"))
        }))
    }

    /// A client for the master in use.
    pub(in crate::node) fn master_client(&self) -> Client {
        self.master_client
            .read()
            .map_or_else(|e| e.into_inner().clone(), |c| c.clone())
    }

    /// The address of the master in use.
    pub(in crate::node) fn address(&self) -> String {
        self.current
            .read()
            .map_or_else(|e| e.into_inner().1.clone(), |c| c.1.clone())
    }

    /// The connection to the master in use on `lane` (modulo the lanes there
    /// are; a clone shares it).
    fn conn(&self, lane: usize) -> ConnectionManager {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.0[lane % current.0.len()].clone()
    }

    /// How many lanes it has.
    pub(crate) fn lanes(&self) -> usize {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .len()
    }

    /// A client for the master the Sentinels name now. If that is not the
    /// master the command connection uses (the subscriber found the failover
    /// first), the command connection follows it too, in the background.
    pub(crate) async fn master(self: &Arc<Self>) -> RedisResult<Client> {
        let client = self.sentinels.lock().await.async_get_client().await?;
        if client.get_connection_info().addr().to_string() != self.address() {
            self.look_again();
        }
        Ok(client)
    }

    /// Looks the master up again in the background (one lookup at a time), and
    /// keeps looking while it cannot be found or is not answering: during a
    /// failover the Sentinels name the dead master (or none) for a few seconds,
    /// and waiting for the next failed call to ask again would leave the
    /// connection on the dead one until a command timed out there (the
    /// connection manager's own reconnect attempts take seconds).
    pub(in crate::node) fn look_again(self: &Arc<Self>) {
        if self.looking.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            for attempt in 0..LOOKUPS {
                match me.follow().await {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) if attempt == 0 => {
                        warn!(error = %e, "could not find the master through Sentinel; asking again");
                    }
                    Err(e) => {
                        debug!(error = %e, attempt, "master still not found through Sentinel")
                    }
                }
                tokio::time::sleep(LOOKUP_PAUSE).await;
            }
            me.looking.store(false, Ordering::Release);
        });
    }

    /// Has each move tell `counted` the new master's `INFO replication`
    /// once the connection moved. The counting task (`node/replicas/`) hears
    /// of the move too, but only after it: in between, the first lock changes
    /// on a master left with no replica asked for the old master's and waited
    /// out a whole `WAIT`, to be refused `NotReplicated`.
    pub(in crate::node) fn count_on_move(&self, counted: Counted) {
        *self.counted.write().unwrap_or_else(|e| e.into_inner()) = Some(counted);
    }

    /// The `INFO replication` of the master behind `conn`, and whom to tell
    /// of it ([`Follower::count_on_move`]); `None` when nobody counts or the
    /// master does not answer `INFO` soon (the counting task then counts).
    async fn count_at(&self, conn: &mut ConnectionManager) -> Option<(Counted, String)> {
        let counted = self
            .counted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|c| c.counting())?;
        let mut cmd = redis::cmd("INFO");
        let info = cmd.arg("replication").query_async::<String>(conn);
        match tokio::time::timeout(LOOKUP_PAUSE * 4, info).await {
            Ok(Ok(info)) => Some((counted, info)),
            _ => None,
        }
    }

    /// The count of this connection's moves, for replica confirmation to read.
    pub(crate) fn move_count(&self) -> Moves {
        Moves::of(Arc::clone(&self.generation))
    }

    /// Asks the Sentinels and, if the master moved, connects to the new one.
    /// Answers whether the master in use now answers (it moved, or the same one
    /// answers a PING).
    async fn follow(&self) -> RedisResult<bool> {
        let sentinels = self.sentinels.lock().await.async_get_client().await;
        let master = sentinels?;
        let address = master.get_connection_info().addr().to_string();
        if address == self.address() {
            return self.replace_silent(master).await;
        }
        let mut conn = connect_lanes(&master, &self.settings, self.lanes()).await?;
        let counted = self.count_at(&mut conn[0]).await;
        warn!(from = %self.address(), to = %address, "the master moved (failover); following it");
        *self
            .master_client
            .write()
            .unwrap_or_else(|e| e.into_inner()) = master;
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (conn, address);
        // The count changes only after the swap: a call that read the new
        // count (none, say) must not go out on the old master without a WAIT.
        // The Sentinels named this master: its count is taken as it is, and
        // a doubt of the old one ends.
        if let Some((counted, info)) = counted {
            counted.moved(&info);
        }
        self.moved.notify_waiters();
        // Releases no replica confirmed go out to the new master now, not at
        // their next tick (`wire/replicas/kept.rs`); the connection is there
        // already.
        let hook = self
            .counted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(hook) = hook {
            hook.followed();
        }
        Ok(true)
    }
}

/// The command connection's `lane` through a [`Follower`].
pub(crate) fn request<'a>(
    follower: &'a Arc<Follower>,
    lane: usize,
    cmd: &'a Cmd,
) -> RedisFuture<'a, Value> {
    Box::pin(async move {
        follower
            .on_master(lane, |mut conn| async move {
                conn.req_packed_command(cmd).await
            })
            .await
    })
}

/// A pipeline on `lane` through a [`Follower`].
pub(crate) fn request_many<'a>(
    follower: &'a Arc<Follower>,
    lane: usize,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> RedisFuture<'a, Vec<Value>> {
    Box::pin(async move {
        follower
            .on_master(lane, |mut conn| async move {
                conn.req_packed_commands(pipeline, offset, count).await
            })
            .await
    })
}

impl Follower {
    /// Runs `call` on the master's connection on `lane`; gives up with a
    /// dropped-connection error if the connection moves to another master
    /// meanwhile, and looks the master up again on a sign that it moved.
    async fn on_master<T, F>(
        self: &Arc<Self>,
        lane: usize,
        call: impl FnOnce(ConnectionManager) -> F,
    ) -> RedisResult<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
        T: Moved,
    {
        // Listen before taking the connection, so a move in between is heard.
        let mut moved = std::pin::pin!(self.moved.notified());
        moved.as_mut().enable();
        let call = std::pin::pin!(call(self.conn(lane)));
        let outcome = match futures::future::select(call, moved).await {
            futures::future::Either::Left((outcome, _)) => outcome,
            futures::future::Either::Right(((), _)) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the master moved (Sentinel failover) while the call waited; try again",
            ))),
        };
        if outcome.as_ref().map_or_else(says_moved, T::says_moved) {
            self.look_again();
        }
        outcome
    }
}

/// Whether an error means the master may have moved: the connection dropped or
/// was refused.
fn says_moved(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error()
}

/// A reply that may say the master moved: a demoted master answers writes
/// with READONLY.
trait Moved {
    fn says_moved(&self) -> bool;
}

impl Moved for Value {
    fn says_moved(&self) -> bool {
        matches!(self, Value::ServerError(e) if e.to_string().contains("READONLY"))
    }
}

impl Moved for Vec<Value> {
    fn says_moved(&self) -> bool {
        self.iter().any(Moved::says_moved)
    }
}

/// The database of the master's connection.
pub(crate) fn db(follower: &Follower) -> i64 {
    follower.conn(0).get_db()
}

/// Whether the Sentinels of `config` monitor its master name: `Some(true)` if one
/// of them does, `Some(false)` if every Sentinel that answered says it does not,
/// `None` if none answered. What tells a failover in progress (the Sentinels know
/// the name but name no master that answers yet) from a name nobody monitors (a
/// mistyped `--master-name`): redis-rs reports both as "master not found".
pub(crate) async fn monitored(config: &Config) -> Option<bool> {
    let name = config.sentinel.as_ref().map(|(name, _)| name.as_str())?;
    let clients = dial::sentinel_clients(config).ok()?;
    let mut answered = false;
    for client in clients {
        let asked = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(name)
                .query_async::<Value>(&mut conn)
                .await
        };
        match tokio::time::timeout(config.connection_timeout, asked).await {
            Ok(Ok(_)) => return Some(true),
            Ok(Err(e)) if matches!(e.kind(), redis::ErrorKind::Server(_)) => answered = true,
            Ok(Err(e)) => debug!(error = %e, "a Sentinel did not answer SENTINEL MASTER"),
            Err(_) => debug!("a Sentinel did not answer SENTINEL MASTER in time"),
        }
    }
    answered.then_some(false)
}
