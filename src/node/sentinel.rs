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
//! it opens a connection ([`Follower::master`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tracing::{info, warn};

/// See the module documentation.
pub(crate) struct Follower {
    /// Asks the Sentinels where the master is.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The connection to the master found last, and that master's address.
    current: RwLock<(ConnectionManager, String)>,
    /// A lookup is under way (one at a time).
    looking: AtomicBool,
    /// How the connections are made.
    settings: ConnectionManagerConfig,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("master", &self.address())
            .finish()
    }
}

impl Follower {
    /// Finds the master `name` through `sentinels` and connects to it.
    pub(crate) async fn connect(
        name: &str,
        sentinels: &[String],
        settings: ConnectionManagerConfig,
    ) -> RedisResult<Arc<Follower>> {
        // redis-rs takes the name as a String without its TLS feature and as any
        // AsRef<str> with it; a String serves both builds.
        #[allow(clippy::unnecessary_to_owned)]
        let mut client = SentinelClient::build(
            sentinels.to_vec(),
            name.to_string(),
            None,
            SentinelServerType::Master,
        )?;
        let master = client.async_get_client().await?;
        let address = master.get_connection_info().addr().to_string();
        let conn = ConnectionManager::new_with_config(master, settings.clone()).await?;
        info!(master = %address, "found the master through Sentinel");
        Ok(Arc::new(Follower {
            sentinels: tokio::sync::Mutex::new(client),
            current: RwLock::new((conn, address)),
            looking: AtomicBool::new(false),
            settings,
        }))
    }

    /// The address of the master in use.
    fn address(&self) -> String {
        self.current
            .read()
            .map_or_else(|e| e.into_inner().1.clone(), |c| c.1.clone())
    }

    /// The connection to the master in use (a clone shares it).
    fn conn(&self) -> ConnectionManager {
        self.current
            .read()
            .map_or_else(|e| e.into_inner().0.clone(), |c| c.0.clone())
    }

    /// A client for the master the Sentinels name now.
    pub(crate) async fn master(&self) -> RedisResult<Client> {
        self.sentinels.lock().await.async_get_client().await
    }

    /// After a call's outcome: on a sign that the master moved, look it up again
    /// (in the background, one lookup at a time).
    fn check(self: &Arc<Self>, outcome: &RedisResult<Value>) {
        let moved = match outcome {
            Err(e) => e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error(),
            Ok(Value::ServerError(e)) => e.to_string().contains("READONLY"),
            Ok(_) => false,
        };
        if moved && !self.looking.swap(true, Ordering::AcqRel) {
            let me = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(e) = me.follow().await {
                    warn!(error = %e, "could not find the master through Sentinel; will ask again at the next failure");
                }
                me.looking.store(false, Ordering::Release);
            });
        }
    }

    /// Asks the Sentinels and, if the master moved, connects to the new one.
    async fn follow(&self) -> RedisResult<()> {
        let master = self.master().await?;
        let address = master.get_connection_info().addr().to_string();
        if address == self.address() {
            return Ok(());
        }
        let conn = ConnectionManager::new_with_config(master, self.settings.clone()).await?;
        warn!(from = %self.address(), to = %address, "the master moved (failover); following it");
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = (conn, address);
        Ok(())
    }
}

/// The command connection through a [`Follower`].
pub(crate) fn request<'a>(follower: &'a Arc<Follower>, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
    Box::pin(async move {
        let mut conn = follower.conn();
        let outcome = conn.req_packed_command(cmd).await;
        follower.check(&outcome);
        outcome
    })
}

/// A pipeline through a [`Follower`].
pub(crate) fn request_many<'a>(
    follower: &'a Arc<Follower>,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> RedisFuture<'a, Vec<Value>> {
    Box::pin(async move {
        let mut conn = follower.conn();
        let outcome = conn.req_packed_commands(pipeline, offset, count).await;
        if let Err(e) = &outcome {
            follower.check(&Err::<Value, RedisError>(e.clone()));
        }
        outcome
    })
}

/// The database of the master's connection.
pub(crate) fn db(follower: &Follower) -> i64 {
    follower.conn().get_db()
}
