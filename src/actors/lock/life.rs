//! A lock actor's life: the idle handshake with its manager, its start and stop,
//! and supervision (a restart that keeps the waiters and re-reads the holdings).
//!
//! The actor stops after a quiet period only when the manager agrees (it has
//! sent nothing the actor has not seen), so no request is lost; it restarts
//! itself when Redis answers in a shape the protocol does not allow, keeping
//! waiters and holdings, as local state can no longer be trusted.

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, error};

use super::attempts::Unresolved;
use super::release::Releases;
use super::{Idle, LockActor};
use crate::error::{LockError, LostReason};
use crate::wire;

/// The actor's relation to its manager and its restarts.
pub(super) struct Life {
    /// The manager, weakly: a lock actor must not keep its manager alive.
    manager: WeakRecipient<Idle>,
    /// Enqueue messages received, echoed to the manager in the idle handshake.
    pub(super) received: u64,
    /// Set before stopping on purpose so the Supervisor restarts this actor with
    /// its state: `stopped` must then keep waiters and holding.
    restart_requested: bool,
    /// Set by `restarting`: `started` re-reads the holding from Redis.
    restarted: bool,
}

impl Life {
    /// A new actor's life, under `manager`.
    pub(super) fn new(manager: WeakRecipient<Idle>) -> Life {
        Life {
            manager,
            received: 0,
            restart_requested: false,
            restarted: false,
        }
    }
}

impl LockActor {
    /// Redis answered in a shape the protocol does not allow, so local state can no
    /// longer be trusted: stop, and let the Supervisor restart this actor. Waiters
    /// and the holding are kept; the holding is then re-read from Redis.
    pub(super) fn restart(&mut self, why: &dyn std::fmt::Display, ctx: &mut Context<Self>) {
        error!(lock = %self.name, %why, "lock actor cannot continue; restarting it");
        self.life.restart_requested = true;
        ctx.stop();
    }

    /// Starts the idle countdown when nothing at all is going on, and stops it
    /// when something is.
    pub(super) fn idle_countdown(&mut self, ctx: &mut Context<Self>) {
        match (self.is_idle(), self.timers.idle.is_set()) {
            (true, false) => {
                let after = self.shared.config.idle_timeout;
                let slot: fn(&mut Self) -> &mut crate::actors::listen::Alarm =
                    |act| &mut act.timers.idle;
                self.timers.idle.set(ctx, after, slot, Self::on_idle);
            }
            (false, true) => self.timers.idle.cancel(ctx),
            _ => {}
        }
    }

    /// After a restart: asks Redis whether the holdings still stand, then restarts
    /// their expiry timer (or reports them lost) and lets waiters try. The renewer
    /// went on renewing the watchdog holdings meanwhile (this actor's address
    /// outlives the restart).
    fn verify_after_restart(&mut self, ctx: &mut Context<Self>) {
        if self.held.holdings.is_empty() {
            self.pump(ctx);
            return;
        }
        let held: Vec<(u64, Arc<str>)> = self
            .held
            .holdings
            .iter()
            .map(|h| (h.epoch, h.field.clone()))
            .collect();
        let mut conn = self.shared.node.conn();
        let name = self.name.clone();
        let fut = async move {
            let mut counts = Vec::with_capacity(held.len());
            for (epoch, field) in held {
                counts.push((epoch, wire::hold_count(&mut conn, &name, &field).await));
            }
            counts
        };
        ctx.spawn(fut.into_actor(self).map(move |counts, act, ctx| {
            for (epoch, res) in counts {
                // Gone meanwhile, or cannot tell now (the watchdog and the expiry
                // timer will): nothing to do here.
                if matches!(res, Ok(0)) {
                    act.lose(epoch, LostReason::OwnerGone, ctx);
                }
            }
            act.holding_timers(ctx);
            act.pump(ctx);
        }));
    }

    /// Idle for a while: ask the manager to retire this actor. The manager agrees
    /// only if it has sent nothing this actor has not seen, so no request is lost.
    fn on_idle(&mut self, ctx: &mut Context<Self>) {
        let Some(manager) = self.life.manager.upgrade() else {
            ctx.stop();
            return;
        };
        let msg = Idle {
            name: self.name.clone(),
            kind: self.kind.kind(),
            addr: ctx.address(),
            received: self.life.received,
        };
        ctx.spawn(manager.send(msg).into_actor(self).map(|res, act, ctx| {
            if res.unwrap_or(true) {
                debug!(lock = %act.name, "idle lock actor stopped");
                ctx.stop();
            } else {
                act.reconcile(ctx);
            }
        }));
    }
}

impl Actor for LockActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if std::mem::take(&mut self.life.restarted) {
            self.verify_after_restart(ctx);
        } else {
            self.reconcile(ctx);
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if self.life.restart_requested {
            // The Supervisor restarts this same struct: keep everything.
            return;
        }
        // Whatever is still queued will never be served by this actor. Places in a
        // fair queue cannot be given back now: they lapse unrefreshed.
        let _ = self.wait.queue.fail_all(|| LockError::Stopped);
        for h in self.held.holdings.drain() {
            if h.watchdog {
                self.shared.renewals.unwatch(h.epoch);
            }
            h.lost_tx.lose(LostReason::ManagerStopped);
        }
    }
}

impl Supervised for LockActor {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // Every timer and call in flight belonged to the old context and is gone.
        // An acquisition in flight has an unknown outcome now: check it first.
        let queue = &self.wait.queue;
        self.wait
            .attempts
            .restarting(|id| queue.find(id).map(Unresolved::of));
        self.kind.restarting(&mut self.wait.queue);
        // Their callers got a mailbox error; a hold they may have left behind is
        // found by the next release (StillHeld with no guard) or expires unrenewed.
        self.held.releases = Releases::default();
        self.timers.forget();
        if let Some(w) = &mut self.wait.waiting {
            w.forget();
        }
        if let Some(d) = &mut self.wait.detector {
            d.forget();
        }
        // Subscribed again at the next busy answer (the route is simply replaced).
        self.wait.subs.clear();
        self.life.restart_requested = false;
        self.life.restarted = true;
    }
}
