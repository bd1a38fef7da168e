//! [`ReplicaConfirmation`]: how replica confirmation stands, for a manager
//! ([`GetReplicaConfirmation`](crate::GetReplicaConfirmation)) or for a server
//! an operator looks at ([`Admin::replica_confirmation`](crate::Admin::replica_confirmation)).
//!
//! Confirmation is on by default, but it can be off or reduced without any
//! error: the configuration turned it off, the user may not run `INFO` (which
//! counts the replicas), the server is not a master, or no replica can answer
//! now (none attached, every one frozen, cut off or lagging). Lock changes then
//! go on unconfirmed, which keeps locks available but lets a failover forget
//! them. This value says which, so that a command can print it and a service
//! can export it; `lockwarden_replicas_counted` is the same count as a gauge.
//!
//! A manager's comes from its connection's confirmation
//! ([`Node::replica_confirmation`]); an operator's from the server's `INFO
//! replication`, by the rule a manager counts them with ([`of_server`]), so
//! that `lockwarden status` shows confirmation off or reduced without reading
//! a service's log.

use std::fmt;

use super::count::{parse, Doubts};
use super::Confirmer;
use crate::config::Config;
use crate::node::{Conn, Node};

/// How replica confirmation stands (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaConfirmation {
    /// Replicas asked to confirm each lock change; 0 when confirmation is off.
    pub wanted: u32,
    /// Replicas that can confirm now, as last counted; `None` when they
    /// cannot be counted (confirmation off, or a cluster, whose masters are
    /// counted each apart).
    pub counted: Option<u32>,
    /// Why confirmation is off or reduced, in words; `None` when it is full.
    pub reason: Option<String>,
}

impl ReplicaConfirmation {
    /// Off, for `reason`.
    pub(crate) fn off(reason: impl Into<String>) -> ReplicaConfirmation {
        ReplicaConfirmation {
            wanted: 0,
            counted: None,
            reason: Some(reason.into()),
        }
    }

    /// On, asking `wanted` replicas, `counted` of which can answer now.
    pub(crate) fn counted(wanted: u32, counted: u32) -> ReplicaConfirmation {
        let reason = match counted {
            c if c >= wanted => None,
            0 => Some(
                "no replica can confirm lock changes now (none attached, or every one frozen, \
                 cut off or lagging): they are made unconfirmed"
                    .to_string(),
            ),
            c => Some(format!(
                "only {c} of the {wanted} replicas asked for can confirm lock changes now"
            )),
        };
        ReplicaConfirmation {
            wanted,
            counted: Some(counted),
            reason,
        }
    }

    /// Whether every lock change is confirmed by as many replicas as asked.
    pub fn is_full(&self) -> bool {
        self.reason.is_none()
    }

    /// One word for it: `on`, `reduced` or `off`.
    pub fn state(&self) -> &'static str {
        match (self.wanted, &self.reason) {
            (0, _) => "off",
            (_, None) => "on",
            (_, Some(_)) => "reduced",
        }
    }
}

impl fmt::Display for ReplicaConfirmation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replica confirmation {}", self.state())?;
        if let Some(counted) = self.counted {
            write!(f, " ({counted} of {} replicas can confirm)", self.wanted)?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
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
}

/// How many replicas of the server whose `INFO replication` is `info` can
/// confirm lock changes now, by the rule a manager counts them with; `None`
/// when it is not a master.
fn replicas_in(info: &str) -> Option<u32> {
    let replication = parse(info);
    replication
        .master
        .then(|| Doubts::default().count(&replication, None))
}

/// How replica confirmation would stand, now, for a manager that asks
/// `wanted` replicas (`None`: turned off) of the server behind `conn`: off
/// by the configuration, off because the server will not say (`INFO`
/// refused) or is not a master, reduced when fewer replicas can answer than
/// asked, or full. On a cluster the masters are counted each apart, by the
/// managers: `counted` is then `None`.
pub(crate) async fn of_server(conn: &Conn, wanted: Option<u32>) -> ReplicaConfirmation {
    let Some(wanted) = wanted else {
        return ReplicaConfirmation::off("turned off by the configuration (--sync-replicas 0)");
    };
    if conn.is_cluster() {
        return ReplicaConfirmation {
            wanted,
            counted: None,
            reason: None,
        };
    }
    let info = redis::cmd("INFO")
        .arg("replication")
        .query_async::<String>(&mut conn.clone())
        .await;
    match info.map(|info| replicas_in(&info)) {
        Ok(Some(counted)) => ReplicaConfirmation::counted(wanted, counted),
        Ok(None) => ReplicaConfirmation::off("the server is not a master"),
        Err(e) => ReplicaConfirmation::off(format!(
            "the server will not say how many replicas it has ({e}); give the user \
             +info +wait +client|id"
        )),
    }
}
