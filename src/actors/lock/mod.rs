//! The [`LockActor`]: one per lock name and kind, owning that lock's waiters, timers
//! and the local view of who holds it.
//!
//! Everything that happens to one lock in this process is serialised through its
//! actor, which is what keeps the rules simple: a waiter behind a local holder it
//! cannot share with does not ask Redis at all (the local release hands over),
//! and the watchdog and the waiters' timers are timers the actor keeps and
//! cancels. The Redis side is only ever changed by the scripts in [`crate::wire`].
//!
//! This file is the actor: its parts, and the glue that carries out what they
//! decide (every `impl LockActor` block is here). Each other file owns one part,
//! a type whose methods decide or make the Redis call: the waiting engine's lock
//! policy and the waiting side (`waits`, run by the engine of
//! `actors/waiting/engine/`), what a waiter is (`waiters`), the acquisition
//! calls (`acquire`), the holdings (`holding`), the release and its answer
//! (`release`), the hand-over to a local waiter (`handover`), the deadlock
//! checks (`deadlock`), the timers and the kind's chores (`timers`), the idle
//! handshake and supervision (`life`), the shutdown (`shutdown`), the messages
//! (`messages`) and the kinds (`kinds/`: the exclusive lock's turns, the fair
//! lock's places, the spin lock's backoff, each kind's decisions as data).

mod acquire;
mod deadlock;
mod handoff;
mod handover;
mod holding;
mod kinds;
mod life;
mod messages;
mod release;
mod shutdown;
#[cfg(test)]
mod tests;
mod timers;
mod waiters;
mod waits;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, warn};

use super::listen::{self, Alarm};
use super::shared::Shared;
use super::waiting::engine::{Ask, Effect, Engine, Event, Taken};
use crate::error::{redis_is_protocol_error, LockError, LostReason};
use crate::guard::{LockGuard, ReleaseOutcome};
use crate::kind::Kind;
use crate::wire::ReleaseReply;

use acquire::Calls;
use deadlock::Detector;
use holding::{Claim, Held};
use kinds::{AfterRelease, Chore, Giveback, KindState};
use life::Life;
#[cfg(test)]
pub(crate) use messages::{Derail, QueueLen};
pub(crate) use messages::{Enqueue, Idle, IsQuiet, ManagerGone};
use release::{Releases, Releasing, Then};
use timers::Timers;
pub(crate) use waiters::Request;
use waiters::{WaiterQueue, Want};
use waits::{HandOver, LockWaits, Side, Wait};

/// What a release's caller gets back, in the actor's context.
type ReleaseFuture = ResponseActFuture<LockActor, Result<ReleaseOutcome, LockError>>;

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
            wait: Wait::new(kind),
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

/// The runner of the waiting engine: each event goes to the engine, and the
/// effects that come back are carried out here (the calls they need are made
/// by [`acquire::Calls`]).
impl LockActor {
    /// Hands `event` to the engine and carries out what it says; with no
    /// engine (nobody waits or listens), only a waiter that queues makes one.
    fn run(&mut self, event: Event<LockWaits>, ctx: &mut Context<Self>) {
        if self.wait.side.engine_mut().is_some() || matches!(event, Event::Join { .. }) {
            self.wait.side.mark(&self.held.holdings);
            let effects = self.engine().handle(event);
            self.apply(effects, ctx);
            self.wait.side.idle_if_empty();
        }
        self.reconcile(ctx);
    }

    /// Something changed outside the engine that may let a waiter ask (a
    /// release, a holding lost): a check held back for a release goes out
    /// now, and the queue looks again.
    fn look(&mut self, ctx: &mut Context<Self>) {
        if self.releases.none() {
            if let Some(want) = self.wait.check.take() {
                self.resolve(*want, ctx);
            }
        }
        self.run(Event::Look, ctx);
    }

    /// The engine, made if there is none.
    fn engine(&mut self) -> &mut Engine<LockWaits> {
        self.wait.side.engine(&self.name, &self.shared.config)
    }

    /// The acquisition calls of this lock.
    fn calls(&self) -> Calls<'_> {
        let scripts = self.wait.side.kind().scripts();
        Calls {
            name: &self.name,
            shared: &self.shared,
            scripts,
        }
    }

    /// The kind, and its waiters, for `f` ([`Side::with_kind`]).
    fn with_kind<R>(&mut self, f: impl FnOnce(&mut KindState, &mut WaiterQueue) -> R) -> R {
        self.wait.side.with_kind(f)
    }

    /// Carries out `effects`, then those they gave rise to.
    fn apply(&mut self, effects: Vec<Effect<LockWaits>>, ctx: &mut Context<Self>) {
        for effect in effects {
            self.carry_out(effect, ctx);
        }
        let more = self.wait.side.engine_mut().map(Engine::take_effects);
        if let Some(more) = more.filter(|m| !m.is_empty()) {
            self.apply(more, ctx);
        }
    }

    fn carry_out(&mut self, effect: Effect<LockWaits>, ctx: &mut Context<Self>) {
        match effect {
            Effect::Ask(ask) => self.ask(ask, ctx),
            Effect::Grant(taken) => self.granted(taken, ctx),
            Effect::Undo { want, .. } => {
                // A release undoes the hold, not a place in a Redis queue:
                // that is left too (a busy answer that placed it after this
                // leave went out leaves it again).
                let place = self.wait.side.kind().place(&want);
                self.with_kind(|kind, queue| kind.left(place.into_iter().collect(), queue));
                self.undo(want, ctx);
            }
            Effect::Leave(places) => self.with_kind(|kind, queue| kind.left(places, queue)),
            Effect::Check { want } if self.releases.none() => self.resolve(want, ctx),
            // A release in flight would blur the owner's hold count: the check
            // goes out once it is answered (`look`).
            Effect::Check { want } => self.wait.check = Some(Box::new(want)),
            Effect::TimedOut(waiters) => self.calls().timed_out(waiters),
            Effect::Subscribe(name) => {
                self.with_kind(|kind, _| kind.subscribing());
                let subscriber = self.shared.subscriber.clone();
                listen::subscribe(self, &name, &subscriber, ctx);
            }
            Effect::Unsubscribe(name) => listen::unsubscribe(&self.shared.subscriber, &name),
            Effect::Arm(delay) => self.arm(delay, ctx),
            Effect::Disarm => self.timers.wake.cancel(ctx),
            Effect::WakeAfter(delay) => {
                listen::after(delay, ctx, |act, ctx| act.run(Event::Look, ctx))
            }
            // Only with direct handoff: its channels outlive a wait by the
            // idle timeout, so the next waiter of a lock taken in turns finds
            // them subscribed.
            Effect::Linger => {
                let after = self.shared.config.idle_timeout;
                self.timers
                    .linger(after, ctx, |act, ctx| act.run(Event::IdleOver, ctx));
            }
            // A lock's waits are recorded once they wait (`arm`), and its key
            // is never missing (an acquisition makes it).
            Effect::Watch | Effect::KeyFound | Effect::KeyMissing { .. } => {}
        }
    }

    /// Arms the wake timer; someone waits past an attempt, so the wait is
    /// recorded for operators and watched for deadlocks (only then: a lock
    /// granted at once costs neither).
    fn arm(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        let slot: fn(&mut Self) -> &mut Alarm = |act| &mut act.timers.wake;
        self.timers
            .wake
            .set(ctx, delay, slot, |act, ctx| act.run(Event::Timer, ctx));
        if self.wait.side.has_waiters() {
            crate::actors::waiting::watch(self, ctx);
            self.watch_for_deadlocks(ctx);
        }
    }

    /// Sends one acquisition attempt; its answer goes back to the engine (an
    /// answer the protocol does not allow restarts the actor instead).
    fn ask(&mut self, ask: Ask<Want>, ctx: &mut Context<Self>) {
        let (waiter, sent) = (ask.waiter, Instant::now());
        let fut = self.calls().attempt(&ask.want);
        ctx.spawn(fut.into_actor(self).map(move |reply, act, ctx| {
            if let Err(e) = &reply {
                if redis_is_protocol_error(e) {
                    // The engine keeps the attempt out; the restart checks it.
                    return act.life.restart(&act.name, e, ctx);
                }
            }
            // A handoff's message that came while it was out may make a
            // busy answer a grant (`handoff.rs`).
            let answer = handoff::answered(act, waiter, reply, sent);
            let answered = Event::Answered {
                waiter,
                reply: answer.reply,
                sent: answer.sent,
            };
            act.run(answered, ctx);
            if let Some((field, lease)) = answer.extend {
                handoff::extend(act, &field, lease, ctx);
            }
        }));
    }

    /// Redis granted a waiter the lock: it gets a guard, or, if it left
    /// meanwhile, the guard is dropped, which releases the hold.
    fn granted(&mut self, mut taken: Taken<LockWaits>, ctx: &mut Context<Self>) {
        let Some((claim, token, confirmed)) = self.calls().granted(&mut taken) else {
            return;
        };
        let guard = self.grant(claim, token, taken.sent, ctx);
        if let Err(guard) = self
            .engine()
            .deliver(taken, guard.confirmed_by_replica(confirmed))
        {
            debug!(lock = %self.name, "granted to a waiter that left; releasing");
            drop(guard);
        }
    }

    /// The waiter of `want` left while its attempt was out: gives the attempt
    /// back right behind it ([`Calls::undo`]); a give-back that fails is
    /// checked as a lost reply.
    fn undo(&mut self, want: Want, ctx: &mut Context<Self>) {
        let Some(undo) = self.calls().undo(&want, &self.held.holdings) else {
            return;
        };
        ctx.spawn(undo.into_actor(self).map(move |res, act, ctx| match res {
            Ok(reply) => {
                debug!(lock = %act.name, ?reply, "gave back the attempt of a waiter that left")
            }
            Err(e) => {
                warn!(lock = %act.name, error = %e, "could not give back the attempt of a waiter that left; checking it");
                act.run(Event::UndoFailed(want), ctx);
            }
        }));
    }

    /// Finds out what an attempt with a lost reply did ([`Calls::resolve`]).
    fn resolve(&mut self, want: Want, ctx: &mut Context<Self>) {
        let fut = self.calls().resolve(&want, &self.held.holdings);
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            if let Ok(true) = res {
                debug!(lock = %act.name, "an attempt with a lost reply had taken a hold; gave it back");
            }
            act.run(Event::Checked(res.map(|_| ())), ctx);
        }));
    }
}

/// The release path: the work of each step is `release.rs`'s and
/// `handover.rs`'s; here it is spawned and its answer applied.
impl LockActor {
    /// Runs the release script for one hold of a live holding (or, for its
    /// last hold, hands the lock over when the kind says so).
    fn release_hold(&mut self, epoch: u64, ctx: &mut Context<Self>) -> ReleaseFuture {
        let Some(releasing) = Releasing::of(&mut self.held, epoch, &self.name, &self.shared) else {
            return Box::pin(fut::ready(Err(LockError::NotHeld)));
        };
        if releasing.last {
            if let Some(handover) = self.hand_over(epoch, &releasing.giveback, ctx) {
                return handover;
            }
        }
        self.releases.start();
        let sent = releasing.sent;
        let fut = releasing.send(self.wait.side.kind().scripts(), self.shared.clone());
        Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            let out = act.on_released(epoch, sent, res, ctx);
            act.look(ctx);
            out
        }))
    }

    /// Applies a release script's answer ([`Releases::answered`]).
    fn on_released(
        &mut self,
        epoch: u64,
        sent: Instant,
        res: redis::RedisResult<ReleaseReply>,
        ctx: &mut Context<Self>,
    ) -> Result<ReleaseOutcome, LockError> {
        let holdings = &self.held.holdings;
        let (out, then) = self
            .releases
            .answered(holdings, epoch, res, &self.name, &self.shared);
        for step in then {
            match step {
                Then::Freed { published, heard } => {
                    let after = self.wait.side.released(published, heard, &self.name);
                    if after == AfterRelease::Yield {
                        // The head waiter holds back; the engine learns it as
                        // the queue looks.
                        self.run(Event::Look, ctx);
                    }
                }
                Then::Forget => {
                    self.forget(epoch);
                    self.arm_expiry(ctx);
                }
                Then::Lose => self.lose(epoch, LostReason::OwnerGone, ctx),
                Then::Renew => {
                    if let Some(h) = self.held.holdings.get_mut(epoch) {
                        h.valid_until = sent + h.lease;
                    }
                    self.arm_expiry(ctx);
                }
                Then::ReleaseAgain => {
                    let fut = self.release_hold(epoch, ctx);
                    ctx.spawn(fut.map(|_, _, _| ()));
                }
                Then::Restart(why) => self.life.restart(&self.name, &why, ctx),
            }
        }
        out
    }

    /// The last hold of holding `epoch` is being given back: hands the lock to
    /// the local head waiter in the same call when the kind says so and
    /// nothing in flight (an attempt, a check, another release) would race
    /// with it. `None`: a plain release must run.
    fn hand_over(
        &mut self,
        epoch: u64,
        giveback: &Giveback,
        ctx: &mut Context<Self>,
    ) -> Option<ReleaseFuture> {
        if self.wait.check.is_some() || !self.releases.none() {
            return None;
        }
        let holder = self.held.holdings.get(epoch)?.owner;
        let HandOver {
            ask,
            count,
            effects,
        } = self.wait.side.hand_over_to(holder)?;
        self.apply(effects, ctx);
        let (waiter, to) = (ask.waiter, self.calls().attempt_of(&ask.want));
        self.releases.start();
        let (scripts, shared, sent) = (self.calls().scripts, self.shared.clone(), Instant::now());
        let fut = handover::transfer(scripts, shared, giveback.clone(), to, count, sent);
        Some(Box::pin(fut.into_actor(self).map(
            move |handing, act, ctx| {
                let read = handing.read(act.wait.side.listens(&act.name), &act.name);
                if let Some(books) = read.books {
                    act.with_kind(|kind, _| kind.handed(books));
                }
                let out = act.on_released(epoch, sent, read.release, ctx);
                act.run(
                    acquire::handed_to(waiter, sent, read.granted, read.unknown),
                    ctx,
                );
                out
            },
        )))
    }
}

/// The deadlock checks: what is due and what a check found are the
/// [`Detector`]'s, and a round is its message ([`deadlock::Round`]); here
/// the rounds are armed, and what ended is forgotten.
impl LockActor {
    /// Someone waits: arms the next round of checks, if detection is on and
    /// none is armed or running.
    fn watch_for_deadlocks(&mut self, ctx: &mut Context<Self>) {
        let Some(timeout) = self.shared.config.deadlock_timeout else {
            return;
        };
        let (detector, waiters) = (self.wait.detector.as_deref_mut(), self.wait.side.waiters());
        let Some(at) = Detector::next_round(detector, waiters, timeout) else {
            return;
        };
        let delay = at.saturating_duration_since(Instant::now());
        let slot: fn(&mut Self) -> &mut Alarm = |act| act.detector().alarm();
        let alarm = self.detector().alarm();
        alarm.set(ctx, delay, slot, |_, ctx| ctx.notify(deadlock::Round));
    }

    fn detector(&mut self) -> &mut Detector {
        self.wait.detector.get_or_insert_with(Box::default)
    }

    /// Drops what was checked of waits that ended, publishes the waits left
    /// (the holders this process's walks read must be the ones holding now),
    /// and drops the detector once nothing is left.
    fn forget_ended_waits(&mut self, ctx: &mut Context<Self>) {
        let Some(detector) = self.wait.detector.as_mut() else {
            return;
        };
        let side = &self.wait.side;
        let waits = |id| side.waiters().any(|w| w.id == id && !w.is_gone());
        let left = detector.forget_ended(waits, &self.name, &self.shared);
        let kind = self.wait.side.kind().kind();
        deadlock::publish(&self.shared, &self.name, kind, &self.held.holdings, left);
        if !self.wait.side.has_waiters() && detector.is_done() {
            detector.alarm().cancel(ctx);
            self.wait.detector = None;
        }
    }
}
