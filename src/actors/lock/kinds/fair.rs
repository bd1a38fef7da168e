//! What the fair lock adds to the lock actor: its waiters' places in the Redis queue.
//!
//! A fair waiter takes a place in `redisson_lock_queue:{name}` with its first
//! attempt, so local waiters take their places in the order they arrived here, and
//! remote ones in the order they arrived there. From then on it is woken only by a
//! message on its own channel (a release tells the head of the queue, and only the
//! head), by the fallback timer, or by a refresh that finds it at the head of a free
//! lock. While it waits, its place is refreshed every third of
//! [`Config::fair_waiter_lease`](crate::Config::fair_waiter_lease), on the Redis
//! server's clock: a waiter whose process died stops being refreshed, its place
//! lapses, and the next script to run drops it and tells the new head. A waiter that
//! gives up (deadline, dropped caller) leaves the queue at once.
//!
//! Everything fair-only lives here: the kind's rules ([`Fair`]), the state that
//! keeps the places ([`FairPlaces`]), and the lock actor's work on them.

use std::sync::Arc;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;
use tracing::{debug, warn};

use super::{Attempt, Giveback, KindRules};
use crate::actors::lock::LockActor;
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, FairLeave, FairRefresh, Place, ReleaseReply};

/// The fair lock's rules; see the module documentation.
#[derive(Debug)]
pub(super) struct Fair;

impl KindRules for Fair {
    fn channel(&self, name: &str) -> String {
        keys::channel(name)
    }

    fn waiter_channel(&self, name: &str, field: &str) -> String {
        keys::fair_channel(name, field)
    }

    fn per_waiter(&self) -> bool {
        true
    }

    fn hears_own_unlocks(&self) -> bool {
        // A fair release is addressed to the head waiter's own channel, which may
        // be a local waiter that must hear it.
        false
    }

    fn renewal(&self, _kind: AcquireKind) -> Renewal {
        // The held lock is the exclusive lock's hash.
        Renewal::Hash
    }

    fn acquire(
        &self,
        shared: &Shared,
        a: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        let mut conn = shared.node.conn();
        let place_ms = millis(shared.config.fair_waiter_lease);
        async move {
            let call = wire::FairAcquire {
                name: &a.name,
                field: &a.field,
                lease_ms: a.lease_ms,
                place_ms,
                queue: a.queue,
                token_ttl_ms: a.token_ttl_ms,
                reentrant: a.reentrant,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    fn release(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>> {
        let mut conn = shared.node.conn();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        async move {
            let call = wire::FairRelease {
                name: &g.name,
                field: &g.field,
                lease_ms: g.lease_ms,
                request_id: &g.request_id,
                latch_ttl_ms,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }
}

/// The lock actor's fair-only state (idle for the other kinds).
#[derive(Debug, Default)]
pub(crate) struct FairPlaces {
    /// The interval that refreshes the waiters' places in the queue.
    refresh_timer: Option<SpawnHandle>,
    /// A refresh is in flight.
    refreshing: bool,
    /// Calls in flight that take waiters out of the queue.
    leaves: u32,
}

impl FairPlaces {
    /// Whether a call on the places is in flight (the actor must not retire).
    pub(crate) fn busy(&self) -> bool {
        self.refreshing || self.leaves > 0
    }

    /// After a restart: the old context's timer and calls are gone.
    pub(crate) fn reset(&mut self) {
        *self = FairPlaces::default();
    }
}

impl LockActor {
    /// The fair waiter that tries next: the first that is due, skipping those with
    /// a place that a local holder keeps from the lock (the local release tells
    /// the head). Try-once waiters that a local holder keeps out are answered now.
    pub(crate) fn pick_fair(&mut self, ctx: &mut Context<Self>) -> Option<u64> {
        let holdings = &self.holdings;
        let gone = self
            .queue
            .fail_try_once(|w| holdings.blocks(w.req.owner, w.req.kind), None);
        self.leave_fair_queue(gone.queued, ctx);
        for w in self.queue.iter_mut() {
            if w.queued && self.holdings.blocks(w.req.owner, w.req.kind) {
                w.try_now = false;
            }
        }
        self.queue.first(|w| w.try_now).map(|w| w.req.id)
    }

    /// The owner field a fair waiter's channel names, if it is one of this lock's.
    pub(crate) fn fair_field_of<'c>(&self, channel: &'c str) -> Option<&'c str> {
        channel
            .strip_prefix(self.channel().as_str())
            .and_then(|rest| rest.strip_prefix(':'))
    }

    /// The waiters with this owner field try at the next pump.
    pub(crate) fn fair_mark_due(&mut self, field: &str) {
        for w in self.queue.iter_mut() {
            if &*w.req.field == field {
                w.try_now = true;
            }
        }
    }

    /// Keeps the refresh interval running while any waiter may have a place in the
    /// fair queue, and only then.
    pub(crate) fn fair_timers(&mut self, ctx: &mut Context<Self>) {
        let placed = self.rules().per_waiter() && self.queue.iter().any(|w| w.queued);
        match (placed, self.fair.refresh_timer.is_some()) {
            (true, false) => {
                let every = self.shared.config.fair_refresh_every();
                self.fair.refresh_timer =
                    Some(ctx.run_interval(every, |act, ctx| act.refresh_places(ctx)));
            }
            (false, true) => {
                if let Some(t) = self.fair.refresh_timer.take() {
                    ctx.cancel_future(t);
                }
            }
            _ => {}
        }
    }

    /// The refresh tick: one script call keeps every local waiter's place and says
    /// which (if any) is at the head of a free lock.
    fn refresh_places(&mut self, ctx: &mut Context<Self>) {
        if self.fair.refreshing {
            return;
        }
        let mut fields: Vec<Arc<str>> = Vec::new();
        for w in self.queue.iter().filter(|w| w.queued) {
            if !fields.contains(&w.req.field) {
                fields.push(w.req.field.clone());
            }
        }
        if fields.is_empty() {
            return;
        }
        self.fair.refreshing = true;
        let mut conn = self.shared.node.conn();
        let name = self.name.clone();
        let place_ms = millis(self.shared.config.fair_waiter_lease);
        let fut = async move {
            let refs: Vec<&str> = fields.iter().map(|f| &**f).collect();
            let call = FairRefresh {
                name: &name,
                fields: &refs,
                place_ms,
            };
            let places = wire::call(&mut conn, &call).await;
            (fields, places)
        };
        ctx.spawn(fut.into_actor(self).map(|(fields, places), act, ctx| {
            act.fair.refreshing = false;
            match places {
                Ok(places) => {
                    for (field, place) in fields.iter().zip(places) {
                        for w in act.queue.iter_mut().filter(|w| w.req.field == *field) {
                            match place {
                                // Its place lapsed (a refresh came too late): it
                                // takes a new one at the back, being alive.
                                Place::None if w.queued => {
                                    debug!(lock = %act.name, "a waiter's place lapsed; queueing it again");
                                    w.queued = false;
                                    w.try_now = true;
                                }
                                Place::Head => w.try_now = true,
                                Place::None | Place::Kept => {}
                            }
                        }
                    }
                    act.pump(ctx);
                }
                Err(e) => {
                    // The places lapse if this keeps failing; the waiters then take
                    // new ones once Redis answers again.
                    warn!(lock = %act.name, error = %e, "refreshing the waiters' places failed");
                    act.reconcile(ctx);
                }
            }
        }));
    }

    /// Takes these owner fields out of the fair queue, except those another local
    /// waiter still waits with (the same owner, twice).
    pub(crate) fn leave_fair_queue(&mut self, fields: Vec<Arc<str>>, ctx: &mut Context<Self>) {
        let mut leaving: Vec<Arc<str>> = Vec::new();
        for field in fields {
            if !leaving.contains(&field) && !self.queue.iter().any(|w| w.req.field == field) {
                leaving.push(field);
            }
        }
        if leaving.is_empty() {
            return;
        }
        self.fair.leaves += 1;
        let mut conn = self.shared.node.conn();
        let name = self.name.clone();
        let fut = async move {
            let refs: Vec<&str> = leaving.iter().map(|f| &**f).collect();
            wire::call(
                &mut conn,
                &FairLeave {
                    name: &name,
                    fields: &refs,
                },
            )
            .await
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            act.fair.leaves -= 1;
            if let Err(e) = res {
                // Not refreshed any more, the place lapses by itself.
                warn!(lock = %act.name, error = %e, "leaving the fair queue failed; the place will lapse");
            }
            act.reconcile(ctx);
        }));
    }
}
