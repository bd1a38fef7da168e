//! [`Inspect`] and [`ForceUnlock`]: the manager's messages that look at or clear one
//! lock by name, whatever its kind, without going through a lock actor.
//!
//! Both run one script on the manager's command connection. Inspect reads the hash,
//! its TTL and the fair queue in one consistent look and reads it with the same
//! read model as the `lockwarden` command (`view`); ForceUnlock deletes the hash of
//! any kind and wakes whoever waits for it the way that kind's waiters listen (one
//! waiter, the fair queue's head, or every reader and writer).

use actix::prelude::*;
use tracing::info;

use super::manager::LockManager;
use crate::error::LockError;
use crate::view::LockInfo;
use crate::wire::{self, ForceRelease};

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
        let mut conn = self.shared().node.conn();
        Box::pin(async move {
            checked?;
            let deleted = wire::call(&mut conn, &ForceRelease { name: &msg.name }).await?;
            info!(lock = %msg.name, deleted, "force unlock");
            Ok(deleted)
        })
    }
}

/// Read a lock's kind, who holds it (with each holder's host, pid and label when
/// its manager is registered, [`Holder::client`](crate::Holder::client)), their
/// hold counts, its remaining TTL and its fair queue.
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
        let mut conn = self.shared().node.conn();
        let ours = format!("{}:", self.shared().client_id);
        Box::pin(async move {
            checked?;
            // The lock, then who its holders are (their managers' registry entries).
            let info = wire::inspect_lock(&mut conn, &msg.name, Some(&ours)).await?;
            Ok(info)
        })
    }
}
