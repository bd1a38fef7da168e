//! Redis Cluster behind the seam.
//!
//! redis-rs's async cluster connection does the cluster's work: it learns the slot
//! map from the seed nodes, sends each command to the master of its key's slot,
//! follows MOVED and ASK redirects, refreshes the map when slots move and reconnects
//! to nodes that drop. Script calls need nothing more, because every call of the
//! wire layer keeps its keys in one slot: a lock's derived keys share the lock
//! name's hash tag (`keys::validate_name`), and batches are cut per slot through
//! [`slot`] (the renewer's and the coalescer's, via `Node::group`).
//!
//! What this file adds is small: the start-up checks that turn "this is not a
//! cluster" and "nobody answered" into clear errors instead of a hang, the probe
//! that decides between sharded pub/sub (Redis 7+: scripts `SPUBLISH`, waiters
//! `SSUBSCRIBE` on the shard that owns the lock) and plain pub/sub, the pub/sub
//! connection (RESP3 pushes; `pubsub.rs` reads them), and the list of masters an
//! operator's SCAN has to visit, since SCAN walks one node's keys only.

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{ErrorKind, PushInfo, RedisError, RedisResult};
use tokio::sync::mpsc::UnboundedSender;
use tracing::{debug, info};

use crate::config::Config;
use crate::wire::Publish;

/// Number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag, or of the whole key
/// when it has none, modulo 16384, as the cluster specification defines it.
/// redis-rs computes the same for routing but does not export it; batching needs
/// it before a command exists.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            // An empty tag `{}` does not count: the whole key is hashed.
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % SLOTS
}

/// The builder both of a manager's cluster connections start from.
fn builder(seeds: &[String], config: &Config) -> ClusterClientBuilder {
    ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(config.connection_timeout)
        .response_timeout(config.response_timeout)
}

/// The command connection to the cluster of `seeds`, and which publish command
/// its scripts must use. Fails with a clear message when no seed answers or a seed
/// is not in cluster mode.
pub(crate) async fn connect(
    seeds: &[String],
    config: &Config,
) -> RedisResult<(ClusterConnection, Publish)> {
    let client = builder(seeds, config).build()?;
    let mut conn = client.get_async_connection().await.map_err(explain)?;
    // `CLUSTER INFO` on a standalone server answers "cluster support disabled";
    // redis-rs's first slot-map query already failed on one, but a seed list
    // mixing a standalone server with cluster nodes gets here.
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await
        .map_err(explain)?;
    if !info.contains("cluster_state:ok") {
        return Err(RedisError::from((
            ErrorKind::Client,
            "the Redis Cluster is not serving every slot (cluster_state is not ok)",
        )));
    }
    let publish = probe_sharded(&mut conn).await;
    info!(?publish, "connected to Redis Cluster");
    Ok((conn, publish))
}

/// Sharded pub/sub when the servers know `PUBSUB SHARDNUMSUB` (Redis 7+), plain
/// otherwise: the probe Redisson makes too, so both sides of a shared lock pick
/// the same channel kind.
async fn probe_sharded(conn: &mut ClusterConnection) -> Publish {
    let probe: RedisResult<redis::Value> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .query_async(conn)
        .await;
    match probe {
        Ok(_) => Publish::Sharded,
        Err(e) => {
            debug!(error = %e, "no sharded pub/sub on this cluster; using PUBLISH/SUBSCRIBE");
            Publish::Plain
        }
    }
}

/// A cluster connection of its own for the task that counts each master's
/// replicas (`replicas/cluster.rs`): questions on the command connection would
/// wait behind the very `WAIT`s that ran out.
pub(crate) async fn connect_watcher(
    seeds: &[String],
    config: &Config,
) -> RedisResult<ClusterConnection> {
    builder(seeds, config).build()?.get_async_connection().await
}

/// A cluster connection for the subscriber: RESP3, so that messages, server-side
/// unsubscriptions and dropped node connections arrive as pushes on `pushes`.
/// redis-rs resubscribes a node's channels after it reconnects; the subscriber
/// covers what it does not (a channel the server dropped because its slot moved).
pub(crate) async fn connect_pubsub(
    seeds: &[String],
    config: &Config,
    pushes: UnboundedSender<PushInfo>,
) -> RedisResult<ClusterConnection> {
    let client = builder(seeds, config)
        .use_protocol(redis::ProtocolVersion::RESP3)
        .push_sender(pushes)
        .build()?;
    client.get_async_connection().await.map_err(explain)
}

/// The masters of the cluster (`host:port`), for work that visits every node
/// (an operator's SCAN). Failed masters are left out.
pub(crate) async fn masters(conn: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    Ok(parse_masters(&nodes))
}

/// Reads the masters from a `CLUSTER NODES` reply: `<id> <ip:port@cport[,host]>
/// <flags> ...`, flags holding `master` and neither `fail` nor `noaddr`.
fn parse_masters(nodes: &str) -> Vec<(String, u16)> {
    let mut masters: Vec<(String, u16)> = nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags: Vec<&str> = fields.next()?.split(',').collect();
            let serving = flags.contains(&"master")
                && !flags
                    .iter()
                    .any(|f| matches!(*f, "fail" | "fail?" | "noaddr"));
            if !serving {
                return None;
            }
            let host_port = address.split('@').next()?;
            let (host, port) = host_port.rsplit_once(':')?;
            Some((host.to_string(), port.parse().ok()?))
        })
        .collect();
    masters.sort();
    masters
}

/// Where a command goes when it must reach one particular node.
pub(crate) fn at(host: &str, port: u16) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
        host: host.to_string(),
        port,
    })
}

/// Rewords the errors a user meets first: seeds that are not cluster nodes, and
/// seeds that do not answer.
fn explain(e: RedisError) -> RedisError {
    let text = e.to_string();
    if text.contains("cluster support disabled") {
        RedisError::from((
            ErrorKind::Client,
            "a seed is a Redis server without cluster mode (cluster-enabled no): use Config::from_url for a standalone server",
        ))
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_cluster_specification() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{foo}"), 12182);
        assert_eq!(slot("redisson_lock__channel:{foo}"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{}foo"), slot("{}foo"));
        assert_ne!(slot("{}foo"), slot("foo"));
        assert_eq!(slot("a{b}c{d}"), slot("b"));
    }

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 0 3 connected
d4 127.0.0.1:7004@17004,host4 slave a1 0 0 1 connected
e5 127.0.0.1:7005@17005 master - 0 0 5 connected 10923-16383
";
        assert_eq!(
            parse_masters(nodes),
            vec![
                ("127.0.0.1".to_string(), 7001),
                ("127.0.0.1".to_string(), 7002),
                ("127.0.0.1".to_string(), 7005)
            ]
        );
    }
}
