//! [`Leader`]: leader election on top of the exclusive lock, as an actor that tells
//! an actor of the application when it is [`Elected`] and when it is [`Deposed`].
//!
//! Leadership *is* holding the lock `name` in watchdog mode: a candidate queues for
//! it like any waiter (woken by the unlock message), and when it is granted the
//! recipient gets `Elected { fencing_token }`. It stays leader while the lock is
//! held and stops exactly when the lock is lost: the lock actor's `LockLost`
//! (renewal found the owner field gone after a force unlock or an expiry,
//! renewal could not reach Redis before the lease ran out) becomes
//! `Deposed { reason: Lost(..) }`, and the candidate campaigns again. If the
//! candidate's actor dies with its system (its process or its manager's arbiter
//! stopping), `Deposed { reason: Lost(ManagerStopped) }` is sent as it is dropped:
//! nothing renews its lock any more, and another candidate is elected once the
//! lease runs out, so the old leader has always been told first. [`Resign`] gives
//! the lock back (waking the next candidate at once) and ends the campaign. The
//! manager's `Shutdown` gives the lock back too: its `LockLost` says `ShutDown`,
//! which becomes `Deposed { reason: Lost(ShutDown) }` and ends the campaign, as
//! does a follower's acquisition refused with `ShuttingDown`.
//!
//! Observers ask [`WhoLeads`]: the holder's owner field and the last fencing token
//! issued for the name, read from Redis.

use std::time::Duration;

use actix::prelude::*;
use tracing::{info, warn};

use super::acquire::Acquire;
use super::manager::LockManager;
use crate::error::{LockError, LostReason};
use crate::guard::{LockGuard, LockLost};
use crate::keys::{self, Owner};

/// Sent to a candidate's recipient when it becomes leader.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
#[non_exhaustive]
pub struct Elected {
    /// The election's name (the lock's).
    pub name: String,
    /// The fencing token of this term: larger than every earlier leader's. Pass it
    /// to whatever the leader writes to, so that a deposed leader's late writes
    /// can be refused.
    pub fencing_token: u64,
}

/// Why a leader stopped being one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeposedReason {
    /// It resigned ([`Resign`]).
    Resigned,
    /// Its lock was lost; the reason says how (`ManagerStopped` when its actor
    /// died with its system).
    Lost(LostReason),
}

/// Sent to a candidate's recipient when it stops being leader.
///
/// It arrives before any other candidate can be elected in its place when the
/// term ends in the leader's own process: a [`Resign`], a
/// [`Shutdown`](crate::Shutdown) (told before the lock is given back), or
/// renewals that cannot reach Redis (the lease is counted from the send of the
/// last renewal, on this process's clock, so it runs out here before it does in
/// Redis). Not when the lock ends without the leader's process acting: a force
/// unlock, Redis losing its data (a restart without persistence, a failover to a
/// replica that had not received the lock), or the process not running past its
/// lease (`Lost(Paused)`). The leader then learns at its next renewal (up to a
/// third of the lease later) or when it runs again, while a waiting candidate
/// may be elected at once: after a Redis restart that lost the data, an old
/// leader can hear it after the new leader is elected (225 ms after, in one
/// measurement), two leaders at once for that long. Fence what a leader writes
/// with its token ([`FencedWrite`](crate::FencedWrite)) where that overlap
/// matters.
#[derive(Message, Clone, Debug, PartialEq, Eq)]
#[rtype(result = "()")]
#[non_exhaustive]
pub struct Deposed {
    /// The election's name.
    pub name: String,
    /// The fencing token of the term that ended.
    pub fencing_token: u64,
    /// Why.
    pub reason: DeposedReason,
}

/// Stop campaigning; a leader gives its lock back first. Answers once done.
#[derive(Message, Clone, Copy, Debug, Default)]
#[rtype(result = "Result<(), LockError>")]
pub struct Resign;

/// A candidate in an election: leader election on the exclusive lock of the
/// election's name, as an actor that tells an actor of yours when it is
/// [`Elected`] and when it is [`Deposed`].
///
/// Leadership *is* holding that lock, renewed by the watchdog: a candidate
/// queues for it like any waiter (woken by the holder's unlock message), and
/// when it is granted your actor gets `Elected { fencing_token }` (pass the
/// token to whatever the leader writes to, so a deposed leader's late writes can
/// be refused: [`FencedWrite`](crate::FencedWrite)). It stays leader while the
/// lock is held and stops when it is lost: your actor gets
/// `Deposed { reason: Lost(..) }` (a force unlock, Redis losing its data, or
/// renewals that could not reach Redis before the lease ran out) and the
/// candidate queues again. [`Resign`] gives the lock back (the next candidate
/// anywhere is elected at once) and ends the campaign, as does the manager's
/// [`Shutdown`](crate::Shutdown) (`Lost(ShutDown)`). If its actix system stops
/// without either (the process exits), `Deposed { reason:
/// Lost(ManagerStopped) }` is sent as the candidate is dropped; nothing renews
/// the lock any more, and another candidate is elected once its lease (30 s by
/// default) runs out. [`WhoLeads`] asks Redis who leads now.
///
/// ```no_run
/// # use actix::prelude::*;
/// # struct App;
/// # impl Actor for App { type Context = Context<Self>; }
/// # impl Handler<lockwarden::Elected> for App { type Result = (); fn handle(&mut self, _: lockwarden::Elected, _: &mut Context<Self>) {} }
/// # impl Handler<lockwarden::Deposed> for App { type Result = (); fn handle(&mut self, _: lockwarden::Deposed, _: &mut Context<Self>) {} }
/// # async fn demo(manager: Addr<lockwarden::LockManager>, app: Addr<App>) -> Result<(), lockwarden::LockError> {
/// let candidate = lockwarden::Leader::campaign(
///     manager, "scheduler", app.clone().recipient(), app.recipient(),
/// ).await?;
/// // ... later, to step down:
/// candidate.send(lockwarden::Resign).await??;
/// # Ok(()) }
/// ```
pub struct Leader {
    /// The manager whose lock it campaigns for.
    manager: Addr<LockManager>,
    /// The election's name.
    name: String,
    /// Told when elected.
    elected: Recipient<Elected>,
    /// Told when deposed.
    deposed: Recipient<Deposed>,
    /// The owner the lock is held as.
    owner: Owner,
    /// The lock, while leader.
    guard: Option<LockGuard>,
    /// Failed campaigns in a row, for the pause between them.
    failures: u32,
    /// The acquisition under way, or the pause before the next one.
    pending: Option<SpawnHandle>,
    /// It resigned: no new campaign.
    resigned: bool,
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leader")
            .field("name", &self.name)
            .field("leading", &self.guard.is_some())
            .finish_non_exhaustive()
    }
}

impl Leader {
    /// Starts a candidate for `name` on the current actix system, after checking
    /// the name (a bad one is refused before anything reaches Redis). Keep the
    /// address: the candidate runs until it gets [`Resign`] or its system stops.
    pub async fn campaign(
        manager: Addr<LockManager>,
        name: impl Into<String>,
        elected: Recipient<Elected>,
        deposed: Recipient<Deposed>,
    ) -> Result<Addr<Leader>, LockError> {
        let name = name.into();
        manager.send(super::handle::Handle::new(&name)).await??;
        Ok(Leader {
            manager,
            name,
            elected,
            deposed,
            owner: Owner::new(),
            guard: None,
            failures: 0,
            pending: None,
            resigned: false,
        }
        .start())
    }

    /// Queues for the lock, for as long as it takes.
    fn run_for_office(&mut self, ctx: &mut Context<Self>) {
        if self.resigned {
            return;
        }
        let request = Acquire::new(&self.name)
            .candidate()
            .owner(self.owner)
            .on_lost(ctx.address().recipient());
        let sent = self.manager.send(request);
        let handle = ctx.spawn(sent.into_actor(self).map(|res, act, ctx| match res {
            Ok(Ok(guard)) if act.resigned => drop(guard),
            Ok(Ok(guard)) => {
                act.failures = 0;
                let fencing_token = guard.fencing_token();
                act.guard = Some(guard);
                info!(election = %act.name, "elected leader");
                act.elected.do_send(Elected {
                    name: act.name.clone(),
                    fencing_token,
                });
            }
            Ok(Err(LockError::ShuttingDown)) => {
                info!(election = %act.name, "the lock manager is shutting down; the campaign ends");
                act.resigned = true;
                ctx.stop();
            }
            Ok(Err(e)) => {
                let pause = crate::durations::backoff(
                    Duration::from_millis(50),
                    Duration::from_secs(5),
                    act.failures,
                );
                act.failures = act.failures.saturating_add(1);
                warn!(election = %act.name, error = %e, retry_in = ?pause, "campaign failed; trying again");
                act.pending = Some(ctx.run_later(pause, |act, ctx| act.run_for_office(ctx)));
            }
            Err(_) => {
                warn!(election = %act.name, "the lock manager stopped; the campaign ends");
                ctx.stop();
            }
        }));
        self.pending = Some(handle);
    }

    /// Tells the recipient this term ended, once.
    fn step_down(&mut self, reason: DeposedReason) {
        if let Some(guard) = self.guard.take() {
            self.deposed.do_send(Deposed {
                name: self.name.clone(),
                fencing_token: guard.fencing_token(),
                reason,
            });
            // A lost guard's drop is a no-op release; a resigning leader released
            // it already.
            drop(guard);
        }
    }
}

impl Actor for Leader {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.run_for_office(ctx);
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Dropped while leading: its system stopped (or the actor was torn down
        // with it), so nothing renews the lock any more.
        self.step_down(DeposedReason::Lost(LostReason::ManagerStopped));
    }
}

impl Handler<LockLost> for Leader {
    type Result = ();

    fn handle(&mut self, msg: LockLost, ctx: &mut Context<Self>) {
        let ours = self
            .guard
            .as_ref()
            .is_some_and(|g| g.owner_field() == msg.owner_field);
        if !ours {
            return;
        }
        if msg.reason == LostReason::ShutDown {
            // The manager shuts down and gives the lock back: step down, and end
            // the campaign (the manager would refuse it anyway).
            info!(election = %self.name, "the lock manager is shutting down; stepping down");
            self.resigned = true;
            self.step_down(DeposedReason::Lost(msg.reason));
            ctx.stop();
            return;
        }
        warn!(election = %self.name, reason = %msg.reason, "leadership lost");
        self.step_down(DeposedReason::Lost(msg.reason));
        self.run_for_office(ctx);
    }
}

impl Handler<Resign> for Leader {
    type Result = ResponseActFuture<Self, Result<(), LockError>>;

    fn handle(&mut self, _msg: Resign, ctx: &mut Context<Self>) -> Self::Result {
        // Stop queueing: the pending acquisition is dropped with the actor's
        // futures (a grant that races it is given back by the lock actor).
        self.resigned = true;
        if let Some(pending) = self.pending.take() {
            ctx.cancel_future(pending);
        }
        let guard = self.guard.take();
        let name = self.name.clone();
        let deposed = self.deposed.clone();
        let fut = async move {
            let Some(guard) = guard else { return Ok(()) };
            // Told before the lock is given back: once it is, another candidate
            // may be elected within milliseconds, and the old leader must have
            // heard first (it was seen hearing after the new one was elected).
            deposed.do_send(Deposed {
                name,
                fencing_token: guard.fencing_token(),
                reason: DeposedReason::Resigned,
            });
            guard.release().await.map(|_| ())
        };
        Box::pin(fut.into_actor(self).map(|res, _act, ctx| {
            ctx.stop();
            res
        }))
    }
}

/// Who leads the election `name` now, as Redis says.
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<Option<Leadership>, LockError>")]
pub struct WhoLeads {
    /// The election's name.
    name: String,
}

impl WhoLeads {
    /// Ask about the election `name`.
    pub fn new(name: impl Into<String>) -> WhoLeads {
        WhoLeads { name: name.into() }
    }
}

/// The current leader of an election, as [`WhoLeads`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leadership {
    /// The leader's owner field (`<client id>:<owner number>`).
    pub owner_field: String,
    /// Whether the leader is a candidate of the manager that was asked.
    pub this_manager: bool,
    /// The last fencing token issued for the name: the leader's, unless it
    /// re-entered the lock outside the election.
    pub fencing_token: u64,
}

impl Handler<WhoLeads> for LockManager {
    type Result = ResponseFuture<Result<Option<Leadership>, LockError>>;

    fn handle(&mut self, msg: WhoLeads, ctx: &mut Context<Self>) -> Self::Result {
        let checked = self.check_name(&msg.name);
        let inspect = ctx.address().send(super::inspect::Inspect::new(&msg.name));
        let mut conn = self.shared().node.conn();
        Box::pin(async move {
            checked?;
            let info = inspect.await??;
            let Some(holder) = info.holders.into_iter().next() else {
                return Ok(None);
            };
            let token: Option<u64> = redis::cmd("GET")
                .arg(keys::token(&msg.name))
                .query_async(&mut conn)
                .await?;
            Ok(Some(Leadership {
                owner_field: holder.owner_field,
                this_manager: holder.this_manager,
                fencing_token: token.unwrap_or(0),
            }))
        })
    }
}
