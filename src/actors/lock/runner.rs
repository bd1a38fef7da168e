//! The lock actor as the runner of the waiting engine: each event goes to the
//! engine (`actors/waiting/engine/`, with the lock's policy in `waits.rs`), and
//! the effects that come back are carried out here: an attempt sent and its
//! answer handed back, a grant made into a guard, a leaver's attempt undone, a
//! lost reply checked, a subscription made, a timer armed. The calls these
//! need are [`Calls`]'s (`acquire.rs`); the rest of the actor's glue (its
//! parts, the holdings, the release path) is `mod.rs`'s. Apart because it
//! changes with the engine's vocabulary, the rest with the lock's own.

use std::time::Duration;

use actix::prelude::*;
use tracing::{debug, warn};

use super::acquire::Calls;
use super::handoff;
use super::kinds::KindState;
use super::waiters::{WaiterQueue, Want};
use super::waits::LockWaits;
use super::LockActor;
use crate::actors::listen::{self, Alarm};
use crate::actors::waiting::engine::{Ask, Effect, Engine, Event, Taken};
use crate::error::redis_is_protocol_error;

/// The runner of the waiting engine: each event goes to the engine, and the
/// effects that come back are carried out here (the calls they need are made
/// by [`Calls`]).
impl LockActor {
    /// Hands `event` to the engine and carries out what it says; with no
    /// engine (nobody waits or listens), only a waiter that queues makes one.
    pub(super) fn run(&mut self, event: Event<LockWaits>, ctx: &mut Context<Self>) {
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
    pub(super) fn look(&mut self, ctx: &mut Context<Self>) {
        if self.releases.none() {
            if let Some(want) = self.wait.check.take() {
                self.resolve(*want, ctx);
            }
        }
        self.run(Event::Look, ctx);
    }

    /// The engine, made if there is none.
    pub(super) fn engine(&mut self) -> &mut Engine<LockWaits> {
        self.wait.side.engine(&self.name, &self.shared.config)
    }

    /// The acquisition calls of this lock.
    pub(super) fn calls(&self) -> Calls<'_> {
        let scripts = self.wait.side.kind().scripts();
        Calls {
            name: &self.name,
            shared: &self.shared,
            scripts,
        }
    }

    /// The kind, and its waiters, for `f` ([`Side::with_kind`](super::waits::Side::with_kind)).
    pub(super) fn with_kind<R>(
        &mut self,
        f: impl FnOnce(&mut KindState, &mut WaiterQueue) -> R,
    ) -> R {
        self.wait.side.with_kind(f)
    }

    /// Carries out `effects`, then those they gave rise to.
    pub(super) fn apply(&mut self, effects: Vec<Effect<LockWaits>>, ctx: &mut Context<Self>) {
        for effect in effects {
            self.carry_out(effect, ctx);
        }
        let more = self.wait.side.engine_mut().map(Engine::take_effects);
        if let Some(more) = more.filter(|m| !m.is_empty()) {
            self.apply(more, ctx);
        }
    }

    pub(super) fn carry_out(&mut self, effect: Effect<LockWaits>, ctx: &mut Context<Self>) {
        match effect {
            Effect::Ask(ask) => self.ask(*ask, ctx),
            Effect::Grant(taken) => self.granted(*taken, ctx),
            Effect::Undo { want, .. } => {
                // A release undoes the hold, not a place in a Redis queue:
                // that is left too (a busy answer that placed it after this
                // leave went out leaves it again).
                let place = self.wait.side.kind().place(&want);
                self.with_kind(|kind, queue| kind.left(place.into_iter().collect(), queue));
                self.undo(*want, ctx);
            }
            Effect::Leave(places) => self.with_kind(|kind, queue| kind.left(places, queue)),
            Effect::Check { want } if self.releases.none() => self.resolve(*want, ctx),
            // A release in flight would blur the owner's hold count: the check
            // goes out once it is answered (`look`).
            Effect::Check { want } => self.wait.check = Some(want),
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
    pub(super) fn arm(&mut self, delay: Duration, ctx: &mut Context<Self>) {
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
    pub(super) fn ask(&mut self, ask: Ask<Want>, ctx: &mut Context<Self>) {
        let (waiter, sent) = (ask.waiter, ask.sent);
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
    pub(super) fn granted(&mut self, mut taken: Taken<LockWaits>, ctx: &mut Context<Self>) {
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
    pub(super) fn undo(&mut self, want: Want, ctx: &mut Context<Self>) {
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
    pub(super) fn resolve(&mut self, want: Want, ctx: &mut Context<Self>) {
        let fut = self.calls().resolve(&want, &self.held.holdings);
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            if let Ok(true) = res {
                debug!(lock = %act.name, "an attempt with a lost reply had taken a hold; gave it back");
            }
            act.run(Event::Checked(res.map(|_| ())), ctx);
        }));
    }
}
