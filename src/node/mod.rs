//! The Redis seam: the one place that knows what kind of Redis deployment stands
//! behind the lock manager.
//!
//! Everything above this module talks to a [`Node`]: it asks for the command
//! connection ([`Conn`], which every script call of the wire layer is generic over,
//! as redis-rs's own `ConnectionLike` is), for the source of pub/sub connections
//! the subscriber reads from ([`PubSubSource`]), and for the group a key belongs
//! to ([`Node::group`]): work that puts the keys of many locks into one call (the
//! renewer's batches, the coalescer's) only ever batches keys of one group. On a
//! standalone server every key is one group; on a Redis Cluster a group is a hash
//! slot, so no batch can cross a slot.
//!
//! Three deployments stand behind it, each a variant of the connection's `Link`
//! and a file of its own: a standalone server reached through redis-rs's `ConnectionManager`
//! (`standalone.rs`; multiplexed: concurrent scripts from all lock actors are
//! pipelined on one socket; it reconnects by itself when the connection drops,
//! and is replaced here after a call timed out), the master Sentinel names (`sentinel/`,
//! which follows failovers, as redis-rs does not, and `sentinel/switch.rs`, which hears
//! Sentinel announce them), and a Redis Cluster
//! (`cluster.rs`, redis-rs's cluster connection: slot routing, redirects, topology
//! refresh). A new deployment is a new variant and a new part of [`connect()`]
//! (`connect.rs`, one function per deployment); nothing above changes. What redis-rs does itself (pipelining, reconnecting,
//! script caching, cluster routing) is not written here. The connection also says
//! which publish command the scripts use there ([`ScriptConn`]): `SPUBLISH` on a
//! cluster with sharded pub/sub, `PUBLISH` elsewhere; `pubsub.rs` gives the
//! subscriber the matching subscriptions.
//!
//! The coalescer (`coalescer`) lives here too: it is how calls reach the server,
//! not what they mean.
//!
//! So does the node's half of replica confirmation (`replicas/`): how many
//! replicas of each master can confirm a lock change, and whether that master
//! can be trusted, handed to the wire's half through one type,
//! `ReplicaWatch` (`replicas/watch.rs`).

mod cluster;
mod coalescer;
mod connect;
mod diagnose;
mod pubsub;
pub(crate) mod replicas;
mod sentinel;
mod standalone;
mod start;

use std::sync::Arc;

use redis::aio::ConnectionLike;
#[cfg(test)]
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::LockError;
use crate::wire::{Confirmation, Lanes, Publish, ScriptConn};

pub(crate) use coalescer::Coalescer;
pub(crate) use connect::connect;
pub(crate) use pubsub::{Event, PubSubSource, Sink};
use replicas::Confirmer;
pub use replicas::ReplicaConfirmation;
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
    /// A Redis Cluster: a group is a hash slot.
    Cluster,
}

impl Topology {
    /// The group of `key`.
    pub(crate) fn group(self, key: &str) -> Group {
        match self {
            Topology::Standalone => Group(0),
            Topology::Cluster => Group(cluster::slot(key)),
        }
    }
}

/// The command connection, whatever the deployment, and how many replicas must
/// confirm a lock change on it (`Config::sync_replicas`). Cloning it shares the
/// underlying connection.
#[derive(Clone, Debug)]
pub(crate) struct Conn {
    /// The deployment's connection.
    link: Link,
    /// The lane this clone sends on (`wire/replicas/lanes.rs`): 0, the
    /// manager's one connection, but for a confirmed change.
    lane: usize,
    /// Replicas to wait for behind every lock-changing script, and the budget
    /// of `WAIT`s on this connection (`wire/replicas/`); shared by its clones.
    confirmation: Option<Confirmer>,
}

/// The connection of each deployment.
#[derive(Clone)]
enum Link {
    /// A standalone server, replaced after a timeout (`standalone.rs`).
    Standalone(Arc<standalone::Standalone>),
    /// The master Sentinel names, followed across failovers (`sentinel/`).
    Sentinel(Arc<Follower>),
    /// A Redis Cluster (`cluster.rs`), and the publish command of its scripts.
    Cluster(ClusterConnection, Publish),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Link::Standalone(_) => f.write_str("Standalone"),
            Link::Sentinel(s) => write!(f, "Sentinel({s:?})"),
            Link::Cluster(_, publish) => write!(f, "Cluster({publish:?})"),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Standalone(s) => standalone::request(s, self.lane, cmd),
            Link::Sentinel(s) => sentinel::request(s, self.lane, cmd),
            Link::Cluster(c, _) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Standalone(s) => standalone::request_many(s, self.lane, pipeline, offset, count),
            Link::Sentinel(s) => sentinel::request_many(s, self.lane, pipeline, offset, count),
            Link::Cluster(c, _) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Standalone(s) => s.conn().get_db(),
            Link::Sentinel(s) => sentinel::db(s),
            Link::Cluster(c, _) => c.get_db(),
        }
    }
}

impl Lanes for Conn {
    fn lane(&self, lane: usize) -> Conn {
        Conn {
            lane,
            ..self.clone()
        }
    }
}

impl ScriptConn for Conn {
    fn publish(&self) -> Publish {
        match &self.link {
            Link::Cluster(_, publish) => *publish,
            Link::Standalone(_) | Link::Sentinel(_) => Publish::Plain,
        }
    }

    fn confirmation(&self, key: Option<&str>) -> Option<Arc<Confirmation>> {
        Some(self.confirmation.as_ref()?.for_key(key))
    }

    fn slot_of(&self, key: &str) -> Option<u16> {
        self.is_cluster().then(|| cluster::slot(key))
    }
}

impl Conn {
    /// Whether it leads to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(..))
    }

    /// Whether its masters can fail over (Sentinel, Cluster): a master may
    /// then be demoted while frozen or cut off, and still answer when it
    /// resumes.
    pub(crate) fn fails_over(&self) -> bool {
        !matches!(self.link, Link::Standalone(_))
    }

    /// A connection to a standalone server that asks no replica to confirm.
    #[cfg(test)]
    pub(crate) fn standalone(conn: ConnectionManager) -> Conn {
        Conn {
            link: Link::Standalone(Arc::new(standalone::Standalone::fixed(conn))),
            lane: 0,
            confirmation: None,
        }
    }

    /// The masters to visit for work that walks every node's keys (SCAN):
    /// `None` for a single server, where one connection sees every key.
    pub(crate) async fn masters(&self) -> Result<Option<Vec<(String, u16)>>, LockError> {
        match &self.link {
            Link::Cluster(c, _) => Ok(Some(cluster::masters(&mut c.clone()).await?)),
            Link::Standalone(_) | Link::Sentinel(_) => Ok(None),
        }
    }

    /// Sends `cmd` to the cluster master at `at`, or, with `None` or on a single
    /// server, where the command's own routing takes it.
    pub(crate) async fn query_at<T: redis::FromRedisValue>(
        &self,
        cmd: Cmd,
        at: Option<&(String, u16)>,
    ) -> Result<T, LockError> {
        let value = match (&self.link, at) {
            (Link::Cluster(c, _), Some((host, port))) => {
                c.clone()
                    .route_command(cmd, cluster::at(host, *port))
                    .await?
            }
            _ => cmd.query_async(&mut self.clone()).await?,
        };
        Ok(redis::from_redis_value(value).map_err(redis::RedisError::from)?)
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
