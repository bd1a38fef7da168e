//! Replica confirmation on a Redis Cluster: a count of replicas for each master,
//! and no trust in a master the rest of the cluster has demoted.
//!
//! On one server or under Sentinel a connection has one master, so one
//! [`Confirmation`] (`single.rs` keeps its count). A cluster connection
//! talks to every master, each with replicas of its own and its own socket for
//! a `WAIT` to block, so here each master gets a `Confirmation` of its own, and a
//! script call takes the one of the master that serves its key's slot
//! ([`PerMaster::for_key`]). redis-rs sends the script and its `WAIT` there in
//! one pipeline (its pipeline routing follows the script's key and ignores the
//! keyless `WAIT`), and follows MOVED when the slot has moved meanwhile.
//!
//! Once a second, and at once when a `WAIT` came back short, a task asks every
//! master, on a cluster connection of its own (the shared one queues behind the
//! very `WAIT`s that ran out), for its view of the cluster (`CLUSTER NODES`) and
//! its replication (`INFO`). From the views it keeps which master serves which
//! slot (the claim with the highest config epoch wins, as in the cluster
//! itself) and whether the *other* masters agree that a master is one, with no
//! failure flag. A master's count of replicas that can answer is read and kept
//! as on a single server (`count.rs`'s `Doubts`), into that master's
//! [`ReplicaWatch`], with one rule added, the one
//! Sentinel gets from `Follower::still_master`: the count only goes down while
//! the other masters agree. A master frozen through a failover and resumed still
//! believes it serves its slots and answers the calls queued in its socket, a
//! release among them; its replica, promoted, no longer confirms anything, and
//! had the count simply dropped to zero its answers would have been trusted
//! without a `WAIT`, and the promoted master would keep the lock for the rest
//! of its lease (the chaos suite saw 14 s). Kept, the release is not confirmed,
//! so it is redone, owner-checked, and redis-rs's MOVED takes it to the new
//! master. A slot no look has placed yet, and a master first seen while the
//! others do not vouch for it, start from the replicas asked for. How the
//! views are read, and which master they place and vouch for, is
//! `cluster_views.rs`.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures::future::{join_all, select};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{RedisResult, Value};
use tracing::{debug, info, warn};

use super::cluster_views::{agreed, owners, parse_nodes, Answer};
use super::count::{parse, Doubts, Replication};
use super::look::Look;
use super::watch::ReplicaWatch;
use crate::config::ReplicaSync;
use crate::node::cluster::{at, slot};
use crate::wire::{confirm_with, Confirm, Confirmation};

/// How often the masters are asked when no `WAIT` came back short.
const EVERY: Duration = Duration::from_secs(1);

/// Longest a look waits for one master: a frozen one must not hold up the
/// counts of the others for a whole response timeout.
const ASK_BOUND: Duration = Duration::from_secs(1);

/// The confirmations of a cluster's masters, by the slots they serve.
#[derive(Debug)]
pub(crate) struct PerMaster {
    /// How many replicas must confirm, and how long a master waits for them.
    sync: ReplicaSync,
    /// The command connection's response timeout (each `WAIT` budget fits it).
    response_timeout: Duration,
    /// Asked by any master's `Confirmation` when its `WAIT` came back short,
    /// and told of each look made.
    look: Arc<Look>,
    /// Which master serves which slot, as last looked.
    map: RwLock<SlotMap>,
    /// For a key of a slot no look has placed: the replicas asked for.
    unplaced: Arc<Confirmation>,
    /// A grant no replica could confirm is refused
    /// (`Config::refuse_unconfirmed_grants`).
    refuse: bool,
    /// The releases every master's confirmation keeps, counted together: the
    /// connection's, which `Settle` waits for (`wire/replicas/kept.rs`).
    kept: Arc<AtomicUsize>,
}

/// Ranges of slots and the confirmation of the master serving them.
#[derive(Debug, Default)]
struct SlotMap {
    /// `(first, last, master)` by first slot, not overlapping.
    ranges: Vec<(u16, u16, Arc<Confirmation>)>,
}

impl PerMaster {
    /// The confirmation a script on `key` is judged by: that of the master
    /// serving its slot, as last looked.
    pub(crate) fn for_key(&self, key: Option<&str>) -> Arc<Confirmation> {
        let Some(key) = key else {
            return Arc::clone(&self.unplaced);
        };
        let slot = slot(key);
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        let at = map.ranges.partition_point(|(first, _, _)| *first <= slot);
        match at.checked_sub(1).map(|i| &map.ranges[i]) {
            Some((_, last, confirmation)) if slot <= *last => Arc::clone(confirmation),
            _ => Arc::clone(&self.unplaced),
        }
    }

    /// A new master's confirmation, with `live` replicas that can answer,
    /// and the count the cluster task keeps for it.
    fn confirmation(&self, confirm: Confirm, live: u32) -> Master {
        let watch = ReplicaWatch::new(live, Arc::clone(&self.look), false);
        let confirmation = watch.serve(|count| {
            Confirmation::new(self.sync, self.response_timeout, confirm, count)
                .refusing(self.refuse)
                .sharing_kept(Arc::clone(&self.kept))
        });
        Master {
            confirmation,
            watch,
        }
    }
}

/// A master's confirmation, and its count of replicas.
#[derive(Debug, Clone)]
struct Master {
    /// What its scripts are judged by.
    confirmation: Arc<Confirmation>,
    /// Its count, which only the cluster task writes.
    watch: Arc<ReplicaWatch>,
}

/// The view and `INFO` of the master at `address`: `None` when it did not
/// answer within [`ASK_BOUND`] or is no master by its own account, an error
/// only when it refuses the commands (an ACL without them).
async fn ask_one(mut conn: ClusterConnection, address: String) -> RedisResult<Option<Answer>> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Ok(None);
    };
    let Ok(port) = port.parse() else {
        return Ok(None);
    };
    let route = SingleNodeRoutingInfo::ByAddress {
        host: host.to_string(),
        port,
    };
    let mut pipe = redis::pipe();
    pipe.cmd("CLUSTER").arg("NODES").cmd("INFO");
    let asked = conn.route_pipeline(pipe, 0, 2, route);
    let replies = match tokio::time::timeout(ASK_BOUND, asked).await {
        Ok(Ok(replies)) => replies,
        Ok(Err(e)) if crate::error::is_noperm(&e) => return Err(e),
        Ok(Err(e)) => {
            debug!(master = %address, error = %e, "a master did not answer the look");
            return Ok(None);
        }
        Err(_) => {
            debug!(master = %address, "a master did not answer the look in time");
            return Ok(None);
        }
    };
    let text = |v: Option<&Value>| redis::from_redis_value::<String>(v?.clone()).ok();
    let (Some(view), Some(info)) = (text(replies.first()), text(replies.get(1))) else {
        return Ok(None);
    };
    let view = parse_nodes(&view);
    // Only a node that is a master by its own account is one to count.
    Ok(view.iter().any(|s| s.myself && s.master).then_some(Answer {
        address,
        view,
        info,
    }))
}

/// The error of a look that heard from no node in time.
fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no cluster node answered CLUSTER NODES in time",
    ))
}

/// The task's state between looks.
struct Watcher {
    /// A cluster connection of its own.
    conn: ClusterConnection,
    /// Each master's confirmation and count, by address, kept across looks.
    masters: HashMap<String, Master>,
    /// Each master's doubted replicas.
    doubts: HashMap<String, Doubts>,
    /// Masters whose count a disagreement kept up (logged once each).
    held: HashMap<String, u32>,
    /// The last look failed (logged once until one succeeds).
    failing: bool,
}

/// Starts replica confirmation on a cluster: the first look now (so the first
/// lock change knows its master's replicas), then a look every second and after
/// every short `WAIT`, for as long as the manager's connection keeps the
/// returned [`PerMaster`]. `conn` is a cluster connection for the task alone.
/// Fails when no master can be asked (an ACL without `CLUSTER` or `INFO`).
pub(super) async fn start(
    conn: ClusterConnection,
    sync: ReplicaSync,
    (response_timeout, refuse): (Duration, bool),
) -> RedisResult<Arc<PerMaster>> {
    let look = Arc::new(Look::default());
    let kept = Arc::new(AtomicUsize::new(0));
    let per = Arc::new(PerMaster {
        sync,
        response_timeout,
        // Never counted: a slot's master is, once a look places the slot.
        unplaced: ReplicaWatch::new(sync.min, Arc::clone(&look), false).serve(|count| {
            Confirmation::new(sync, response_timeout, Confirm::Wait, count)
                .refusing(refuse)
                .sharing_kept(Arc::clone(&kept))
        }),
        refuse,
        kept,
        look,
        map: RwLock::new(SlotMap::default()),
    });
    let mut watcher = Watcher {
        conn,
        masters: HashMap::new(),
        doubts: HashMap::new(),
        held: HashMap::new(),
        failing: false,
    };
    match watcher.look(&per).await {
        Ok(()) => {}
        // No right to ask: the caller decides (off with a warning by default).
        Err(e) if crate::error::is_noperm(&e) => return Err(e),
        // A node slow or cut at start is no reason to fail it: every slot
        // assumes the replicas asked for until a look places it.
        Err(e) => {
            warn!(error = %e, assumed = sync.min, "could not count the cluster masters' replicas at start; lock changes wait for the replicas asked for until they are counted");
            watcher.failing = true;
        }
    }
    let weak = Arc::downgrade(&per);
    tokio::spawn(async move {
        loop {
            let Some(look) = weak.upgrade().map(|p| Arc::clone(&p.look)) else {
                return;
            };
            let tick = std::pin::pin!(tokio::time::sleep(EVERY));
            let _ = select(tick, std::pin::pin!(look.asked())).await;
            let covers = look.starting();
            if !watcher.look_again(&weak).await {
                return;
            }
            // Calls held back by a short WAIT go out by these counts now.
            look.finished(covers);
        }
    });
    Ok(per)
}

impl Watcher {
    /// One look from the task; false when the manager's connection is gone.
    async fn look_again(&mut self, weak: &Weak<PerMaster>) -> bool {
        let Some(per) = weak.upgrade() else {
            return false;
        };
        match self.look(&per).await {
            Ok(()) if std::mem::take(&mut self.failing) => {
                info!("counting the cluster masters' replicas again");
            }
            Ok(()) => {}
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    warn!(error = %e, "cannot count the cluster masters' replicas; keeping the last counts");
                }
            }
        }
        true
    }

    /// Asks the masters, then places slots and counts replicas.
    async fn look(&mut self, per: &PerMaster) -> RedisResult<()> {
        let answers = self.ask().await?;
        let owned = owners(&answers);
        if owned.is_empty() {
            // No view answered in time (every node slow at once, as on a
            // loaded machine): nothing says any master stopped serving, so
            // nothing is forgotten. Read as an empty map, this look would
            // forget every master, and the next one would meet them anew,
            // each with a fresh count: one whose replica is away would then
            // seem never to have had one, and its unconfirmed releases would
            // no longer be kept for a failover.
            return Err(timed_out());
        }
        let mut voters: Vec<&str> = owned.iter().map(|(_, _, a)| a.as_str()).collect();
        voters.sort_unstable();
        voters.dedup();
        let mut ranges = Vec::new();
        for (first, last, address) in &owned {
            let (first, last, address) = (*first, *last, address.clone());
            let master = match self.masters.get(&address) {
                Some(m) => m.clone(),
                None => {
                    let m = self.meet(per, &address, &answers, &voters).await;
                    self.masters.insert(address.clone(), m.clone());
                    m
                }
            };
            ranges.push((first, last, master.confirmation));
        }
        for answer in &answers {
            if let Some(master) = self.masters.get(&answer.address).cloned() {
                self.count(&answer.address, &master.watch, answer, &answers, &voters);
            }
        }
        // Masters that serve nothing any more are forgotten: a new claim
        // starts over with a fresh count and fresh doubts. The releases one
        // kept unconfirmed go out now, to its slots' new masters
        // (`wire/replicas/kept.rs`).
        self.masters.retain(|_, m| {
            let serves = ranges
                .iter()
                .any(|(_, _, r)| Arc::ptr_eq(&m.confirmation, r));
            if !serves {
                m.confirmation.new_master(false);
            }
            serves
        });
        let masters = &self.masters;
        self.doubts
            .retain(|address, _| masters.contains_key(address));
        self.held.retain(|address, _| masters.contains_key(address));
        *per.map.write().unwrap_or_else(PoisonError::into_inner) = SlotMap { ranges };
        Ok(())
    }

    /// Each master's view and `INFO`, asked at once; masters that do not
    /// answer within [`ASK_BOUND`] are left out. The masters asked are those
    /// a view from any node names (so a cluster that failed over is followed).
    async fn ask(&mut self) -> RedisResult<Vec<Answer>> {
        let cmd = redis::cmd("CLUSTER").arg("NODES").clone();
        let asked = cmd.query_async::<String>(&mut self.conn);
        let named = match tokio::time::timeout(ASK_BOUND, asked).await {
            Ok(Ok(nodes)) => parse_nodes(&nodes),
            // The masters known from the last look are asked anyway.
            Ok(Err(e)) if self.masters.is_empty() || crate::error::is_noperm(&e) => return Err(e),
            Ok(Err(_)) | Err(_) if !self.masters.is_empty() => Vec::new(),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(timed_out()),
        };
        let mut addresses: Vec<String> = named
            .into_iter()
            .filter(|s| s.master && !s.address.starts_with(':'))
            .map(|s| s.address)
            .chain(self.masters.keys().cloned())
            .collect();
        addresses.sort();
        addresses.dedup();
        let asks = addresses.into_iter().map(|address| {
            let conn = self.conn.clone();
            ask_one(conn, address)
        });
        let mut answers = Vec::new();
        for answer in join_all(asks).await {
            if let Some(answer) = answer? {
                answers.push(answer);
            }
        }
        Ok(answers)
    }

    /// The confirmation of a master first seen serving slots: with the
    /// commands its `INFO` calls for, and its count of replicas if the other
    /// masters vouch for it, else the replicas asked for.
    async fn meet(
        &mut self,
        per: &PerMaster,
        address: &str,
        answers: &[Answer],
        voters: &[&str],
    ) -> Master {
        let Some(answer) = answers.iter().find(|a| a.address == address) else {
            // It did not answer (frozen, or just gone): assume the replicas
            // asked for, and the commands of a master without AOF.
            return per.confirmation(Confirm::Wait, per.sync.min);
        };
        let field = |name: &str| {
            answer
                .info
                .lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(str::to_owned)
        };
        let version = field("redis_version").unwrap_or_default();
        let aof = field("aof_enabled").as_deref() == Some("1");
        let appendfsync = match aof {
            true => self.appendfsync(address).await,
            false => None,
        };
        let confirm = confirm_with(&version, aof, appendfsync.as_deref());
        let replication = parse(&answer.info);
        let doubts = self.doubts.entry(address.to_string()).or_default();
        let mut live = doubts.count(&replication, None);
        if live < per.sync.min && !agreed(address, answers, voters) {
            live = per.sync.min;
        }
        info!(
            master = address,
            live,
            ?confirm,
            "replica confirmation on a cluster master"
        );
        per.confirmation(confirm, live)
    }

    /// The `appendfsync` of the master at `address`, if it will say.
    async fn appendfsync(&mut self, address: &str) -> Option<String> {
        let (host, port) = address.rsplit_once(':')?;
        let cmd = redis::cmd("CONFIG").arg("GET").arg("appendfsync").clone();
        let reply = self
            .conn
            .route_command(cmd, at(host, port.parse().ok()?))
            .await;
        let pairs: Vec<String> = redis::from_redis_value(reply.ok()?).ok()?;
        pairs.get(1).cloned()
    }

    /// Counts the replicas of the master of `answer` that can answer, and
    /// lowers its count only while the other masters agree it
    /// is one.
    fn count(
        &mut self,
        address: &str,
        watch: &ReplicaWatch,
        answer: &Answer,
        answers: &[Answer],
        voters: &[&str],
    ) {
        let replication: Replication = parse(&answer.info);
        let doubts = self.doubts.entry(address.to_string()).or_default();
        let live = doubts.count(&replication, watch.short_by());
        let was = watch.live();
        if live < was && !agreed(address, answers, voters) {
            if self.held.insert(address.to_string(), was) != Some(was) {
                warn!(
                    master = address,
                    was,
                    now = live,
                    "a cluster master lost replicas while the other masters do not name it a \
                     healthy master (a failover?): its answers stay unconfirmed"
                );
            }
            return;
        }
        self.held.remove(address);
        if live != was {
            info!(
                master = address,
                was,
                now = live,
                replicas = ?replication.replicas,
                "replicas that can confirm lock changes on a cluster master"
            );
            watch.set_live(live);
        }
    }
}
