//! A lock actor's life: the idle handshake with its manager, its start and stop,
//! and supervision (a restart that keeps the waiters and re-reads the holdings).
//!
//! The actor stops after a quiet period only when the manager agrees (it has
//! sent nothing the actor has not seen), so no request is lost; it restarts
//! itself when Redis answers in a shape the protocol does not allow, keeping
//! waiters and holdings, as local state can no longer be trusted.

use std::sync::Arc;

use actix::fut::wrap_future;
use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, error};

use super::release::Releases;
use super::{Idle, LockActor};
use crate::error::{LockError, LostReason};
use crate::kind::Kind;
use crate::node::Conn;
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

impl Life {
    /// Redis answered in a shape the protocol does not allow, so local state can no
    /// longer be trusted: stop, and let the Supervisor restart this actor. Waiters
    /// and the holding are kept; the holding is then re-read from Redis.
    pub(super) fn restart(
        &mut self,
        name: &str,
        why: &dyn std::fmt::Display,
        ctx: &mut Context<LockActor>,
    ) {
        error!(lock = %name, %why, "lock actor cannot continue; restarting it");
        self.restart_requested = true;
        ctx.stop();
    }

    /// Idle for a while: ask the manager to retire this actor. The manager agrees
    /// only if it has sent nothing this actor has not seen, so no request is lost.
    pub(super) fn ask_to_retire(&self, name: Arc<str>, kind: Kind, ctx: &mut Context<LockActor>) {
        let Some(manager) = self.manager.upgrade() else {
            ctx.stop();
            return;
        };
        let msg = Idle {
            name,
            kind,
            addr: ctx.address(),
            received: self.received,
        };
        let asked = wrap_future::<_, LockActor>(manager.send(msg));
        ctx.spawn(asked.map(|res, act, ctx| {
            if res.unwrap_or(true) {
                debug!(lock = %act.name, "idle lock actor stopped");
                ctx.stop();
            } else {
                act.reconcile(ctx);
            }
        }));
    }
}

/// After a restart: how many holds Redis counts for each holding (`epoch`,
/// owner field) the actor kept.
async fn hold_counts(
    mut conn: Conn,
    name: Arc<str>,
    held: Vec<(u64, Arc<str>)>,
) -> Vec<(u64, redis::RedisResult<u32>)> {
    let mut counts = Vec::with_capacity(held.len());
    for (epoch, field) in held {
        counts.push((epoch, wire::hold_count(&mut conn, &name, &field).await));
    }
    counts
}

impl Actor for LockActor {
    type Context = Context<Self>;

    /// After a restart, asks Redis whether the holdings still stand, then
    /// restarts their expiry timer (or reports them lost) and lets waiters try.
    /// The renewer went on renewing the watchdog holdings meanwhile (this
    /// actor's address outlives the restart).
    fn started(&mut self, ctx: &mut Context<Self>) {
        if !std::mem::take(&mut self.life.restarted) {
            self.reconcile(ctx);
            return;
        }
        // Waiters may have missed their message; an attempt that was out is
        // checked before anyone asks again, and channels are subscribed anew.
        self.with_kind(|kind, queue| kind.restarting(queue));
        if let Some(engine) = self.wait.side.engine_mut() {
            let effects = engine.restart();
            self.apply(effects, ctx);
        }
        if self.held.holdings.is_empty() {
            self.look(ctx);
            return;
        }
        let held = self.held.holdings.iter();
        let held = held.map(|h| (h.epoch, h.field.clone())).collect();
        let counts = hold_counts(self.shared.node.conn(), self.name.clone(), held);
        ctx.spawn(counts.into_actor(self).map(move |counts, act, ctx| {
            for (epoch, res) in counts {
                // Gone meanwhile, or cannot tell now (the watchdog and the expiry
                // timer will): nothing to do here.
                if matches!(res, Ok(0)) {
                    act.lose(epoch, LostReason::OwnerGone, ctx);
                }
            }
            act.arm_expiry(ctx);
            act.look(ctx);
        }));
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if self.life.restart_requested {
            // The Supervisor restarts this same struct: keep everything.
            return;
        }
        // Whatever is still queued will never be served by this actor. Places in a
        // fair queue cannot be given back now: they lapse unrefreshed; an
        // attempt out is not undone either (its lease ends it).
        if let Some(engine) = self.wait.side.engine_mut() {
            let _ = engine.fail_all(|| LockError::Stopped);
            for name in engine.drop_channels() {
                crate::actors::listen::unsubscribe(&self.shared.subscriber, &name);
            }
        }
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
        // The waiting side learns it as the actor starts again (`started`).
        // Releases' callers got a mailbox error; a hold they may have left
        // behind is found by the next release (StillHeld with no guard) or
        // expires unrenewed.
        self.releases = Releases::default();
        self.timers.forget();
        if let Some(w) = &mut self.wait.records {
            w.forget();
        }
        if let Some(d) = &mut self.wait.detector {
            d.forget();
        }
        // A check held back for a release is out as far as the engine
        // knows: its restart asks for it again.
        self.wait.check = None;
        self.life.restart_requested = false;
        self.life.restarted = true;
    }
}
