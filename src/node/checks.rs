//! Settings of the Redis server that can break locks without any error, read once
//! when a manager starts and reported in the log.
//!
//! Under `maxmemory`, any eviction policy but `noeviction` may delete a lock key
//! to make room: `allkeys-*` any key, `volatile-*` keys with a TTL, which every
//! lock has. The lock is then free for the next taker while its holder still
//! believes it holds it, and nothing tells either of them. Only the server knows
//! its policy, so it is asked (`CONFIG GET`); a server that refuses the question
//! (an ACL without CONFIG, a managed service that renames it) is not checked.
//!
//! Replica confirmation (`Config::sync_replicas`, on by default) starts from the
//! master's `INFO`: how many replicas can confirm now (`node/replicas/` keeps
//! the count current afterwards), the server's version and whether it keeps an
//! AOF, which decide whether `WAITAOF` follows each `WAIT` (`wire/replicas/`).
//! An explicit setting on a server that is not a master, or that will not
//! answer `INFO`, is refused at start; the default is then turned off with a
//! warning that says why, so that a least-privilege user without `INFO` still
//! starts. [`confirmer`] then builds the connection's confirmation from it (its
//! lanes, its fast lane when the server answers `CLIENT ID`).

use std::sync::Arc;

use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use super::{cluster, cluster_replicas, replicas, Confirmer, Conn, Link};
use crate::config::{Config, ReplicaSync};
use crate::error::LockError;
use crate::wire::{confirm_with, Confirm, Confirmation};

/// Reads, at start, what replica confirmation needs of the master: which
/// commands confirm a lock change there and how many replicas can answer now.
/// `None`: the default setting meets a server that cannot confirm (not a master,
/// no `INFO` right), and confirmation is off (logged). An explicit setting
/// there is an error.
pub(crate) async fn replicas_can_confirm<C: ConnectionLike>(
    conn: &mut C,
    sync: ReplicaSync,
    default: bool,
) -> Result<Option<(Confirm, u32)>, LockError> {
    // The default sections hold server, persistence and replication alike.
    let info: String = match redis::cmd("INFO").query_async(conn).await {
        Ok(info) => info,
        Err(e) if e.is_timeout() || e.is_io_error() || e.is_connection_dropped() => {
            // A slow or cut link at start is no reason to fail it, nor to turn
            // confirmation off: assume the replicas asked for until
            // `node/replicas/` counts them (a second later).
            warn!(
                error = %e,
                assumed = sync.min,
                "could not read the master's INFO at start; lock changes wait for the replicas \
                 asked for until they are counted"
            );
            return Ok(Some((Confirm::Wait, sync.min)));
        }
        Err(e) if default => {
            warn!(
                error = %e,
                "replica confirmation is off: the server will not answer INFO, which counts the \
                 replicas (give the user +info +wait, or turn it off with no_replica_sync / \
                 --sync-replicas 0)"
            );
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    let replication = super::replicas::parse(&info);
    if !replication.master {
        if default {
            warn!(
                "replica confirmation is off: the server is not a master (its role is not master)"
            );
            return Ok(None);
        }
        return Err(LockError::InvalidConfig(
            "sync_replicas: the server is not a master (its role is not master)".into(),
        ));
    }
    let live = super::replicas::Doubts::default().count(&replication, None);
    if live < sync.min {
        // Not a configuration error: right after a failover the new master has no
        // replica until the old master comes back as one. Lock changes wait for
        // the replicas that can answer, fewer than asked, and with none they go
        // unconfirmed (counted, `wire/replicas/unconfirmed.rs`).
        warn!(
            live,
            wanted = sync.min,
            "replica confirmation is reduced: fewer replicas can confirm lock changes than \
             asked; each change waits for those that can, and with none it is made \
             unconfirmed (lockwarden_unconfirmed_changes_total)"
        );
    }
    info!(
        live,
        "replica confirmation: replicas that can confirm lock changes"
    );
    let version = field("redis_version").unwrap_or_default();
    let aof = field("aof_enabled").as_deref() == Some("1");
    let appendfsync = match aof {
        true => config_get(conn, "appendfsync").await,
        false => None,
    };
    let confirm = confirm_with(&version, aof, appendfsync.as_deref());
    match confirm {
        Confirm::Wait => {}
        Confirm::WaitOnly(why) => info!(
            version,
            "the master keeps an AOF, but lock changes are confirmed with WAIT alone \
             (replicas received them, not necessarily on disk): {why}"
        ),
        Confirm::WaitAndAof => info!(
            version,
            "the master keeps an AOF with appendfsync always: lock changes also wait for \
             WAITAOF 1 0 (written to the master's disk)"
        ),
    }
    Ok(Some((confirm, live)))
}

/// One `CONFIG GET` value, or `None` if the server will not say (an ACL without
/// CONFIG, a managed service that renames it).
async fn config_get<C: ConnectionLike>(conn: &mut C, name: &str) -> Option<String> {
    let pairs: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await
        .map_err(|e| debug!(error = %e, name, "cannot read a server setting"))
        .ok()?;
    pairs.get(1).cloned()
}

/// Reads `maxmemory` and `maxmemory-policy` and warns, once, if locks can be
/// evicted. Never fails: the check is advice, not a condition to start.
pub(crate) async fn warn_if_locks_can_be_evicted<C: ConnectionLike>(conn: &mut C) {
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory*")
        .query_async(conn)
        .await;
    let pairs = match reply {
        Ok(pairs) => pairs,
        Err(e) => {
            debug!(error = %e, "cannot read maxmemory-policy; eviction of locks not checked");
            return;
        }
    };
    let get = |name: &str| {
        pairs
            .chunks_exact(2)
            .find(|kv| kv[0].eq_ignore_ascii_case(name))
            .map(|kv| kv[1].as_str())
    };
    let policy = get("maxmemory-policy").unwrap_or("noeviction");
    let limit = get("maxmemory").unwrap_or("0");
    if evicts_locks(policy) {
        warn!(
            policy,
            maxmemory = limit,
            "Redis may evict lock keys under memory pressure (maxmemory-policy {policy}): an \
             evicted lock is free for others while its holder believes it holds it; use \
             noeviction for the locks' Redis (docs/operations.md)"
        );
    }
}

/// Whether this policy may delete a lock key: every policy but `noeviction`.
fn evicts_locks(policy: &str) -> bool {
    !policy.eq_ignore_ascii_case("noeviction")
}

/// Replica confirmation for the manager's connection `conn`, by `sync`: `None`
/// when the default setting meets a server that cannot confirm (logged).
pub(super) async fn confirmer(
    conn: &Conn,
    config: &Config,
    sync: crate::config::ReplicaSync,
) -> Result<Option<Confirmer>, LockError> {
    if let (Link::Cluster(..), Some(seeds)) = (&conn.link, &config.cluster) {
        let counted = async {
            let own = cluster::connect_watcher(seeds, config).await?;
            cluster_replicas::start(
                own,
                sync,
                (config.response_timeout, config.refuse_unconfirmed),
            )
            .await
        };
        return match counted.await {
            Ok(per) => Ok(Some(Confirmer::PerMaster(per))),
            Err(e) if config.sync_is_default() => {
                tracing::warn!(
                    error = %e,
                    "replica confirmation is off: the cluster will not answer CLUSTER NODES and \
                     INFO, which count each master's replicas (give the user +cluster|nodes \
                     +info +wait, or turn it off with no_replica_sync / --sync-replicas 0)"
                );
                Ok(None)
            }
            Err(e) => Err(e.into()),
        };
    }
    let mut probe = conn.clone();
    let found = replicas_can_confirm(&mut probe, sync, config.sync_is_default()).await?;
    let Some((confirm, mut live)) = found else {
        return Ok(None);
    };
    if let Link::Sentinel(follower) = &conn.link {
        live = replicas::trusted_at_start(follower, live, sync.min).await;
    }
    // One server behind the connection: the fast path (short WAITs, several
    // at once) can tell a reconnect by CLIENT ID (a standalone reconnect lands
    // on the same server, whose client ids only grow) and a Sentinel move by
    // the Follower's generation.
    let generation = match &conn.link {
        Link::Sentinel(follower) => follower.generation(),
        _ => Arc::default(),
    };
    let lanes = match &conn.link {
        Link::Standalone(s) => s.lanes(),
        Link::Sentinel(follower) => follower.lanes(),
        Link::Cluster(..) => 1,
    };
    let mut confirmation = Confirmation::new(sync, config.response_timeout, confirm, live)
        .lanes(lanes)
        .refusing(config.refuse_unconfirmed);
    // The fast path tells connections apart by `CLIENT ID`: a user without it
    // keeps one whole WAIT behind every script, within the budget. A probe
    // that got no answer says nothing of the user's rights, but under
    // Sentinel it says the master went silent (frozen, maybe being replaced):
    // the connection starts with the master in doubt.
    let mut silent = false;
    match redis::cmd("CLIENT")
        .arg("ID")
        .query_async::<i64>(&mut probe)
        .await
    {
        Ok(_) => confirmation = confirmation.fast(generation, config.response_timeout),
        Err(e) if e.is_timeout() || e.is_io_error() || e.is_connection_dropped() => {
            confirmation = confirmation.fast(generation, config.response_timeout);
            silent = matches!(conn.link, Link::Sentinel(_));
        }
        Err(e) => tracing::warn!(
            error = %e,
            "lock changes are confirmed one whole WAIT at a time (slower under load): the \
             server will not answer CLIENT ID, which the fast path needs (give the user \
             +client|id)"
        ),
    }
    if silent && confirmation.doubt_master() {
        tracing::warn!(
            "the master did not answer at start: until the Sentinels vouch for it, lock \
             changes it answers are not taken as done"
        );
    }
    let confirmation = Arc::new(confirmation);
    replicas::watch(
        &conn.link,
        &config.client,
        &confirmation,
        (config.connection_timeout, config.response_timeout),
    );
    Ok(Some(Confirmer::One(confirmation)))
}

#[cfg(test)]
mod tests {
    use super::evicts_locks;

    #[test]
    fn only_noeviction_keeps_locks() {
        assert!(!evicts_locks("noeviction"));
        for p in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-ttl",
        ] {
            assert!(evicts_locks(p), "{p}");
        }
    }
}
