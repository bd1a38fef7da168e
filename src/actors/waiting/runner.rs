//! The runner: the one actix actor, [`SyncActor`], that every synchronizer
//! (plain, permit-expirable and fair semaphore, latch) runs as, generic over
//! its policy. It owns the waiting engine (`engine/`) and the parts that need
//! an actor's context (the timer, the idle alarm, the waiting records, the
//! policy's `Extra`: permit holdings or Redis-queue places), turns messages
//! into the engine's events, and carries out the effects that come back: the
//! attempt sent under its op id, the grant made and delivered, the undo sent
//! exactly once and counted as unsettled, the subscription asked for, the
//! timer armed.
//!
//! What a policy does with Redis is its [`Calls`]: its acquire and undo
//! scripts, how it makes a grant, and the hooks for the parts only it has.
//! One actor body for all of them keeps each rule in one place, as one
//! generic broker actor serves every message type.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use tracing::{debug, warn};

use super::engine::{Ask, Effect, Engine, Event, Policy, Taken, Waiter};
use super::{ended, send_once, timeout, watch, Waited, Waiting, Waits};
use crate::actors::listen::{self, Alarm, Channel, Listener};
use crate::actors::shared::{Shared, ShutDown};
use crate::actors::subscriber::{Resync, Unlocked};
use crate::sync_view::SynchronizerKind;
use crate::wire::waiting::WaitKind;
use crate::wire::Undone;

/// What a policy says to Redis, and what it adds to the actor.
pub(crate) trait Calls: Policy + Unpin + 'static {
    /// Its own state that needs the actor (permit holdings, places).
    type Extra: Default + Unpin;
    /// What its keys and waiting records are labelled.
    const KIND: SynchronizerKind;

    /// One attempt.
    fn ask(
        shared: &Shared,
        name: &Arc<str>,
        ask: Ask<Self::Want>,
    ) -> LocalBoxFuture<'static, redis::RedisResult<Self::Reply>>;

    /// One copy of the undo of the take under `op` (sent again under the same
    /// op while a repeat is recognised). Never asked of a policy without op ids.
    fn undo(
        _shared: &Shared,
        _name: &Arc<str>,
        _op: &Arc<str>,
        _want: &Self::Want,
    ) -> LocalBoxFuture<'static, redis::RedisResult<Undone>> {
        Box::pin(futures::future::ready(Ok(Undone::Cancelled)))
    }

    /// Finds out what a lost attempt for `want` did and gives back a take
    /// that no grant accounts for. Only asked of a policy that
    /// [`Policy::checks_lost`]; the others have nothing to check.
    fn check(
        _act: &mut SyncActor<Self>,
        _want: &Self::Want,
    ) -> LocalBoxFuture<'static, redis::RedisResult<()>> {
        Box::pin(futures::future::ready(Ok(())))
    }

    /// Makes the grant of a waiter whose take (sent at `sent`) succeeded.
    fn grant(
        act: &mut SyncActor<Self>,
        want: &Self::Want,
        won: Option<Self::Won>,
        sent: Instant,
        ctx: &mut Context<SyncActor<Self>>,
    ) -> Self::Grant;

    /// A grant found its caller gone: drops what was made for it.
    fn ungrant(
        _act: &mut SyncActor<Self>,
        _grant: Self::Grant,
        _ctx: &mut Context<SyncActor<Self>>,
    ) {
    }

    /// Answers these waiters, whose deadline passed, with a timeout (each
    /// waited this long); a policy that [`Policy::names_holder`] reads who
    /// holds first. Only asked of such a policy.
    fn timed_out(
        _act: &mut SyncActor<Self>,
        waiters: Vec<(Waiter<Self>, Duration)>,
        _ctx: &mut Context<SyncActor<Self>>,
    ) {
        for (w, waited) in waiters {
            let _ = w.answer(Err(timeout(waited)));
        }
    }

    /// Takes these places out of the Redis queue.
    fn leave(_act: &mut SyncActor<Self>, _ids: Vec<Arc<str>>, _ctx: &mut Context<SyncActor<Self>>) {
    }

    /// After each event's effects: keeps its own parts in step.
    fn after(_act: &mut SyncActor<Self>, _ctx: &mut Context<SyncActor<Self>>) {}
}

/// See the module documentation: one per name and policy in a process.
pub(crate) struct SyncActor<P: Calls> {
    /// The synchronizer's name (its key).
    pub(crate) name: Arc<str>,
    /// The manager's connection, subscriber and settings.
    pub(crate) shared: Arc<Shared>,
    /// Waiters, the attempt, the channels, and every decision.
    pub(crate) engine: Engine<P>,
    /// The policy's own state that needs the actor.
    pub(crate) extra: P::Extra,
    /// The fallback / deadline timer.
    timer: Alarm,
    /// Ends a lingering subscription once nobody waited for a while.
    idle: Alarm,
    /// The waiting records and the missing-key warning.
    waiting: Waiting,
}

impl<P: Calls> SyncActor<P> {
    /// The actor of `name` under `policy`, not started.
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>, policy: P) -> SyncActor<P> {
        SyncActor {
            waiting: Waiting::new(name.clone(), WaitKind::Sync(P::KIND)),
            engine: Engine::new(policy, shared.config.clone()),
            extra: P::Extra::default(),
            name,
            shared,
            timer: Alarm::default(),
            idle: Alarm::default(),
        }
    }

    /// Hands `event` to the engine and carries out what it says.
    pub(crate) fn run(&mut self, event: Event<P>, ctx: &mut Context<Self>) {
        if matches!(event, Event::Arrive { .. }) {
            self.idle.cancel(ctx);
        }
        let effects = self.engine.handle(event);
        self.apply(effects, ctx);
        P::after(self, ctx);
        ended(self, ctx);
    }

    /// Carries out `effects`, then those they gave rise to.
    fn apply(&mut self, effects: Vec<Effect<P>>, ctx: &mut Context<Self>) {
        for effect in effects {
            self.carry_out(effect, ctx);
        }
        let more = self.engine.take_effects();
        if !more.is_empty() {
            self.apply(more, ctx);
        }
    }

    fn carry_out(&mut self, effect: Effect<P>, ctx: &mut Context<Self>) {
        match effect {
            Effect::Ask(ask) => self.ask(*ask, ctx),
            Effect::Grant(taken) => self.grant(*taken, ctx),
            Effect::Undo { op, want } => self.undo(op, *want, ctx),
            Effect::Leave(ids) => P::leave(self, ids, ctx),
            Effect::TimedOut(waiters) => P::timed_out(self, waiters, ctx),
            Effect::Check { want } => {
                let check = P::check(self, &want);
                let done = check.into_actor(self);
                ctx.spawn(done.map(|done, act, ctx| act.run(Event::Checked(done), ctx)));
            }
            Effect::Subscribe(name) => {
                let subscriber = self.shared.subscriber.clone();
                listen::subscribe(self, &name, &subscriber, ctx);
            }
            Effect::Unsubscribe(name) => listen::unsubscribe(&self.shared.subscriber, &name),
            Effect::Arm(delay) => self.timer.set(
                ctx,
                delay,
                |act: &mut Self| &mut act.timer,
                |act, ctx| act.run(Event::Timer, ctx),
            ),
            Effect::Disarm => self.timer.cancel(ctx),
            Effect::WakeAfter(delay) => {
                listen::after(delay, ctx, |act, ctx| act.run(Event::Look, ctx))
            }
            Effect::Linger => self.linger(ctx),
            Effect::Watch => watch(self, ctx),
            Effect::KeyFound => self.waiting.key_found(),
            Effect::KeyMissing { waiting, waited } => {
                self.waiting.key_missing(waiting, waited);
            }
        }
    }

    /// Sends one attempt; its answer goes back to the engine.
    fn ask(&mut self, ask: Ask<P::Want>, ctx: &mut Context<Self>) {
        let (waiter, sent) = (ask.waiter, ask.sent);
        let call = P::ask(&self.shared, &self.name, ask);
        ctx.spawn(call.into_actor(self).map(move |reply, act, ctx| {
            act.run(
                Event::Answered {
                    waiter,
                    reply,
                    sent,
                },
                ctx,
            );
        }));
    }

    /// Makes a taken waiter's grant and answers it; a grant whose caller
    /// left is dropped here (the engine undoes the take).
    fn grant(&mut self, mut taken: Taken<P>, ctx: &mut Context<Self>) {
        let won = taken.won.take();
        let grant = P::grant(self, &taken.waiter.want.want, won, taken.sent, ctx);
        if let Err(grant) = self.engine.deliver(taken, grant) {
            P::ungrant(self, grant, ctx);
        }
    }

    /// Undoes the take under `op`, exactly once, in the background: permits
    /// back if a copy took them, none taken by a copy that runs later. The
    /// queue looks again when it is done.
    fn undo(&mut self, op: Arc<str>, want: P::Want, ctx: &mut Context<Self>) {
        let (shared, name) = (self.shared.clone(), self.name.clone());
        let permits = self.engine.policy().wants(&want);
        let ticket = shared.unsettled.enter();
        let undone = want.clone();
        let fut = async move {
            let _counted = ticket;
            let what = || {
                let label = P::LABEL;
                format!("undoing a take of {permits} permit(s) of {label} {name:?}")
            };
            send_once(&shared.config, what, || P::undo(&shared, &name, &op, &want)).await
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            let name = act.name.clone();
            let event = match res {
                Ok(Undone::GaveBack) => {
                    debug!(%name, "permits taken for a waiter that left are back");
                    Event::Look
                }
                Ok(_) => Event::Look,
                Err(e) => {
                    warn!(%name, error = %e, "undoing a waiter's take failed");
                    Event::UndoFailed(undone)
                }
            };
            act.run(event, ctx);
        }));
    }

    /// Nobody waits: the subscription stays for the idle timeout (waiters
    /// come in bursts), then ends unless someone came.
    fn linger(&mut self, ctx: &mut Context<Self>) {
        if self.idle.is_set() {
            return;
        }
        let after = self.shared.config.idle_timeout;
        self.idle.set(
            ctx,
            after,
            |act: &mut Self| &mut act.idle,
            |act, ctx| act.run(Event::IdleOver, ctx),
        );
    }
}

impl<P: Calls> Actor for SyncActor<P> {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        for name in self.engine.drop_channels() {
            listen::unsubscribe(&self.shared.subscriber, &name);
        }
    }
}

/// The manager shuts down: every waiter is answered `ShuttingDown` (new ones
/// are refused as they come). Permits held stay with their guards.
impl<P: Calls> Handler<ShutDown> for SyncActor<P> {
    type Result = usize;

    fn handle(&mut self, _msg: ShutDown, ctx: &mut Context<Self>) -> usize {
        self.run(Event::Shutdown, ctx);
        0
    }
}

impl<P: Calls> Handler<Unlocked> for SyncActor<P> {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        let Unlocked {
            channel, wake_all, ..
        } = msg;
        self.run(Event::Heard { channel, wake_all }, ctx);
    }
}

impl<P: Calls> Handler<Resync> for SyncActor<P> {
    type Result = ();

    /// Messages may have been lost: look again.
    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.run(Event::Wake, ctx);
    }
}

impl<P: Calls> Listener for SyncActor<P> {
    fn channel(&mut self, name: &str) -> Option<&mut Channel> {
        self.engine.channel_mut(name)
    }

    fn subscribed(&mut self, name: &str, ctx: &mut Context<Self>) {
        self.run(Event::Subscribed(name.to_owned()), ctx);
    }
}

impl<P: Calls> Waits for SyncActor<P> {
    fn waiting(&mut self) -> &mut Waiting {
        &mut self.waiting
    }

    fn waiters_now(&self) -> Vec<Waited> {
        self.engine.waited()
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}
