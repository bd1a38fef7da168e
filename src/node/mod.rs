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
//! refresh). A new deployment is a new variant and a new arm in [`connect`];
//! nothing above changes. What redis-rs does itself (pipelining, reconnecting,
//! script caching, cluster routing) is not written here. The connection also says
//! which publish command the scripts use there ([`ScriptConn`]): `SPUBLISH` on a
//! cluster with sharded pub/sub, `PUBLISH` elsewhere; `pubsub.rs` gives the
//! subscriber the matching subscriptions.
//!
//! The coalescer (`coalescer`) lives here too: it is how calls reach the server,
//! not what they mean.

mod checks;
mod cluster;
mod cluster_replicas;
mod coalescer;
mod diagnose;
mod pubsub;
mod replicas;
mod sentinel;
mod standalone;
mod start;

use std::sync::Arc;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::config::Config;
use crate::error::LockError;
use crate::replication::ReplicaConfirmation;
use crate::wire::{Confirmation, Lanes, Publish, ScriptConn};

pub(crate) use coalescer::Coalescer;
use pubsub::Target;
pub(crate) use pubsub::{Event, PubSubSource, Sink};
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

/// Where a connection's confirmation comes from.
#[derive(Clone, Debug)]
enum Confirmer {
    /// One master (a single server, or the one Sentinel names).
    One(Arc<Confirmation>),
    /// A cluster: the master serving the key's slot (`cluster_replicas.rs`).
    PerMaster(Arc<cluster_replicas::PerMaster>),
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
        match self.confirmation.as_ref()? {
            Confirmer::One(c) => Some(Arc::clone(c)),
            Confirmer::PerMaster(per) => Some(per.for_key(key)),
        }
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

/// How many replicas of the server whose `INFO replication` is `info` can
/// confirm lock changes now, by the rule a manager counts them with; `None`
/// when it is not a master.
pub(crate) fn replicas_in(info: &str) -> Option<u32> {
    let replication = replicas::parse(info);
    replication
        .master
        .then(|| replicas::Doubts::default().count(&replication, None))
}

impl Node {
    /// How replica confirmation stands on this node's connection, which
    /// `config` set up.
    pub(crate) fn replica_confirmation(&self, config: &Config) -> ReplicaConfirmation {
        let Some(sync) = config.replica_sync() else {
            return ReplicaConfirmation::off(
                "turned off by the configuration (no_replica_sync, --sync-replicas 0, or a \
                 response timeout too short for a WAIT)",
            );
        };
        match &self.conn.confirmation {
            None => ReplicaConfirmation::off(
                "the server cannot count its replicas: it is not a master, or the user may not \
                 run INFO (or CLUSTER NODES on a cluster); give the user +info +wait +client|id",
            ),
            Some(Confirmer::One(c)) => ReplicaConfirmation::counted(sync.min, c.live()),
            Some(Confirmer::PerMaster(_)) => ReplicaConfirmation {
                wanted: sync.min,
                counted: None,
                reason: None,
            },
        }
    }

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
    // A lock manager that confirms changes with replicas gets its lanes (a
    // WAIT blocks a whole connection, `wire/replicas/lanes.rs`); a cluster
    // keeps redis-rs's connection per master.
    let lanes = match purpose {
        Purpose::Locks if config.cluster.is_none() && config.replica_sync().is_some() => {
            config.confirmation_lanes
        }
        _ => 1,
    };
    // The connection manager retries a failed first connection several times with
    // backoff (4.7 s against a closed port); the documented connection timeout is
    // the bound a caller was promised, so the whole first connection is held to it.
    // A cluster gets a few more: redis-rs connects to every master it learns of.
    let bound = match config.cluster {
        Some(_) => config.connection_timeout * 3,
        None => config.connection_timeout,
    };
    let first = || async {
        let found =
            async {
                Ok::<_, redis::RedisError>(match (&config.sentinel, &config.cluster) {
                    (_, Some(seeds)) => {
                        let (conn, publish) = cluster::connect(seeds, config).await?;
                        Link::Cluster(conn, publish)
                    }
                    (Some(_), None) => {
                        Link::Sentinel(Follower::connect(config, cm.clone(), lanes).await?)
                    }
                    (None, None) => {
                        // One plain attempt first, whose failure is named at once when
                        // a person must fix it: the connection manager would retry it
                        // for the whole timeout. A failure that may pass (a restart, a
                        // slow link) gets the manager's retries, then the look's words.
                        let began = std::time::Instant::now();
                        let looked = diagnose::first_look(config).await;
                        let looked = match looked {
                            Err(e) if diagnose::settled(&e) => return Err(e),
                            looked => looked.err(),
                        };
                        let made = futures::future::try_join_all((0..lanes).map(|_| {
                            ConnectionManager::new_with_config(client.clone(), cm.clone())
                        }));
                        // Within the start's bound, leaving a moment to answer the
                        // look's words rather than the bound's.
                        let left = bound
                            .saturating_sub(began.elapsed())
                            .saturating_sub(std::time::Duration::from_millis(50));
                        match tokio::time::timeout(left, made).await {
                            Ok(Ok(conns)) => Link::Standalone(Arc::new(
                                standalone::Standalone::new(conns, client.clone(), cm.clone()),
                            )),
                            Ok(Err(e)) => return Err(looked.unwrap_or(e)),
                            Err(_) => {
                                return Err(looked.unwrap_or_else(|| {
                                    redis::RedisError::from(std::io::Error::new(
                                        std::io::ErrorKind::TimedOut,
                                        "no connection within the connection timeout",
                                    ))
                                }))
                            }
                        }
                    }
                })
            };
        let found = tokio::time::timeout(bound, found).await.map_err(|_| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("could not connect to Redis within the connection timeout ({bound:?})"),
            ))
        })?;
        // A Sentinel's master or a cluster's slots asked without the password they
        // want: say where it goes (a standalone server's error is named already).
        let standalone = config.sentinel.is_none() && config.cluster.is_none();
        found.map_err(|e| match standalone {
            true => e,
            false => diagnose::no_password(config, &e).unwrap_or(e),
        })
    };
    // A failover in progress is waited out within `Config::start_wait` (start.rs).
    let link = start::until_found(config, first).await?;
    let (target, topology) = match &link {
        Link::Standalone(_) => (Target::Server(Box::new(client)), Topology::Standalone),
        Link::Sentinel(follower) => {
            // Weakly: the subscriber may outlive the manager, and the Follower's
            // `+switch-master` listeners must end with the manager.
            (
                Target::Master(Arc::downgrade(follower)),
                Topology::Standalone,
            )
        }
        Link::Cluster(_, publish) => {
            let seeds = config.cluster.clone().unwrap_or_default();
            let target = Target::Cluster(seeds, Box::new(config.clone()), *publish);
            (target, Topology::Cluster)
        }
    };
    let mut conn = Conn {
        link,
        lane: 0,
        confirmation: None,
    };
    // A server that wants a password the URL does not give takes the connection
    // and refuses every command (NOAUTH): refused here, not at the first lock. A
    // lock manager's least-privilege user may lack PING (NOPERM): that is an
    // answer too; an operator's needs it. A cluster was asked for its slots on
    // connecting (a NOAUTH failed that), and a PING there goes to every master.
    let ping = match (&conn.link, purpose) {
        (_, Purpose::Operator) | (Link::Sentinel(_), Purpose::Locks) => true,
        // Standalone: `diagnose::first_look` has asked.
        (Link::Standalone(_) | Link::Cluster(..), Purpose::Locks) => false,
    };
    if ping {
        match redis::cmd("PING").query_async::<()>(&mut conn).await {
            Ok(()) => {}
            Err(e) if purpose == Purpose::Locks && crate::error::is_noperm(&e) => {}
            Err(e) => return Err(diagnose::no_password(config, &e).unwrap_or(e).into()),
        }
    }
    match purpose {
        Purpose::Operator => {}
        Purpose::Locks => {
            if let Link::Sentinel(follower) = &conn.link {
                follower.listen_for_switches(
                    (config.reconnect_min, config.reconnect_max),
                    config.connection_timeout,
                );
            }
            checks::warn_if_locks_can_be_evicted(&mut conn).await;
            if let Some(sync) = config.replica_sync() {
                conn.confirmation = checks::confirmer(&conn, config, sync).await?;
                if conn.confirmation.is_none() {
                    crate::stats::record::replicas_counted(0);
                }
            } else if let Link::Sentinel(_) = &conn.link {
                // No WAIT, but a demoted master is still not trusted.
                let only = replicas::doubts_only(&conn.link, config);
                conn.confirmation = Some(Confirmer::One(only));
            }
        }
    }
    Ok(Node {
        conn,
        topology,
        pubsub: PubSubSource::new(target, config.connection_timeout),
    })
}
