//! What the fair semaphore answers to the outside: the caller's messages
//! ([`TakePermits`], [`GivePermits`], the manager's [`ShutDown`]), the
//! subscriber's ([`Unlocked`] on a waiter's channel, [`Resync`]), and the
//! kit's hooks ([`Listener`], [`Waits`], [`Placed`]). Each marks which waiter
//! may ask and leaves the deciding to `pump` in `mod.rs`.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use tracing::{debug, warn};

use super::{FairSemaphoreActor, FairWant};
use crate::actors::listen::{Channel, Listener};
use crate::actors::semaphore::permits::{give_back, GivePermits};
use crate::actors::semaphore::TakePermits;
use crate::actors::shared::Shared;
use crate::actors::shared::ShutDown;
use crate::actors::subscriber::{Resync, Unlocked};
use crate::actors::waiting::{
    self, keep_refreshing, on_leaving, PlaceCalls, Placed, Places, Waited, Waiting, Waits,
};
use crate::durations::millis;
use crate::error::LockError;
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire::{self, FairSemLeave, FairSemRefresh, Place};

impl Actor for FairSemaphoreActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        for mut c in self.channels.drain(..) {
            c.unsubscribe(&self.shared.subscriber);
        }
    }
}

/// The manager shuts down: every waiter is answered `ShuttingDown` and leaves
/// the queue.
impl Handler<ShutDown> for FairSemaphoreActor {
    type Result = usize;

    fn handle(&mut self, _msg: ShutDown, ctx: &mut Context<Self>) -> usize {
        let gone = self.waiters.answer_all(|| Err(LockError::ShuttingDown));
        self.forget(gone, ctx);
        self.timer.cancel(ctx);
        keep_refreshing(self, self.shared.config.fair_refresh_every(), ctx);
        0
    }
}

impl Waits for FairSemaphoreActor {
    fn waiting(&mut self) -> &mut Waiting {
        &mut self.waiting
    }

    fn waiters_now(&self) -> Vec<Waited> {
        self.waiters.waited(|w| u64::from(w.permits))
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Placed for FairSemaphoreActor {
    fn places(&mut self) -> &mut Places {
        &mut self.places
    }

    fn places_name(&self) -> &str {
        &self.name
    }

    fn placed(&self) -> Vec<Arc<str>> {
        let queued = self.waiters.iter().filter(|w| w.want.queued);
        queued.map(|w| w.want.id.clone()).collect()
    }

    fn refreshed(&mut self, stands: Vec<(Arc<str>, Place)>, ctx: &mut Context<Self>) {
        for (id, place) in stands {
            let Some(w) = self.waiters.iter_mut().find(|w| w.want.id == id) else {
                continue;
            };
            match place {
                // Its place lapsed (a refresh came too late): alive, it takes a
                // new one at the back.
                Place::None if w.want.queued => {
                    debug!(semaphore = %self.name, waiter = %id, "a waiter's place lapsed; queueing it again");
                    w.want.queued = false;
                    w.want.due = true;
                }
                Place::Head => w.want.due = true,
                Place::None | Place::Kept => {}
            }
        }
        self.pump(ctx);
    }

    fn places_changed(&mut self, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}

impl PlaceCalls for FairSemaphoreActor {
    fn refresh_call(
        &self,
        ids: Vec<Arc<str>>,
    ) -> LocalBoxFuture<'static, redis::RedisResult<Vec<Place>>> {
        let (name, mut conn) = (self.name.clone(), self.shared.node.conn());
        let place_ms = millis(self.shared.config.fair_waiter_lease);
        async move {
            let waiters: Vec<&str> = ids.iter().map(|i| &**i).collect();
            let call = FairSemRefresh {
                name: &name,
                waiters: &waiters,
                place_ms,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    fn leave_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, redis::RedisResult<()>> {
        let (name, mut conn) = (self.name.clone(), self.shared.node.conn());
        async move {
            let waiters: Vec<&str> = ids.iter().map(|i| &**i).collect();
            let call = FairSemLeave {
                name: &name,
                waiters: &waiters,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }
}

impl Handler<TakePermits> for FairSemaphoreActor {
    type Result = ();

    fn handle(&mut self, msg: TakePermits, ctx: &mut Context<Self>) {
        let Some(msg) = msg.answered_at_once(&self.shared, !self.waiters.is_empty()) else {
            return;
        };
        let TakePermits {
            permits,
            wait,
            reply,
            gone,
            ..
        } = msg;
        let once = wait == Some(Duration::ZERO);
        let want = FairWant {
            permits,
            id: Arc::from(""),
            queued: false,
            due: true,
            asking: false,
            lost: false,
        };
        let client_id = self.shared.client_id.clone();
        let w = self.waiters.arrive_with(want, wait, once, reply);
        // Its id in Redis names it as its waiting record does.
        w.want.id = Arc::from(format!("{client_id}:{}", w.id));
        // A caller that stops waiting leaves the queue now, not at a timer.
        on_leaving(gone, ctx, Self::pump);
        if !once {
            waiting::watch(self, ctx);
        }
        self.pump(ctx);
        if wait.is_some() {
            self.arm(ctx, self.shared.config.max_retry_interval);
        }
    }
}

impl Handler<GivePermits> for FairSemaphoreActor {
    type Result = ();

    fn handle(&mut self, msg: GivePermits, ctx: &mut Context<Self>) {
        let (shared, name) = (self.shared.clone(), self.name.clone());
        let GivePermits { permits, reply } = msg;
        let kind = SynchronizerKind::Semaphore;
        let given = async move {
            let res = give_back(shared, name.clone(), permits, kind, true).await;
            if let Err(e) = &res {
                // A guard dropped without awaiting its release learns nothing:
                // say it here.
                warn!(semaphore = %name, permits, error = %e, "giving back permits failed");
            }
            reply.send(res);
        };
        // The release script tells the head on its channel, local or not.
        ctx.spawn(given.into_actor(self).map(|_, act, ctx| {
            act.nudge();
            act.pump(ctx);
        }));
    }
}

impl Handler<Unlocked> for FairSemaphoreActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        let told = self
            .waiters
            .iter_mut()
            .find(|w| keys::sem_waiter_channel(&self.name, &w.want.id) == msg.channel);
        if let Some(w) = told {
            w.want.due = true;
        }
        self.pump(ctx);
    }
}

impl Listener for FairSemaphoreActor {
    fn channel(&mut self, name: &str) -> Option<&mut Channel> {
        self.channels.iter_mut().find(|c| c.name() == name)
    }

    /// A waiter's channel is made: it may take its place now.
    fn subscribed(&mut self, _name: &str, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}

impl Handler<Resync> for FairSemaphoreActor {
    type Result = ();

    /// Messages may have been lost: the first waiter with a place asks.
    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.nudge();
        self.pump(ctx);
    }
}
