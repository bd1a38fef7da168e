//! The lock actor's messages: what the manager sends it ([`Enqueue`],
//! [`ManagerGone`], [`IsQuiet`]), what a waiter's closed answer channel sends
//! it ([`Cancel`]), what it sends the manager
//! ([`Idle`]), what the subscriber routes to it (an unlock message, a
//! subscription made, a resync), and the test hooks. Each handler turns its
//! message into an event of the waiting side, or a question about the actor;
//! the work is the actor's (`mod.rs`) and its parts'.

use std::sync::Arc;

use actix::prelude::*;
use tracing::debug;

use super::timers;
use super::waiters::{self, Reply, Request};
use super::waits;
use super::LockActor;
use crate::actors::listen::{Channel, Listener};
use crate::actors::subscriber::{Resync, Unlocked};
use crate::actors::waiting::engine::Event;
use crate::error::LockError;
use crate::kind::Kind;
use crate::reply;

/// Queue a waiter (sent by the manager only, which counts them for the idle handshake).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Enqueue(pub(crate) Request, pub(crate) Reply);

/// The caller of this waiter went away: forget it (sent by the waker the
/// lock actor leaves on the caller's answer channel, `reply::on_asker_gone`).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Cancel {
    pub(crate) waiter: u64,
}

/// The manager stopped: an idle lock actor stops now rather than after its idle
/// countdown (nothing can send it work any more, and it keeps the manager's
/// connections open); a busy one stops when it is done, as the countdown then
/// finds the manager gone.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct ManagerGone;

impl Handler<ManagerGone> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: ManagerGone, ctx: &mut Context<Self>) {
        if self.is_idle() {
            ctx.stop();
        }
    }
}

/// A lock actor has had nothing to do for a while and offers to stop (sent to the
/// manager). The answer `true` (stop) comes when the manager has sent it nothing
/// it has not seen; the registry entry is then gone, so the next request for that
/// name starts a fresh actor.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(crate) struct Idle {
    /// The lock name.
    pub(crate) name: Arc<str>,
    /// Its kind.
    pub(crate) kind: Kind,
    /// Which actor asks: a stale one (replaced in the registry) is told to stop.
    pub(crate) addr: Addr<LockActor>,
    /// Enqueue messages it received, compared with those sent.
    pub(crate) received: u64,
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
        self.life.restart(&self.name, &"derailed by a test", ctx);
    }
}

/// Whether nothing this actor sent to Redis is still unsettled: no attempt in
/// flight or with a lost reply to check, no release in flight. A process that is
/// about to exit asks this (through the manager's `Settle`) so that a grant that
/// landed after its waiter left is given back before nobody is left to do it.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(crate) struct IsQuiet;

impl Handler<IsQuiet> for LockActor {
    type Result = bool;

    fn handle(&mut self, _msg: IsQuiet, _ctx: &mut Context<Self>) -> bool {
        self.wait.side.is_quiet() && self.wait.check.is_none() && self.releases.none()
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
        self.wait.side.waiters().count()
    }
}

impl Handler<Enqueue> for LockActor {
    type Result = ();

    fn handle(&mut self, Enqueue(req, mut reply): Enqueue, ctx: &mut Context<Self>) {
        self.life.received += 1;
        // The caller's own answer channel: when the caller stops waiting, the
        // engine sweeps the waiter out (and undoes its attempt, if one is out).
        let (lock, waiter) = (ctx.address().downgrade(), req.id);
        let watched = reply::on_asker_gone(&mut reply, move || {
            if let Some(lock) = lock.upgrade() {
                lock.do_send(Cancel { waiter });
            }
        });
        if !watched {
            debug!(lock = %self.name, waiter, "waiter left before it queued");
            self.reconcile(ctx);
            return;
        }
        let (owner, kind) = (req.owner, req.kind);
        let holdings = &self.held.holdings;
        let reentrant = holdings.reenters(owner, kind);
        let refusal = if self.shared.is_shutting_down() {
            // Sent before the manager's shutdown reached it: refused like the rest.
            Some(LockError::ShuttingDown)
        } else if holdings.is_upgrade(owner, kind) {
            // It would wait for its own read holds: refused now, not queued.
            Some(LockError::UpgradeRefused)
        } else if reentrant && !req.reentrant {
            // A non-reentrant lock its owner holds: refused now, not queued (a
            // hold taken meanwhile is refused by the acquire script instead).
            Some(LockError::ReentryRefused)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            waiters::refuse(kind, reply, refusal);
            self.reconcile(ctx);
            return;
        }
        let blocked = holdings.blocks(owner, kind);
        // A waiter with no deadline behind a holder of this same process may be
        // waiting for itself (the same task, another owner): it is watched, and
        // reported later if it is still there then (`timers.rs`).
        let stall_watch = req.wait.is_none() && blocked;
        if !self.wait.side.has_waiters() {
            self.with_kind(|kind, _| kind.wait_begins());
        }
        // A re-entry by a holder here goes first: making it wait behind others
        // who wait for that holder would deadlock.
        let mut want = waiters::want(req, reentrant, blocked);
        want.stall_watch = stall_watch;
        self.run(waits::join(want, reply), ctx);
        if stall_watch {
            timers::watch_stalls(self, ctx);
        }
    }
}

impl Handler<Cancel> for LockActor {
    type Result = ();

    /// Its caller's end of the reply is dropped already: the engine sweeps it
    /// out (and undoes its attempt, if one is out).
    fn handle(&mut self, msg: Cancel, ctx: &mut Context<Self>) {
        debug!(lock = %self.name, waiter = msg.waiter, "waiter left");
        self.run(Event::Left, ctx);
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        let Unlocked {
            channel,
            wake_all,
            grant,
        } = msg;
        if let Some(payload) = grant {
            tracing::trace!(lock = %self.name, %channel, payload, "handoff message");
            return super::handoff::received(self, &payload, ctx);
        }
        tracing::trace!(lock = %self.name, %channel, wake_all, "unlock message");
        self.run(Event::Heard { channel, wake_all }, ctx);
    }
}

impl Listener for LockActor {
    fn channel(&mut self, name: &str) -> Option<&mut Channel> {
        self.wait.side.engine_mut()?.channel_mut(name)
    }

    /// The lock may have been released between the refused attempt and the
    /// subscription: the queue looks again.
    fn subscribed(&mut self, name: &str, ctx: &mut Context<Self>) {
        self.run(Event::Subscribed(name.to_owned()), ctx);
    }
}

impl Handler<Resync> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        // Messages may have been lost while the subscriber was away.
        self.with_kind(|kind, queue| kind.resync(queue));
        self.run(Event::Wake, ctx);
    }
}
