//! What [`Admin`] tells of replica confirmation on the server it looks at: how
//! many replicas could confirm a manager's lock changes there now, by the rule
//! a manager counts them with (`node/replicas/count.rs`), against what the
//! configuration asks for. `lockwarden status` prints it, so that an operator
//! sees confirmation off or reduced without reading a service's log.

use super::admin::Admin;
use crate::node;
use crate::replication::ReplicaConfirmation;

impl Admin {
    /// How replica confirmation would stand for a manager with this
    /// configuration and user, now: off by the configuration, off because the
    /// server will not say (`INFO` refused) or is not a master, reduced when
    /// fewer replicas can answer than asked, or full. On a cluster the masters
    /// are counted each apart, by the managers: `counted` is then `None`.
    pub async fn replica_confirmation(&self) -> ReplicaConfirmation {
        let Some(wanted) = self.sync_wanted else {
            return ReplicaConfirmation::off("turned off by the configuration (--sync-replicas 0)");
        };
        if self.conn.is_cluster() {
            return ReplicaConfirmation {
                wanted,
                counted: None,
                reason: None,
            };
        }
        let info = redis::cmd("INFO")
            .arg("replication")
            .query_async::<String>(&mut self.conn.clone())
            .await;
        match info.map(|info| node::replicas_in(&info)) {
            Ok(Some(counted)) => ReplicaConfirmation::counted(wanted, counted),
            Ok(None) => ReplicaConfirmation::off("the server is not a master"),
            Err(e) => ReplicaConfirmation::off(format!(
                "the server will not say how many replicas it has ({e}); give the user \
                 +info +wait +client|id"
            )),
        }
    }
}
