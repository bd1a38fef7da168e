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

use std::sync::Arc;

use actix::prelude::*;
use tracing::{debug, warn};

use super::{Kind, LockActor};
use crate::config::millis;
use crate::scripts::{self, Place};

impl LockActor {
    /// The fair waiter that tries next: the first that is due, skipping those with
    /// a place that a local holder keeps from the lock (the local release tells
    /// the head). Try-once waiters that a local holder keeps out are answered now.
    pub(super) fn pick_fair(&mut self, ctx: &mut Context<Self>) -> Option<u64> {
        let holdings = &self.holdings;
        let gone = self
            .queue
            .fail_try_once(|w| holdings.blocks(w.owner, w.kind), None);
        self.leave(gone.queued, ctx);
        for w in self.queue.iter_mut() {
            if w.queued && self.holdings.blocks(w.owner, w.kind) {
                w.due = false;
            }
        }
        self.queue.first(|w| w.due).map(|w| w.id)
    }

    /// The owner field a fair waiter's channel names, if it is one of this lock's.
    pub(super) fn fair_field_of<'c>(&self, channel: &'c str) -> Option<&'c str> {
        channel
            .strip_prefix(self.channel().as_str())
            .and_then(|rest| rest.strip_prefix(':'))
    }

    /// The waiters with this owner field try at the next pump.
    pub(super) fn fair_mark_due(&mut self, field: &str) {
        for w in self.queue.iter_mut() {
            if &*w.field == field {
                w.due = true;
            }
        }
    }

    /// Keeps the refresh interval running while any waiter may have a place in the
    /// fair queue, and only then.
    pub(super) fn fair_timers(&mut self, ctx: &mut Context<Self>) {
        let placed = self.kind == Kind::Fair && self.queue.iter().any(|w| w.queued);
        match (placed, self.refresh_timer.is_some()) {
            (true, false) => {
                let every = self.shared.config.fair_refresh_every();
                self.refresh_timer =
                    Some(ctx.run_interval(every, |act, ctx| act.refresh_places(ctx)));
            }
            (false, true) => {
                if let Some(t) = self.refresh_timer.take() {
                    ctx.cancel_future(t);
                }
            }
            _ => {}
        }
    }

    /// The refresh tick: one script call keeps every local waiter's place and says
    /// which (if any) is at the head of a free lock.
    fn refresh_places(&mut self, ctx: &mut Context<Self>) {
        if self.refreshing {
            return;
        }
        let mut fields: Vec<Arc<str>> = Vec::new();
        for w in self.queue.iter().filter(|w| w.queued) {
            if !fields.contains(&w.field) {
                fields.push(w.field.clone());
            }
        }
        if fields.is_empty() {
            return;
        }
        self.refreshing = true;
        let conn = self.shared.conn.clone();
        let name = self.name.clone();
        let place_ms = millis(self.shared.config.fair_waiter_lease);
        let fut = async move {
            let refs: Vec<&str> = fields.iter().map(|f| &**f).collect();
            let places = scripts::fair_refresh(conn, &name, &refs, place_ms).await;
            (fields, places)
        };
        ctx.spawn(fut.into_actor(self).map(|(fields, places), act, ctx| {
            act.refreshing = false;
            match places {
                Ok(places) => {
                    for (field, place) in fields.iter().zip(places) {
                        for w in act.queue.iter_mut().filter(|w| w.field == *field) {
                            match place {
                                // Its place lapsed (a refresh came too late): it
                                // takes a new one at the back, being alive.
                                Place::None if w.queued => {
                                    debug!(lock = %act.name, "a waiter's place lapsed; queueing it again");
                                    w.queued = false;
                                    w.due = true;
                                }
                                Place::Head => w.due = true,
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
                    act.settle(ctx);
                }
            }
        }));
    }

    /// Takes these owner fields out of the fair queue, except those another local
    /// waiter still waits with (the same owner, twice).
    pub(super) fn leave(&mut self, fields: Vec<Arc<str>>, ctx: &mut Context<Self>) {
        let mut leaving: Vec<Arc<str>> = Vec::new();
        for field in fields {
            if !leaving.contains(&field) && !self.queue.iter().any(|w| w.field == field) {
                leaving.push(field);
            }
        }
        if leaving.is_empty() {
            return;
        }
        self.leaves += 1;
        let conn = self.shared.conn.clone();
        let name = self.name.clone();
        let fut = async move {
            let refs: Vec<&str> = leaving.iter().map(|f| &**f).collect();
            scripts::fair_leave(conn, &name, &refs).await
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            act.leaves -= 1;
            if let Err(e) = res {
                // Not refreshed any more, the place lapses by itself.
                warn!(lock = %act.name, error = %e, "leaving the fair queue failed; the place will lapse");
            }
            act.settle(ctx);
        }));
    }
}
