//! Counting the replicas that can confirm a lock change, and not trusting a
//! master that lost them all to a failover.
//!
//! A `WAIT` for a replica that cannot answer (frozen, killed, cut off) lasts its
//! whole timeout, and a fixed count of replicas turns that replica's trouble into
//! a stalled lock: after a failover the new master has no replica until the old
//! one comes back as one, and every grant waited for it. So the connection's
//! [`Confirmation`] asks only for the replicas that can answer now, and this task
//! keeps that number current from the master's `INFO replication`: a replica
//! counts while it is online and acknowledged within the last second (`lag` 0 or
//! 1: replicas acknowledge every second), and one that let a `WAIT` run out is
//! doubted until it acknowledges again (`lag` 0), so a frozen replica stops
//! counting right after the first `WAIT` it missed instead of a second later.
//! The task looks every second, and at once when a `WAIT` came back short.
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
//! is: the Sentinels named it.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::select;
use tracing::{debug, info, warn};

use super::sentinel::Follower;
use super::{Conn, Link};
use crate::wire::Confirmation;

/// How often the replicas are counted when no `WAIT` came back short.
const EVERY: Duration = Duration::from_secs(1);

/// Highest `lag` (seconds since the replica's last acknowledgement) of a replica
/// that can answer: replicas acknowledge every second, so 0 or 1.
const LIVE_LAG: u64 = 1;

/// One replica as `INFO replication` lists it on its master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replica {
    /// `ip:port`, which names it across looks.
    pub(crate) address: String,
    /// `state=online`: past its first full synchronisation.
    pub(crate) online: bool,
    /// Seconds since its last acknowledgement.
    pub(crate) lag: u64,
}

/// What `INFO replication` (or a default `INFO`) says of replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replication {
    /// `role:master`.
    pub(crate) master: bool,
    /// Its replicas (none on a replica).
    pub(crate) replicas: Vec<Replica>,
}

/// Reads the replication fields of an `INFO` reply.
pub(crate) fn parse(info: &str) -> Replication {
    let mut replication = Replication {
        master: false,
        replicas: Vec::new(),
    };
    for line in info.lines().map(str::trim) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name == "role" {
            replication.master = value == "master";
        } else if name.starts_with("slave") && name[5..].bytes().all(|b| b.is_ascii_digit()) {
            let field = |key: &str| {
                value
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            replication.replicas.push(Replica {
                address: format!(
                    "{}:{}",
                    field("ip").unwrap_or("?"),
                    field("port").unwrap_or("?")
                ),
                online: field("state") == Some("online"),
                lag: field("lag")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(u64::MAX),
            });
        }
    }
    replication
}

/// The replicas doubted since they let a `WAIT` run out, and the count of those
/// that can answer.
#[derive(Debug, Default)]
pub(crate) struct Doubts(HashSet<String>);

impl Doubts {
    /// Counts the replicas of `replication` that can answer. After a short
    /// `WAIT` (`after_short`), every replica that has not acknowledged this very
    /// second is doubted; a doubted one is trusted again once it has.
    pub(crate) fn count(&mut self, replication: &Replication, after_short: bool) -> u32 {
        if !replication.master {
            return 0;
        }
        let mut live = 0;
        for r in replication.replicas.iter().filter(|r| r.online) {
            if r.lag == 0 {
                self.0.remove(&r.address);
            } else if after_short {
                self.0.insert(r.address.clone());
            }
            if r.lag <= LIVE_LAG && !self.0.contains(&r.address) {
                live += 1;
            }
        }
        live
    }
}

/// Keeps `confirmation`'s count of replicas current for the master behind
/// `link`, until the confirmation (the manager's connection) is gone.
pub(super) fn watch(link: Link, confirmation: &Arc<Confirmation>) {
    let weak = Arc::downgrade(confirmation);
    let follower = match &link {
        Link::Sentinel(f) => Some(Arc::clone(f)),
        Link::Standalone(_) | Link::Cluster(..) => None,
    };
    tokio::spawn(async move {
        let mut watcher = Watcher {
            conn: Conn {
                link,
                confirmation: None,
            },
            // The count the connection starts with is this master's.
            address: follower.as_ref().map(|f| f.address()),
            follower,
            doubts: Doubts::default(),
            failing: false,
        };
        loop {
            let Some(asked) = weak.upgrade().map(|c| c.look_asked()) else {
                return;
            };
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
            if !watcher.look(&weak).await {
                return;
            }
        }
    });
}

/// The task's state between looks.
struct Watcher {
    /// The connection the counted master is reached on (asking no replica).
    conn: Conn,
    /// Under Sentinel, what follows the master.
    follower: Option<Arc<Follower>>,
    /// Replicas doubted since a short `WAIT`.
    doubts: Doubts,
    /// The master counted last (under Sentinel), to tell a move from a loss.
    address: Option<String>,
    /// The last look failed (logged once until one succeeds).
    failing: bool,
}

impl Watcher {
    /// One look; false when the confirmation is gone.
    async fn look(&mut self, weak: &Weak<Confirmation>) -> bool {
        let Some(confirmation) = weak.upgrade() else {
            return false;
        };
        let follower = self.follower.clone();
        let before = follower.as_ref().map(|f| f.address());
        let info = redis::cmd("INFO")
            .arg("replication")
            .query_async::<String>(&mut self.conn)
            .await;
        let info = match info {
            Ok(info) => info,
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
        let address = follower.as_ref().map(|f| f.address());
        if address != before {
            // The connection moved while asking: count the new master now.
            drop(confirmation);
            return Box::pin(self.look(weak)).await;
        }
        let replication = parse(&info);
        let live = self.doubts.count(&replication, confirmation.is_short());
        let was = confirmation.live();
        let moved = address.is_some() && address != self.address;
        if live < was && !moved {
            if let Some(follower) = &follower {
                if !trusted(follower).await {
                    return true;
                }
            }
        }
        if moved {
            self.address = address;
            self.doubts = Doubts::default();
        }
        if live != was {
            info!(
                was,
                now = live,
                master = self.address.as_deref().unwrap_or("the server"),
                moved,
                replicas = ?replication.replicas,
                "replicas that can confirm lock changes"
            );
            confirmation.set_live(live);
        } else {
            debug!(live, "replicas counted");
        }
        true
    }
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
                "the master lost its replicas and the Sentinels name another master or are \
                 failing over: its answers are not trusted; following the new master"
            );
            follower.look_again();
            false
        }
        None => {
            warn!(
                master = %follower.address(),
                "the master lost its replicas and no Sentinel answered whether it still is the \
                 master: its answers stay unconfirmed until one does"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=127.0.0.1,port=7001,state=online,offset=100,lag=0\r\n\
        slave1:ip=127.0.0.1,port=7002,state=online,offset=90,lag=1\r\n\
        master_failover_state:no-failover\r\nmaster_repl_offset:100\r\n";

    #[test]
    fn replicas_are_read_from_info() {
        let r = parse(INFO);
        assert!(r.master);
        assert_eq!(r.replicas.len(), 2);
        assert_eq!(r.replicas[1].address, "127.0.0.1:7002");
        assert_eq!(r.replicas[1].lag, 1);
        let replica = parse("role:slave\r\nmaster_host:127.0.0.1\r\nslave_read_only:1\r\n");
        assert!(!replica.master && replica.replicas.is_empty());
    }

    #[test]
    fn a_replica_that_missed_a_wait_is_doubted_until_it_acknowledges() {
        let mut doubts = Doubts::default();
        let r = parse(INFO);
        assert_eq!(doubts.count(&r, false), 2, "lag 0 and 1 both count");
        assert_eq!(
            doubts.count(&r, true),
            1,
            "after a short WAIT, lag 1 is doubted"
        );
        assert_eq!(doubts.count(&r, false), 1, "and stays doubted at lag 1");
        let back = parse(&INFO.replace("lag=1", "lag=0"));
        assert_eq!(
            doubts.count(&back, false),
            2,
            "trusted again once it acknowledged"
        );
        let frozen = parse(&INFO.replace("lag=1", "lag=3"));
        assert_eq!(
            doubts.count(&frozen, false),
            1,
            "a silent replica does not count"
        );
        let syncing = parse(&INFO.replace("state=online,offset=90", "state=wait_bgsave,offset=0"));
        assert_eq!(doubts.count(&syncing, false), 1);
        assert_eq!(doubts.count(&parse("role:slave\r\n"), false), 0);
    }
}
