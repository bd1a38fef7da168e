//! Where a behaviour test runs: one standalone server, or a Redis Cluster shared by
//! many scenarios. A scenario written against [`Target`] runs unchanged on both:
//! it gets its managers' `Config` here, and its raw checks go to the node that
//! serves the key it looks at (on a cluster, the master owning the key's slot),
//! pub/sub checks use the sharded commands on a cluster (where lockwarden itself
//! uses them), and counters from `INFO` are summed over the masters.

use futures::stream::{BoxStream, StreamExt};
use std::collections::HashMap;

use super::cluster::Cluster;
use super::server::RedisServer;

/// A standalone server or a cluster, owned by the test.
pub enum Target {
    /// One `redis-server`.
    Server(RedisServer),
    /// A Redis Cluster; pub/sub is sharded (Redis 7).
    Cluster(Cluster),
}

impl Target {
    /// A fresh standalone server.
    pub fn standalone() -> Target {
        Target::Server(RedisServer::start())
    }

    /// A fresh cluster of `masters` masters with `replicas` replicas each.
    pub fn cluster(masters: usize, replicas: usize) -> Target {
        Target::Cluster(Cluster::start(masters, replicas))
    }

    /// Whether this is a cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }

    /// A config for this target with every other setting at its default.
    pub fn config(&self) -> lockwarden::Config {
        match self {
            Target::Server(server) => super::config(server),
            Target::Cluster(cluster) => cluster.config(),
        }
    }

    /// Starts a manager here, with `tune` applied to the default config.
    pub async fn manager(
        &self,
        tune: impl FnOnce(lockwarden::Config) -> lockwarden::Config,
    ) -> actix::Addr<lockwarden::LockManager> {
        lockwarden::LockManager::start(tune(self.config()))
            .await
            .unwrap_or_else(|e| panic!("manager did not start: {e}"))
    }

    /// The running masters (the server itself when standalone).
    pub fn masters(&self) -> Vec<&RedisServer> {
        match self {
            Target::Server(server) => vec![server],
            Target::Cluster(cluster) => cluster
                .running_masters()
                .into_iter()
                .map(|i| &cluster.nodes[i])
                .collect(),
        }
    }

    /// The node that serves `key` (its slot's master on a cluster).
    pub fn node_for(&self, key: &str) -> &RedisServer {
        match self {
            Target::Server(server) => server,
            Target::Cluster(cluster) => &cluster.nodes[cluster.owner_of(key)],
        }
    }

    /// Runs a raw command on the node serving its key (`args[1]`; any master for
    /// a command without arguments) and returns its reply.
    pub fn raw<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let node = match args.get(1) {
            Some(key) => self.node_for(key),
            None => self.masters()[0],
        };
        super::raw(node, args)
    }

    /// Whether `key` exists.
    pub fn exists(&self, key: &str) -> bool {
        self.raw::<i64>(&["EXISTS", key]) == 1
    }

    /// For each `(key, field)`, whether the hash at `key` has `field`: one
    /// pipeline per node, so a check of many locks does not block the test's
    /// runtime (which also runs the managers) for long.
    pub fn hexists_all(&self, pairs: &[(String, String)]) -> Vec<bool> {
        let owners: Vec<&RedisServer> = match self {
            Target::Server(server) => vec![server; pairs.len()],
            Target::Cluster(cluster) => {
                let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
                cluster
                    .owners_of(&keys)
                    .into_iter()
                    .map(|i| &cluster.nodes[i])
                    .collect()
            }
        };
        let mut answers = vec![false; pairs.len()];
        let mut by_node: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, node) in owners.iter().enumerate() {
            by_node.entry(node.port()).or_default().push(i);
        }
        for indexes in by_node.values() {
            let mut pipe = redis::pipe();
            for &i in indexes {
                pipe.cmd("HEXISTS").arg(&pairs[i].0).arg(&pairs[i].1);
            }
            let held: Vec<i64> = pipe
                .query(&mut owners[indexes[0]].conn())
                .expect("HEXISTS pipeline");
            for (&i, h) in indexes.iter().zip(held) {
                answers[i] = h == 1;
            }
        }
        answers
    }

    /// Over how many cluster slots `keys` are spread (1 on a standalone server,
    /// where there is no slot to keep a batch inside).
    pub fn slots(&self, keys: &[String]) -> usize {
        let Target::Cluster(cluster) = self else {
            return 1;
        };
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
        }
        let slots: Vec<u16> = pipe
            .query(&mut cluster.nodes[cluster.running_masters()[0]].conn())
            .expect("CLUSTER KEYSLOT");
        slots
            .into_iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
    }

    /// How many connections are subscribed to `channel` where lockwarden
    /// subscribes it (`PUBSUB SHARDNUMSUB` on the slot's master on a cluster).
    pub fn subscribers(&self, channel: &str) -> i64 {
        let numsub = if self.is_cluster() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        let n: Vec<(String, i64)> =
            super::raw(self.node_for(channel), &["PUBSUB", numsub, channel]);
        n.first().map_or(0, |(_, count)| *count)
    }

    /// Publishes `message` on `channel` as a Redisson client would here
    /// (`SPUBLISH` on a Redis 7 cluster).
    pub fn publish(&self, channel: &str, message: &str) {
        let publish = if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        let _: i64 = super::raw(self.node_for(channel), &[publish, channel, message]);
    }

    /// The messages published on `channels` from now on (sharded subscriptions on
    /// a cluster).
    pub async fn listen(&self, channels: &[String]) -> BoxStream<'static, redis::Msg> {
        match self {
            Target::Server(server) => {
                let client = redis::Client::open(server.url()).expect("url");
                let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
                for channel in channels {
                    pubsub.subscribe(channel).await.expect("subscribe");
                }
                pubsub.into_on_message().boxed()
            }
            Target::Cluster(cluster) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let client = redis::cluster::ClusterClientBuilder::new(cluster.seeds())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(tx)
                    .build()
                    .expect("cluster client");
                let mut conn = client.get_async_connection().await.expect("connect");
                for channel in channels {
                    conn.ssubscribe(channel).await.expect("ssubscribe");
                }
                // The connection lives as long as the stream.
                futures::stream::unfold((rx, conn), |(mut rx, conn)| async move {
                    let push = rx.recv().await?;
                    Some((redis::Msg::from_push_info(push), (rx, conn)))
                })
                .filter_map(|msg| async move { msg })
                .boxed()
            }
        }
    }

    /// The messages published on any channel starting with `prefix` on a server
    /// (`PSUBSCRIBE`); on a cluster, where sharded pub/sub has no patterns, on
    /// the `known` channels only.
    pub async fn listen_prefix(
        &self,
        prefix: &str,
        known: &[String],
    ) -> BoxStream<'static, redis::Msg> {
        match self {
            Target::Server(server) => {
                let client = redis::Client::open(server.url()).expect("url");
                let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
                pubsub
                    .psubscribe(format!("{prefix}*"))
                    .await
                    .expect("psubscribe");
                pubsub.into_on_message().boxed()
            }
            Target::Cluster(_) => self.listen(known).await,
        }
    }

    /// `INFO commandstats` calls per command, summed over the masters.
    pub fn commandstats(&self) -> HashMap<String, u64> {
        let mut sum = HashMap::new();
        for node in self.masters() {
            for (command, calls) in node.commandstats() {
                *sum.entry(command).or_insert(0) += calls;
            }
        }
        sum
    }

    /// Total calls of all commands over the masters, script-internal ones included.
    pub fn total_calls(&self) -> u64 {
        self.commandstats().values().sum()
    }

    /// Keys stored, summed over the masters, less the client registry entries
    /// (`lockwarden:client:{..}`): a manager writes its own in the background
    /// after it starts, so they come and go on their own (`super::data_keys`).
    pub fn dbsize(&self) -> i64 {
        self.masters()
            .iter()
            .map(|n| super::data_key_count(n))
            .sum()
    }

    /// An async connection to the node serving `key`, for commands on that key
    /// only (and keys of its slot).
    pub async fn conn_for(&self, key: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.node_for(key).url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    /// The server's log (every master's on a cluster), for failure messages.
    pub fn log(&self) -> String {
        self.masters().iter().map(|n| n.log()).collect()
    }
}
