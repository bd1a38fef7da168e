//! The [`LockActor`]: one per lock name, owning that lock's waiters, timers and the
//! local view of who holds it.
//!
//! Everything that happens to one lock in this process is serialised through its
//! actor, which is what keeps the rules simple: at most one acquisition attempt is in
//! flight per lock (local waiters never stampede Redis), a waiter behind a local
//! holder of another owner does not ask Redis at all (the local release hands over),
//! and the watchdog, the fallback retry and the waiters' deadlines are timers the
//! actor keeps and cancels. The Redis side is only ever changed by the scripts in
//! [`crate::scripts`]; this file decides when to run them and what their answers
//! mean for the waiters and holders.

mod acquire;
mod holding;
#[cfg(test)]
mod tests;
mod waiters;

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakAddr;
use tracing::{debug, error};

use crate::error::{LockError, LostReason};
use crate::guard::ReleaseOutcome;
use crate::keys::{self};
use crate::manager::{Idle, LockManager, Shared};
use crate::subscriber::{Resync, Unlocked, Unsubscribe};

use holding::{Holding, LostHoldings};
pub(crate) use waiters::Waiter;
use waiters::WaiterQueue;

/// Queue a waiter (sent by the manager only, which counts them for the idle handshake).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Enqueue(pub(crate) Waiter);

/// The caller of this waiter went away: forget it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Cancel {
    pub(crate) waiter: u64,
}

/// Give back one hold (sent by a guard).
#[derive(Message, Debug)]
#[rtype(result = "Result<ReleaseOutcome, LockError>")]
pub(crate) struct Release {
    /// The holding the guard belongs to.
    pub(crate) epoch: u64,
}

/// State of this lock's channel subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// Not subscribed.
    Off,
    /// Asked the subscriber; no answer yet.
    Pending,
    /// Routed (and subscribed, or to be subscribed on reconnect).
    On,
}

/// The actor of one lock name; see the module documentation.
pub(crate) struct LockActor {
    /// The lock name (also the lock key).
    name: Arc<str>,
    /// This lock's unlock channel.
    channel: String,
    /// Connection, config, client id, subscriber and counters of the manager.
    shared: Arc<Shared>,
    /// The manager, weakly: a lock actor must not keep its manager alive.
    manager: WeakAddr<LockManager>,
    /// Local waiters, head first.
    queue: WaiterQueue,
    /// The local owner holding the lock, if any.
    holding: Option<Holding>,
    /// Lost holdings whose guards are still alive.
    lost: LostHoldings,
    /// Next holding epoch.
    next_epoch: u64,
    /// The waiter whose acquisition attempt is in flight.
    attempt: Option<u64>,
    /// An unlock (or resync) arrived while an attempt was in flight: if that attempt
    /// finds the lock busy, try again at once rather than sleep.
    woken: bool,
    /// Unlock messages this actor published itself and will hear back; they carry
    /// no news (the local release already handed over), so they are skipped.
    own_unlocks: u32,
    /// Channel subscription state.
    sub: Sub,
    /// Fallback retry / deadline timer.
    wake_timer: Option<SpawnHandle>,
    /// Watchdog interval while a watchdog holding exists.
    renew_timer: Option<SpawnHandle>,
    /// A renewal is in flight.
    renewing: bool,
    /// Fires when the holding's `valid_until` passes without a successful renewal.
    expiry_timer: Option<SpawnHandle>,
    /// Release scripts in flight.
    releases: u32,
    /// Stops the actor after a quiet period.
    idle_timer: Option<SpawnHandle>,
    /// Enqueue messages received, echoed to the manager in the idle handshake.
    received: u64,
    /// An attempt whose reply was lost, to be checked before the next one.
    unresolved: Option<acquire::Unresolved>,
    /// That check is in flight.
    resolving: bool,
    /// Set before stopping on purpose so the Supervisor restarts this actor with
    /// its state: `stopped` must then keep waiters and holding.
    restart_requested: bool,
    /// Set by `restarting`: `started` re-reads the holding from Redis.
    restarted: bool,
    /// The Redis error the last attempt met, if it failed: waiters whose deadline
    /// passes get it instead of a bare "timed out".
    last_error: Option<redis::RedisError>,
    /// Consecutive Redis errors of acquisition attempts, for the backoff.
    failures: u32,
}

impl LockActor {
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>, manager: WeakAddr<LockManager>) -> Self {
        LockActor {
            channel: keys::channel(&name),
            name,
            shared,
            manager,
            queue: WaiterQueue::default(),
            holding: None,
            lost: LostHoldings::default(),
            next_epoch: 1,
            attempt: None,
            woken: false,
            own_unlocks: 0,
            sub: Sub::Off,
            wake_timer: None,
            renew_timer: None,
            renewing: false,
            expiry_timer: None,
            releases: 0,
            idle_timer: None,
            received: 0,
            unresolved: None,
            resolving: false,
            restart_requested: false,
            restarted: false,
            last_error: None,
            failures: 0,
        }
    }

    /// Brings timers and the subscription in line with what is left to do: keeps a
    /// deadline timer while waiters wait, unsubscribes when none do, and starts the
    /// idle countdown when nothing at all is going on.
    fn settle(&mut self, ctx: &mut Context<Self>) {
        if self.queue.is_empty() {
            if let Some(t) = self.wake_timer.take() {
                ctx.cancel_future(t);
            }
            if self.sub == Sub::On {
                self.shared.subscriber.do_send(Unsubscribe {
                    channel: self.channel.clone(),
                });
                self.sub = Sub::Off;
                self.own_unlocks = 0;
            }
        } else if self.wake_timer.is_none() {
            self.schedule(None, ctx);
        }
        let idle = self.queue.is_empty()
            && self.holding.is_none()
            && self.lost.is_empty()
            && self.attempt.is_none()
            && self.unresolved.is_none()
            && self.releases == 0
            && self.sub == Sub::Off;
        match (idle, self.idle_timer.is_some()) {
            (true, false) => {
                let after = self.shared.config.idle_timeout;
                self.idle_timer = Some(ctx.run_later(after, |act, ctx| {
                    act.idle_timer = None;
                    act.on_idle(ctx);
                }));
            }
            (false, true) => {
                if let Some(t) = self.idle_timer.take() {
                    ctx.cancel_future(t);
                }
            }
            _ => {}
        }
    }

    /// Redis answered in a shape the protocol does not allow, so local state can no
    /// longer be trusted: stop, and let the Supervisor restart this actor. Waiters
    /// and the holding are kept; the holding is then re-read from Redis.
    pub(super) fn restart(&mut self, why: &dyn std::fmt::Display, ctx: &mut Context<Self>) {
        error!(lock = %self.name, %why, "lock actor cannot continue; restarting it");
        self.restart_requested = true;
        ctx.stop();
    }

    /// After a restart: asks Redis whether the holding still stands, then restarts
    /// its timers (or reports it lost) and lets waiters try.
    fn verify_after_restart(&mut self, ctx: &mut Context<Self>) {
        let Some(h) = &self.holding else {
            self.pump(ctx);
            return;
        };
        let (epoch, field) = (h.epoch, h.field.clone());
        let mut conn = self.shared.conn.clone();
        let name = self.name.clone();
        let fut = async move {
            redis::cmd("HGET")
                .arg(&*name)
                .arg(&*field)
                .query_async::<Option<u32>>(&mut conn)
                .await
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            if act.holding.as_ref().is_none_or(|h| h.epoch != epoch) {
                return act.pump(ctx);
            }
            match res {
                Ok(Some(holds)) if holds > 0 => act.resume_holding(ctx),
                Ok(_) => act.lose(LostReason::OwnerGone, ctx),
                // Cannot tell now: the watchdog and the expiry timer will.
                Err(_) => act.resume_holding(ctx),
            }
            act.pump(ctx);
        }));
    }

    /// Idle for a while: ask the manager to retire this actor. The manager agrees
    /// only if it has sent nothing this actor has not seen, so no request is lost.
    fn on_idle(&mut self, ctx: &mut Context<Self>) {
        let Some(manager) = self.manager.upgrade() else {
            ctx.stop();
            return;
        };
        let msg = Idle {
            name: self.name.clone(),
            addr: ctx.address(),
            received: self.received,
        };
        ctx.spawn(manager.send(msg).into_actor(self).map(|res, act, ctx| {
            if res.unwrap_or(true) {
                debug!(lock = %act.name, "idle lock actor stopped");
                ctx.stop();
            } else {
                act.settle(ctx);
            }
        }));
    }
}

impl Actor for LockActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if std::mem::take(&mut self.restarted) {
            self.verify_after_restart(ctx);
        } else {
            self.settle(ctx);
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if self.restart_requested {
            // The Supervisor restarts this same struct: keep everything.
            return;
        }
        // Whatever is still queued will never be served by this actor.
        self.queue.fail_all(|| LockError::Stopped);
        if let Some(h) = self.holding.take() {
            let _ = h.lost_tx.send(Some(LostReason::ManagerStopped));
        }
    }
}

/// Test hook: act as if Redis had answered in a shape the protocol does not allow.
#[cfg(test)]
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Derail;

#[cfg(test)]
impl Handler<Derail> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: Derail, ctx: &mut Context<Self>) {
        self.restart(&"derailed by a test", ctx);
    }
}

/// Test hook: how many waiters are queued.
#[cfg(test)]
#[derive(Message, Debug)]
#[rtype(result = "usize")]
pub(crate) struct QueueLen;

#[cfg(test)]
impl Handler<QueueLen> for LockActor {
    type Result = usize;

    fn handle(&mut self, _msg: QueueLen, _ctx: &mut Context<Self>) -> usize {
        self.queue.len()
    }
}

impl Supervised for LockActor {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // Every timer and call in flight belonged to the old context and is gone.
        // An acquisition in flight has an unknown outcome now: check it first.
        if let Some(id) = self.attempt.take() {
            self.unresolved = self.queue.find(id).map(acquire::Unresolved::of);
        }
        self.woken = false;
        self.resolving = false;
        self.renewing = false;
        // Their callers got a mailbox error; a hold they may have left behind is
        // found by the next release (StillHeld with no guard) or expires unrenewed.
        self.releases = 0;
        self.wake_timer = None;
        self.renew_timer = None;
        self.expiry_timer = None;
        self.idle_timer = None;
        // Subscribed again at the next busy answer (the route is simply replaced).
        self.sub = Sub::Off;
        self.own_unlocks = 0;
        self.restart_requested = false;
        self.restarted = true;
    }
}

impl Handler<Enqueue> for LockActor {
    type Result = ();

    fn handle(&mut self, Enqueue(waiter): Enqueue, ctx: &mut Context<Self>) {
        self.received += 1;
        let reentrant = self
            .holding
            .as_ref()
            .is_some_and(|h| h.owner == waiter.owner);
        self.queue.push(waiter, reentrant);
        self.pump(ctx);
    }
}

impl Handler<Cancel> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Cancel, ctx: &mut Context<Self>) {
        if self.queue.take(msg.waiter).is_some() {
            debug!(lock = %self.name, waiter = msg.waiter, "waiter left");
        }
        self.pump(ctx);
    }
}

impl Handler<Release> for LockActor {
    type Result = ResponseActFuture<Self, Result<ReleaseOutcome, LockError>>;

    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(reason) = self.lost.release_one(msg.epoch) {
            self.settle(ctx);
            return Box::pin(fut::ready(Err(LockError::Lost(reason))));
        }
        self.release_hold(msg.epoch)
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        // An exclusive lock admits one holder either way, so "wake all" and "wake
        // one" both mean: let the head waiter try.
        tracing::trace!(lock = %self.name, wake_all = msg.wake_all, "unlock message");
        if self.own_unlocks > 0 {
            self.own_unlocks -= 1;
            return;
        }
        self.wake(ctx);
    }
}

impl Handler<Resync> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.own_unlocks = 0;
        self.wake(ctx);
    }
}
