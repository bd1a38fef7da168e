//! Acquisition: the lock actor as the waiting engine's runner. Every event of
//! the waiting side (a waiter queued or gone, an attempt's answer, an unlock
//! message, a subscription made, the timer) goes to the engine
//! (`actors/waiting/engine/`, with the lock's policy in `waits.rs`), and this
//! file carries out the effects that come back: the kind's acquire script
//! sent, the guard made and delivered, a take undone, a lost attempt checked,
//! the channel subscribed, the timer armed.
//!
//! What only a lock does with them: a waiter that leaves while its attempt is
//! out has that attempt given back by a release sent right behind it
//! ([`LockActor::undo`]), so that Redis undoes a late grant even if this
//! process is gone by the time Redis runs it; an attempt whose answer is lost
//! is checked by the owner's hold count before anyone asks again
//! ([`LockActor::resolve`]), after any release in flight (which would blur
//! that count); a timeout names who holds the lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, warn};

use super::holding::Claim;
use super::kinds::{self, Giveback, KindState};
use super::waiters::{WaiterQueue, Want, WhoHolds};
use super::waits::LockWaits;
use super::LockActor;
use crate::actors::listen::{self, Alarm};
use crate::actors::waiting::engine::{Ask, Effect, Engine, Event, Taken, Waiter};
use crate::durations::millis;
use crate::error::redis_is_protocol_error;
use crate::wire::{self, AcquireReply};

impl LockActor {
    /// Hands `event` to the engine and carries out what it says; with no
    /// engine (nobody waits or listens), only a waiter that queues makes one.
    pub(super) fn run(&mut self, event: Event<LockWaits>, ctx: &mut Context<Self>) {
        if self.wait.side.engine_mut().is_some() || matches!(event, Event::Join { .. }) {
            self.mark_waiters();
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

    /// The kind, and its waiters (none while nobody waits), for `f`.
    pub(super) fn with_kind<R>(
        &mut self,
        f: impl FnOnce(&mut KindState, &mut WaiterQueue) -> R,
    ) -> R {
        match self.wait.side.kind_and_queue() {
            (kind, Some(queue)) => f(kind, queue),
            (kind, None) => f(kind, &mut WaiterQueue::default()),
        }
    }

    /// Tells the policy what only the actor knows: whether this process holds
    /// the lock, and which waiters a local holding keeps out.
    fn mark_waiters(&mut self) {
        let holdings = &self.held.holdings;
        let Some(engine) = self.wait.side.engine_mut() else {
            return;
        };
        let (policy, queue) = engine.policy_mut();
        policy.holding = !holdings.is_empty();
        for w in queue.iter_mut() {
            w.want.blocked = holdings.blocks(w.want.req.owner, w.want.req.kind);
        }
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
            Effect::TimedOut(waiters) => self.timed_out(waiters),
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
            // A lock's waits are recorded once they wait (`arm`), its key is
            // never missing (an acquisition makes it), and it never lingers.
            Effect::Watch | Effect::KeyFound | Effect::KeyMissing { .. } | Effect::Linger => {}
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
        let waiter = ask.waiter;
        let call = self.attempt_of(&ask.want);
        let sent = Instant::now();
        let fut = self.wait.side.kind().scripts().acquire(&self.shared, call);
        ctx.spawn(fut.into_actor(self).map(move |reply, act, ctx| {
            if let Err(e) = &reply {
                if redis_is_protocol_error(e) {
                    // The engine keeps the attempt out; the restart checks it.
                    return act.life.restart(&act.name, e, ctx);
                }
            }
            let answered = Event::Answered {
                waiter,
                reply,
                sent,
            };
            act.run(answered, ctx);
        }));
    }

    /// The acquisition attempt `want` asks for, laid out for its kind's script.
    pub(super) fn attempt_of(&self, want: &Want) -> kinds::Attempt {
        let config = &self.shared.config;
        kinds::Attempt {
            name: self.name.clone(),
            kind: want.req.kind,
            field: want.req.field.clone(),
            lease_ms: millis(want.req.lease.unwrap_or(config.watchdog_lease)),
            queue: want.placing,
            token_ttl_ms: millis(config.token_ttl),
            new_owner: want.new_owner_now,
            reentrant: want.req.reentrant,
            delay_ms: millis(config.lock_delay),
        }
    }

    /// Redis granted a waiter the lock: it gets a guard, or, if it left
    /// meanwhile, the guard is dropped, which releases the hold.
    fn granted(&mut self, mut taken: Taken<LockWaits>, ctx: &mut Context<Self>) {
        let Some(won) = taken.won.take() else {
            return; // a lock's grant always comes of its own answer
        };
        let req = &mut taken.waiter.want.want.req;
        let waited = req.since.elapsed();
        let metric = super::holding::metric_name(&self.shared, &self.name);
        crate::stats::record::acquired(req.kind, waited, metric);
        let (token, holds) = (won.token, won.holds);
        req.span
            .in_scope(|| debug!(token, holds, ?waited, "acquired"));
        let claim = Claim {
            kind: req.kind,
            owner: req.owner,
            field: req.field.clone(),
            lease: req.lease,
            on_lost: req.on_lost.take(),
        };
        let guard = self
            .grant(claim, won.token, taken.sent, ctx)
            .confirmed_by_replica(won.confirmed);
        if let Err(guard) = self.engine().deliver(taken, guard) {
            debug!(lock = %self.name, "granted to a waiter that left; releasing");
            drop(guard);
        }
    }

    /// The waiter of `want` left while its attempt was out: an owner-checked
    /// release of its field is sent now, right behind it, so that Redis runs
    /// it next whenever it runs the acquisition: a grant that lands after the
    /// waiter left is undone even if this process exits before the answer
    /// comes (a frozen server runs both when it resumes). It is one `EVAL`
    /// carrying the script, never resent ([`wire::call_once`]), so that it
    /// needs nothing from the server's script cache and cannot land behind a
    /// later attempt. Every kind's acquisition is undone exactly by one
    /// release of its field (`Scripts::undo_abandoned` says how); a
    /// non-reentrant one only while its owner holds nothing here (its refused
    /// re-entry followed by a release would take the hold it had). Either
    /// way, an answer that says it took is checked after ([`Self::resolve`]).
    fn undo(&mut self, want: Want, ctx: &mut Context<Self>) {
        let req = &want.req;
        let holding = self.held.holdings.of(req.owner, req.kind);
        if !req.reentrant && holding.is_some_and(|h| h.guards > 0) {
            return;
        }
        let giveback = Giveback {
            name: self.name.clone(),
            kind: req.kind,
            field: req.field.clone(),
            lease_ms: millis(req.lease.unwrap_or(self.shared.config.watchdog_lease)),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        };
        let scripts = self.wait.side.kind().scripts();
        let Some(undo) = scripts.undo_abandoned(&self.shared, giveback) else {
            return;
        };
        ctx.spawn(undo.into_actor(self).map(move |res, act, ctx| match res {
            Ok(reply) => {
                debug!(lock = %act.name, ?reply, "gave back the attempt of a waiter that left")
            }
            Err(e) => {
                // Not known to have run: what the attempt did is checked by
                // the owner's hold count, as for a lost reply.
                warn!(lock = %act.name, error = %e, "could not give back the attempt of a waiter that left; checking it");
                act.run(Event::UndoFailed(want), ctx);
            }
        }));
    }

    /// These waiters' deadlines passed with nothing to tell them but a
    /// timeout: each is told who held the lock then.
    fn timed_out(&mut self, waiters: Vec<(Waiter<LockWaits>, Duration)>) {
        for _ in &waiters {
            self.shared.counters.timeout();
        }
        let who = WhoHolds {
            conn: self.shared.node.conn(),
            name: self.name.clone(),
            ours: format!("{}:", self.shared.client_id),
        };
        who.answer(waiters);
    }

    /// Finds out what an attempt with a lost reply did, and undoes it if it took a
    /// hold: the owner's count in Redis is compared with the guards that exist here.
    /// A hold that no guard accounts for is given back at once; nothing is granted
    /// from an unknown outcome (its fencing token is unknown too).
    pub(super) fn resolve(&mut self, want: Want, ctx: &mut Context<Self>) {
        let req = &want.req;
        let held_here = self.held.holdings.of(req.owner, req.kind);
        let expected = held_here.map_or(0, |h| h.guards);
        let lease = held_here.map_or(self.shared.config.watchdog_lease, |h| h.lease);
        let mut conn = self.shared.node.conn();
        let (name, field) = (self.name.clone(), req.field.clone());
        let giveback = Giveback {
            name: name.clone(),
            kind: req.kind,
            field: field.clone(),
            lease_ms: millis(lease),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        };
        let release = self
            .wait
            .side
            .kind()
            .scripts()
            .release(&self.shared, giveback);
        let fut = async move {
            if wire::hold_count(&mut conn, &name, &field).await? <= expected {
                return Ok(false);
            }
            release.await?;
            Ok::<_, redis::RedisError>(true)
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            if let Ok(true) = res {
                debug!(lock = %act.name, "an attempt with a lost reply had taken a hold; gave it back");
            }
            act.run(Event::Checked(res.map(|_| ())), ctx);
        }));
    }

    /// A hand-over's answer, as the answer to the attempt of `waiter`: granted
    /// with `token` (and `confirmed` by a replica), or not (`unknown`: it may
    /// have been, and is checked).
    pub(super) fn handed_to(
        &mut self,
        waiter: u64,
        sent: Instant,
        granted: Option<(u64, bool)>,
        unknown: bool,
        ctx: &mut Context<Self>,
    ) {
        let event = match granted {
            Some((token, confirmed)) => Event::Answered {
                waiter,
                reply: Ok(AcquireReply::Acquired {
                    token,
                    holds: 1,
                    confirmed,
                }),
                sent,
            },
            None => Event::Withdrawn { waiter, unknown },
        };
        self.run(event, ctx);
    }
}
