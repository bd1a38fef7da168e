//! [`Admin`]: read-only views over the locks in a Redis server, for operators (the
//! `lockwarden` command) rather than for services that take locks.
//!
//! A service asks about one lock it knows by name ([`Inspect`](crate::Inspect)).
//! An operator also needs to find the locks that exist ([`Admin::list`]) and to tell
//! their kinds apart, which needs the raw hash: a read-write lock is the same hash as
//! an exclusive one plus a `mode` field. These views need no lock manager (no client
//! id, no subscriber), so they live here with their own connection, made with a
//! single attempt so that an unreachable server is reported at once instead of after
//! a round of reconnect backoff. Finding locks uses SCAN with a type filter, never
//! KEYS, which would block the server for as long as it walks the whole keyspace.

use std::time::Duration;

use futures::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::Config;
use crate::error::LockError;
use crate::inspect::{Holder, QueuedWaiter};
use crate::keys;
use crate::scripts;

/// How many keys one SCAN call is asked to look at: large enough to walk a big
/// keyspace in few round trips, small enough that each call stays short.
const SCAN_COUNT: usize = 500;

/// The hash field of a read-write lock that holds its mode (`read` or `write`).
const MODE_FIELD: &str = "mode";

/// Checks a lock name with the rules and limits of `config`, before anything is sent
/// to Redis: the same check every message of the lock manager makes.
pub fn check_lock_name(config: &Config, name: &str) -> Result<(), LockError> {
    keys::validate_name(name, config.max_name_len).map_err(LockError::from)
}

/// The kind of a lock, as its Redis hash shows it (what [`Inspect`](crate::Inspect)
/// and the `lockwarden` command report). What an acquisition takes is an
/// [`AcquireKind`](crate::AcquireKind): a fair lock's hash looks exclusive, and both
/// sides of a read-write lock share one hash.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// A reentrant exclusive lock (also the key of a fair lock: its queue lives in
    /// other keys).
    Exclusive,
    /// A read-write lock, with its current mode (`read` or `write`).
    ReadWrite {
        /// The hash's `mode` field.
        mode: String,
    },
    /// A hash that does not look like a lock (an application's hash under the
    /// same name); [`Admin::list`] leaves these out.
    NotALock,
}

impl LockKind {
    /// A short name: `exclusive`, `read-write` or `not-a-lock`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::ReadWrite { .. } => "read-write",
            LockKind::NotALock => "not-a-lock",
        }
    }
}

/// One lock as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockSummary {
    /// The lock name (its key).
    pub name: String,
    /// Its kind.
    pub kind: LockKind,
    /// Its holders and their hold counts (never marked as this manager's: an
    /// [`Admin`] has no client id).
    pub holders: Vec<Holder>,
    /// Time until it expires; `None` when the key has no expiry.
    pub ttl: Option<Duration>,
    /// A fair lock's waiters, head first, with the time left on their places.
    pub queue: Vec<QueuedWaiter>,
}

/// Read-only access to the locks of one Redis server; see the module documentation.
#[derive(Clone, Debug)]
pub struct Admin {
    /// The command connection.
    conn: ConnectionManager,
    /// Longest accepted lock name, from the config.
    max_name_len: usize,
}

impl Admin {
    /// Connects to the server of `config`, with one attempt bounded by its
    /// connection timeout, and checks that it answers PING.
    pub async fn connect(config: &Config) -> Result<Admin, LockError> {
        config.validate()?;
        let cm_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connection_timeout))
            .set_number_of_retries(0);
        let mut conn = ConnectionManager::new_with_config(config.client.clone(), cm_config).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await?;
        Ok(Admin {
            conn,
            max_name_len: config.max_name_len,
        })
    }

    /// The lock `name` with its kind, holders and TTL; `None` when there is no such
    /// key, kind [`LockKind::NotALock`] for a hash that does not look like a lock.
    /// Fails for a key that is not a hash, and with [`LockError::InvalidName`] for
    /// a name no lock can have.
    pub async fn describe(&self, name: &str) -> Result<Option<LockSummary>, LockError> {
        keys::validate_name(name, self.max_name_len)?;
        let found = scripts::inspect(self.conn.clone(), name).await?;
        Ok(found.exists.then(|| summarize(name, found)))
    }

    /// The locks whose names match the glob `pattern` (`*` for all), sorted by
    /// name. Hashes that do not look like locks (an owner field and a hold
    /// count in every field but `mode`) are left out; a
    /// key that vanishes or changes type while the scan runs is skipped.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LockSummary>, LockError> {
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut locks = Vec::new();
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .arg("TYPE")
                .arg("hash")
                .query_async(&mut conn)
                .await?;
            // Lock names are text; a binary key is not one of ours.
            let names: Vec<String> = batch
                .into_iter()
                .filter_map(|k| String::from_utf8(k).ok())
                .collect();
            // The connection is multiplexed: these go out as one pipeline.
            let looks = join_all(names.iter().map(|n| scripts::inspect(conn.clone(), n))).await;
            for (name, look) in names.iter().zip(looks) {
                if let Some(found) = look.ok().filter(|f| f.exists) {
                    let lock = summarize(name, found);
                    if lock.kind != LockKind::NotALock {
                        locks.push(lock);
                    }
                }
            }
            // SCAN may return a key more than once; the cursor 0 ends the walk.
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        locks.sort_by(|a, b| a.name.cmp(&b.name));
        locks.dedup_by(|a, b| a.name == b.name);
        Ok(locks)
    }
}

/// A lock's summary from its raw hash.
fn summarize(name: &str, found: scripts::Inspected) -> LockSummary {
    let scripts::Inspected {
        ttl, fields, queue, ..
    } = found;
    let kind = classify(&fields).unwrap_or(LockKind::NotALock);
    // An application's hash has no holders, whatever numbers it keeps.
    let holders = fields
        .into_iter()
        .filter(|_| kind != LockKind::NotALock)
        .filter(|(field, _)| field != MODE_FIELD)
        .filter_map(|(owner_field, value)| {
            Some(Holder {
                holds: value.parse().ok()?,
                owner_field,
                this_manager: false,
            })
        })
        .collect();
    LockSummary {
        name: name.to_string(),
        kind,
        holders,
        ttl,
        queue,
    }
}

/// Tells a lock hash from any other hash. A lock hash has at least one holder; every
/// holder field is an owner field (`<client id>:<n>`, `:write` after it for a
/// writer: at least one `:`) whose value is a hold count of 1 or more; a `mode`
/// field of `read` or `write` makes it a read-write lock. Anything else (an
/// application's hash that happens to match the pattern) is not a lock.
pub(crate) fn classify(fields: &[(String, String)]) -> Option<LockKind> {
    let mut mode = None;
    let mut holders = 0;
    for (field, value) in fields {
        if field == MODE_FIELD {
            if value != "read" && value != "write" {
                return None;
            }
            mode = Some(value.clone());
        } else if field.contains(':') && value.parse::<u32>().is_ok_and(|n| n > 0) {
            holders += 1;
        } else {
            return None;
        }
    }
    if holders == 0 {
        return None;
    }
    Some(match mode {
        Some(mode) => LockKind::ReadWrite { mode },
        None => LockKind::Exclusive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(f, v)| (f.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn exclusive_and_read_write_hashes_are_told_apart() {
        let uuid = "4f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11";
        assert_eq!(
            classify(&fields(&[(&format!("{uuid}:1"), "2")])),
            Some(LockKind::Exclusive)
        );
        assert_eq!(
            classify(&fields(&[
                ("mode", "write"),
                (&format!("{uuid}:1:write"), "1")
            ])),
            Some(LockKind::ReadWrite {
                mode: "write".into()
            })
        );
    }

    #[test]
    fn other_hashes_are_not_locks() {
        assert_eq!(classify(&[]), None);
        assert_eq!(classify(&fields(&[("name", "alice")])), None);
        assert_eq!(classify(&fields(&[("visits", "3")])), None);
        assert_eq!(classify(&fields(&[("a:1", "0")])), None);
        assert_eq!(classify(&fields(&[("mode", "read")])), None);
        assert_eq!(classify(&fields(&[("mode", "x"), ("a:1", "1")])), None);
    }
}
