//! The task that keeps the count of one master's replicas current (a
//! standalone server, or the master Sentinel names), and does not trust a
//! master that lost them all to a failover.
//!
//! A `WAIT` for a replica that cannot answer (frozen, killed, cut off) lasts its
//! whole timeout, and a fixed count of replicas turns that replica's trouble into
//! a stalled lock: after a failover the new master has no replica until the old
//! one comes back as one, and every grant waited for it. So the connection's
//! [`Confirmation`] asks only for the replicas that can answer now, and this task
//! keeps that number ([`ReplicaWatch`]) current from the master's `INFO replication`, on a
//! connection of its own; which replicas count, and which are doubted after a
//! short `WAIT`, is `count.rs`'s to say. The task looks every second, and at
//! once when a `WAIT` came back short.
//!
//! Fewer replicas is also what a demoted master sees: when Sentinel promotes its
//! replica, the replica leaves it, and the old master, frozen through the
//! failover and resumed, answers every queued call as if nothing happened. Had
//! the count simply dropped to zero, its answers would have been trusted
//! without a `WAIT`, a release among them, and the promoted master would have
//! kept that lock for the rest of its lease. So under Sentinel the count only
//! goes down once the Sentinels still name this master with no failover under
//! way; otherwise the connection is sent to look for the new master (and every
//! change the old one answers stays unconfirmed, to be undone or redone there).
//! A standalone server has nobody to ask, and its count goes down as it sees.
//! When the connection moves to a new master, that master's count is taken as it
//! is (the Sentinels named it), by the hook this task hands the Follower
//! ([`OnMove`]), run as it moves, so that the first calls there do not wait
//! for the old master's replicas.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::select;
use tracing::{debug, info, warn};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, RedisResult};

use super::count::{parse, Doubts};
use super::look::Look;
use super::watch::ReplicaWatch;
use crate::node::sentinel::{CountOnMove, Follower};
use crate::node::Link;
use crate::wire::{Confirmation, ReplicaCount};

/// How often the replicas are counted when no `WAIT` came back short.
const EVERY: Duration = Duration::from_secs(1);

/// How long the master may take to answer the count's `INFO` before, under
/// Sentinel, it is doubted ([`ReplicaWatch::doubt_master`]): a failover needs
/// the master silent for the Sentinels' `down-after-milliseconds` (1 s at the
/// least in practice) and then an election, so a doubt raised this soon is in
/// place before a demoted master can answer again. A master merely slow for a
/// moment costs a question to the Sentinels.
const SILENT: Duration = Duration::from_millis(500);

/// The confirmation of a connection under Sentinel with replica confirmation
/// off (`Config::no_replica_sync`): it never asks for a `WAIT`, but its master
/// is watched all the same and doubted when it goes silent
/// ([`ReplicaWatch::doubt_master`]), so that a demoted master's answers are
/// not trusted whatever the replica setting. It costs an `INFO` a second.
pub(in crate::node) fn doubts_only(
    link: &Link,
    config: &crate::config::Config,
) -> Arc<Confirmation> {
    let none = crate::config::ReplicaSync {
        min: 0,
        timeout: Duration::from_millis(1),
    };
    let watch = ReplicaWatch::new(0, Arc::default(), false);
    let confirmation = watch.serve(|count| {
        Confirmation::new(
            none,
            config.response_timeout,
            crate::wire::Confirm::Wait,
            count,
        )
    });
    keep_counted(
        link,
        &config.client,
        (&watch, Doubts::default()),
        (config.connection_timeout, config.response_timeout),
    );
    confirmation
}

/// What the Follower runs as it moves to a new master: that master's count
/// from its `INFO replication`, taken as it is (the Sentinels named it), and
/// an end to the doubt of the old one.
struct OnMove(Weak<ReplicaWatch>);

impl CountOnMove for OnMove {
    fn counting(&self) -> bool {
        self.0.strong_count() > 0
    }

    fn moved(&self, info: &str) {
        if let Some(watch) = self.0.upgrade() {
            watch.set_live(super::count::count_new_master(info));
            watch.trust_master();
        }
    }

    fn followed(&self) {
        if let Some(watch) = self.0.upgrade() {
            watch.new_master(true);
        }
    }
}

/// Keeps `watch`'s count of replicas current for the master behind `link`
/// (reached with `client` on a single server), until the count (the manager's
/// connection) is gone, going on from the start-up check's `doubts` (which
/// replicas it saw in sync). `bounds` are the connection and response timeouts
/// of its own connection.
pub(super) fn keep_counted(
    link: &Link,
    client: &Client,
    (watch, doubts): (&Arc<ReplicaWatch>, Doubts),
    bounds: (Duration, Duration),
) {
    let weak = Arc::downgrade(watch);
    if let Link::Sentinel(follower) = link {
        follower.count_on_move(Arc::new(OnMove(Arc::downgrade(watch))));
    }
    let follower = match link {
        Link::Sentinel(f) => Some(Arc::clone(f)),
        Link::Standalone(_) | Link::Cluster(..) => None,
    };
    let mut watcher = Watcher {
        // The count the connection starts with is this master's.
        address: follower.as_ref().map(|f| f.address()),
        follower,
        client: client.clone(),
        conn: None,
        bounds,
        doubts,
        failing: false,
    };
    let look: Arc<Look> = Arc::clone(watch.look());
    tokio::spawn(async move {
        loop {
            // A first look at once: a master that went silent while the
            // manager started is doubted before its first answers come back.
            let covers = look.starting();
            if !watcher.look(&weak).await {
                return;
            }
            // Calls held back by a short WAIT go out by this count now.
            look.finished(covers);
            let asked = look.asked();
            // A periodic look, one asked for by a short WAIT, or one for the
            // master the connection just moved to.
            let tick = std::pin::pin!(tokio::time::sleep(EVERY));
            let follower = watcher.follower.clone();
            let moved = std::pin::pin!(async move {
                match follower {
                    Some(f) => f.moves().await,
                    None => std::future::pending().await,
                }
            });
            let _ = select(select(tick, std::pin::pin!(asked)), moved).await;
        }
    });
}

/// The task's state between looks.
struct Watcher {
    /// Under Sentinel, what follows the master.
    follower: Option<Arc<Follower>>,
    /// The single server's client (under Sentinel, the Follower's is used).
    client: Client,
    /// A connection of its own to the counted master, and that master's
    /// address: `INFO` on the shared command connection would wait behind
    /// the very `WAIT`s that ran out.
    conn: Option<(String, MultiplexedConnection)>,
    /// Connection and response timeouts of that connection.
    bounds: (Duration, Duration),
    /// Replicas doubted since a short `WAIT`.
    doubts: Doubts,
    /// The master counted last (under Sentinel), to tell a move from a loss.
    address: Option<String>,
    /// The last look failed (logged once until one succeeds).
    failing: bool,
}

impl Watcher {
    /// The master's `INFO replication` and its address, on this task's own
    /// connection (made again when the master moved or the last one failed).
    async fn replication(&mut self, watch: &ReplicaWatch) -> RedisResult<(String, Option<String>)> {
        let (client, address) = match &self.follower {
            Some(f) => (f.master_client(), Some(f.address())),
            None => (self.client.clone(), None),
        };
        let key = address.clone().unwrap_or_default();
        if self.conn.as_ref().is_none_or(|(at, _)| *at != key) {
            let settings = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.bounds.0))
                .set_response_timeout(Some(self.bounds.1));
            let made = client
                .get_multiplexed_async_connection_with_config(&settings)
                .await;
            match made {
                Ok(conn) => self.conn = Some((key.clone(), conn)),
                Err(e) => {
                    self.doubt(watch, &key, &e);
                    return Err(e);
                }
            }
        }
        let Some((_, conn)) = self.conn.as_mut() else {
            return Err(RedisError::from((redis::ErrorKind::Io, "no connection")));
        };
        let mut conn = conn.clone();
        let mut cmd = redis::cmd("INFO");
        let mut asked = std::pin::pin!(cmd.arg("replication").query_async::<String>(&mut conn));
        let info = match tokio::time::timeout(SILENT, asked.as_mut()).await {
            Ok(info) => info,
            Err(_) => {
                let silent = RedisError::from((redis::ErrorKind::Io, "no answer to INFO"));
                self.doubt(watch, &key, &silent);
                asked.await
            }
        };
        if let Err(e) = &info {
            self.doubt(watch, &key, e);
            self.conn = None;
        }
        Ok((info?, address))
    }

    /// Under Sentinel, doubts the master at `asked` (it went silent or cannot
    /// be reached: `why`), unless the connection has moved on from it since:
    /// the old master's late failure says nothing of the new one.
    fn doubt(&self, watch: &ReplicaWatch, asked: &str, why: &RedisError) {
        let Some(follower) = &self.follower else {
            return;
        };
        // A refusal (NOPERM: a user without INFO) is an answer, not silence.
        let silent = why.is_timeout()
            || why.is_io_error()
            || why.is_connection_dropped()
            || why.is_connection_refusal();
        if silent && follower.address() == asked && watch.doubt_master() {
            warn!(
                master = %asked,
                error = %why,
                "the master is not answering: until the Sentinels vouch for it again, lock \
                 changes it answers are not taken as done"
            );
        }
    }

    /// One look; false when the count (the manager's connection) is gone.
    async fn look(&mut self, weak: &Weak<ReplicaWatch>) -> bool {
        let Some(watch) = weak.upgrade() else {
            return false;
        };
        let (info, address) = match self.replication(&watch).await {
            Ok(found) => found,
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    warn!(error = %e, "cannot count the master's replicas (INFO replication); keeping the last count");
                }
                return true;
            }
        };
        if self.failing {
            self.failing = false;
            info!("counting the master's replicas again");
        }
        if self
            .follower
            .as_ref()
            .is_some_and(|f| Some(f.address()) != address)
        {
            // The connection moved while asking: count the new master now.
            drop(watch);
            return Box::pin(self.look(weak)).await;
        }
        let replication = parse(&info);
        if let Some(follower) = &self.follower {
            if !vouched(follower, &watch, replication.master).await {
                return true;
            }
        }
        let live = self.doubts.count(&replication, watch.short_by());
        let was = watch.live();
        let moved = address.is_some() && address != self.address;
        if live < was && !moved {
            if let Some(follower) = &self.follower {
                if !trusted(follower).await {
                    return true;
                }
            }
        }
        if moved {
            self.address = address;
            self.doubts = Doubts::default();
        }
        let wanted = watch.wanted();
        if live != was && live < wanted && was >= wanted {
            warn!(
                was,
                now = live,
                wanted,
                master = self.address.as_deref().unwrap_or("the server"),
                replicas = ?replication.replicas,
                "replica confirmation is reduced: fewer replicas can confirm lock changes than \
                 asked (lockwarden_replicas_counted); with none they are made unconfirmed"
            );
            watch.set_live(live);
        } else if live != was {
            info!(
                was,
                now = live,
                master = self.address.as_deref().unwrap_or("the server"),
                moved,
                replicas = ?replication.replicas,
                "replicas that can confirm lock changes"
            );
            watch.set_live(live);
        } else {
            debug!(live, "replicas counted");
        }
        true
    }
}

/// The count a new connection under Sentinel starts with: `live` as the master
/// reports it, unless that is fewer than `min` and the Sentinels do not still
/// name this master with no failover under way. A process that starts while a
/// master frozen through a failover resumes finds it without its replica (the
/// replica is the new master) and, trusting that, had a grant of the demoted
/// master handed to it as held (the chaos suite's "untold loss"). Then `min`
/// is assumed: its changes stay unconfirmed while the Follower moves on.
pub(super) async fn trusted_at_start(follower: &Arc<Follower>, live: u32, min: u32) -> u32 {
    if live >= min || trusted(follower).await {
        live
    } else {
        min
    }
}

/// Whether `follower`'s master (`master`: its `INFO` says so) can be trusted
/// now: yes unless it is in doubt ([`ReplicaWatch::doubt_master`]) or no longer
/// a master; a doubted master is vouched for by the Sentinels ([`trusted`]),
/// and one they do not name is left for the master they do.
async fn vouched(follower: &Arc<Follower>, watch: &ReplicaWatch, master: bool) -> bool {
    if !master {
        // Demoted and told so: whatever it answers now is a replica's refusal,
        // but a change it took while frozen may be answered any moment.
        if watch.doubt_master() {
            warn!(master = %follower.address(), "the master turned replica: following the new master");
        }
        follower.look_again();
        return false;
    }
    if !watch.master_doubted() {
        return true;
    }
    if !trusted(follower).await {
        return false;
    }
    if watch.trust_master() {
        info!(master = %follower.address(), "the Sentinels vouch for the master again: its answers count");
    }
    true
}

/// Whether the Sentinels still name `follower`'s master with no failover under
/// way, so that its lost replicas are a replica's trouble, not a demotion. If
/// not, the follower looks for the new master.
async fn trusted(follower: &Arc<Follower>) -> bool {
    match follower.still_master().await {
        Some(true) => true,
        Some(false) => {
            warn!(
                master = %follower.address(),
                "the master lost its replicas or went silent, and the Sentinels name another master or are \
                 failing over: its answers are not trusted; following the new master"
            );
            follower.look_again();
            false
        }
        None => {
            warn!(
                master = %follower.address(),
                "the master lost its replicas or went silent, and no Sentinel answered whether it still is the \
                 master: its answers stay unconfirmed until one does"
            );
            false
        }
    }
}
