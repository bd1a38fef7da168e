//! [`Settle`]: waits until nothing a manager sent to Redis is left unsettled, for a
//! process on its way out.
//!
//! A waiter whose wait runs out while its attempt is still on the wire (a round
//! trip slower than the wait, a grant that waits for replicas) is answered at its
//! deadline, and the attempt is settled afterwards: a grant that lands for a
//! waiter that left is given back, a grant too few replicas confirmed is undone, a
//! lost reply is checked. That needs the process to still run. A command that
//! exits right after a timeout took those settlements with it, and Redis kept the
//! lock for a whole lease (a proxy adding 300-800 ms each way leaked it in 9 of 9
//! tries). `Settle` is what such a process sends before it exits: it answers once
//! every lock actor of the manager is quiet, no semaphore give-back, latch
//! count-down or undo of a waiter's take is left unanswered and no release that no replica
//! confirmed is still kept to be redone after a failover, or at its bound.

use std::time::{Duration, Instant};

use actix::prelude::*;

use super::manager::LockManager;
use crate::actors::lock::IsQuiet;
use crate::wire::ScriptConn;

/// How often the lock actors are asked again while something is in flight.
const POLL: Duration = Duration::from_millis(10);

/// Waits until no lock change of the manager is in flight (attempts, checks of
/// lost replies, releases), at most `within`. Answers whether everything settled.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "bool")]
pub struct Settle {
    within: Duration,
}

impl Settle {
    /// Waits at most `within`; a settlement still running then is given up (the
    /// lock it concerns frees within its lease).
    pub fn within(within: Duration) -> Settle {
        Settle { within }
    }
}

impl Handler<Settle> for LockManager {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: Settle, _ctx: &mut Context<Self>) -> Self::Result {
        let actors: Vec<_> = self.lock_actors().collect();
        let unsettled = self.shared().unsettled.clone();
        // This manager's connection's kept releases (every master's on a
        // cluster), not another manager's of the same process.
        let kept = self.shared().node.conn().confirmation(None);
        let kept_pending = move || kept.as_ref().map_or(0, |c| c.kept_pending());
        let deadline = Instant::now() + msg.within;
        Box::pin(async move {
            for actor in actors {
                loop {
                    match actor.send(IsQuiet).await {
                        Ok(true) | Err(_) => break,
                        Ok(false) if Instant::now() + POLL > deadline => return false,
                        Ok(false) => tokio::time::sleep(POLL).await,
                    }
                }
            }
            // Permits given back and takes undone: each is on the wire from
            // its first try, and answered or given up within its op id's
            // window (`actors/waiting/once.rs`).
            // And releases no replica confirmed, kept to be redone after a
            // failover (`wire/replicas/kept.rs`): they end with the process.
            while !unsettled.is_empty() || kept_pending() > 0 {
                if Instant::now() + POLL > deadline {
                    return false;
                }
                tokio::time::sleep(POLL).await;
            }
            true
        })
    }
}
