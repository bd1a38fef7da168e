//! The fair lock (Redisson `getFairLock`): waiters granted in the order they
//! arrived, across processes, through their places in the Redis queue.
//!
//! A fair waiter takes a place in `redisson_lock_queue:{name}` with its first
//! attempt, so local waiters take their places in the order they arrived here, and
//! remote ones in the order they arrived there. From then on it is woken only by a
//! message on its own channel (a release tells the head of the queue, and only the
//! head), by the fallback timer, or by a refresh that finds it at the head of a free
//! lock: so any waiter that is due tries, not only the local head.
//!
//! The places themselves (one refresh in flight, leave calls counted, failures
//! logged) are the waiting kit's [`Places`] (`actors/waiting/places.rs`), the
//! same part the fair semaphore keeps, with this lock's own calls
//! ([`FairPlaceCalls`]: `wire::FairRefresh` / `wire::FairLeave`). The kind does
//! not own the actor's context, so it takes the kit's steps itself and hands
//! each call to the lock actor as a [`Chore`]; what comes back is a [`Done`].

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;
use tracing::debug;

use super::decisions::answer_try_once;
use super::{Attempt, Chore, Giveback, Policy, Scripts};
use crate::actors::lock::waiters::{WaiterQueue, Want};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{Heard, Pick, Then};
use crate::actors::waiting::{PlaceCalls, Places};
use crate::config::Config;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, FairLeave, FairRefresh, Place, ReleaseReply};

/// The fair lock's state: its waiters' places in the Redis queue.
#[derive(Debug, Default)]
pub(in crate::actors::lock) struct Fair {
    /// The places, and the calls that keep them (the kit's part).
    places: Places,
    /// Owner fields to take out of the Redis queue with the next chore. A
    /// boxed slice, not a `Vec`: a held lock carries its kind inline, and this
    /// keeps `KindState` at 40 bytes (only a waiter that gives up adds to it).
    pub(super) leaving: Box<[Arc<str>]>,
}

/// The outcome of a call on the places, as a [`Chore`] hands it back.
enum Done {
    /// A refresh of these fields answered.
    Refreshed(Vec<Arc<str>>, RedisResult<Vec<Place>>),
    /// A leave answered.
    Left(RedisResult<()>),
}

impl Fair {
    /// The field `field` leaves the Redis queue, unless a local waiter still
    /// waits with it.
    fn leave_field(&mut self, field: &str, queue: &WaiterQueue) {
        let waits = queue.iter().any(|w| &*w.want.req.field == field);
        if !waits && !self.leaving.iter().any(|f| &**f == field) {
            let mut leaving = std::mem::take(&mut self.leaving).into_vec();
            leaving.push(Arc::from(field));
            self.leaving = leaving.into_boxed_slice();
        }
    }

    /// Applies a refresh's answer: a waiter at the head of a free lock tries
    /// now; one whose place lapsed (a refresh came too late) takes a new one at
    /// the back, being alive.
    fn refreshed(queue: &mut WaiterQueue, stands: Vec<(Arc<str>, Place)>, name: &str) {
        for (field, place) in stands {
            for w in queue.iter_mut().filter(|w| w.want.req.field == field) {
                match place {
                    Place::None if w.want.queued => {
                        debug!(lock = %name, "a waiter's place lapsed; queueing it again");
                        w.want.queued = false;
                        w.want.try_now = true;
                    }
                    Place::Head => w.want.try_now = true,
                    Place::None | Place::Kept => {}
                }
            }
        }
    }
}

impl Policy for Fair {
    fn scripts(&self) -> &'static dyn Scripts {
        &FairScripts
    }

    /// The first waiter that is due, skipping those with a place that a local
    /// holder keeps from the lock (the local release tells the head).
    /// Try-once waiters that a local holder keeps out are answered now. With
    /// nobody due, the timer rings when the holder's lease says the lock may
    /// be free (a lapsed lease publishes nothing).
    fn next(&mut self, queue: &mut WaiterQueue, now: Instant) -> Pick {
        answer_try_once(queue, |w| w.want.blocked);
        for w in queue.iter_mut() {
            if w.want.queued && w.want.blocked {
                w.want.try_now = false;
            }
        }
        if let Some(w) = queue.iter().find(|w| w.want.try_now) {
            return Pick::Waiter(w.id);
        }
        let lease_ends = queue.iter().filter_map(|w| w.want.retry_at).min();
        let left = lease_ends.and_then(|at| at.checked_duration_since(now));
        left.filter(|l| !l.is_zero())
            .map_or(Pick::Nobody, Pick::HoldBack)
    }

    /// Once sent, the attempt may put it in the Redis queue (unless it tries
    /// once): from then on, leaving this queue must leave that one too.
    fn sending(&mut self, want: &mut Want, once: bool, _config: &Config) -> bool {
        let queue = !once;
        want.queued |= queue;
        want.try_now = false;
        queue
    }

    /// Only this waiter's one attempt was made; the others make their own (so
    /// others may be due at once). It listens on its own channel from now on.
    fn short(&mut self, want: &mut Want, ttl: Option<Duration>, _c: &Config) -> Then {
        want.listens = true;
        want.retry_at = ttl.map(|t| Instant::now() + t);
        Then::Pump
    }

    fn channel_of(&self, want: &Want, name: &str) -> Option<String> {
        want.listens
            .then(|| keys::fair_channel(name, &want.req.field))
    }

    /// A fair waiter's channel is its own: no use listening once it left.
    fn own_channel(&self, want: &Want, name: &str) -> Option<String> {
        self.channel_of(want, name)
    }

    fn place(&self, want: &Want) -> Option<Arc<str>> {
        want.queued.then(|| want.req.field.clone())
    }

    /// A message names its waiter by channel: that one tries. Its own
    /// releases' messages are news too (they may name a local waiter).
    fn heard(&mut self, channel: &str, name: &str, queue: &mut WaiterQueue) -> Heard {
        if let Some(field) = field_of(channel, name) {
            mark_due(queue, field);
        }
        Heard::Wake
    }

    fn subscribed(&mut self, channel: &str, name: &str, queue: &mut WaiterQueue) {
        self.heard(channel, name, queue);
    }

    /// The head of the Redis queue may be another of ours (places are taken
    /// in arrival order, but one that lapsed and was taken again is not).
    fn placed(&mut self, stands: Vec<(Arc<str>, Place)>, queue: &mut WaiterQueue, name: &str) {
        Fair::refreshed(queue, stands, name);
    }

    /// Messages may have been lost: every waiter tries again (one of them may
    /// be at the head of a free lock).
    fn resync(&mut self, queue: &mut WaiterQueue) {
        queue.iter_mut().for_each(|w| w.want.try_now = true);
    }

    /// Waiters may have missed their message: each tries again.
    fn restarting(&mut self, queue: &mut WaiterQueue) {
        self.places.reset();
        queue.iter_mut().for_each(|w| w.want.try_now = true);
    }

    /// The first of ours in the Redis queue asks again (the others are told by
    /// message when their turn comes).
    fn timer_fired(&mut self, queue: &mut WaiterQueue) {
        if let Some(w) = queue.iter_mut().find(|w| w.want.queued) {
            w.want.try_now = true;
        }
    }

    /// These waiters left: their fields leave the Redis queue, except those
    /// another local waiter still waits with (the same owner, twice).
    fn left(&mut self, places: Vec<Arc<str>>, queue: &WaiterQueue) {
        for field in places {
            self.leave_field(&field, queue);
        }
    }

    /// Places are refreshed every third of `Config::fair_waiter_lease` while
    /// any waiter may have one.
    fn tick_every(&self, queue: &WaiterQueue, config: &Config) -> Option<Duration> {
        queue
            .iter()
            .any(|w| w.want.queued)
            .then(|| config.fair_refresh_every())
    }

    /// The refresh: one script call keeps every local waiter's place and says
    /// which (if any) is at the head of a free lock.
    fn tick(&mut self, queue: &WaiterQueue, name: &Arc<str>, shared: &Shared) -> Option<Chore> {
        let mut fields: Vec<Arc<str>> = Vec::new();
        for w in queue.iter().filter(|w| w.want.queued) {
            if !fields.contains(&w.want.req.field) {
                fields.push(w.want.req.field.clone());
            }
        }
        if !self.places.start_refresh(&fields) {
            return None;
        }
        let call = FairPlaceCalls { name, shared }.refresh_call(fields.clone());
        let work = async move { Box::new(Done::Refreshed(fields, call.await)) as Box<dyn Any> };
        Some(Chore(work.boxed_local()))
    }

    /// The call that takes the leaving fields out of the Redis queue, if any.
    fn chore(&mut self, queue: &WaiterQueue, name: &Arc<str>, shared: &Shared) -> Option<Chore> {
        let leaving = std::mem::take(&mut self.leaving).into_vec();
        let still: Vec<Arc<str>> = queue.iter().map(|w| w.want.req.field.clone()).collect();
        let leaving = self.places.start_leave(leaving, &still)?;
        let call = FairPlaceCalls { name, shared }.leave_call(leaving);
        let work = async move { Box::new(Done::Left(call.await)) as Box<dyn Any> };
        Some(Chore(work.boxed_local()))
    }

    /// A call's outcome; answers whether waiters may try now (a refresh
    /// answered).
    fn chore_done(&mut self, done: Box<dyn Any>, queue: &mut WaiterQueue, name: &str) -> bool {
        let Ok(done) = done.downcast::<Done>() else {
            return false;
        };
        match *done {
            Done::Refreshed(fields, res) => match self.places.refresh_answered(fields, res, name) {
                Some(stands) => {
                    Fair::refreshed(queue, stands, name);
                    true
                }
                None => false,
            },
            Done::Left(res) => {
                self.places.leave_answered(res, name);
                false
            }
        }
    }

    fn busy_with_chores(&self) -> bool {
        self.places.busy()
    }
}

/// The fair lock's calls on its places, for one chore.
struct FairPlaceCalls<'a> {
    name: &'a Arc<str>,
    shared: &'a Shared,
}

impl PlaceCalls for FairPlaceCalls<'_> {
    fn refresh_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, RedisResult<Vec<Place>>> {
        let (name, mut conn) = (self.name.clone(), self.shared.node.conn());
        let place_ms = millis(self.shared.config.fair_waiter_lease);
        async move {
            let fields: Vec<&str> = ids.iter().map(|f| &**f).collect();
            let call = FairRefresh {
                name: &name,
                fields: &fields,
                place_ms,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    fn leave_call(&self, ids: Vec<Arc<str>>) -> LocalBoxFuture<'static, RedisResult<()>> {
        let (name, mut conn) = (self.name.clone(), self.shared.node.conn());
        async move {
            let fields: Vec<&str> = ids.iter().map(|f| &**f).collect();
            let call = FairLeave {
                name: &name,
                fields: &fields,
            };
            wire::call(&mut conn, &call).await.map(|_| ())
        }
        .boxed_local()
    }
}

/// The owner field a fair waiter's channel names, if it is one of this lock's.
fn field_of<'c>(channel: &'c str, name: &str) -> Option<&'c str> {
    channel
        .strip_prefix(keys::channel(name).as_str())
        .and_then(|rest| rest.strip_prefix(':'))
}

/// The waiters with this owner field try at the next pump.
fn mark_due(queue: &mut WaiterQueue, field: &str) {
    for w in queue.iter_mut() {
        if &*w.want.req.field == field {
            w.want.try_now = true;
        }
    }
}

/// The fair lock's scripts.
#[derive(Debug)]
pub(super) struct FairScripts;

impl Scripts for FairScripts {
    fn channel(&self, name: &str) -> String {
        keys::channel(name)
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
        async move { wire::call(&mut conn, &fair_release_of(&g, latch_ttl_ms)).await }.boxed_local()
    }

    /// One release undoes exactly what the acquisition did to the lock hash
    /// (granted or re-entered: one hold more, then one less; busy: nothing,
    /// then nothing, the release of a field that holds nothing changing
    /// nothing); a place it took is left by the waiter's leave, or lapses
    /// within `Config::fair_waiter_lease` if this process is gone first. Sent as
    /// the exclusive lock's is: one `EVAL`, never resent.
    fn undo_abandoned(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> Option<LocalBoxFuture<'static, RedisResult<ReleaseReply>>> {
        let mut conn = shared.node.conn();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        Some(
            async move { wire::call_once(&mut conn, &fair_release_of(&g, latch_ttl_ms)).await }
                .boxed_local(),
        )
    }
}

/// The fair release script call for `g`.
fn fair_release_of(g: &Giveback, latch_ttl_ms: u64) -> wire::FairRelease<'_> {
    wire::FairRelease {
        name: &g.name,
        field: &g.field,
        lease_ms: g.lease_ms,
        request_id: &g.request_id,
        latch_ttl_ms,
    }
}
