//! Replica confirmation, the node's half: how many replicas of each master can
//! confirm a lock change now, whether that master can be trusted, and where
//! it all starts.
//!
//! The feature has two halves, one folder per layer. The wire's
//! (`wire/replicas/`) sends each lock-changing script with a `WAIT` behind it,
//! within a budget of `WAIT`s per connection, and says what a shortfall means
//! for the caller. This one keeps the numbers that budget goes by, for each
//! deployment:
//!
//! - `watch.rs`: [`ReplicaWatch`](watch::ReplicaWatch), the one interface between the halves: the
//!   count, the doubt of the master and the request to look again travel only
//!   through its methods, and its doc comment lists who writes them;
//! - `single.rs`: the task that counts one master's replicas (a standalone
//!   server, or the master Sentinel names, following it as it moves);
//! - `cluster.rs` and `cluster_views.rs`: the task that counts every cluster
//!   master's, and the rules by which the masters' views place slots and
//!   vouch for a master;
//! - `count.rs`: which replicas count, from `INFO replication`; `look.rs`: the
//!   request to count again after a short `WAIT`, and its answer;
//! - `start.rs`: the first count and the confirmation each deployment starts
//!   with; `status.rs`: how confirmation stands, for a manager or an operator
//!   ([`ReplicaConfirmation`]).
//!
//! The settings are `config/replicas.rs`'s.

mod cluster;
mod cluster_views;
mod count;
mod look;
mod single;
mod start;
mod status;
mod watch;

use std::sync::Arc;

use crate::wire::Confirmation;
pub(in crate::node) use single::doubts_only;
pub(in crate::node) use start::confirmer;
pub(crate) use status::of_server;
pub use status::ReplicaConfirmation;

/// Where a connection's confirmation comes from.
#[derive(Clone, Debug)]
pub(super) enum Confirmer {
    /// One master (a single server, or the one Sentinel names).
    One(Arc<Confirmation>),
    /// A cluster: the master serving the key's slot (`cluster.rs`).
    PerMaster(Arc<cluster::PerMaster>),
}

impl Confirmer {
    /// The confirmation a script on `key` is judged by.
    pub(super) fn for_key(&self, key: Option<&str>) -> Arc<Confirmation> {
        match self {
            Confirmer::One(c) => Arc::clone(c),
            Confirmer::PerMaster(per) => per.for_key(key),
        }
    }
}
