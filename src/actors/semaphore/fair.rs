//! The fair semaphore's policy, [`Fair`]: the waiters of one fair semaphore
//! are served in the order they arrived across every process, with a queue in
//! Redis and scripts of its own (`lua/fair_sem_*.lua`); what this process adds
//! to the [`SyncActor`] for it is the kit's [`Places`].
//!
//! Each waiter takes a place in the semaphore's queue in Redis with its first
//! attempt (local waiters one at a time, in their arrival order, so that their
//! places keep it); the script grants permits only to the head of the queue,
//! and only when enough are free: strict FIFO, as
//! `java.util.concurrent.Semaphore(fair = true)`, so a head that wants more
//! than is free holds up the smaller waiters behind it. A waiter's id in the
//! queue is its op id, and its channel is its own. A queued waiter asks again
//! only when it is due: told on its channel (a fair release, a head that left,
//! lapsed or took its permits and left some), by a refresh of the places that
//! finds it at the head with permits free, or by the fallback timer
//! (`Config::max_retry_interval`), which makes the first placed waiter due.
//! [`Places`] keeps the places alive every third of `Config::fair_waiter_lease`
//! and takes a waiter that gives up out at once; a waiter whose process died
//! lapses and is skipped.
//!
//! The permits are the plain semaphore's key, so plain acquirers (this crate's
//! or Redisson's) share them; they do not queue and can take permits ahead of
//! the queue. Their releases are heard by the fair waiters through the
//! refresh and the fallback timer; fair releases tell the head at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use tracing::debug;

use super::{Grant, Takes};
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{
    Ask, Event, Found, Heard, Mark, Pick, Policy, Then, Waiter, Waiters,
};
use crate::actors::waiting::{
    keep_refreshing, leave, Calls, PlaceCalls, Placed, Places, SyncActor,
};
use crate::durations::millis;
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire::{
    self, FairSemAcquire, FairSemLeave, FairSemRefresh, FairSemUndo, Place, SemTake, Undone,
};

/// What one fair waiter wants, and where it stands in the queue.
#[derive(Debug, Clone)]
pub(crate) struct FairWant {
    /// Permits it wants.
    permits: u32,
    /// It holds a place in the queue (its last attempt took or kept one).
    queued: bool,
    /// It should ask Redis at the next look: it has no place yet, or it was
    /// told it may be at the head.
    due: bool,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Fair {
    name: Arc<str>,
    /// The first half of every waiter id, `<client id>:<n>`.
    client_id: String,
}

impl Fair {
    pub(crate) fn new(name: Arc<str>, client_id: String) -> Fair {
        Fair { name, client_id }
    }

    /// The channel of the waiter with op id `op`.
    fn channel_of(&self, op: &str) -> String {
        keys::sem_waiter_channel(&self.name, op)
    }
}

/// The first local waiter with a place asks at the next look: it is the only
/// one here that can be the head.
fn nudge(waiters: &mut Waiters<Fair>) {
    if let Some(w) = waiters.iter_mut().find(|w| w.want.want.queued) {
        w.want.want.due = true;
    }
}

impl Policy for Fair {
    type Want = FairWant;
    type Grant = Grant;
    type Won = ();
    type Reply = SemTake;
    const LABEL: &'static str = "fair semaphore";

    fn name(&self) -> &str {
        &self.name
    }

    /// Its id in Redis names it as its waiting record does.
    fn op(&self, local: u64) -> Option<Arc<str>> {
        Some(Arc::from(format!("{}:{local}", self.client_id)))
    }

    fn wants(&self, want: &FairWant) -> u64 {
        u64::from(want.permits)
    }

    fn next(&mut self, waiters: &mut Waiters<Self>, _now: Instant) -> Pick {
        let due = waiters.iter().find(|w| w.want.want.due);
        due.map_or(Pick::Nobody, |w| Pick::Waiter(w.id))
    }

    /// A waiter that will wait listens on its own channel before it takes a
    /// place: the head's message could come before a later subscription.
    fn channel(&self, w: &Waiter<Self>) -> Option<String> {
        let op = w.want.op.as_deref().filter(|_| !w.once)?;
        Some(self.channel_of(op))
    }

    fn own_channel(&self, mark: &Mark<FairWant>) -> Option<String> {
        mark.op.as_deref().map(|op| self.channel_of(op))
    }

    fn place(&self, mark: &Mark<FairWant>) -> Option<Arc<str>> {
        mark.op.clone().filter(|_| mark.want.queued)
    }

    fn classify(&mut self, reply: SemTake) -> Found<()> {
        match reply {
            SemTake::Taken { left } => Found::Taken { left, won: () },
            SemTake::Short { missing, .. } => Found::Short {
                retry_in: None,
                missing,
                first: None,
            },
        }
    }

    /// The script told the new head; if it is here, it asks now.
    fn after_grant(&mut self, left: u64, _: &FairWant, waiters: &mut Waiters<Self>) -> Then {
        if left > 0 {
            nudge(waiters);
        }
        Then::Pump
    }

    /// It holds a place now, and waits until it is told.
    fn short(&mut self, want: &mut FairWant, _retry_in: Option<Duration>) -> Then {
        want.queued = true;
        want.due = false;
        Then::Pump
    }

    fn woken(&mut self, waiters: &mut Waiters<Self>) {
        nudge(waiters);
    }

    fn heard(&mut self, channel: &str, _wake_all: bool, waiters: &mut Waiters<Self>) -> Heard {
        let told = waiters.iter_mut().find(|w| {
            let op = w.want.op.as_deref().unwrap_or_default();
            self.channel_of(op) == channel
        });
        if let Some(w) = told {
            w.want.want.due = true;
        }
        Heard::Wake
    }

    fn placed(&mut self, stands: Vec<(Arc<str>, Place)>, waiters: &mut Waiters<Self>) {
        for (id, place) in stands {
            let Some(w) = waiters.iter_mut().find(|w| w.want.op.as_ref() == Some(&id)) else {
                continue;
            };
            let want = &mut w.want.want;
            match place {
                // Its place lapsed (a refresh came too late): alive, it takes a
                // new one at the back.
                Place::None if want.queued => {
                    debug!(semaphore = %self.name, waiter = %id, "a waiter's place lapsed; queueing it again");
                    want.queued = false;
                    want.due = true;
                }
                Place::Head => want.due = true,
                Place::None | Place::Kept => {}
            }
        }
    }
}

impl Calls for Fair {
    type Extra = Places;
    const KIND: SynchronizerKind = SynchronizerKind::Semaphore;

    fn ask(
        shared: &Shared,
        name: &Arc<str>,
        ask: Ask<FairWant>,
    ) -> LocalBoxFuture<'static, redis::RedisResult<SemTake>> {
        let (mut conn, name) = (shared.node.conn(), name.clone());
        let place_ms = millis(shared.config.fair_waiter_lease);
        let once_ttl_ms = millis(shared.config.latch_ttl);
        let waiter = ask.op.unwrap_or_default();
        async move {
            let call = FairSemAcquire {
                name: &name,
                waiter: &waiter,
                permits: ask.want.permits,
                place_ms,
                queue: !ask.once,
                once_ttl_ms,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    /// Out of the queue, its permits back if a copy took them, none taken by
    /// a copy that runs later (`lua/fair_sem_undo.lua`).
    fn undo(
        shared: &Shared,
        name: &Arc<str>,
        op: &Arc<str>,
        want: &FairWant,
    ) -> LocalBoxFuture<'static, redis::RedisResult<Undone>> {
        let (mut conn, name, id) = (shared.node.conn(), name.clone(), op.clone());
        let once_ttl_ms = millis(shared.config.latch_ttl);
        let permits = want.permits;
        async move {
            let call = FairSemUndo {
                name: &name,
                waiter: &id,
                permits,
                once_ttl_ms,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    fn grant(
        _act: &mut SyncActor<Self>,
        _want: &FairWant,
        _won: Option<()>,
        _sent: Instant,
        _ctx: &mut Context<SyncActor<Self>>,
    ) -> Grant {
        Grant { permits: None }
    }

    fn leave(act: &mut SyncActor<Self>, ids: Vec<Arc<str>>, ctx: &mut Context<SyncActor<Self>>) {
        leave(act, ids, ctx);
    }

    /// The places are refreshed while any waiter here holds one, and only then.
    fn after(act: &mut SyncActor<Self>, ctx: &mut Context<SyncActor<Self>>) {
        let every = act.shared.config.fair_refresh_every();
        keep_refreshing(act, every, ctx);
    }
}

impl Takes for Fair {
    const FAIR: bool = true;

    fn want(&self, permits: u32, _lease: Option<Duration>) -> FairWant {
        FairWant {
            permits,
            queued: false,
            due: true,
        }
    }
}

impl Placed for SyncActor<Fair> {
    fn places(&mut self) -> &mut Places {
        &mut self.extra
    }

    fn places_name(&self) -> &str {
        &self.name
    }

    fn placed(&self) -> Vec<Arc<str>> {
        let queued = self.engine.waiters().filter(|w| w.want.want.queued);
        queued.filter_map(|w| w.want.op.clone()).collect()
    }

    fn refreshed(&mut self, stands: Vec<(Arc<str>, Place)>, ctx: &mut Context<Self>) {
        self.run(Event::Places(stands), ctx);
    }

    fn places_changed(&mut self, ctx: &mut Context<Self>) {
        self.run(Event::Look, ctx);
    }
}

impl PlaceCalls for SyncActor<Fair> {
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
