//! The waiting kit's part of deadlock detection: this process's own long
//! waits, kept where every lock actor of the manager can read them
//! ([`LocalWaits`]), and one check of a wait ([`check`]): the walk over this
//! process first, then over Redis (`crate::deadlock` has the walk,
//! `wire/deadlock.rs` the records).
//!
//! A cycle whose every owner is of this manager (two tasks that took two locks
//! in opposite orders) is found without a round trip: each lock actor with a
//! wait past `Config::deadlock_timeout` publishes that wait and the lock's
//! holders of this manager here, and the walk over them needs nothing else.
//! Only a wait this process cannot settle alone writes its record in Redis
//! and walks there. A lock actor publishes only while one of its waits is
//! past the timeout, so a held lock costs nothing here.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::RedisError;

use crate::actors::shared::Shared;
use crate::client::{client_id_of, ClientInfo};
use crate::deadlock::{find_cycle, Deadlock, Graph, LockState, OwnerState, Wait};
use crate::kind::Kind;
use crate::wire::deadlock::{record, RedisGraph};

/// What one lock actor shows of its lock to the other actors' walks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Published {
    /// The fields this manager's owners hold it under.
    pub(crate) holders: Vec<String>,
    /// Its waits past the timeout.
    pub(crate) waits: Vec<Wait>,
}

/// The long waits of one manager's lock actors, by lock name and kind (one
/// actor each). A plain mutex: written and read only when a wait is past the
/// timeout, never on an acquisition's path.
#[derive(Debug, Default)]
pub(crate) struct LocalWaits {
    by_lock: Mutex<HashMap<(Arc<str>, Kind), Published>>,
}

impl LocalWaits {
    /// Shows `published` for the actor of `name` and `kind`, or nothing when
    /// it has no long wait left.
    pub(crate) fn publish(&self, name: &Arc<str>, kind: Kind, published: Option<Published>) {
        let mut map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        match published {
            Some(p) => {
                map.insert((name.clone(), kind), p);
            }
            None => {
                map.remove(&(name.clone(), kind));
            }
        }
    }

    /// A copy to walk (the walk must not hold the lock across its steps).
    fn snapshot(&self) -> Vec<(Arc<str>, Published)> {
        let map = self.by_lock.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter()
            .map(|((n, _), p)| (n.clone(), p.clone()))
            .collect()
    }
}

/// The graph of this process alone: an owner of another client ends the
/// search (Redis is asked next).
struct LocalGraph {
    locks: Vec<(Arc<str>, Published)>,
    client_id: String,
    me: ClientInfo,
}

impl Graph for LocalGraph {
    type Error = Infallible;

    async fn lock(&mut self, name: &str) -> Result<LockState, Infallible> {
        let holders = self
            .locks
            .iter()
            .filter(|(n, _)| &**n == name)
            .flat_map(|(_, p)| p.holders.iter().cloned())
            .collect();
        Ok(LockState {
            holders,
            queue: Vec::new(),
        })
    }

    async fn owner(&mut self, owner: &str) -> Result<Option<OwnerState>, Infallible> {
        if client_id_of(owner) != Some(self.client_id.as_str()) {
            return Ok(None);
        }
        let waits = self
            .locks
            .iter()
            .flat_map(|(_, p)| p.waits.iter())
            .filter(|w| w.owners.iter().any(|o| o == owner))
            .cloned()
            .collect();
        Ok(Some(OwnerState {
            client: Some(self.me.clone()),
            waits,
        }))
    }
}

/// What one check of a wait found.
#[derive(Debug)]
pub(crate) struct Checked {
    /// The cycle through the wait, if any.
    pub(crate) cycle: Option<Deadlock>,
    /// Whether the wait's record was written in Redis (it must be removed
    /// when the wait ends).
    pub(crate) recorded: bool,
    /// Redis commands the check sent (the record's write and the walk's reads).
    pub(crate) commands: usize,
    /// What Redis answered instead, if it failed (the walk stopped there).
    pub(crate) error: Option<RedisError>,
}

/// Checks `wait`: over this process, then (writing its record first) over
/// Redis. `record_life`: how long the record lives unless the next check
/// refreshes it; `None` checks this process only (Redis refused the records).
pub(crate) async fn check(
    shared: Arc<Shared>,
    wait: Wait,
    record_life: Option<Duration>,
) -> Checked {
    let me = ClientInfo::this_process(shared.config.label.as_deref());
    let mut local = LocalGraph {
        locks: shared.local_waits.snapshot(),
        client_id: shared.client_id.clone(),
        me: me.clone(),
    };
    let Ok((cycle, _)) = find_cycle(&mut local, &wait, Some(me.clone())).await;
    let Some(record_life) = record_life.filter(|_| cycle.is_none()) else {
        return Checked {
            cycle,
            recorded: false,
            commands: 0,
            error: None,
        };
    };
    let conn = shared.node.conn();
    let entry_ttl = shared.config.watchdog_lease;
    let written = record(&conn, &wait, record_life, entry_ttl).await;
    let commands = 2 * wait.owners.len();
    if let Err(e) = written {
        return Checked {
            cycle: None,
            recorded: false,
            commands,
            error: Some(e),
        };
    }
    let mut graph = RedisGraph { conn };
    match find_cycle(&mut graph, &wait, Some(me)).await {
        Ok((cycle, reads)) => Checked {
            cycle,
            recorded: true,
            commands: commands + reads,
            error: None,
        },
        Err(e) => Checked {
            cycle: None,
            recorded: true,
            commands: commands + 1,
            error: Some(e),
        },
    }
}
