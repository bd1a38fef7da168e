//! A lock actor's timers, and the Redis work its kind asks for.
//!
//! The wake timer (fallback retry, the waiters' deadlines), the expiry timer
//! (explicit leases) and the idle countdown are the skeleton's; the kind's
//! periodic timer runs while the kind says it needs one
//! ([`Policy::tick_every`](super::kinds::Policy::tick_every): the fair lock's
//! refresh of its places). A kind's Redis work (a [`Chore`]) is spawned here and
//! its outcome handed back to the kind, opaque to the skeleton.

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
    /// Stops the actor after a quiet period.
    pub(super) idle: Alarm,
    /// The kind's periodic timer, while it needs one.
    tick: Option<SpawnHandle>,
}

impl Timers {
    /// After a restart: the old context's timers are gone.
    pub(super) fn forget(&mut self) {
        self.wake.forget();
        self.expiry.forget();
        self.idle.forget();
        self.tick = None;
    }
}

impl LockActor {
    /// Keeps the kind's periodic timer running while the kind needs it, and
    /// only then.
    pub(super) fn kind_timers(&mut self, ctx: &mut Context<Self>) {
        let every = self.kind.tick_every(&self.wait.queue, &self.shared.config);
        match (every, self.timers.tick.is_some()) {
            (Some(every), false) => {
                let tick = ctx.run_interval(every, |act, ctx| {
                    let chore = act.kind.tick(&act.wait.queue, &act.name, &act.shared);
                    act.run_chore(chore, ctx);
                });
                self.timers.tick = Some(tick);
            }
            (None, true) => {
                if let Some(t) = self.timers.tick.take() {
                    ctx.cancel_future(t);
                }
            }
            _ => {}
        }
    }

    /// Sends the Redis work the kind has pending.
    pub(super) fn send_chores(&mut self, ctx: &mut Context<Self>) {
        while let Some(chore) = self.kind.chore(&self.wait.queue, &self.name, &self.shared) {
            self.run_chore(Some(chore), ctx);
        }
    }

    /// Spawns a chore; its outcome goes to the kind, which says whether waiters
    /// may try now.
    fn run_chore(&mut self, chore: Option<Chore>, ctx: &mut Context<Self>) {
        let Some(Chore(work)) = chore else {
            return;
        };
        ctx.spawn(work.into_actor(self).map(|done, act, ctx| {
            if act.kind.chore_done(done, &mut act.wait.queue, &act.name) {
                act.pump(ctx);
            } else {
                act.reconcile(ctx);
            }
        }));
    }
}
