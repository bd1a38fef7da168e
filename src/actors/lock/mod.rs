//! The [`LockActor`]: one per lock name and kind, owning that lock's waiters, timers
//! and the local view of who holds it.
//!
//! Everything that happens to one lock in this process is serialised through its
//! actor, which is what keeps the rules simple: a waiter behind a local holder it
//! cannot share with does not ask Redis at all (the local release hands over),
//! and the watchdog and the waiters' timers are timers the actor keeps and
//! cancels. Its waiting side is the kit's waiting engine, the one every
//! synchronizer runs (one attempt at a time, leavers, deadlines, lost answers:
//! `actors/waiting/engine/`), with the lock's policy (`waits.rs`); the actor is
//! its runner (`acquire.rs`). The Redis side is only ever changed by the
//! scripts in [`crate::wire`].
//!
//! A kind of lock (exclusive, fair, read-write, spin) is `KindState`: the kind's
//! own state (the exclusive lock's turns, the fair lock's places, the spin
//! lock's backoff) and its decisions, which its hooks answer as data (`kinds/`).
//! The rest is the same code for all: `waiters` (what a waiter is), `waits`
//! (the engine's lock policy, and the engine kept only while someone waits),
//! `acquire` (the runner: the engine's effects carried out), `holding` (grant,
//! expiry, loss), `release` (the whole release path), `handover` (a release
//! that hands the lock to a local waiter), `shutdown` (the manager's shutdown:
//! waiters answered, holds given back), `timers` (the actor's timers and its
//! kind's Redis chores), `deadlock` (the deadlock checks of long waits), `life`
//! (idle handshake and supervision) and this file (the actor and its messages).

mod acquire;
mod deadlock;
mod handover;
mod holding;
mod kinds;
mod life;
mod release;
mod shutdown;
#[cfg(test)]
mod tests;
mod timers;
mod waiters;
mod waits;

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, warn};

use super::listen::{Alarm, Channel, Listener};
use super::shared::Shared;
use super::subscriber::{Resync, Unlocked};
use super::waiting::engine::Event;
use super::waiting::Waiting;
use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::kind::Kind;

use holding::{Claim, Held};
use kinds::Chore;
use life::Life;
use release::Releases;
use timers::Timers;
use waiters::Want;
pub(crate) use waiters::{Reply, Request};
use waits::Side;

/// Queue a waiter (sent by the manager only, which counts them for the idle handshake).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Enqueue(pub(crate) Request, pub(crate) Reply);

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

/// The actor of one lock name and kind; see the module documentation. A short
/// list of owned parts, each a type whose methods change it.
pub(crate) struct LockActor {
    /// The lock name (also the lock key).
    name: Arc<str>,
    /// Connection, config, client id, subscriber and counters of the manager.
    shared: Arc<Shared>,
    /// The waiting side: its kind, who waits, what is asked of Redis for
    /// them, what they listen on.
    wait: Wait,
    /// The holding side: who holds, what was lost, what is being given back.
    held: Held,
    /// Release scripts in flight (`release.rs`).
    releases: Releases,
    /// The wake, expiry and idle timers, and the kind's periodic one (`timers.rs`).
    timers: Timers,
    /// The manager, the idle handshake's count and the restart flags (`life.rs`).
    life: Life,
}

/// The waiting side of a lock actor: the parts that change when a caller
/// arrives, asks, listens or leaves. Grouped apart from the holding side
/// because a held lock with nobody waiting keeps these empty (the engine and
/// the boxed parts absent), which is what keeps a held lock's actor small
/// (docs/performance.md, client bytes per held lock).
struct Wait {
    /// The kind, and the waiting engine while anyone waits or listens (`waits.rs`).
    side: Side,
    /// The waiting records of waits over a second (`actors/waiting/records.rs`),
    /// boxed and only while someone waits.
    records: Option<Box<Waiting>>,
    /// Its deadlock checks (`deadlock.rs`), boxed and only while a wait is
    /// past `Config::deadlock_timeout`, for the same reason.
    detector: Option<Box<deadlock::Detector>>,
    /// The check of a lost attempt, held back while a release is out (the
    /// owner's hold count would be blurred).
    check: Option<Box<Want>>,
}

impl LockActor {
    pub(crate) fn new(
        name: Arc<str>,
        kind: Kind,
        shared: Arc<Shared>,
        manager: WeakRecipient<Idle>,
    ) -> Self {
        LockActor {
            name,
            shared,
            wait: Wait {
                side: Side::new(kind),
                records: None,
                detector: None,
                check: None,
            },
            held: Held::default(),
            releases: Releases::default(),
            timers: Timers::default(),
            life: Life::new(manager),
        }
    }

    /// Brings what lives beside the engine in line with what is left to do:
    /// keeps the kind's periodic timer and sends its chores, drops what ended
    /// of the waiting records and deadlock checks, and starts the idle
    /// countdown when nothing at all is going on.
    /// (Not "settle": that word is the `Settle` message's, nothing on the wire.)
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        let config = self.shared.config.clone();
        let every = self.with_kind(|kind, queue| kind.tick_every(queue, &config));
        self.timers.keep_ticking(every, ctx, |act, ctx| {
            let (name, shared) = (act.name.clone(), act.shared.clone());
            let chore = act.with_kind(|kind, queue| kind.tick(queue, &name, &shared));
            act.run_chore(chore, ctx);
        });
        self.send_chores(ctx);
        self.forget_ended_waits(ctx);
        if self.wait.records.is_some() {
            // A recorded wait that ended is unrecorded now, not at the next
            // tick: a process that exits right after its wait leaves no record
            // behind. Only while records exist (they are boxed on demand).
            crate::actors::waiting::ended(self, ctx);
        }
        let (idle, after) = (self.is_idle(), self.shared.config.idle_timeout);
        self.timers.idle_countdown(idle, after, ctx, |act, ctx| {
            let kind = act.wait.side.kind().kind();
            act.life.ask_to_retire(act.name.clone(), kind, ctx)
        });
    }

    /// Nothing at all is going on: no waiter, holding, call or subscription.
    fn is_idle(&self) -> bool {
        matches!(self.wait.side, Side::Idle { .. })
            && self.held.holdings.is_empty()
            && self.held.lost.is_empty()
            && self.releases.none()
            && !self.wait.side.kind().busy_with_chores()
            && self.wait.detector.is_none()
            && self.wait.check.is_none()
    }

    /// The channel its waiters listen on (for the fair lock, the prefix of each
    /// waiter's own channel). Made when needed rather than kept: only waiters
    /// need it, and a held lock's actor should stay small.
    fn channel(&self) -> String {
        self.wait.side.kind().scripts().channel(&self.name)
    }

    /// Whether `channel` is subscribed (and routed here).
    fn listening(&mut self, channel: &str) -> bool {
        let engine = self.wait.side.engine_mut();
        engine
            .and_then(|e| e.channel_mut(channel))
            .is_some_and(|c| c.is_live())
    }

    /// Sends the Redis work the kind has pending.
    fn send_chores(&mut self, ctx: &mut Context<Self>) {
        let (name, shared) = (self.name.clone(), self.shared.clone());
        while let Some(chore) = self.with_kind(|kind, queue| kind.chore(queue, &name, &shared)) {
            self.run_chore(Some(chore), ctx);
        }
    }

    /// Records a successful acquisition and makes its guard; a local holding
    /// the grant shows stale is declared lost first.
    fn grant(
        &mut self,
        claim: Claim,
        token: u64,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) -> LockGuard {
        for epoch in self.held.stale(claim.owner, claim.kind) {
            self.lose(epoch, LostReason::OwnerGone, ctx);
        }
        let renewal = self.wait.side.kind().scripts().renewal(claim.kind);
        let g = holding::Granting {
            name: &self.name,
            shared: &self.shared,
            renewal,
            addr: ctx.address(),
        };
        let guard = self.held.grant(claim, token, sent, g);
        self.arm_expiry(ctx);
        guard
    }

    /// Holding `epoch` is lost (its guards are told). The caller looks again.
    fn lose(&mut self, epoch: u64, reason: LostReason, ctx: &mut Context<Self>) {
        if self.held.lose(epoch, reason, &self.shared, &self.name) {
            self.arm_expiry(ctx);
        }
    }

    /// Takes holding `epoch` out and stops renewing it.
    fn forget(&mut self, epoch: u64) -> Option<holding::Holding> {
        let metric = holding::metric_name(&self.shared, &self.name);
        self.held.forget(epoch, &self.shared, metric)
    }

    /// Arms (or re-arms) the timer that declares holdings with an explicit
    /// lease lost when their lease runs out.
    fn arm_expiry(&mut self, ctx: &mut Context<Self>) {
        self.timers.expiry.cancel(ctx);
        let Some(first) = self.held.next_expiry() else {
            return;
        };
        let delay = first.saturating_duration_since(Instant::now());
        let slot: fn(&mut Self) -> &mut Alarm = |act| &mut act.timers.expiry;
        self.timers.expiry.set(ctx, delay, slot, |act, ctx| {
            for epoch in act.held.expired(Instant::now()) {
                act.lose(epoch, LostReason::LeaseExpired, ctx);
            }
            act.arm_expiry(ctx);
            act.look(ctx);
        });
    }

    /// Spawns a chore; its outcome goes to the kind, which says whether
    /// waiters may try now.
    fn run_chore(&mut self, chore: Option<Chore>, ctx: &mut Context<Self>) {
        let Some(chore) = chore else {
            return;
        };
        Timers::spawn_chore(chore, ctx, |act, done, ctx| {
            let name = act.name.clone();
            if act.with_kind(|kind, queue| kind.chore_done(done, queue, &name)) {
                act.run(Event::Look, ctx);
            } else {
                act.reconcile(ctx);
            }
        });
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

    fn handle(&mut self, Enqueue(req, reply): Enqueue, ctx: &mut Context<Self>) {
        self.life.received += 1;
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
        if req.wait.is_none() && blocked {
            // A waiter with no deadline behind a holder of this same process may be
            // waiting for itself (the same task, another owner): say so, later, if
            // it is still there then. Only such waiters get the timer: one on every
            // acquisition would stay in the actor for the whole delay (135 bytes
            // per held lock).
            let id = req.id;
            ctx.run_later(self.shared.config.stall_warning, move |act, _| {
                act.warn_if_stalled(id)
            });
        }
        if !self.wait.side.has_waiters() {
            self.with_kind(|kind, _| kind.wait_begins());
        }
        // A re-entry by a holder here goes first: making it wait behind others
        // who wait for that holder would deadlock.
        let want = waiters::want(req, reentrant, blocked);
        self.run(waits::join(want, reply), ctx);
    }
}

impl LockActor {
    /// The waiter `id` has waited [`Config::stall_warning`](crate::Config::stall_warning)
    /// without a deadline: if another owner of this process still keeps it out,
    /// warn that it may be waiting for itself.
    fn warn_if_stalled(&self, id: u64) {
        let Some(w) = self.wait.side.waiters().find(|w| w.id == id) else {
            return;
        };
        let (owner, kind) = (w.want.req.owner, w.want.req.kind);
        let mut holdings = self.held.holdings.iter();
        if let Some(h) = holdings.find(|h| holding::keeps_out((h.owner, h.kind), owner, kind)) {
            w.want.req.span.in_scope(|| {
                warn!(
                    lock = %self.name,
                    waited = ?w.want.req.since.elapsed(),
                    holder = %h.owner,
                    waiter = %w.want.req.owner,
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
        let Unlocked { channel, wake_all } = msg;
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
