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
//! A kind of lock (exclusive, fair, read-write, spin) is the actor's
//! `KindState`: the kind's own state (the exclusive lock's
//! turns, the fair lock's places, the spin lock's backoff) and its decisions,
//! which its hooks answer as data that the skeleton carries out (`kinds/`). The
//! skeleton is the same code for all: `waiters` (the queue), `attempts` (the
//! attempt state and its books), `acquire` (when to try and what answers mean),
//! `holding` (grant, expiry, loss), `release` (the whole release path),
//! `handover` (a release that hands the lock to a local waiter), `shutdown` (the
//! manager's shutdown: waiters answered, holds given back), `timers` (the
//! actor's timers and its kind's Redis chores), `life` (idle handshake and
//! supervision) and this file (the actor and its messages).

mod acquire;
mod attempts;
mod deadlock;
mod handover;
mod holding;
mod kinds;
mod life;
mod release;
mod shutdown;
mod subs;
#[cfg(test)]
mod tests;
mod timers;
mod waiters;

use std::sync::Arc;

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, warn};

use super::listen::{Channel, Listener};
use super::shared::Shared;
use super::subscriber::{Resync, Unlocked};
use super::waiting::Waiting;
use crate::error::LockError;
use crate::kind::Kind;
use subs::Subs;

use attempts::Attempts;
use holding::Held;
use kinds::{Chore, Heard, KindState};
use life::Life;
use release::Releases;
use timers::Timers;
use waiters::Gone;
use waiters::Waiter;
use waiters::WaiterQueue;
pub(crate) use waiters::{Reply, Request};

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
    /// Its kind, with the kind's own state (`kinds/`).
    kind: KindState,
    /// Connection, config, client id, subscriber and counters of the manager.
    shared: Arc<Shared>,
    /// The waiting side: who waits, what is asked of Redis for them, what
    /// they listen on.
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
/// because a held lock with nobody waiting keeps these empty (and the boxed
/// ones absent), which is what keeps a held lock's actor small
/// (docs/performance.md, client bytes per held lock).
#[derive(Default)]
struct Wait {
    /// Local waiters, head first.
    queue: WaiterQueue,
    /// The acquisition attempt: in flight, lost, checked, failing (`attempts.rs`).
    attempts: Attempts,
    /// Channel -> subscription state (one channel, or one per fair waiter).
    subs: Subs,
    /// The waiting records of waits over a second (`actors/waiting/records.rs`),
    /// boxed and only while someone waits.
    waiting: Option<Box<Waiting>>,
    /// Its deadlock checks (`deadlock.rs`), boxed and only while a wait is
    /// past `Config::deadlock_timeout`, for the same reason.
    detector: Option<Box<deadlock::Detector>>,
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
            kind: KindState::new(kind),
            shared,
            wait: Wait::default(),
            held: Held::default(),
            releases: Releases::default(),
            timers: Timers::default(),
            life: Life::new(manager),
        }
    }

    /// Brings timers and subscriptions in line with what is left to do: keeps a
    /// deadline timer while waiters wait, unsubscribes channels no waiter listens
    /// on, keeps the kind's periodic timer and sends its chores, and starts the
    /// idle countdown when nothing at all is going on.
    /// (Not "settle": that word is the `Settle` message's, nothing on the wire.)
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        if self.wait.queue.is_empty() {
            self.timers.wake.cancel(ctx);
        } else if !self.timers.wake.is_set() {
            self.schedule(None, ctx);
        }
        let mut subs = std::mem::take(&mut self.wait.subs);
        for mut channel in subs.take_unneeded(|name| self.needs(name)) {
            channel.unsubscribe(&self.shared.subscriber);
        }
        self.wait.subs = subs;
        let every = self.kind.tick_every(&self.wait.queue, &self.shared.config);
        self.timers.keep_ticking(every, ctx, |act, ctx| {
            let chore = act.kind.tick(&act.wait.queue, &act.name, &act.shared);
            act.run_chore(chore, ctx);
        });
        self.send_chores(ctx);
        self.forget_ended_waits(ctx);
        if self.wait.waiting.is_some() {
            // A recorded wait that ended is unrecorded now, not at the next
            // tick: a process that exits right after its wait leaves no record
            // behind. Only while records exist (they are boxed on demand).
            crate::actors::waiting::ended(self, ctx);
        }
        let (idle, after) = (self.is_idle(), self.shared.config.idle_timeout);
        self.timers.idle_countdown(idle, after, ctx, |act, ctx| {
            act.life
                .ask_to_retire(act.name.clone(), act.kind.kind(), ctx)
        });
    }

    /// Nothing at all is going on: no waiter, holding, call or subscription.
    fn is_idle(&self) -> bool {
        self.wait.queue.is_empty()
            && self.held.holdings.is_empty()
            && self.held.lost.is_empty()
            && self.wait.attempts.is_quiet()
            && self.releases.none()
            && !self.kind.busy_with_chores()
            && self.wait.subs.is_empty()
            && self.wait.detector.is_none()
    }

    /// The channel its waiters listen on (for the fair lock, the prefix of each
    /// waiter's own channel). Made when needed rather than kept: only waiters
    /// need it, and a held lock's actor should stay small.
    fn channel(&self) -> String {
        self.kind.scripts().channel(&self.name)
    }

    /// Whether `channel` must stay subscribed: the kind says (some waiter
    /// listens on it, or the holder keeps listening while it takes turns).
    fn needs(&self, channel: &str) -> bool {
        let holding = !self.held.holdings.is_empty();
        self.kind
            .needs(channel, &self.name, &self.wait.queue, holding)
    }

    /// Whether `channel` is subscribed (and routed here).
    fn listening(&self, channel: &str) -> bool {
        self.wait.subs.is_live(channel)
    }

    /// Waiters were taken out of the queue without a grant: the kind does what
    /// it must (the fair lock takes them out of the Redis queue).
    fn left(&mut self, gone: Gone) {
        self.kind.left(gone, &self.wait.queue);
    }

    /// Sends the Redis work the kind has pending.
    fn send_chores(&mut self, ctx: &mut Context<Self>) {
        while let Some(chore) = self.kind.chore(&self.wait.queue, &self.name, &self.shared) {
            self.run_chore(Some(chore), ctx);
        }
    }

    /// Spawns a chore; its outcome goes to the kind, which says whether
    /// waiters may try now.
    fn run_chore(&mut self, chore: Option<Chore>, ctx: &mut Context<Self>) {
        let Some(chore) = chore else {
            return;
        };
        Timers::spawn_chore(chore, ctx, |act, done, ctx| {
            if act.kind.chore_done(done, &mut act.wait.queue, &act.name) {
                act.pump(ctx);
            } else {
                act.reconcile(ctx);
            }
        });
    }

    /// Carries out what the kind made of an unlock message or a subscription.
    fn on_heard(&mut self, heard: Heard, ctx: &mut Context<Self>) {
        match heard {
            Heard::Nothing => {}
            Heard::Wake => self.wake(ctx),
            Heard::Pump => self.pump(ctx),
            Heard::WakeAfter(delay) => {
                // The runtime's timers tick in whole milliseconds: a delay of
                // microseconds is slept on a blocking-pool thread.
                let slept = actix_rt::task::spawn_blocking(move || std::thread::sleep(delay));
                ctx.spawn(slept.into_actor(self).map(|_, act, ctx| act.wake(ctx)));
            }
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
        self.wait.attempts.is_quiet() && self.releases.none()
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
        self.wait.queue.len()
    }
}

impl Handler<Enqueue> for LockActor {
    type Result = ();

    fn handle(&mut self, Enqueue(request, reply): Enqueue, ctx: &mut Context<Self>) {
        let waiter = waiters::waiter(request, reply);
        self.life.received += 1;
        if self.shared.is_shutting_down() {
            // Sent before the manager's shutdown reached it: refused like the rest.
            waiters::fail(waiter, LockError::ShuttingDown);
            self.reconcile(ctx);
            return;
        }
        if self
            .held
            .holdings
            .is_upgrade(waiter.want.req.owner, waiter.want.req.kind)
        {
            // It would wait for its own read holds: refused now, not queued.
            waiters::fail(waiter, LockError::UpgradeRefused);
            self.reconcile(ctx);
            return;
        }
        let reentrant = self
            .held
            .holdings
            .reenters(waiter.want.req.owner, waiter.want.req.kind);
        if reentrant && !waiter.want.req.reentrant {
            // A non-reentrant lock its owner holds: refused now, not queued (a
            // hold taken meanwhile is refused by the acquire script instead).
            waiters::fail(waiter, LockError::ReentryRefused);
            self.reconcile(ctx);
            return;
        }
        if waiter.deadline.is_none()
            && !waiter.once
            && self
                .held
                .holdings
                .blocks(waiter.want.req.owner, waiter.want.req.kind)
        {
            // A waiter with no deadline behind a holder of this same process may be
            // waiting for itself (the same task, another owner): say so, later, if
            // it is still there then. Only such waiters get the timer: one on every
            // acquisition would stay in the actor for the whole delay (135 bytes
            // per held lock).
            let id = waiter.want.req.id;
            ctx.run_later(self.shared.config.stall_warning, move |act, _| {
                act.warn_if_stalled(id)
            });
        }
        if self.wait.queue.is_empty() {
            self.kind.wait_begins();
        }
        self.wait.queue.push(waiter, reentrant);
        self.pump(ctx);
    }
}

impl LockActor {
    /// The waiter `id` has waited [`Config::stall_warning`](crate::Config::stall_warning)
    /// without a deadline: if another owner of this process still keeps it out,
    /// warn that it may be waiting for itself.
    fn warn_if_stalled(&self, id: u64) {
        let Some(w) = self.wait.queue.find(id) else {
            return;
        };
        if let Some(h) = self.held.holdings.iter().find(|h| {
            h.owner != w.want.req.owner
                && (h.kind.excludes(w.want.req.kind) || w.want.req.kind.excludes(h.kind))
        }) {
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

    fn handle(&mut self, msg: Cancel, ctx: &mut Context<Self>) {
        if let Some(w) = self.wait.queue.take(msg.waiter) {
            debug!(lock = %self.name, waiter = msg.waiter, "waiter left");
            self.left(Gone::of(&w));
            self.abandon(&w, ctx);
        }
        self.pump(ctx);
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        tracing::trace!(lock = %self.name, channel = %msg.channel, wake_all = msg.wake_all, "unlock message");
        let heard = self
            .kind
            .heard(&msg.channel, &self.name, &mut self.wait.queue);
        self.on_heard(heard, ctx);
    }
}

impl Listener for LockActor {
    fn channel(&mut self, name: &str) -> Option<&mut Channel> {
        self.wait.subs.get_mut(name)
    }

    /// The lock may have been released between the refused attempt and the
    /// subscription: the waiters of `name` try now.
    fn subscribed(&mut self, name: &str, ctx: &mut Context<Self>) {
        let heard = self.kind.subscribed(name, &self.name, &mut self.wait.queue);
        self.on_heard(heard, ctx);
    }
}

impl Handler<Resync> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        // Messages may have been lost while the subscriber was away.
        self.kind.resync(&mut self.wait.queue);
        self.wake(ctx);
    }
}
