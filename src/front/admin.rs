//! [`Admin`]: read-only views over the locks, semaphores and latches in a Redis
//! server, for operators (the `lockwarden` command) rather than for services that
//! take locks.
//!
//! A service asks about one lock it knows by name ([`Inspect`](crate::Inspect)).
//! An operator also needs to find the locks that exist ([`Admin::list`]) and to tell
//! their kinds apart, which needs the raw hash: a read-write lock is the same hash as
//! an exclusive one plus a `mode` field. These views need no lock manager (no client
//! id, no subscriber), so they live here with their own connection, made with a
//! single attempt so that an unreachable server is reported at once instead of after
//! a round of reconnect backoff. Finding locks and synchronizers uses SCAN with a
//! type filter, never KEYS, which would block the server for as long as it walks the
//! whole keyspace.

use std::time::Duration;

use futures::future::join_all;

use crate::config::Config;
use crate::error::LockError;
use crate::keys;
use crate::node::{self, Conn, Purpose, ReplicaConfirmation};
use crate::sync_view::{Looked, RecordedWaiter, SynchronizerKind, SynchronizerSummary};
use crate::view::{attach_clients, Holder, Inspected, LockKind, QueuedWaiter};
use crate::wire::{self, Inspect, Publish, ScriptConn, SyncInspect};

/// How many keys one SCAN call is asked to look at: large enough to walk a big
/// keyspace in few round trips, small enough that each call stays short.
const SCAN_COUNT: usize = 500;

/// Checks a lock name with the rules and limits of `config`, before anything is sent
/// to Redis: the same check every message of the lock manager makes.
pub fn check_lock_name(config: &Config, name: &str) -> Result<(), LockError> {
    keys::validate_name(name, config.max_name_len).map_err(LockError::from)
}

/// Checks an explicit lease with the limits of `config`, before anything is sent to
/// Redis: at least 1 ms (PEXPIRE 0 would delete the lock) and at most
/// [`Config::max_lease`]. The same check every acquisition makes.
pub fn check_lease(config: &Config, lease: Duration) -> Result<(), LockError> {
    let reason = if lease < Duration::from_millis(1) {
        "must be at least 1 ms"
    } else if lease > config.max_lease {
        "is over the configured maximum lease"
    } else {
        return Ok(());
    };
    Err(LockError::InvalidLease { lease, reason })
}

/// One lock as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockSummary {
    /// The lock name (its key).
    pub name: String,
    /// Its kind.
    pub kind: LockKind,
    /// Its holders and their hold counts, with who each is when its manager is
    /// registered (never marked as this manager's: an [`Admin`] has no client id).
    pub holders: Vec<Holder>,
    /// Time until it expires; `None` when the key has no expiry.
    pub ttl: Option<Duration>,
    /// A fair lock's waiters, head first, with the time left on their places.
    pub queue: Vec<QueuedWaiter>,
    /// The waiters recorded in Redis (any kind of lock: those that have waited
    /// a second, of managers recent enough to record them), oldest first, with
    /// the owner field each will hold the lock under and who it is; empty when
    /// none are or the Redis user may not read the records.
    pub waiters: Vec<RecordedWaiter>,
}

/// Read-only access to the locks, semaphores and latches of one Redis deployment,
/// for operators: describe one by name, list those whose names match a pattern
/// (SCAN with a type filter, never KEYS; on a cluster, on every master). It needs
/// no lock manager; it connects with a single attempt, so an unreachable server is
/// reported at once.
#[derive(Clone, Debug)]
pub struct Admin {
    /// The command connection.
    pub(super) conn: Conn,
    /// Longest accepted lock name, from the config.
    pub(super) max_name_len: usize,
    /// Replicas the config asks to confirm each lock change (`None`: off),
    /// for [`Admin::replica_confirmation`].
    pub(super) sync_wanted: Option<u32>,
}

impl Admin {
    /// Connects to the server of `config`, with one attempt bounded by its
    /// connection timeout, and checks that it answers PING.
    pub async fn connect(config: &Config) -> Result<Admin, LockError> {
        let node = node::connect(config, Purpose::Operator).await?;
        Ok(Admin {
            conn: node.conn(),
            max_name_len: config.max_name_len,
            sync_wanted: config.replica_sync().map(|sync| sync.min),
        })
    }

    /// How replica confirmation would stand for a manager with this
    /// configuration and user, now: off by the configuration, off because the
    /// server will not say (`INFO` refused) or is not a master, reduced when
    /// fewer replicas can answer than asked, or full. On a cluster the masters
    /// are counted each apart, by the managers: `counted` is then `None`.
    /// `lockwarden status` prints it.
    pub async fn replica_confirmation(&self) -> ReplicaConfirmation {
        node::replicas::of_server(&self.conn, self.sync_wanted).await
    }

    /// The lock `name` with its kind, holders and TTL; `None` when there is no such
    /// key, kind [`LockKind::NotALock`] for a hash that does not look like a lock.
    /// Fails for a key that is not a hash, and with [`LockError::InvalidName`] for
    /// a name no lock can have.
    pub async fn describe(&self, name: &str) -> Result<Option<LockSummary>, LockError> {
        keys::validate_name(name, self.max_name_len)?;
        let found = wire::call(&mut self.conn.clone(), &Inspect { name }).await?;
        let mut lock = found.exists.then(|| summarize(name, found));
        self.attach_clients(lock.as_mut_slice()).await?;
        self.attach_lock_waiters(lock.as_mut_slice()).await?;
        Ok(lock)
    }

    /// The semaphore or count-down latch `name`: its kind, number, TTL, how
    /// many wait on it and who, and a fair semaphore's queue (`sync_view.rs`
    /// says how the kind is told).
    /// With no key, a summary marked
    /// [`key_missing`](SynchronizerSummary::key_missing) when waiters are
    /// recorded on it, else `None`; `None` too when the key holds no integer (a
    /// lock's hash, say).
    pub async fn synchronizer(&self, name: &str) -> Result<Option<SynchronizerSummary>, LockError> {
        keys::validate_name(name, self.max_name_len)?;
        // TYPE first: a lock's name needs no rights to a synchronizer's other
        // keys, which the script names.
        let kind: String = redis::cmd("TYPE")
            .arg(name)
            .query_async(&mut self.conn.clone())
            .await?;
        if kind == "none" {
            return self.missing(name).await;
        }
        if kind != "string" {
            return Ok(None);
        }
        let mut found = self.look_at_counters(vec![name.to_string()]).await?;
        self.attach_waiters(&mut found).await?;
        for sync in found
            .iter_mut()
            .filter(|s| s.kind == SynchronizerKind::Semaphore)
        {
            sync.queue = self.semaphore_queue(name).await?;
        }
        Ok(found.into_iter().next())
    }

    /// The fair waiters queued on semaphore `name`, head first: each one's
    /// waiter id (`<client id>:<n>`, as the waiting records name it) and the
    /// time left on its place (zero: lapsed, about to be dropped). Empty when
    /// nobody waits fairly. Read as it stands, not atomic with the permits.
    pub async fn semaphore_queue(&self, name: &str) -> Result<Vec<QueuedWaiter>, LockError> {
        keys::validate_name(name, self.max_name_len)?;
        let (now_ms, queue) = wire::read_sem_queue(&mut self.conn.clone(), name).await?;
        let left = |until: u64| Duration::from_millis(until.saturating_sub(now_ms));
        Ok(queue
            .into_iter()
            .map(|(owner_field, until)| QueuedWaiter {
                owner_field,
                expires_in: Some(until.map_or(Duration::ZERO, left)),
            })
            .collect())
    }

    /// The semaphores and count-down latches whose names match the glob
    /// `pattern`, sorted by name: those lockwarden labelled, and unlabelled ones
    /// (Redisson's) while something waits on them or, for a permit-expirable
    /// semaphore, while it has permits out. Integer strings with none of these
    /// ([`SynchronizerKind::Counter`]: an idle Redisson semaphore or latch, or
    /// an application's counter) are left out; [`synchronizer`](Self::synchronizer)
    /// still shows one by name. Names with waiters recorded but no key (a
    /// semaphore deleted or lost with Redis's data) are in the list too, marked
    /// [`key_missing`](SynchronizerSummary::key_missing). Fails with [`LockError::NoPermission`] for a user
    /// whose ACL does not cover the keys it reads (`~lockwarden_kind:*` among them,
    /// docs/operations.md).
    pub async fn synchronizers(
        &self,
        pattern: &str,
    ) -> Result<Vec<SynchronizerSummary>, LockError> {
        let mut found = self
            .scan_each(pattern, "string", async |names| {
                let seen = self.look_at_counters(names).await?;
                let known = seen
                    .into_iter()
                    .filter(|s| s.kind != SynchronizerKind::Counter);
                Ok(known.collect())
            })
            .await?;
        found.extend(self.missing_keys(pattern).await?);
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found.dedup_by(|a, b| a.name == b.name);
        self.attach_waiters(&mut found).await?;
        Ok(found)
    }

    /// Looks at each of `names` (`lua/sync_inspect.lua`, all sent at once), then
    /// counts the listeners on both channels of those that hold an integer (one
    /// NUMSUB), and makes summaries of them. A name no synchronizer can have (its
    /// derived keys would cross slots) is skipped, and so is a key that vanished
    /// or changed type meanwhile (the script answers no value); any error of the
    /// script is returned (no right to the label's key, say), not taken for "no
    /// synchronizer".
    async fn look_at_counters(
        &self,
        mut names: Vec<String>,
    ) -> Result<Vec<SynchronizerSummary>, LockError> {
        names.retain(|name| keys::validate_name(name, self.max_name_len).is_ok());
        let looks = join_all(names.iter().map(|name| {
            let mut conn = self.conn.clone();
            async move { wire::call(&mut conn, &SyncInspect { name }).await }
        }))
        .await;
        let mut counters: Vec<(String, Looked)> = Vec::new();
        for (name, look) in names.into_iter().zip(looks) {
            let look = look?;
            if look.value.is_some() {
                counters.push((name, look));
            }
        }
        let channels: Vec<String> = counters
            .iter()
            .flat_map(|(name, _)| [keys::semaphore_channel(name), keys::latch_channel(name)])
            .collect();
        let listening = self.listeners(&channels).await?;
        Ok(counters
            .into_iter()
            .zip(listening.chunks_exact(2))
            .filter_map(|((name, look), on)| look.into_summary(&name, on[0], on[1]))
            .collect())
    }

    /// The locks whose names match the glob `pattern` (`*` for all), sorted by
    /// name. Hashes that do not look like locks (an owner field and a hold
    /// count in every field but `mode`) are left out; a
    /// key that vanishes or changes type while the scan runs is skipped.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LockSummary>, LockError> {
        let mut locks = self
            .scan_each(pattern, "hash", async |names| {
                Ok(self.look_at_locks(names).await)
            })
            .await?;
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        locks.dedup_by(|a, b| a.name == b.name);
        self.attach_clients(&mut locks).await?;
        self.attach_lock_waiters(&mut locks).await?;
        Ok(locks)
    }

    /// The locks among `names` (`lua/inspect.lua` for each, all sent at once); a
    /// key that vanished or is not a lock is skipped.
    async fn look_at_locks(&self, names: Vec<String>) -> Vec<LockSummary> {
        // The connection is multiplexed: these go out as one pipeline (on a
        // cluster, each to its slot's master, the one just scanned).
        let looks = join_all(names.iter().map(|name| {
            let mut conn = self.conn.clone();
            async move { wire::call(&mut conn, &Inspect { name }).await }
        }))
        .await;
        names
            .iter()
            .zip(looks)
            .filter_map(|(name, look)| Some(summarize(name, look.ok().filter(|f| f.exists)?)))
            .filter(|lock| lock.kind != LockKind::NotALock)
            .collect()
    }

    /// Fills in who each holder of `locks` is, from the registry entries of their
    /// client ids (one HGETALL per distinct client, all sent at once).
    async fn attach_clients(&self, locks: &mut [LockSummary]) -> Result<(), LockError> {
        let ids: Vec<&str> = locks
            .iter()
            .flat_map(|l| l.holders.iter().filter_map(Holder::client_id))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let clients = wire::read_clients(&self.conn, &ids).await?;
        for lock in locks {
            attach_clients(&mut lock.holders, &clients);
        }
        Ok(())
    }

    /// For each of `locks`, how many connections are subscribed to its unlock
    /// channel: roughly, how many processes wait for it (a lockwarden manager, like
    /// a Redisson client, subscribes once per lock while it has waiters). A fair
    /// lock's queued waiters listen on channels of their own and are counted by its
    /// queue instead. One `PUBSUB NUMSUB` (`SHARDNUMSUB` on a cluster with sharded
    /// pub/sub, summed over the nodes by redis-rs) for all of them.
    pub async fn waiting(&self, locks: &[LockSummary]) -> Result<Vec<u64>, LockError> {
        let channels: Vec<String> = locks
            .iter()
            .map(|l| match l.kind {
                LockKind::ReadWrite { .. } => keys::rw_channel(&l.name),
                LockKind::Exclusive | LockKind::NotALock => keys::channel(&l.name),
            })
            .collect();
        self.listeners(&channels).await
    }

    /// How many connections listen on each of `channels`: one `PUBSUB NUMSUB`
    /// (`SHARDNUMSUB` on a cluster with sharded pub/sub, summed over the nodes by
    /// redis-rs) for all of them.
    pub(super) async fn listeners(&self, channels: &[String]) -> Result<Vec<u64>, LockError> {
        if channels.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg(match self.conn.publish() {
            Publish::Sharded => "SHARDNUMSUB",
            Publish::Plain => "NUMSUB",
        });
        cmd.arg(channels);
        let counts: std::collections::HashMap<String, u64> = self.conn.query_at(cmd, None).await?;
        Ok(channels
            .iter()
            .map(|c| counts.get(c).copied().unwrap_or(0))
            .collect())
    }

    /// Walks the keys of type `kind` matching `pattern` with SCAN, on a cluster
    /// on every master (SCAN walks one server's keys), and hands each page of
    /// names to `look`, keeping what it answers. SCAN may give a key twice: the
    /// callers sort and dedup. A binary key is skipped: lock and synchronizer
    /// names are text.
    pub(super) async fn scan_each<T>(
        &self,
        pattern: &str,
        kind: &str,
        look: impl AsyncFn(Vec<String>) -> Result<Vec<T>, LockError>,
    ) -> Result<Vec<T>, LockError> {
        let nodes = match self.conn.masters().await? {
            Some(masters) => masters.into_iter().map(Some).collect(),
            None => vec![None],
        };
        let mut found = Vec::new();
        for node in &nodes {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .arg("TYPE")
                    .arg(kind);
                let (next, batch): (u64, Vec<Vec<u8>>) =
                    self.conn.query_at(scan, node.as_ref()).await?;
                let names = batch
                    .into_iter()
                    .filter_map(|k| String::from_utf8(k).ok())
                    .collect();
                found.extend(look(names).await?);
                // The cursor 0 ends the walk.
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(found)
    }
}

/// A lock's summary from one look at its keys (no holder is marked as ours: an
/// [`Admin`] has no client id).
fn summarize(name: &str, found: Inspected) -> LockSummary {
    let info = found.into_info(name, None);
    LockSummary {
        name: info.name,
        kind: info.kind.unwrap_or(LockKind::NotALock),
        holders: info.holders,
        ttl: info.ttl,
        queue: info.queue,
        waiters: Vec::new(),
    }
}
