//! The read model of a lock: what its Redis hash and fair queue say, in the terms a
//! service ([`Inspect`](crate::Inspect)) and an operator ([`Admin`](crate::Admin))
//! both use.
//!
//! A lock hash holds owner fields and hold counts, plus a `mode` field when it is a
//! read-write lock; a fair lock's waiters live in two other keys. This file turns
//! those raw fields into holders and a kind, once, for both readers: they differ
//! only in whether they can tell which holders are their own.

use std::collections::HashMap;
use std::time::Duration;

use crate::client::{client_id_of, ClientInfo};

/// The hash field of a read-write lock that holds its mode (`read` or `write`).
const MODE_FIELD: &str = "mode";
/// The lock-delay mark of a lock taken with `Config::lock_delay` (`lua/acquire.lua`):
/// when its lease ends and how long the lock stays taken after that. Not a holder.
const DELAY_FIELD: &str = "lockwarden:delay";

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
    /// same name); [`Admin::list`](crate::Admin::list) leaves these out.
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

    /// A read-write lock's mode (`read` or `write`); `None` for other kinds.
    pub fn mode(&self) -> Option<&str> {
        match self {
            LockKind::ReadWrite { mode } => Some(mode),
            LockKind::Exclusive | LockKind::NotALock => None,
        }
    }
}

/// One holder of a lock, as [`Inspect`](crate::Inspect) saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner field: `<client id>:<owner>` (Redisson: `<client id>:<thread id>`),
    /// with `:write` after it for the writer of a read-write lock.
    pub owner_field: String,
    /// Its hold count.
    pub holds: u32,
    /// Whether the holder is an owner of the manager that inspected (always
    /// `false` from an [`Admin`](crate::Admin), which has no client id).
    pub this_manager: bool,
    /// Who the holder's client id is (host, pid, label...), from the registry
    /// entry its lock manager keeps in Redis; `None` when there is no valid entry:
    /// a Redisson client, a manager that is gone, or an entry something else wrote
    /// (shown as [`UNKNOWN_CLIENT`](crate::UNKNOWN_CLIENT)).
    pub client: Option<ClientInfo>,
}

impl Holder {
    /// Whether this is the write side of a read-write lock (its owner field ends
    /// with `:write`); the other holders of a read-write lock are readers.
    pub fn is_writer(&self) -> bool {
        self.owner_field.ends_with(":write")
    }

    /// The client id part of its owner field, when it is one lockwarden or
    /// Redisson makes (a UUID).
    pub fn client_id(&self) -> Option<&str> {
        client_id_of(&self.owner_field)
    }

    /// Who holds it, for people: [`ClientInfo::describe`] or
    /// [`UNKNOWN_CLIENT`](crate::UNKNOWN_CLIENT).
    pub fn who(&self) -> String {
        ClientInfo::describe_or_unknown(self.client.as_ref())
    }

    /// The holder in one phrase, as the library's timeout and the `lockwarden`
    /// command name it: `<owner field> on host web-3 pid 4211 label "billing"
    /// (billing-svc, lockwarden 0.1.0), 2 holds` (no "on ..." part when its
    /// manager has no registry entry).
    pub fn describe(&self) -> String {
        let on = match &self.client {
            Some(c) => format!(" on {}", c.describe()),
            None => String::new(),
        };
        let plural = if self.holds == 1 { "" } else { "s" };
        format!(
            "{}{on}, {} hold{plural}",
            crate::client::escape(&self.owner_field),
            self.holds
        )
    }
}

/// Fills in [`Holder::client`] of `holders` from the registry entries `found`
/// (by client id).
pub(crate) fn attach_clients<'a>(
    holders: impl IntoIterator<Item = &'a mut Holder>,
    found: &HashMap<String, ClientInfo>,
) {
    for h in holders {
        h.client = h.client_id().and_then(|id| found.get(id)).cloned();
    }
}

/// One waiter in a fair lock's queue, as [`Inspect`](crate::Inspect) saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiter's owner field.
    pub owner_field: String,
    /// Time left before its place lapses unless the waiter refreshes it (live
    /// waiters do, every third of `Config::fair_waiter_lease`), by the Redis
    /// server's clock; zero once lapsed, `None` when it has no deadline.
    pub expires_in: Option<Duration>,
}

/// A lock's state, as [`Inspect`](crate::Inspect) saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// What the lock's hash shows it to be: exclusive (also the hash of a fair
    /// lock), read-write with its mode, or a hash that is not a lock; `None` when
    /// there is no such key.
    pub kind: Option<LockKind>,
    /// Who holds it, with hold counts (a read-write lock's readers and writer);
    /// empty when it is free or not a lock.
    pub holders: Vec<Holder>,
    /// Time until it expires; `None` when it is free or has no expiry.
    pub ttl: Option<Duration>,
    /// A fair lock's waiters in the order they will be served (some may be
    /// waiters that died and whose place has not lapsed yet); empty otherwise.
    pub queue: Vec<QueuedWaiter>,
}

impl LockInfo {
    /// Whether anyone holds the lock.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// A read-write lock's mode (`read` or `write`); `None` for other kinds.
    pub fn mode(&self) -> Option<&str> {
        self.kind.as_ref().and_then(LockKind::mode)
    }

    /// The writer of a read-write lock, if one holds it.
    pub fn writer(&self) -> Option<&Holder> {
        self.holders.iter().find(|h| h.is_writer())
    }
}

/// What one look at a lock's keys found (the answer of `lua/inspect.lua`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Inspected {
    /// Whether the lock key exists.
    pub(crate) exists: bool,
    /// Its remaining TTL; `None` when it has none (or does not exist).
    pub(crate) ttl: Option<Duration>,
    /// The hash's fields and values.
    pub(crate) fields: Vec<(String, String)>,
    /// The fair queue, head first.
    pub(crate) queue: Vec<QueuedWaiter>,
}

impl Inspected {
    /// The lock `name` as this look saw it. `ours` is the owner-field prefix of the
    /// manager that looked (`<client id>:`), or `None` for a reader with no client
    /// id; holders starting with it are marked [`Holder::this_manager`].
    pub(crate) fn into_info(self, name: &str, ours: Option<&str>) -> LockInfo {
        let kind = self
            .exists
            .then(|| classify(&self.fields).unwrap_or(LockKind::NotALock));
        // An application's hash has no holders, whatever numbers it keeps.
        let is_lock = !matches!(kind, None | Some(LockKind::NotALock));
        let holders = self
            .fields
            .into_iter()
            .filter(|_| is_lock)
            .filter(|(field, _)| field != MODE_FIELD && field != DELAY_FIELD)
            .filter_map(|(owner_field, value)| {
                Some(Holder {
                    holds: value.parse().ok()?,
                    this_manager: ours.is_some_and(|p| owner_field.starts_with(p)),
                    client: None,
                    owner_field,
                })
            })
            .collect();
        LockInfo {
            name: name.to_string(),
            kind,
            holders,
            ttl: self.ttl,
            queue: self.queue,
        }
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
        } else if field == DELAY_FIELD {
            // The lock-delay mark: not a holder, and no sign of a lock by itself.
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
        assert_eq!(
            classify(&fields(&[
                ("a:1", "1"),
                ("lockwarden:delay", "1700000000000,15000")
            ])),
            Some(LockKind::Exclusive),
            "a lock with its lock-delay mark"
        );
        assert_eq!(
            classify(&fields(&[("lockwarden:delay", "1700000000000,15000")])),
            None
        );
        assert_eq!(classify(&fields(&[("mode", "x"), ("a:1", "1")])), None);
    }

    #[test]
    fn holders_are_marked_by_the_owner_prefix_and_a_foreign_hash_has_none() {
        let look = Inspected {
            exists: true,
            ttl: None,
            fields: fields(&[("mode", "read"), ("me:1", "2"), ("you:3", "1")]),
            queue: Vec::new(),
        };
        let info = look.into_info("rw", Some("me:"));
        assert_eq!(info.holders.len(), 2);
        assert!(info.holders.iter().any(|h| h.this_manager && h.holds == 2));
        let foreign = Inspected {
            exists: true,
            fields: fields(&[("visits", "3")]),
            ..Inspected::default()
        };
        let info = foreign.into_info("h", None);
        assert_eq!(info.kind, Some(LockKind::NotALock));
        assert!(info.holders.is_empty());
    }
}
