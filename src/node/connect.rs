//! [`connect`]: the one way the manager, [`Admin`](crate::Admin) and the
//! `lockwarden` command reach Redis, one function per deployment.
//!
//! Connecting is the same five steps whatever stands behind the seam: the first
//! connection (a standalone server's, the master Sentinel names, or a
//! cluster's), tried again while the deployment changes hands (`start.rs`);
//! where the subscriber will open its connections; a PING where nothing asked
//! the server yet; and, for a lock manager, the start-up checks and replica
//! confirmation (`replicas/start.rs`). Each deployment's own part is a function
//! here, so a new deployment adds one and an arm in [`first`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::RedisError;

use super::pubsub::{PubSubSource, Target};
use super::sentinel::Follower;
use super::{cluster, diagnose, replicas, standalone, start};
use super::{Conn, Link, Node, Purpose, Topology};
use crate::config::Config;
use crate::error::LockError;

/// Connects to the deployment `config` names, for `purpose`. The one way the
/// manager, [`Admin`](crate::Admin) and the `lockwarden` command reach Redis.
pub(crate) async fn connect(config: &Config, purpose: Purpose) -> Result<Node, LockError> {
    config.validate()?;
    let cm = manager_config(config, purpose);
    // A failover in progress is waited out within `Config::start_wait`
    // (start.rs). Boxed: each deployment's future nests in this one, and an
    // application's own future nests this one in turn.
    let link = start::until_found(config, || Box::pin(first(config, purpose, &cm))).await?;
    let (target, topology) = subscribed_at(config, &link);
    let mut conn = Conn {
        link,
        lane: 0,
        confirmation: None,
    };
    ping(config, purpose, &mut conn).await?;
    if purpose == Purpose::Locks {
        for_locks(config, &mut conn).await?;
    }
    Ok(Node {
        conn,
        topology,
        pubsub: PubSubSource::new(target, config.connection_timeout),
    })
}

/// How the connection managers (a standalone server's, Sentinel's master's)
/// try: a lock manager reconnects with backoff, an operator tries once.
fn manager_config(config: &Config, purpose: Purpose) -> ConnectionManagerConfig {
    let cm = ConnectionManagerConfig::new()
        .set_response_timeout(Some(config.response_timeout))
        .set_connection_timeout(Some(config.connection_timeout));
    match purpose {
        Purpose::Locks => cm
            .set_min_delay(config.reconnect_min)
            .set_max_delay(config.reconnect_max),
        Purpose::Operator => cm.set_number_of_retries(0),
    }
}

/// One try at the deployment's first connection, within the connection
/// timeout.
async fn first(
    config: &Config,
    purpose: Purpose,
    cm: &ConnectionManagerConfig,
) -> Result<Link, RedisError> {
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
    let found = async {
        match (&config.sentinel, &config.cluster) {
            (_, Some(seeds)) => first_cluster(seeds, config).await,
            (Some(_), None) => first_sentinel(config, cm, lanes).await,
            (None, None) => first_standalone(config, cm, lanes, bound).await,
        }
    };
    let found = tokio::time::timeout(bound, found).await.map_err(|_| {
        RedisError::from(std::io::Error::new(
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
}

/// A Redis Cluster: redis-rs's cluster connection, and the publish command
/// its scripts use there.
async fn first_cluster(seeds: &[String], config: &Config) -> Result<Link, RedisError> {
    let (conn, publish) = cluster::connect(seeds, config).await?;
    Ok(Link::Cluster(conn, publish))
}

/// The master Sentinel names, followed across failovers, with `lanes`
/// connections to it.
async fn first_sentinel(
    config: &Config,
    cm: &ConnectionManagerConfig,
    lanes: usize,
) -> Result<Link, RedisError> {
    Ok(Link::Sentinel(
        Follower::connect(config, cm.clone(), lanes).await?,
    ))
}

/// A standalone server, with `lanes` connections to it, within `bound`.
async fn first_standalone(
    config: &Config,
    cm: &ConnectionManagerConfig,
    lanes: usize,
    bound: Duration,
) -> Result<Link, RedisError> {
    // One plain attempt first, whose failure is named at once when a person
    // must fix it: the connection manager would retry it for the whole
    // timeout. A failure that may pass (a restart, a slow link) gets the
    // manager's retries, then the look's words.
    let began = Instant::now();
    let looked = match diagnose::first_look(config).await {
        Err(e) if diagnose::settled(&e) => return Err(e),
        looked => looked.err(),
    };
    let client = &config.client;
    let made = futures::future::try_join_all(
        (0..lanes).map(|_| ConnectionManager::new_with_config(client.clone(), cm.clone())),
    );
    // Within the start's bound, leaving a moment to answer the look's words
    // rather than the bound's.
    let left = bound
        .saturating_sub(began.elapsed())
        .saturating_sub(Duration::from_millis(50));
    match tokio::time::timeout(left, made).await {
        Ok(Ok(conns)) => Ok(Link::Standalone(Arc::new(standalone::Standalone::new(
            conns,
            client.clone(),
            cm.clone(),
        )))),
        Ok(Err(e)) => Err(looked.unwrap_or(e)),
        Err(_) => Err(looked.unwrap_or_else(|| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no connection within the connection timeout",
            ))
        })),
    }
}

/// Where the subscriber opens its connections on `link`, and how keys group.
fn subscribed_at(config: &Config, link: &Link) -> (Target, Topology) {
    match link {
        Link::Standalone(_) => (
            Target::Server(Box::new(config.client.clone())),
            Topology::Standalone,
        ),
        // Weakly: the subscriber may outlive the manager, and the Follower's
        // `+switch-master` listeners must end with the manager.
        Link::Sentinel(follower) => (
            Target::Master(Arc::downgrade(follower)),
            Topology::Standalone,
        ),
        Link::Cluster(_, publish) => {
            let seeds = config.cluster.clone().unwrap_or_default();
            let target = Target::Cluster(seeds, Box::new(config.clone()), *publish);
            (target, Topology::Cluster)
        }
    }
}

/// A server that wants a password the URL does not give takes the connection
/// and refuses every command (NOAUTH): refused here, not at the first lock. A
/// lock manager's least-privilege user may lack PING (NOPERM): that is an
/// answer too; an operator's needs it. A cluster was asked for its slots on
/// connecting (a NOAUTH failed that), and a PING there goes to every master.
async fn ping(config: &Config, purpose: Purpose, conn: &mut Conn) -> Result<(), LockError> {
    let ping = match (&conn.link, purpose) {
        (_, Purpose::Operator) | (Link::Sentinel(_), Purpose::Locks) => true,
        // Standalone: `diagnose::first_look` has asked.
        (Link::Standalone(_) | Link::Cluster(..), Purpose::Locks) => false,
    };
    if !ping {
        return Ok(());
    }
    match redis::cmd("PING").query_async::<()>(conn).await {
        Ok(()) => Ok(()),
        Err(e) if purpose == Purpose::Locks && crate::error::is_noperm(&e) => Ok(()),
        Err(e) => Err(diagnose::no_password(config, &e).unwrap_or(e).into()),
    }
}

/// What a lock manager's connection gets beyond an operator's: Sentinel's
/// `+switch-master` listeners, the eviction check, and replica confirmation
/// (or, under Sentinel with it off, a watch on the master all the same).
async fn for_locks(config: &Config, conn: &mut Conn) -> Result<(), LockError> {
    if let Link::Sentinel(follower) = &conn.link {
        follower.listen_for_switches(
            (config.reconnect_min, config.reconnect_max),
            config.connection_timeout,
        );
    }
    start::warn_if_locks_can_be_evicted(conn).await;
    if let Some(sync) = config.replica_sync() {
        conn.confirmation = replicas::confirmer(conn, config, sync).await?;
        if conn.confirmation.is_none() {
            crate::stats::record::replicas_counted(0);
        }
    } else if let Link::Sentinel(_) = &conn.link {
        // No WAIT, but a demoted master is still not trusted.
        let only = replicas::doubts_only(&conn.link, config);
        conn.confirmation = Some(replicas::Confirmer::One(only));
    }
    Ok(())
}
