//! The fair waiters' places in the Redis queue, kept by one part: which owner
//! fields must leave the queue, the refresh that keeps the others, and the calls
//! of both in flight.
//!
//! While a waiter waits, its place is refreshed every third of
//! [`Config::fair_waiter_lease`](crate::Config::fair_waiter_lease), on the Redis
//! server's clock: a waiter whose process died stops being refreshed, its place
//! lapses, and the next script to run drops it and tells the new head. A waiter
//! that gives up (deadline, dropped caller) leaves the queue at once.
//!
//! Self-contained on purpose: what it knows of a waiter is its owner field and
//! its `queued` / `try_now` marks, so the shared queue places of the waiting kit
//! can take its place.

use std::any::Any;
use std::sync::Arc;

use futures::FutureExt;
use redis::RedisResult;
use tracing::{debug, warn};

use crate::actors::lock::kinds::Chore;
use crate::actors::lock::waiters::{Gone, WaiterQueue};
use crate::actors::shared::Shared;
use crate::durations::millis;
use crate::wire::{self, FairLeave, FairRefresh, Place};

/// The places' state; see the module documentation.
#[derive(Debug, Default)]
pub(in crate::actors::lock) struct Places {
    /// Owner fields to take out of the Redis queue with the next call.
    leaving: Vec<Arc<str>>,
    /// A refresh is in flight.
    refreshing: bool,
    /// Calls in flight that take waiters out of the queue.
    leaves: u32,
}

/// The outcome of a call on the places.
enum Done {
    /// A refresh of these fields answered these places.
    Refreshed(Vec<Arc<str>>, RedisResult<Vec<Place>>),
    /// A leave answered.
    Left(RedisResult<()>),
}

impl Places {
    /// Whether a call on the places is in flight (the actor must not retire).
    pub(in crate::actors::lock) fn busy(&self) -> bool {
        self.refreshing || self.leaves > 0
    }

    /// After a restart: the old context's calls are gone.
    pub(in crate::actors::lock) fn reset(&mut self) {
        self.refreshing = false;
        self.leaves = 0;
    }

    /// These waiters were taken out of the queue: their fields leave the Redis
    /// queue, except those another local waiter still waits with (the same
    /// owner, twice).
    pub(in crate::actors::lock) fn leave(&mut self, gone: Gone, queue: &WaiterQueue) {
        for field in gone.queued {
            self.leave_field(&field, queue);
        }
    }

    /// The field `field` leaves the Redis queue, unless a local waiter still
    /// waits with it.
    pub(in crate::actors::lock) fn leave_field(&mut self, field: &str, queue: &WaiterQueue) {
        let waits = queue.iter().any(|w| &*w.req.field == field);
        if !waits && !self.leaving.iter().any(|f| &**f == field) {
            self.leaving.push(Arc::from(field));
        }
    }

    /// The fields that leave with the next call (taken).
    pub(in crate::actors::lock) fn take_leaving(&mut self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.leaving)
    }

    /// The owner fields to refresh: those of waiters that may have a place, once
    /// each; none while a refresh is in flight.
    pub(in crate::actors::lock) fn to_refresh(&self, queue: &WaiterQueue) -> Vec<Arc<str>> {
        let mut fields: Vec<Arc<str>> = Vec::new();
        if self.refreshing {
            return fields;
        }
        for w in queue.iter().filter(|w| w.queued) {
            if !fields.contains(&w.req.field) {
                fields.push(w.req.field.clone());
            }
        }
        fields
    }

    /// Applies a refresh's answer: a waiter at the head of a free lock tries
    /// now; one whose place lapsed (a refresh came too late) takes a new one at
    /// the back, being alive.
    pub(in crate::actors::lock) fn refreshed(
        queue: &mut WaiterQueue,
        fields: &[Arc<str>],
        places: Vec<Place>,
        name: &str,
    ) {
        for (field, place) in fields.iter().zip(places) {
            for w in queue.iter_mut().filter(|w| w.req.field == *field) {
                match place {
                    Place::None if w.queued => {
                        debug!(lock = %name, "a waiter's place lapsed; queueing it again");
                        w.queued = false;
                        w.try_now = true;
                    }
                    Place::Head => w.try_now = true,
                    Place::None | Place::Kept => {}
                }
            }
        }
    }

    /// The refresh tick: one script call keeps every local waiter's place and
    /// says which (if any) is at the head of a free lock.
    pub(in crate::actors::lock) fn refresh(
        &mut self,
        queue: &WaiterQueue,
        name: &Arc<str>,
        shared: &Shared,
    ) -> Option<Chore> {
        let fields = self.to_refresh(queue);
        if fields.is_empty() {
            return None;
        }
        self.refreshing = true;
        let mut conn = shared.node.conn();
        let name = name.clone();
        let place_ms = millis(shared.config.fair_waiter_lease);
        let work = async move {
            let refs: Vec<&str> = fields.iter().map(|f| &**f).collect();
            let call = FairRefresh {
                name: &name,
                fields: &refs,
                place_ms,
            };
            let places = wire::call(&mut conn, &call).await;
            Box::new(Done::Refreshed(fields, places)) as Box<dyn Any>
        };
        Some(Chore(work.boxed_local()))
    }

    /// The call that takes the leaving fields out of the Redis queue, if any.
    pub(in crate::actors::lock) fn send_leaves(
        &mut self,
        name: &Arc<str>,
        shared: &Shared,
    ) -> Option<Chore> {
        let leaving = self.take_leaving();
        if leaving.is_empty() {
            return None;
        }
        self.leaves += 1;
        let mut conn = shared.node.conn();
        let name = name.clone();
        let work = async move {
            let refs: Vec<&str> = leaving.iter().map(|f| &**f).collect();
            let call = FairLeave {
                name: &name,
                fields: &refs,
            };
            let res = wire::call(&mut conn, &call).await.map(|_| ());
            Box::new(Done::Left(res)) as Box<dyn Any>
        };
        Some(Chore(work.boxed_local()))
    }

    /// A call's outcome; answers whether waiters may try now.
    pub(in crate::actors::lock) fn done(
        &mut self,
        done: Box<dyn Any>,
        queue: &mut WaiterQueue,
        name: &str,
    ) -> bool {
        let Ok(done) = done.downcast::<Done>() else {
            return false;
        };
        match *done {
            Done::Refreshed(fields, Ok(places)) => {
                self.refreshing = false;
                Places::refreshed(queue, &fields, places, name);
                true
            }
            Done::Refreshed(_, Err(e)) => {
                self.refreshing = false;
                // The places lapse if this keeps failing; the waiters then take
                // new ones once Redis answers again.
                warn!(lock = %name, error = %e, "refreshing the waiters' places failed");
                false
            }
            Done::Left(res) => {
                self.leaves = self.leaves.saturating_sub(1);
                if let Err(e) = res {
                    // Not refreshed any more, the place lapses by itself.
                    warn!(lock = %name, error = %e, "leaving the fair queue failed; the place will lapse");
                }
                false
            }
        }
    }
}
