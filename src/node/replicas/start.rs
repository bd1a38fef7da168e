//! Where replica confirmation starts, once per manager: its confirmation of
//! lock changes for each deployment ([`confirmer`]).
//!
//! Replica confirmation (`Config::sync_replicas`, on by default) starts from the
//! master's `INFO`: how many replicas can confirm now (`single.rs` keeps
//! the count current afterwards, `cluster.rs` each master's on a cluster), the server's version and whether it keeps an
//! AOF, which decide whether `WAITAOF` follows each `WAIT` (`wire/replicas/`).
//! An explicit setting on a server that is not a master, or that will not
//! answer `INFO`, is refused at start; the default is then turned off with a
//! warning that says why, so that a least-privilege user without `INFO` still
//! starts. [`confirmer`] then builds the connection's confirmation from it (its
//! lanes, its fast lane when the server answers `CLIENT ID`).

use std::sync::Arc;

use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use super::count::{parse, Doubts};
use super::watch::ReplicaWatch;
use super::{cluster as per_master, single, Confirmer};
use crate::config::{Config, ReplicaSync};
use crate::error::LockError;
use crate::node::{cluster, Conn, Link};
use crate::wire::{confirm_with, Confirm, Confirmation, Moves};

/// Reads, at start, what replica confirmation needs of the master: which
/// commands confirm a lock change there and how many replicas can answer now.
/// `None`: the default setting meets a server that cannot confirm (not a master,
/// no `INFO` right), and confirmation is off (logged). An explicit setting
/// there is an error.
pub(crate) async fn replicas_can_confirm<C: ConnectionLike>(
    conn: &mut C,
    sync: ReplicaSync,
    default: bool,
) -> Result<Option<(Confirm, u32, Doubts)>, LockError> {
    // The default sections hold server, persistence and replication alike.
    let info: String = match redis::cmd("INFO").query_async(conn).await {
        Ok(info) => info,
        Err(e) if e.is_timeout() || e.is_io_error() || e.is_connection_dropped() => {
            // A slow or cut link at start is no reason to fail it, nor to turn
            // confirmation off: assume the replicas asked for until
            // `single.rs` counts them (a second later).
            warn!(
                error = %e,
                assumed = sync.min,
                "could not read the master's INFO at start; lock changes wait for the replicas \
                 asked for until they are counted"
            );
            return Ok(Some((Confirm::Wait, sync.min, Doubts::default())));
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
    let replication = parse(&info);
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
    let mut doubts = Doubts::default();
    let live = doubts.count(&replication, None);
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
    let confirm = commands(conn, &info).await;
    Ok(Some((confirm, live, doubts)))
}

/// Which commands confirm a lock change on the master whose `INFO` is `info`:
/// `WAITAOF` follows the `WAIT` only on Redis 7.2+ with AOF and `appendfsync
/// always` (logged either way when the master keeps an AOF).
async fn commands<C: ConnectionLike>(conn: &mut C, info: &str) -> Confirm {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
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
    confirm
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

/// Replica confirmation for the manager's connection `conn`, by `sync`: `None`
/// when the default setting meets a server that cannot confirm (logged). One
/// count per deployment: a cluster's masters each their own, kept by the
/// cluster task; one master's (a single server, or the one Sentinel names)
/// kept by `single.rs`.
pub(in crate::node) async fn confirmer(
    conn: &Conn,
    config: &Config,
    sync: ReplicaSync,
) -> Result<Option<Confirmer>, LockError> {
    match (&conn.link, &config.cluster) {
        (Link::Cluster(..), Some(seeds)) => cluster_confirmer(seeds, config, sync).await,
        _ => one_master(conn, config, sync).await,
    }
}

/// A cluster's confirmation: one per master, counted by the cluster task on
/// a cluster connection of its own.
async fn cluster_confirmer(
    seeds: &[String],
    config: &Config,
    sync: ReplicaSync,
) -> Result<Option<Confirmer>, LockError> {
    let counted = async {
        let own = cluster::connect_watcher(seeds, config).await?;
        per_master::start(
            own,
            sync,
            (config.response_timeout, config.refuse_unconfirmed),
        )
        .await
    };
    match counted.await {
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
    }
}

/// The confirmation of a connection to one master (a single server, or the
/// one Sentinel names), with its lanes and, when the server answers
/// `CLIENT ID`, its fast path; its count is kept by `single.rs`.
async fn one_master(
    conn: &Conn,
    config: &Config,
    sync: ReplicaSync,
) -> Result<Option<Confirmer>, LockError> {
    let mut probe = conn.clone();
    let found = replicas_can_confirm(&mut probe, sync, config.sync_is_default()).await?;
    let Some((confirm, mut live, doubts)) = found else {
        return Ok(None);
    };
    if let Link::Sentinel(follower) = &conn.link {
        live = single::trusted_at_start(follower, live, sync.min).await;
    }
    // One server behind the connection: the fast path (short WAITs, several
    // at once) can tell a reconnect by CLIENT ID (a standalone reconnect lands
    // on the same server, whose client ids only grow) and a Sentinel move by
    // the Follower's count of moves.
    let moves = match &conn.link {
        Link::Sentinel(follower) => follower.move_count(),
        _ => Moves::default(),
    };
    let lanes = match &conn.link {
        Link::Standalone(s) => s.lanes(),
        Link::Sentinel(follower) => follower.lanes(),
        Link::Cluster(..) => 1,
    };
    let (fast, silent) = client_id(&mut probe, conn).await;
    let watch = ReplicaWatch::new(live, Arc::default(), silent);
    if silent {
        tracing::warn!(
            "the master did not answer at start: until the Sentinels vouch for it, lock \
             changes it answers are not taken as done"
        );
    }
    let confirmation = watch.serve(|count| {
        let made = Confirmation::new(sync, config.response_timeout, confirm, count)
            .lanes(lanes)
            .refusing(config.refuse_unconfirmed);
        match fast {
            true => made.fast(moves, config.response_timeout),
            false => made,
        }
    });
    single::keep_counted(
        &conn.link,
        &config.client,
        (&watch, doubts),
        (config.connection_timeout, config.response_timeout),
    );
    Ok(Some(Confirmer::One(confirmation)))
}

/// Whether the fast path can be had, and whether the master was silent at
/// start. The fast path tells connections apart by `CLIENT ID`: a user
/// without it keeps one whole WAIT behind every script, within the budget. A
/// probe that got no answer says nothing of the user's rights, but under
/// Sentinel it says the master went silent (frozen, maybe being replaced):
/// the connection starts with the master in doubt.
async fn client_id(probe: &mut Conn, conn: &Conn) -> (bool, bool) {
    match redis::cmd("CLIENT")
        .arg("ID")
        .query_async::<i64>(probe)
        .await
    {
        Ok(_) => (true, false),
        Err(e) if e.is_timeout() || e.is_io_error() || e.is_connection_dropped() => {
            (true, matches!(conn.link, Link::Sentinel(_)))
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                "lock changes are confirmed one whole WAIT at a time (slower under load): the \
                 server will not answer CLIENT ID, which the fast path needs (give the user \
                 +client|id)"
            );
            (false, false)
        }
    }
}
