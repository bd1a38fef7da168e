//! [`Inspect`] and [`ForceUnlock`]: the manager's messages that look at or clear one
//! lock by name, whatever its kind, without going through a lock actor.
//!
//! Both run one script on the manager's shared connection. Inspect reads the hash,
//! its TTL and the fair queue in one consistent look and names the kind with the
//! same classifier as the `lockwarden` command ([`LockKind`]); ForceUnlock deletes
//! the hash of any kind and wakes whoever waits for it the way that kind's waiters
//! listen (one waiter, the fair queue's head, or every reader and writer).

use std::time::Duration;

use actix::prelude::*;
use tracing::info;

use crate::admin::{self, LockKind};
use crate::error::LockError;
use crate::manager::LockManager;
use crate::scripts;

/// Delete a lock whoever holds it, whatever its kind, waking its waiters (one of an
/// exclusive lock, the head of a fair lock's queue, all of a read-write lock's).
/// Answers whether there was one.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<bool, LockError>")]
pub struct ForceUnlock {
    /// The lock name.
    name: String,
}

impl ForceUnlock {
    /// Force-unlock the lock `name`.
    pub fn new(name: impl Into<String>) -> ForceUnlock {
        ForceUnlock { name: name.into() }
    }
}

impl Handler<ForceUnlock> for LockManager {
    type Result = ResponseFuture<Result<bool, LockError>>;

    fn handle(&mut self, msg: ForceUnlock, _ctx: &mut Context<Self>) -> Self::Result {
        let checked = self.check_name(&msg.name);
        let conn = self.shared.conn.clone();
        Box::pin(async move {
            checked?;
            let deleted = scripts::force_release(conn, &msg.name).await?;
            info!(lock = %msg.name, deleted, "force unlock");
            Ok(deleted)
        })
    }
}

/// One holder of a lock, as [`Inspect`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner field: `<client id>:<owner>` (Redisson: `<client id>:<thread id>`),
    /// with `:write` after it for the writer of a read-write lock.
    pub owner_field: String,
    /// Its hold count.
    pub holds: u32,
    /// Whether the holder is an owner of the manager that inspected.
    pub this_manager: bool,
}

impl Holder {
    /// Whether this is the write side of a read-write lock (its owner field ends
    /// with `:write`); the other holders of a read-write lock are readers.
    pub fn is_writer(&self) -> bool {
        self.owner_field.ends_with(":write")
    }
}

/// A lock's state, as [`Inspect`] saw it.
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
    /// empty when it is free.
    pub holders: Vec<Holder>,
    /// Time until it expires; `None` when it is free or has no expiry.
    pub ttl: Option<Duration>,
    /// A fair lock's waiters in the order they will be served (some may be
    /// waiters that died and whose place has not lapsed yet); empty otherwise.
    pub queue: Vec<QueuedWaiter>,
}

/// One waiter in a fair lock's queue, as [`Inspect`] saw it.
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

impl LockInfo {
    /// Whether anyone holds the lock.
    pub fn is_held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// A read-write lock's mode (`read` or `write`); `None` for other kinds.
    pub fn mode(&self) -> Option<&str> {
        match &self.kind {
            Some(LockKind::ReadWrite { mode }) => Some(mode),
            _ => None,
        }
    }

    /// The writer of a read-write lock, if one holds it.
    pub fn writer(&self) -> Option<&Holder> {
        self.holders.iter().find(|h| h.is_writer())
    }
}

/// Read a lock's kind, who holds it, their hold counts, its remaining TTL and its
/// fair queue.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<LockInfo, LockError>")]
pub struct Inspect {
    /// The lock name.
    name: String,
}

impl Inspect {
    /// Inspect the lock `name`.
    pub fn new(name: impl Into<String>) -> Inspect {
        Inspect { name: name.into() }
    }
}

impl Handler<Inspect> for LockManager {
    type Result = ResponseFuture<Result<LockInfo, LockError>>;

    fn handle(&mut self, msg: Inspect, _ctx: &mut Context<Self>) -> Self::Result {
        let checked = self.check_name(&msg.name);
        let conn = self.shared.conn.clone();
        let ours = format!("{}:", self.shared.client_id);
        Box::pin(async move {
            checked?;
            let found = scripts::inspect(conn, &msg.name).await?;
            let kind = found
                .exists
                .then(|| admin::classify(&found.fields).unwrap_or(LockKind::NotALock));
            let holders = found
                .fields
                .into_iter()
                .filter_map(|(field, value)| {
                    // Fields whose value is not a count (a read-write lock's `mode`)
                    // are not holders.
                    let holds = value.parse().ok()?;
                    Some(Holder {
                        this_manager: field.starts_with(&ours),
                        owner_field: field,
                        holds,
                    })
                })
                .collect();
            Ok(LockInfo {
                name: msg.name,
                kind,
                holders,
                ttl: found.ttl,
                queue: found.queue,
            })
        })
    }
}
