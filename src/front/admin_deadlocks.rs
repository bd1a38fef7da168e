//! [`Admin::deadlocks`]: the cycles in the wait-for graph as it stands, for
//! operators (`lockwarden top` marks their locks, `lockwarden status` says when
//! a lock is in one).
//!
//! A waiting process finds the cycles through its own waits and breaks them
//! (`crate::deadlock`); an operator asks about all of them at once, including
//! those nobody breaks: waits in processes that run with detection off, or
//! a cycle in the second before its detector looks. So the walk is the same one
//! ([`find_cycle`] over [`RedisGraph`]), started from every wait Redis knows of:
//! - the wait records in the client registry entries (`wire/deadlock.rs`),
//!   written by waits that have lasted `Config::deadlock_timeout`: exact (what
//!   the wait wants, on whose behalf it waits);
//! - the waiting records (`lockwarden_waiters:{<name>}`, written
//!   after a second whatever the detection setting): the owner is the field
//!   without `:write`, and it wants the write lock when the field ends so,
//!   else the exclusive one. Used for a wait no registry record describes.
//!
//! Each cycle is found once from each of its members; the answer has it once,
//! turned so that its first link is the wait a detector would fail
//! ([`victim`]). Reading is best effort like the waiters' (a Redis user whose
//! ACL predates the records sees none, rather than an error). The cost is a
//! SCAN of the registry entries and of the waiting records (on a cluster, on
//! every master), then at most [`WALK_LIMIT`](crate::deadlock::WALK_LIMIT)
//! reads per wait found.

use std::collections::{BTreeMap, BTreeSet};

use super::admin::Admin;
use redis::RedisError;

use crate::deadlock::{find_cycle, owner_of, victim, Deadlock, Graph, LockState, OwnerState, Wait};
use crate::error::{is_noperm, LockError};
use crate::keys;
use crate::kind::AcquireKind;
use crate::node::Conn;
use crate::wire::deadlock::{read_owner, recorded_owners, RedisGraph};
use crate::wire::waiting::{self, WaitKind};

/// The glob of the client registry entries (`keys::client_key`).
const CLIENT_ENTRIES: &str = "lockwarden:client:*";

/// The graph as Redis holds it, plus the waits only the waiting records show:
/// an owner whose process runs with detection off records no wait in its
/// registry entry, and the walk must still see what it waits for.
struct KnownWaits {
    /// Locks and owners as the detectors read them.
    redis: RedisGraph<Conn>,
    /// Every wait found before the walk ([`Admin::start_waits`]).
    waits: Vec<Wait>,
}

impl Graph for KnownWaits {
    type Error = RedisError;

    async fn lock(&mut self, name: &str) -> Result<LockState, RedisError> {
        self.redis.lock(name).await
    }

    async fn owner(&mut self, owner: &str) -> Result<Option<OwnerState>, RedisError> {
        let Some(mut state) = self.redis.owner(owner).await? else {
            // No registry entry: the search ends here, as in the detectors.
            return Ok(None);
        };
        for wait in self
            .waits
            .iter()
            .filter(|w| w.owners.iter().any(|o| o == owner))
        {
            if !state.waits.iter().any(|w| w.lock == wait.lock) {
                state.waits.push(wait.clone());
            }
        }
        Ok(Some(state))
    }
}

impl Admin {
    /// The deadlocks now: every cycle of waits, each once, its first link the
    /// wait a detector would fail (the one that started last). Waits of
    /// processes that run with detection off are seen from their waiting
    /// records once they have waited a second; a holder with no registry entry
    /// (a Redisson client, an older lockwarden) ends the search, as in the
    /// detectors. Semaphores and latches are not in the graph.
    pub async fn deadlocks(&self) -> Result<Vec<Deadlock>, LockError> {
        let starts = self.start_waits().await?;
        let mut graph = KnownWaits {
            redis: RedisGraph {
                conn: self.conn.clone(),
            },
            waits: starts.values().cloned().collect(),
        };
        let mut seen: BTreeSet<Vec<(String, String)>> = BTreeSet::new();
        let mut found = Vec::new();
        for wait in starts.into_values() {
            let client = match read_owner(&mut graph.redis.conn, &wait.owners[0]).await {
                Ok(owner) => owner.and_then(|o| o.client),
                Err(e) if is_noperm(&e) => None,
                Err(e) => return Err(e.into()),
            };
            let (cycle, _reads) = match find_cycle(&mut graph, &wait, client).await {
                Ok(walked) => walked,
                Err(e) if is_noperm(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            let Some(mut cycle) = cycle else { continue };
            let key: BTreeSet<(String, String)> = cycle
                .links
                .iter()
                .map(|l| (l.owner.clone(), l.lock.clone()))
                .collect();
            if seen.insert(key.into_iter().collect()) {
                let first = victim(&cycle);
                cycle.links.rotate_left(first);
                found.push(cycle);
            }
        }
        Ok(found)
    }

    /// Every wait Redis knows of, by lock and hold field: those the registry
    /// entries record (with every owner each counts for, its own first), then
    /// those only the waiting records show.
    async fn start_waits(&self) -> Result<BTreeMap<(String, String), Wait>, LockError> {
        let mut waits: BTreeMap<(String, String), Wait> = BTreeMap::new();
        for wait in self.recorded_waits().await? {
            let key = (wait.lock.clone(), wait.field.clone());
            match waits.get_mut(&key) {
                Some(known) => {
                    for owner in wait.owners {
                        if !known.owners.contains(&owner) {
                            known.owners.push(owner);
                        }
                    }
                }
                None => {
                    waits.insert(key, wait);
                }
            }
        }
        for wait in waits.values_mut() {
            // The wait's own owner first: the cycle's link is named after it.
            let own = owner_of(&wait.field).to_string();
            if let Some(at) = wait.owners.iter().position(|o| *o == own) {
                wait.owners.swap(0, at);
            }
        }
        for wait in self.waiting_records().await? {
            let key = (wait.lock.clone(), wait.field.clone());
            waits.entry(key).or_insert(wait);
        }
        Ok(waits)
    }

    /// The waits recorded in the client registry entries: one per owner and
    /// lock (a nested command's wait shows once under each owner it counts for).
    async fn recorded_waits(&self) -> Result<Vec<Wait>, LockError> {
        let entries = self
            .scan_each(CLIENT_ENTRIES, "hash", async |keys| Ok(keys))
            .await;
        let entries = match entries {
            Ok(entries) => entries,
            Err(LockError::NoPermission { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut owners: BTreeSet<String> = BTreeSet::new();
        for key in entries {
            let fields: Vec<String> = match redis::cmd("HKEYS")
                .arg(&key)
                .query_async(&mut self.conn.clone())
                .await
            {
                Ok(fields) => fields,
                Err(e) if is_noperm(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            owners.extend(recorded_owners(&key, &fields));
        }
        let mut waits = Vec::new();
        for owner in owners {
            match read_owner(&mut self.conn.clone(), &owner).await {
                Ok(Some(state)) => waits.extend(state.waits),
                Ok(None) => {}
                Err(e) if is_noperm(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(waits)
    }

    /// The lock waits the waiting records show (`lockwarden_waiters:*`).
    async fn waiting_records(&self) -> Result<Vec<Wait>, LockError> {
        let names = self
            .scan_each("lockwarden_waiters:*", "zset", async |keys| {
                Ok(keys
                    .iter()
                    .filter_map(|k| keys::name_of_waiters(k).map(str::to_string))
                    .collect())
            })
            .await;
        let names = match names {
            Ok(names) => names,
            Err(LockError::NoPermission { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let names: BTreeSet<String> = names.into_iter().collect();
        let mut waits = Vec::new();
        for name in names {
            let records = match waiting::read(&mut self.conn.clone(), &name).await {
                Ok(records) => records,
                Err(e) if is_noperm(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            waits.extend(
                records
                    .into_iter()
                    .filter(|(r, _)| r.kind == WaitKind::Lock)
                    .map(|(r, _)| Wait {
                        owners: vec![owner_of(&r.owner_field).to_string()],
                        lock: name.clone(),
                        wants: AcquireKind::of_hold_field(&r.owner_field),
                        field: r.owner_field,
                        since_ms: r.since_ms,
                    }),
            );
        }
        Ok(waits)
    }
}
