//! The places part of the waiting kit: for a fair synchronizer, its local
//! waiters' places in a queue kept in Redis, so that waiters of every process
//! are served in the order they arrived.
//!
//! A waiter takes its place with its first attempt (the synchronizer's own
//! acquire script does that). From then on [`Places`] keeps it: while any local
//! waiter has a place, one refresh call every third of the place lease
//! (`Config::fair_waiter_lease`) renews all of them on the Redis server's clock
//! and says which is at the head and should try now. A waiter whose process
//! died stops being refreshed, its place lapses, and the next script to run
//! drops it from the head and tells the new head; a waiter that gives up
//! (deadline, dropped caller, shutdown) leaves at once through the leave call,
//! so it holds nobody up at all. A failed leave is logged and left to lapse.
//!
//! The kit does not know the scripts: the actor implements [`Placed`], which
//! names its waiters' ids and makes the two calls (the fair semaphore with
//! `wire::FairSemRefresh` / `wire::FairSemLeave`; the fair lock's
//! `FairRefresh` / `FairLeave` fit the same shape), and hears where each waiter
//! stands.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use redis::RedisResult;
use tracing::warn;

use crate::wire::Place;

/// An actor whose waiters hold places in a Redis queue.
pub(crate) trait Placed: Actor<Context = Context<Self>> {
    /// Its places' state.
    fn places(&mut self) -> &mut Places;

    /// The ids of its waiters that hold a place now, each once.
    fn placed(&self) -> Vec<Arc<str>>;

    /// The refresh call for these ids: where each stands, in the same order.
    fn refresh_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, RedisResult<Vec<Place>>>;

    /// The leave call for these ids.
    fn leave_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, RedisResult<()>>;

    /// A refresh answered: where each id stands ([`Place::None`]: its place
    /// lapsed, a live waiter takes a new one; [`Place::Head`]: try now).
    fn refreshed(&mut self, stands: Vec<(Arc<str>, Place)>, ctx: &mut Context<Self>);

    /// A call on the places ended without news for the waiters (a failed
    /// refresh, a leave): the actor looks at its queue again.
    fn places_changed(&mut self, ctx: &mut Context<Self>);
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Places {
    /// The synchronizer's name, for the logs.
    name: Arc<str>,
    /// The interval that refreshes the places while there are any.
    refresh_timer: Option<SpawnHandle>,
    /// A refresh is in flight.
    refreshing: bool,
    /// Leave calls in flight.
    leaves: u32,
}

impl Places {
    /// No places yet for the synchronizer `name`.
    pub(crate) fn new(name: Arc<str>) -> Places {
        Places {
            name,
            refresh_timer: None,
            refreshing: false,
            leaves: 0,
        }
    }

    /// Whether a call on the places is in flight.
    #[allow(dead_code)]
    pub(crate) fn busy(&self) -> bool {
        self.refreshing || self.leaves > 0
    }

    /// After a restart: the old context's timer and calls are gone.
    #[allow(dead_code)]
    pub(crate) fn reset(&mut self) {
        self.refresh_timer = None;
        self.refreshing = false;
        self.leaves = 0;
    }
}

/// Keeps the refresh interval (`every`) running while any waiter of `act` has a
/// place, and only then.
pub(crate) fn keep_refreshing<A: Placed>(act: &mut A, every: Duration, ctx: &mut Context<A>) {
    let placed = !act.placed().is_empty();
    let places = act.places();
    match (placed, places.refresh_timer.is_some()) {
        (true, false) => {
            places.refresh_timer = Some(ctx.run_interval(every, |act, ctx| refresh(act, ctx)));
        }
        (false, true) => {
            if let Some(t) = places.refresh_timer.take() {
                ctx.cancel_future(t);
            }
        }
        _ => {}
    }
}

/// The refresh tick: one call keeps every local place and says where each
/// waiter stands.
fn refresh<A: Placed>(act: &mut A, ctx: &mut Context<A>) {
    if act.places().refreshing {
        return;
    }
    let ids = act.placed();
    if ids.is_empty() {
        return;
    }
    act.places().refreshing = true;
    let call = act.refresh_call(ids.clone());
    ctx.spawn(call.into_actor(act).map(move |res, act, ctx| {
        act.places().refreshing = false;
        match res {
            Ok(stands) => act.refreshed(ids.into_iter().zip(stands).collect(), ctx),
            Err(e) => {
                // The places lapse if this keeps failing; the waiters then take
                // new ones once Redis answers again.
                let name = act.places().name.clone();
                warn!(%name, error = %e, "refreshing the waiters' places failed");
                act.places_changed(ctx);
            }
        }
    }));
}

/// Takes these ids out of the queue at once, except those a local waiter still
/// holds (the same id twice: a lock's owner waiting twice).
pub(crate) fn leave<A: Placed>(act: &mut A, ids: Vec<Arc<str>>, ctx: &mut Context<A>) {
    let still = act.placed();
    let mut leaving: Vec<Arc<str>> = Vec::new();
    for id in ids {
        if !leaving.contains(&id) && !still.contains(&id) {
            leaving.push(id);
        }
    }
    if leaving.is_empty() {
        return;
    }
    act.places().leaves += 1;
    let call = act.leave_call(leaving);
    ctx.spawn(call.into_actor(act).map(|res, act, ctx| {
        act.places().leaves -= 1;
        if let Err(e) = res {
            // Not refreshed any more, the place lapses by itself.
            let name = act.places().name.clone();
            warn!(%name, error = %e, "leaving the queue failed; the place will lapse");
        }
        act.places_changed(ctx);
    }));
}
