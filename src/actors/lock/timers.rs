//! A lock actor's timers, and the Redis work its kind asks for.
//!
//! The wake timer (fallback retry, the waiters' deadlines), the expiry timer
//! (explicit leases) and the idle countdown are the skeleton's; the kind's
//! periodic timer runs while the kind says it needs one
//! ([`Policy::tick_every`](super::kinds::Policy::tick_every): the fair lock's
//! refresh of its places). A kind's Redis work (a [`Chore`]) is spawned here and
//! its outcome handed back to the kind, opaque to the skeleton.

use std::any::Any;
use std::time::{Duration, Instant};

use actix::fut::wrap_future;
use actix::prelude::*;

use super::kinds::Chore;
use super::LockActor;
use crate::actors::listen::Alarm;

/// The actor's timers; see the module documentation.
#[derive(Debug, Default)]
pub(super) struct Timers {
    /// Fallback retry / deadline timer.
    pub(super) wake: Alarm,
    /// Fires when the earliest explicit lease of a holding runs out.
    pub(super) expiry: Alarm,
    /// Stops the actor after a quiet period ([`Timers::idle_countdown`]).
    pub(super) idle: Alarm,
    /// Since when nothing at all has been going on; `None` while something is.
    idle_since: Option<Instant>,
    /// Ends the subscriptions a kind keeps after the last waiter left
    /// (`Policy::lingers`: the exclusive lock with direct handoff).
    linger: Alarm,
    /// Looks at the waiters that may wait for themselves ([`watch_stalls`]).
    stall: Alarm,
    /// The kind's periodic timer, while it needs one.
    tick: Option<SpawnHandle>,
}

impl Timers {
    /// Keeps the kind's periodic timer running while the kind asks for one
    /// (`every`), and only then; each tick runs `tick` on the actor.
    pub(super) fn keep_ticking(
        &mut self,
        every: Option<Duration>,
        ctx: &mut Context<LockActor>,
        tick: fn(&mut LockActor, &mut Context<LockActor>),
    ) {
        match (every, self.tick.is_some()) {
            (Some(every), false) => self.tick = Some(ctx.run_interval(every, tick)),
            (None, true) => {
                if let Some(t) = self.tick.take() {
                    ctx.cancel_future(t);
                }
            }
            _ => {}
        }
    }

    /// Spawns the kind's Redis work on the actor; its outcome, opaque to the
    /// skeleton, goes to `done` (which hands it to the kind).
    pub(super) fn spawn_chore(
        Chore(work): Chore,
        ctx: &mut Context<LockActor>,
        done: fn(&mut LockActor, Box<dyn Any>, &mut Context<LockActor>),
    ) {
        ctx.spawn(wrap_future::<_, LockActor>(work).map(move |out, act, ctx| done(act, out, ctx)));
    }

    /// Starts the idle countdown when nothing at all is going on (`idle`), and
    /// stops it when something is; `then` runs once `after` has passed with
    /// nothing going on.
    ///
    /// Busy and idle alternate on every acquire+release pair of a lock nobody
    /// else wants, so the timer is not set and cancelled each time (a spawned
    /// future and a timer entry per pair): only the moment is noted, and a
    /// timer left running from an earlier quiet period looks when it rings,
    /// ending the actor or setting itself for the rest of the period.
    pub(super) fn idle_countdown(
        &mut self,
        idle: bool,
        after: Duration,
        ctx: &mut Context<LockActor>,
        then: fn(&mut LockActor, &mut Context<LockActor>),
    ) {
        match (idle, self.idle_since) {
            (true, None) => {
                self.idle_since = Some(Instant::now());
                if !self.idle.is_set() {
                    self.ring_idle_after(after, after, ctx, then);
                }
            }
            (false, Some(_)) => self.idle_since = None,
            _ => {}
        }
    }

    /// Sets the idle timer to look in `delay` whether the actor has been idle
    /// for `after`.
    fn ring_idle_after(
        &mut self,
        delay: Duration,
        after: Duration,
        ctx: &mut Context<LockActor>,
        then: fn(&mut LockActor, &mut Context<LockActor>),
    ) {
        let slot: fn(&mut LockActor) -> &mut Alarm = |act| &mut act.timers.idle;
        self.idle.set(ctx, delay, slot, move |act, ctx| {
            // Busy now: the next quiet period sets the timer again.
            let Some(since) = act.timers.idle_since else {
                return;
            };
            match after.checked_sub(since.elapsed()) {
                Some(left) if !left.is_zero() => act.timers.ring_idle_after(left, after, ctx, then),
                // A countdown refused (the manager sent something meanwhile)
                // starts again from the next look (`reconcile`).
                _ => {
                    act.timers.idle_since = None;
                    then(act, ctx)
                }
            }
        });
    }

    /// Nobody waits but the subscriptions stay: `then` runs after `after`,
    /// unless a linger is already counting down (a waiter that came and went
    /// meanwhile only finds the subscriptions ended a little sooner).
    pub(super) fn linger(
        &mut self,
        after: Duration,
        ctx: &mut Context<LockActor>,
        then: fn(&mut LockActor, &mut Context<LockActor>),
    ) {
        if !self.linger.is_set() {
            let slot: fn(&mut LockActor) -> &mut Alarm = |act| &mut act.timers.linger;
            self.linger.set(ctx, after, slot, then);
        }
    }

    /// After a restart: the old context's timers are gone.
    pub(super) fn forget(&mut self) {
        self.wake.forget();
        self.expiry.forget();
        self.idle.forget();
        self.idle_since = None;
        self.linger.forget();
        self.stall.forget();
        self.tick = None;
    }
}

/// Arms the stall timer, unless it is set, for the earliest waiter that came
/// with no deadline while another owner of this process held the lock
/// (`Want::stall_watch`): once it has waited `Config::stall_warning`, it is
/// reported if such an owner still keeps it out (once: its mark is cleared),
/// and the timer is armed for the next such waiter.
///
/// One timer per lock actor, not one per waiter: a timer stays in the actor's
/// context until it rings, whether or not its waiter was served long before,
/// and actix polls every timer of a context each time the actor wakes. With a
/// 30 s timer per queued acquisition, a lock taken in turns by the tasks of
/// one process carried some 20,000 of them, and its local hand-overs took
/// 2.5x a round trip (docs/performance.md). Its handle is the actor's, not the
/// waiting engine's: the engine is dropped whenever nobody waits, and a
/// handle dropped with it left its timer running beside the next engine's
/// (measured: two waiters taking turns lost what the fix had won).
pub(super) fn watch_stalls(act: &mut LockActor, ctx: &mut Context<LockActor>) {
    if act.timers.stall.is_set() {
        return;
    }
    let after = act.shared.config.stall_warning;
    let next = act
        .wait
        .side
        .waiters()
        .filter(|w| w.want.stall_watch)
        .map(|w| w.want.req.since + after)
        .min();
    let Some(due) = next else {
        return;
    };
    let slot: fn(&mut LockActor) -> &mut Alarm = |act| &mut act.timers.stall;
    let delay = due.saturating_duration_since(Instant::now());
    act.timers.stall.set(ctx, delay, slot, |act, ctx| {
        let now = Instant::now();
        let after = act.shared.config.stall_warning;
        if let Some(engine) = act.wait.side.engine_mut() {
            for w in engine.policy_mut().1.iter_mut() {
                if w.want.stall_watch && w.want.req.since + after <= now {
                    w.want.stall_watch = false;
                    w.want.warn_if_stalled(&act.held.holdings, &act.name);
                }
            }
        }
        watch_stalls(act, ctx);
    });
}
