//! The exclusive lock's places in its handoff queue (`Config::direct_handoff`):
//! who takes one, keeping them alive, and giving them up.
//!
//! A waiter that waits takes a place with each attempt that finds the lock
//! held, its first included (`lua/acquire.lua`, `ARGV[6]`), at the back of a list
//! beside the lock; the release that frees the lock makes the first live place
//! the holder and tells its process, or, when nobody hears that (the process
//! died, or its waiter does not listen yet), takes the hold back and looks at
//! the next (`lua/release.lua`; the actor's half is `actors/lock/handoff.rs`).
//! A place lives [`PLACE_LIFE`] past the last call
//! that kept it, so one whose process died stops counting within that; the
//! places of this lock's waiters are kept by one call every [`REFRESH_EVERY`]
//! (one per lock, not per waiter). A place the refresh finds gone was handed
//! the lock (its message may be on its way, or lost) or lapsed (a stalled
//! process): either way its waiter asks again at once, which finds the hold
//! or takes a new place. A waiter that leaves gives its place up.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use redis::RedisResult;
use tracing::debug;

use crate::actors::lock::kinds::Chore;
use crate::actors::lock::waiters::{WaiterQueue, Want};
use crate::actors::shared::Shared;
use crate::config::Config;
use crate::durations::millis;
use crate::keys;
use crate::wire::{self, PlacesKept};

/// How long a place lives past the last call that took or kept it: a waiter
/// that died is skipped by releases this long after its last refresh at most.
pub(in crate::actors::lock) const PLACE_LIFE: Duration = Duration::from_millis(1000);

/// How often the places of a lock's waiters are kept: a third of their life,
/// so that two refreshes may be late before a live waiter's place lapses.
const REFRESH_EVERY: Duration = Duration::from_millis(300);

/// The lease a release gives the waiter it hands the lock to. Short, as the
/// waiter's process may have frozen since its last refresh (still subscribed,
/// so the release cannot tell): the lock then waits this long at most. The
/// receiver makes it its own lease at once.
pub(in crate::actors::lock) const HAND_LEASE: Duration = Duration::from_millis(800);

/// The places' calls in flight, and the places given up and not yet sent.
#[derive(Debug, Default)]
pub(super) struct Places {
    /// A refresh is out.
    refreshing: bool,
    /// A leave is out.
    leaving_out: bool,
    /// Fields of waiters that left with a place, to take out.
    leaving: Vec<Arc<str>>,
    /// When the lock's hold was last known to end (a busy answer's lease):
    /// a refresh that finds it ending sooner (handed to another waiter, with
    /// the short lease) has the head ask, so that its answer times the retry.
    known_end: Option<Instant>,
}

/// What a places call came back with.
enum Done {
    /// A refresh of these fields, sent then.
    Refreshed(Vec<Arc<str>>, Instant, RedisResult<PlacesKept>),
    /// A leave.
    Left(RedisResult<PlacesKept>),
}

impl Places {
    /// Whether a waiter that wants `want` takes places: the option is on, its
    /// owner was made for this wait (a hold of its field can only be a
    /// handoff), and there is no lock-delay (a lapsed hold must keep the lock
    /// taken, which a handoff would not know of).
    pub(super) fn takes_places(want: &Want, config: &Config) -> bool {
        config.direct_handoff && config.lock_delay.is_zero() && want.req.new_owner
    }

    /// The channel on which this process hears that `want`'s field holds
    /// the lock `name`, once it may have a place.
    pub(super) fn channel(want: &Want, name: &str) -> Option<String> {
        let listening = want.hands_off && want.listens;
        let client = client_of(&want.req.field)?;
        listening.then(|| keys::handoff_channel(name, client))
    }

    /// How often the places must be kept while the queue is as it is.
    pub(super) fn every(queue: &WaiterQueue) -> Option<Duration> {
        queue.iter().any(|w| w.want.queued).then_some(REFRESH_EVERY)
    }

    /// The refresh of every place this lock's waiters may have.
    pub(super) fn refresh(
        &mut self,
        queue: &WaiterQueue,
        name: &Arc<str>,
        shared: &Shared,
    ) -> Option<Chore> {
        let fields: Vec<Arc<str>> = queue
            .iter()
            .filter(|w| w.want.queued)
            .map(|w| w.want.req.field.clone())
            .collect();
        if self.refreshing || fields.is_empty() {
            return None;
        }
        self.refreshing = true;
        let call = places_call(name, shared, fields.clone(), PLACE_LIFE);
        let sent = Instant::now();
        let work =
            async move { Box::new(Done::Refreshed(fields, sent, call.await)) as Box<dyn Any> };
        Some(Chore(work.boxed_local()))
    }

    /// Waiters with these places left.
    pub(super) fn left(&mut self, fields: Vec<Arc<str>>) {
        self.leaving.extend(fields);
    }

    /// The call that gives up the places of waiters that left, if any.
    pub(super) fn leave(&mut self, name: &Arc<str>, shared: &Shared) -> Option<Chore> {
        if self.leaving_out || self.leaving.is_empty() {
            return None;
        }
        self.leaving_out = true;
        let fields = std::mem::take(&mut self.leaving);
        let call = places_call(name, shared, fields, Duration::ZERO);
        let work = async move { Box::new(Done::Left(call.await)) as Box<dyn Any> };
        Some(Chore(work.boxed_local()))
    }

    /// A places call answered: a place kept moves its waiter's `placed_at`
    /// on; a place gone has its waiter ask again at once (answered `true`:
    /// the queue looks again).
    pub(super) fn done(&mut self, done: Box<dyn Any>, queue: &mut WaiterQueue, name: &str) -> bool {
        let Ok(done) = done.downcast::<Done>() else {
            return false;
        };
        match *done {
            Done::Refreshed(fields, sent, Ok(kept)) => {
                self.refreshing = false;
                let mut gone = self.ends_sooner(kept.ttl.map(|ttl| sent + ttl));
                for (field, had) in fields.iter().zip(kept.had) {
                    let Some(w) = queue.iter_mut().find(|w| &w.want.req.field == field) else {
                        continue;
                    };
                    if had {
                        w.want.placed_at = Some(sent);
                    } else if !w.want.handed {
                        w.want.queued = false;
                        w.want.handed = true;
                        gone = true;
                    }
                }
                gone
            }
            Done::Refreshed(_, _, Err(e)) => {
                self.refreshing = false;
                debug!(lock = name, error = %e, "keeping the handoff places failed; tried again at the next refresh");
                false
            }
            Done::Left(res) => {
                self.leaving_out = false;
                if let Err(e) = res {
                    // The places lapse on their own within PLACE_LIFE; a
                    // release that hands the lock to one meanwhile is answered
                    // by a give-back (`actors/lock/handoff.rs`).
                    debug!(lock = name, error = %e, "giving up handoff places failed; they lapse");
                }
                false
            }
        }
    }

    /// A busy answer said the lock's hold ends in `ttl`.
    pub(super) fn busy_for(&mut self, ttl: Option<Duration>) {
        self.known_end = ttl.map(|ttl| Instant::now() + ttl);
    }

    /// Whether the lock's hold ends at `end`, sooner than last known (by
    /// more than a refresh's worth of clock noise): it was handed on.
    fn ends_sooner(&mut self, end: Option<Instant>) -> bool {
        let Some(end) = end else {
            return false;
        };
        let sooner = self
            .known_end
            .is_none_or(|known| known > end + Duration::from_millis(50));
        if sooner {
            self.known_end = Some(end);
        }
        sooner
    }

    /// A call is out (the actor must not retire).
    pub(super) fn busy(&self) -> bool {
        self.refreshing || self.leaving_out || !self.leaving.is_empty()
    }

    /// The actor restarts: the calls in flight are gone.
    pub(super) fn reset(&mut self) {
        self.refreshing = false;
        self.leaving_out = false;
    }
}

/// The process part of an owner field, `<client id>:<owner>`.
pub(in crate::actors::lock) fn client_of(field: &str) -> Option<&str> {
    field.rsplit_once(':').map(|(client, _)| client)
}

/// One places call for `fields` of the lock `name`: kept for `life`, or
/// given up (zero).
fn places_call(
    name: &Arc<str>,
    shared: &Shared,
    fields: Vec<Arc<str>>,
    life: Duration,
) -> impl std::future::Future<Output = RedisResult<PlacesKept>> + 'static {
    let mut conn = shared.node.conn();
    let name = name.clone();
    async move {
        let fields: Vec<&str> = fields.iter().map(|f| &**f).collect();
        let call = wire::HandoffPlaces {
            name: &name,
            fields: &fields,
            life_ms: millis(life),
        };
        wire::call(&mut conn, &call).await
    }
}
