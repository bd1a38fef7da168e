//! The [`LockActor`]: one per lock name and kind, owning that lock's waiters, timers
//! and the local view of who holds it.
//!
//! Everything that happens to one lock in this process is serialised through its
//! actor, which is what keeps the rules simple: at most one acquisition attempt is in
//! flight per lock (local waiters never stampede Redis), a waiter behind a local
//! holder it cannot share with does not ask Redis at all (the local release hands
//! over), and the watchdog, the fallback retry and the waiters' deadlines are timers
//! the actor keeps and cancels. The Redis side is only ever changed by the scripts in
//! [`crate::wire`]; this file decides when to run them and what their answers
//! mean for the waiters and holders.
//!
//! The three kinds of lock (exclusive, fair, read-write) are one actor with a
//! [`Kind`]; what a kind does differently (its scripts, the channel a waiter listens
//! on, its renewal) is in its own file under `kinds/`, reached through
//! [`LockActor::rules`]. The fair lock adds its waiters' places in the Redis queue
//! (`kinds/fair.rs`). The queue, attempts, timers, holdings and supervision are the
//! same code for all: `waiters` (the queue), `attempts` (the attempt state and its
//! books), `acquire` (when to try and what answers mean), `holding` (grant,
//! expiry, loss), `release` (the whole release path), `shutdown` (the manager's
//! shutdown: waiters answered, holds given back), `turn` (runs of local holds,
//! and how a waiter wakes after another process's release) and this file
//! (lifecycle and supervision).

mod acquire;
mod attempts;
mod holding;
mod kinds;
mod release;
mod shutdown;
mod subs;
#[cfg(test)]
mod tests;
mod turn;
mod waiters;

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, error, warn};

use super::listen::{Alarm, Channel, Listener};
use super::shared::Shared;
use super::subscriber::{Resync, Unlocked};
use super::waiting::Waiting;
use crate::error::{LockError, LostReason};
use crate::kind::Kind;
use crate::wire;
use subs::Subs;

use attempts::{Attempts, Unresolved};
use holding::{Holdings, LostHoldings};
use kinds::fair::FairPlaces;
use kinds::KindRules;
use release::Releases;
pub(crate) use waiters::Request;
use waiters::Waiter;
use waiters::WaiterQueue;

/// Queue a waiter (sent by the manager only, which counts them for the idle handshake).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Enqueue(pub(crate) Request);

/// The caller of this waiter went away: forget it.
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

/// The actor of one lock name and kind; see the module documentation.
pub(crate) struct LockActor {
    /// The lock name (also the lock key).
    name: Arc<str>,
    /// Which kind of lock it serves.
    kind: Kind,
    /// Connection, config, client id, subscriber and counters of the manager.
    shared: Arc<Shared>,
    /// The manager, weakly: a lock actor must not keep its manager alive.
    manager: WeakRecipient<Idle>,
    /// Local waiters, head first.
    queue: WaiterQueue,
    /// The local owners holding the lock.
    holdings: Holdings,
    /// Lost holdings whose guards are still alive.
    lost: LostHoldings,
    /// The acquisition attempt: in flight, lost, checked, failing (`attempts.rs`).
    attempts: Attempts,
    /// Channel -> subscription state (one channel, or one per fair waiter), and
    /// the unlock messages of its own still to come.
    subs: Subs,
    /// Fallback retry / deadline timer.
    wake_timer: Alarm,
    /// Fires when the earliest explicit lease of a holding runs out.
    expiry_timer: Alarm,
    /// Fair lock: the waiters' places in the Redis queue.
    fair: FairPlaces,
    /// Release scripts in flight.
    releases: Releases,
    /// Stops the actor after a quiet period.
    idle_timer: Alarm,
    /// Enqueue messages received, echoed to the manager in the idle handshake.
    received: u64,
    /// Set before stopping on purpose so the Supervisor restarts this actor with
    /// its state: `stopped` must then keep waiters and holding.
    restart_requested: bool,
    /// Set by `restarting`: `started` re-reads the holding from Redis.
    restarted: bool,
    /// This process's run of grants, and whether it yields to others (`turn.rs`).
    turn: turn::Turn,
    /// The waiting records of waits over a second (`actors/waiting.rs`), boxed
    /// and only while someone waits: a held lock's actor stays as small as it
    /// was (docs/performance.md, client bytes per held lock).
    waiting: Option<Box<Waiting>>,
}

impl LockActor {
    pub(crate) fn new(
        name: Arc<str>,
        kind: Kind,
        shared: Arc<Shared>,
        manager: WeakRecipient<Idle>,
    ) -> Self {
        LockActor {
            waiting: None,
            name,
            kind,
            shared,
            manager,
            queue: WaiterQueue::default(),
            holdings: Holdings::default(),
            lost: LostHoldings::default(),
            attempts: Attempts::default(),
            subs: Subs::default(),
            wake_timer: Alarm::default(),
            expiry_timer: Alarm::default(),
            fair: FairPlaces::default(),
            releases: Releases::default(),
            idle_timer: Alarm::default(),
            received: 0,
            restart_requested: false,
            restarted: false,
            turn: turn::Turn::default(),
        }
    }

    /// Brings timers and subscriptions in line with what is left to do: keeps a
    /// deadline timer while waiters wait, unsubscribes channels no waiter listens
    /// on, and starts the idle countdown when nothing at all is going on.
    /// (Not "settle": that word is the `Settle` message's, nothing on the wire.)
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        if self.queue.is_empty() {
            self.wake_timer.cancel(ctx);
        } else if !self.wake_timer.is_set() {
            self.schedule(None, ctx);
        }
        let mut subs = std::mem::take(&mut self.subs);
        for mut channel in subs.take_unneeded(|name| self.needs(name)) {
            channel.unsubscribe(&self.shared.subscriber);
        }
        self.subs = subs;
        self.fair_timers(ctx);
        let idle = self.is_idle();
        match (idle, self.idle_timer.is_set()) {
            (true, false) => {
                let after = self.shared.config.idle_timeout;
                self.idle_timer.set(
                    ctx,
                    after,
                    |act: &mut Self| &mut act.idle_timer,
                    Self::on_idle,
                );
            }
            (false, true) => self.idle_timer.cancel(ctx),
            _ => {}
        }
    }

    /// Nothing at all is going on: no waiter, holding, call or subscription.
    fn is_idle(&self) -> bool {
        self.queue.is_empty()
            && self.holdings.is_empty()
            && self.lost.is_empty()
            && self.attempts.is_quiet()
            && self.releases.none()
            && !self.fair.busy()
            && self.subs.is_empty()
    }

    /// Redis answered in a shape the protocol does not allow, so local state can no
    /// longer be trusted: stop, and let the Supervisor restart this actor. Waiters
    /// and the holding are kept; the holding is then re-read from Redis.
    pub(super) fn restart(&mut self, why: &dyn std::fmt::Display, ctx: &mut Context<Self>) {
        error!(lock = %self.name, %why, "lock actor cannot continue; restarting it");
        self.restart_requested = true;
        ctx.stop();
    }

    /// The channel its waiters listen on: the unlock channel (exclusive; for the
    /// fair lock, the prefix of each waiter's own channel) or the read-write
    /// channel. Made when needed rather than kept: only waiters need it, and a held
    /// lock's actor should stay small.
    fn channel(&self) -> String {
        self.rules().channel(&self.name)
    }

    /// What this lock's kind does differently.
    fn rules(&self) -> &'static dyn KindRules {
        kinds::rules(self.kind)
    }

    /// Whether `channel` must stay subscribed: some waiter listens on it, or
    /// the holder keeps listening while it takes turns (`turn.rs`,
    /// [`LockActor::holder_listens`]).
    fn needs(&self, channel: &str) -> bool {
        if self.rules().per_waiter() {
            self.fair_field_of(channel)
                .is_some_and(|field| self.queue.iter().any(|w| &*w.req.field == field))
        } else {
            (self.holder_listens() || !self.queue.is_empty()) && channel == self.channel()
        }
    }

    /// Whether `channel` is subscribed (and routed here).
    fn listening(&self, channel: &str) -> bool {
        self.subs.is_live(channel)
    }

    /// After a restart: asks Redis whether the holdings still stand, then restarts
    /// their expiry timer (or reports them lost) and lets waiters try. The renewer
    /// went on renewing the watchdog holdings meanwhile (this actor's address
    /// outlives the restart).
    fn verify_after_restart(&mut self, ctx: &mut Context<Self>) {
        if self.holdings.is_empty() {
            self.pump(ctx);
            return;
        }
        let held: Vec<(u64, Arc<str>)> = self
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
        let Some(manager) = self.manager.upgrade() else {
            ctx.stop();
            return;
        };
        let msg = Idle {
            name: self.name.clone(),
            kind: self.kind,
            addr: ctx.address(),
            received: self.received,
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
        if std::mem::take(&mut self.restarted) {
            self.verify_after_restart(ctx);
        } else {
            self.reconcile(ctx);
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if self.restart_requested {
            // The Supervisor restarts this same struct: keep everything.
            return;
        }
        // Whatever is still queued will never be served by this actor. Places in a
        // fair queue cannot be given back now: they lapse unrefreshed.
        let _ = self.queue.fail_all(|| LockError::Stopped);
        for h in self.holdings.drain() {
            if h.watchdog {
                self.shared.renewals.unwatch(h.epoch);
            }
            h.lost_tx.lose(LostReason::ManagerStopped);
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
        self.attempts.is_quiet() && self.releases.none()
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
        let queue = &self.queue;
        self.attempts
            .restarting(|id| queue.find(id).map(Unresolved::of));
        self.fair.reset();
        // Fair waiters may have missed their message: each tries again.
        for w in self.queue.iter_mut() {
            w.try_now = true;
        }
        // Their callers got a mailbox error; a hold they may have left behind is
        // found by the next release (StillHeld with no guard) or expires unrenewed.
        self.releases = Releases::default();
        self.wake_timer.forget();
        self.expiry_timer.forget();
        self.idle_timer.forget();
        if let Some(w) = &mut self.waiting {
            w.forget();
        }
        // Subscribed again at the next busy answer (the route is simply replaced).
        self.subs.clear();
        self.restart_requested = false;
        self.restarted = true;
    }
}

impl Handler<Enqueue> for LockActor {
    type Result = ();

    fn handle(&mut self, Enqueue(request): Enqueue, ctx: &mut Context<Self>) {
        let waiter = Waiter::new(request);
        self.received += 1;
        if self.shared.is_shutting_down() {
            // Sent before the manager's shutdown reached it: refused like the rest.
            waiter.fail(LockError::ShuttingDown);
            self.reconcile(ctx);
            return;
        }
        if self.holdings.is_upgrade(waiter.req.owner, waiter.req.kind) {
            // It would wait for its own read holds: refused now, not queued.
            waiter.fail(LockError::UpgradeRefused);
            self.reconcile(ctx);
            return;
        }
        let reentrant = self.holdings.reenters(waiter.req.owner, waiter.req.kind);
        if reentrant && !waiter.req.reentrant {
            // A non-reentrant lock its owner holds: refused now, not queued (a
            // hold taken meanwhile is refused by the acquire script instead).
            waiter.fail(LockError::ReentryRefused);
            self.reconcile(ctx);
            return;
        }
        if waiter.deadline.is_none()
            && !waiter.try_once
            && self.holdings.blocks(waiter.req.owner, waiter.req.kind)
        {
            // A waiter with no deadline behind a holder of this same process may be
            // waiting for itself (the same task, another owner): say so, later, if
            // it is still there then. Only such waiters get the timer: one on every
            // acquisition would stay in the actor for the whole delay (135 bytes
            // per held lock).
            let id = waiter.req.id;
            ctx.run_later(self.shared.config.stall_warning, move |act, _| {
                act.warn_if_stalled(id)
            });
        }
        if self.queue.is_empty() {
            // The spin backoff counts one wait's busy answers, not an earlier one's.
            self.attempts.restart_spin();
        }
        self.queue.push(waiter, reentrant);
        self.pump(ctx);
    }
}

impl LockActor {
    /// The waiter `id` has waited [`Config::stall_warning`](crate::Config::stall_warning)
    /// without a deadline: if another owner of this process still keeps it out,
    /// warn that it may be waiting for itself.
    fn warn_if_stalled(&self, id: u64) {
        let Some(w) = self.queue.find(id) else {
            return;
        };
        if let Some(h) = self.holdings.iter().find(|h| {
            h.owner != w.req.owner && (h.kind.excludes(w.req.kind) || w.req.kind.excludes(h.kind))
        }) {
            w.req.span.in_scope(|| {
                warn!(
                    lock = %self.name,
                    waited = ?w.req.since.elapsed(),
                    holder = %h.owner,
                    waiter = %w.req.owner,
                    "waiting, with no deadline, for a lock that another owner of this same \
                     process holds; if the same task holds it, it waits for itself forever: \
                     pass the holder's Owner to re-enter (Acquire::owner), or give the wait a \
                     deadline (Acquire::wait)"
                )
            });
        }
    }
}

impl Handler<Cancel> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Cancel, ctx: &mut Context<Self>) {
        if let Some(w) = self.queue.take(msg.waiter) {
            debug!(lock = %self.name, waiter = msg.waiter, "waiter left");
            if w.queued {
                self.leave_fair_queue(vec![w.req.field.clone()], ctx);
            }
            self.abandon(&w, ctx);
        }
        self.pump(ctx);
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        tracing::trace!(lock = %self.name, channel = %msg.channel, wake_all = msg.wake_all, "unlock message");
        if self.rules().per_waiter() {
            // A fair lock's message names its waiter by channel: that one tries.
            // Its own releases' messages are news too (they may name a local waiter).
            self.wake_channel(&msg.channel, ctx);
            return;
        }
        if self.subs.heard_own() {
            return;
        }
        if self.rules().takes_turns() {
            self.heard_another_release(ctx);
            return;
        }
        // "Wake all" and "wake one" both mean: let the head waiter try. Each grant
        // lets the next head try at once, so after a write release every local
        // reader gets its turn, one short round trip apart.
        self.wake(ctx);
    }
}

impl Listener for LockActor {
    fn channel(&mut self, name: &str) -> Option<&mut Channel> {
        self.subs.get_mut(name)
    }

    /// The lock may have been released between the refused attempt and the
    /// subscription: the waiters of `name` try now.
    fn subscribed(&mut self, name: &str, ctx: &mut Context<Self>) {
        self.wake_channel(name, ctx);
    }
}

impl Handler<Resync> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.subs.forget_own();
        // Messages may have been lost while the subscriber was away: every fair
        // waiter tries again (one of them may be at the head of a free lock).
        for w in self.queue.iter_mut() {
            w.try_now = true;
        }
        self.wake(ctx);
    }
}
