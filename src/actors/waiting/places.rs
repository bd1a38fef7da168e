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
//! The kit does not know the scripts: whoever keeps places implements
//! [`PlaceCalls`], the two calls in its own scripts (the fair semaphore with
//! `wire::FairSemRefresh` / `wire::FairSemLeave`, the fair lock with
//! `wire::FairRefresh` / `wire::FairLeave`). It is driven in one of two ways:
//! - an actor that owns its [`Places`] implements [`Placed`] (which names its
//!   waiters' ids and hears where each stands), and [`keep_refreshing`] and
//!   [`leave`] run the interval and the calls on its context: the fair
//!   semaphore;
//! - a part that does not own the actor's context (a lock kind, whose Redis
//!   work the lock actor runs for it as a chore) takes the same steps itself:
//!   [`Places::start_refresh`] / [`Places::refresh_answered`] and
//!   [`Places::start_leave`] / [`Places::leave_answered`], the bookkeeping the
//!   two drivers share: one refresh in flight at a time, leave calls counted,
//!   an id that a local waiter still holds never left, failures logged.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use redis::RedisResult;
use tracing::warn;

use crate::wire::Place;

/// The two calls on a Redis queue of places, in a synchronizer's own scripts.
pub(crate) trait PlaceCalls {
    /// The refresh call for these ids: where each stands, in the same order.
    fn refresh_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, RedisResult<Vec<Place>>>;

    /// The leave call for these ids.
    fn leave_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, RedisResult<()>>;
}

/// An actor whose waiters hold places in a Redis queue, and which owns them.
pub(crate) trait Placed: PlaceCalls + Actor<Context = Context<Self>> {
    /// Its places' state.
    fn places(&mut self) -> &mut Places;

    /// Its name, for what the places log.
    fn places_name(&self) -> &str;

    /// The ids of its waiters that hold a place now, each once.
    fn placed(&self) -> Vec<Arc<str>>;

    /// A refresh answered: where each id stands ([`Place::None`]: its place
    /// lapsed, a live waiter takes a new one; [`Place::Head`]: try now).
    fn refreshed(&mut self, stands: Vec<(Arc<str>, Place)>, ctx: &mut Context<Self>);

    /// A call on the places ended without news for the waiters (a failed
    /// refresh, a leave): the actor looks at its queue again.
    fn places_changed(&mut self, ctx: &mut Context<Self>);
}

/// See the module documentation. Small (24 bytes), since a fair lock carries
/// it for as long as it is held: the name it logs under is its owner's.
#[derive(Debug, Default)]
pub(crate) struct Places {
    /// The interval that refreshes the places while there are any.
    refresh_timer: Option<SpawnHandle>,
    /// A refresh is in flight.
    refreshing: bool,
    /// Leave calls in flight.
    leaves: u32,
}

impl Places {
    /// Whether a call on the places is in flight.
    pub(crate) fn busy(&self) -> bool {
        self.refreshing || self.leaves > 0
    }

    /// After a restart: the old context's timer and calls are gone.
    pub(crate) fn reset(&mut self) {
        self.refresh_timer = None;
        self.refreshing = false;
        self.leaves = 0;
    }

    /// A refresh of `ids` may start now: not when there are none, nor while
    /// one is in flight (the next tick makes it). Marks it in flight.
    pub(crate) fn start_refresh(&mut self, ids: &[Arc<str>]) -> bool {
        if self.refreshing || ids.is_empty() {
            return false;
        }
        self.refreshing = true;
        true
    }

    /// The refresh of `ids` answered: where each stands, or `None` when it
    /// failed (logged under `name`).
    pub(crate) fn refresh_answered(
        &mut self,
        ids: Vec<Arc<str>>,
        res: RedisResult<Vec<Place>>,
        name: &str,
    ) -> Option<Vec<(Arc<str>, Place)>> {
        self.refreshing = false;
        match res {
            Ok(stands) => Some(ids.into_iter().zip(stands).collect()),
            Err(e) => {
                // The places lapse if this keeps failing; the waiters then take
                // new ones once Redis answers again.
                warn!(%name, error = %e, "refreshing the waiters' places failed");
                None
            }
        }
    }

    /// The ids among `ids` that leave the queue now: each once, and none that
    /// a local waiter still holds (`still`: the same id twice, a lock's owner
    /// waiting twice). When there are any, a leave call is counted in flight.
    pub(crate) fn start_leave(
        &mut self,
        ids: Vec<Arc<str>>,
        still: &[Arc<str>],
    ) -> Option<Vec<Arc<str>>> {
        let mut leaving: Vec<Arc<str>> = Vec::new();
        for id in ids {
            if !leaving.contains(&id) && !still.contains(&id) {
                leaving.push(id);
            }
        }
        if leaving.is_empty() {
            return None;
        }
        self.leaves += 1;
        Some(leaving)
    }

    /// A leave call answered (a failure is logged under `name`: the place
    /// lapses).
    pub(crate) fn leave_answered(&mut self, res: RedisResult<()>, name: &str) {
        self.leaves = self.leaves.saturating_sub(1);
        if let Err(e) = res {
            // Not refreshed any more, the place lapses by itself.
            warn!(%name, error = %e, "leaving the queue failed; the place will lapse");
        }
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
    let ids = act.placed();
    if !act.places().start_refresh(&ids) {
        return;
    }
    let call = act.refresh_call(ids.clone());
    ctx.spawn(call.into_actor(act).map(move |res, act, ctx| {
        let name: Arc<str> = Arc::from(act.places_name());
        match act.places().refresh_answered(ids, res, &name) {
            Some(stands) => act.refreshed(stands, ctx),
            None => act.places_changed(ctx),
        }
    }));
}

/// Takes these ids out of the queue at once, except those a local waiter still
/// holds (the same id twice: a lock's owner waiting twice).
pub(crate) fn leave<A: Placed>(act: &mut A, ids: Vec<Arc<str>>, ctx: &mut Context<A>) {
    let still = act.placed();
    let Some(leaving) = act.places().start_leave(ids, &still) else {
        return;
    };
    let call = act.leave_call(leaving);
    ctx.spawn(call.into_actor(act).map(|res, act, ctx| {
        let name: Arc<str> = Arc::from(act.places_name());
        act.places().leave_answered(res, &name);
        act.places_changed(ctx);
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|n| Arc::from(*n)).collect()
    }

    /// One refresh at a time, and none for no places; its answer pairs each id
    /// with where it stands, a failure with nothing.
    #[test]
    fn one_refresh_in_flight_and_its_answer_names_each_place() {
        let mut places = Places::default();
        assert!(!places.start_refresh(&[]));
        assert!(places.start_refresh(&ids(&["a", "b"])));
        assert!(!places.start_refresh(&ids(&["a", "b"])), "one in flight");
        assert!(places.busy());
        let stands =
            places.refresh_answered(ids(&["a", "b"]), Ok(vec![Place::Head, Place::Kept]), "res");
        assert_eq!(
            stands.map(|s| s.into_iter().map(|(_, p)| p).collect::<Vec<_>>()),
            Some(vec![Place::Head, Place::Kept])
        );
        assert!(!places.busy());
        assert!(places.start_refresh(&ids(&["a"])));
        let down = redis::RedisError::from((redis::ErrorKind::Io, "down"));
        assert!(places
            .refresh_answered(ids(&["a"]), Err(down), "res")
            .is_none());
        assert!(!places.busy());
    }

    /// An id leaves once, and not while a local waiter still holds it.
    #[test]
    fn an_id_leaves_once_unless_a_waiter_still_holds_it() {
        let mut places = Places::default();
        assert_eq!(places.start_leave(ids(&["a"]), &ids(&["a"])), None);
        assert!(!places.busy());
        let leaving = places.start_leave(ids(&["a", "b", "a"]), &ids(&["b"]));
        assert_eq!(leaving, Some(ids(&["a"])));
        assert!(places.busy());
        places.leave_answered(Ok(()), "res");
        assert!(!places.busy());
    }
}
