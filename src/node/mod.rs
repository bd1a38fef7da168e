//! The Redis seam: the one place that knows what kind of Redis deployment stands
//! behind the lock manager.
//!
//! Everything above this module talks to a [`Node`]: it asks for the command
//! connection ([`Conn`], which every script call of the wire layer is generic over,
//! as redis-rs's own `ConnectionLike` is), for the source of pub/sub connections
//! the subscriber reads from ([`PubSubSource`]), and for the group a key belongs
//! to ([`Node::group`]): work that puts the keys of many locks into one call (the
//! renewer's batches, the coalescer's) only ever batches keys of one group. On a
//! standalone server every key is one group; a Redis Cluster will have one group per
//! hash slot, so no batch can cross a slot.
//!
//! Today the seam has one deployment, a standalone server reached through redis-rs's
//! `ConnectionManager` (multiplexed: concurrent scripts from all lock actors are
//! pipelined on one socket; it reconnects by itself). A new deployment (Sentinel,
//! Cluster) is a new [`Conn`] variant and a new arm in [`connect`], in a file of its
//! own under this folder; nothing above changes. What redis-rs does itself
//! (pipelining, reconnecting, script caching, cluster routing) is not written here.
//!
//! The coalescer (`coalescer`) lives here too: it is how calls reach the server,
//! not what they mean.

mod checks;
mod coalescer;
mod sentinel;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::config::Config;
use crate::error::LockError;

pub(crate) use coalescer::Coalescer;
use sentinel::Follower;

/// What a connection is for: they differ in how hard they try to reach Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A lock manager: reconnects with backoff for as long as it lives.
    Locks,
    /// An operator's one-off look ([`Admin`](crate::Admin)): one attempt, bounded
    /// by the connection timeout, and a PING, so that an unreachable server is
    /// reported at once instead of after a round of reconnect backoff.
    Operator,
}

/// The group of a key: keys of one group may share a script call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Group(u16);

/// The shape of the deployment, as far as batching cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server: every key is in one group.
    Standalone,
}

impl Topology {
    /// The group of `key`.
    pub(crate) fn group(self, _key: &str) -> Group {
        match self {
            Topology::Standalone => Group(0),
        }
    }
}

/// The command connection, whatever the deployment. Cloning it shares the
/// underlying connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A standalone server.
    Standalone(ConnectionManager),
    /// The master Sentinel names, followed across failovers (`sentinel.rs`).
    Sentinel(Arc<Follower>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Standalone(_) => f.write_str("Conn::Standalone"),
            Conn::Sentinel(s) => write!(f, "Conn::Sentinel({s:?})"),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Standalone(c) => c.req_packed_command(cmd),
            Conn::Sentinel(s) => sentinel::request(s, cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(s) => sentinel::request_many(s, pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Standalone(c) => c.get_db(),
            Conn::Sentinel(s) => sentinel::db(s),
        }
    }
}

/// Opens pub/sub connections for the subscriber (a dedicated connection each time:
/// its message stream ends when the connection drops, which is how the subscriber
/// learns that it must resubscribe).
#[derive(Clone, Debug)]
pub(crate) struct PubSubSource {
    /// Where to connect: a server, or the master Sentinel names at the time.
    target: PubSubTarget,
    /// How long one attempt may take.
    timeout: Duration,
}

/// Where the subscriber's connections go.
#[derive(Clone, Debug)]
enum PubSubTarget {
    /// Always this server (boxed: a client is large, and this enum is cloned).
    Server(Box<redis::Client>),
    /// The master the Sentinels name when the connection is opened.
    Master(Arc<Follower>),
}

impl PubSubSource {
    /// A new pub/sub connection, or why there is none (a timeout included).
    pub(crate) async fn open(&self) -> Result<PubSub, String> {
        let target = self.target.clone();
        let open = async move {
            match target {
                PubSubTarget::Server(client) => client.get_async_pubsub().await,
                PubSubTarget::Master(follower) => follower.master().await?.get_async_pubsub().await,
            }
        };
        tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| "timed out connecting".to_string())?
            .map_err(|e| e.to_string())
    }
}

/// One Redis deployment, connected; see the module documentation. Cheap to clone.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    /// The command connection.
    conn: Conn,
    /// How keys group for batching.
    topology: Topology,
    /// Where the subscriber's connections come from.
    pubsub: PubSubSource,
}

impl Node {
    /// The command connection (a clone shares it).
    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// The group of `key`: keys of one group may share a script call.
    pub(crate) fn group(&self, key: &str) -> Group {
        self.topology.group(key)
    }

    /// How keys group, for work that batches away from the node (the coalescer).
    pub(crate) fn topology(&self) -> Topology {
        self.topology
    }

    /// Where the subscriber opens its connections.
    pub(crate) fn pubsub(&self) -> PubSubSource {
        self.pubsub.clone()
    }
}

/// Connects to the deployment `config` names, for `purpose`. The one way the
/// manager, [`Admin`](crate::Admin) and the `lockwarden` command reach Redis.
pub(crate) async fn connect(config: &Config, purpose: Purpose) -> Result<Node, LockError> {
    config.validate()?;
    let client = config.client.clone();
    let mut cm = ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout))
        .set_connection_timeout(Some(config.connection_timeout));
    cm = match purpose {
        Purpose::Locks => cm
            .set_min_delay(config.reconnect_min)
            .set_max_delay(config.reconnect_max),
        Purpose::Operator => cm.set_number_of_retries(0),
    };
    // The connection manager retries a failed first connection several times with
    // backoff (4.7 s against a closed port); the documented connection timeout is
    // the bound a caller was promised, so the whole first connection is held to it.
    let first = async {
        Ok::<_, redis::RedisError>(match &config.sentinel {
            None => Conn::Standalone(ConnectionManager::new_with_config(client.clone(), cm).await?),
            Some((master, sentinels)) => {
                Conn::Sentinel(Follower::connect(master, sentinels, cm).await?)
            }
        })
    };
    let mut conn = tokio::time::timeout(config.connection_timeout, first)
        .await
        .map_err(|_| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "could not connect to Redis within the connection timeout ({:?})",
                    config.connection_timeout
                ),
            ))
        })??;
    let target = match &conn {
        Conn::Standalone(_) => PubSubTarget::Server(Box::new(client)),
        Conn::Sentinel(follower) => PubSubTarget::Master(Arc::clone(follower)),
    };
    match purpose {
        Purpose::Operator => {
            let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        }
        Purpose::Locks => checks::warn_if_locks_can_be_evicted(&mut conn).await,
    }
    Ok(Node {
        conn,
        topology: Topology::Standalone,
        pubsub: PubSubSource {
            target,
            timeout: config.connection_timeout,
        },
    })
}
