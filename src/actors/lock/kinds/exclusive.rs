//! The exclusive reentrant lock (Redisson `getLock`): one owner at a time, no order
//! among waiters, every waiter listening on the lock's one unlock channel.
//!
//! Its acquire and release go through the manager's coalescer, so that those of
//! many locks that are ready at the same moment share one script call; the
//! watchdog renews its holdings many per call. Its state is the turn that
//! processes take on the lock (`exclusive/turn.rs`): runs of hand-overs inside
//! this process, then a yield to the others, and a random start after another
//! process's release.

mod handoff;
mod turn;

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;

use super::decisions::{self, Freed};
use super::echo::Echo;
use super::{AfterRelease, Attempt, Chore, Giveback, Handed, LastRelease, Policy, Scripts};
use crate::actors::lock::waiters::{WaiterQueue, Want};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{Heard, Pick, Then};
use crate::config::Config;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, ReleaseReply, TransferReply};
use handoff::Places;
pub(in crate::actors::lock) use handoff::HAND_LEASE;
use handoff::PLACE_LIFE;
use turn::{Turn, PRECISION};

/// The exclusive lock's state: its turn, and its own unlock messages to come.
#[derive(Debug, Default)]
pub(in crate::actors::lock) struct Exclusive {
    /// This process's run of grants, and whether it yields to others.
    turn: Turn,
    /// Its own unlock messages still to come back.
    echo: Echo,
    /// Its waiters' places in the handoff queue (`exclusive/handoff.rs`),
    /// made when a waiter first takes one: boxed, as most locks never do, and
    /// a lock actor stays as small as it can (`kinds/mod.rs`).
    places: Option<Box<Places>>,
}

impl Policy for Exclusive {
    fn scripts(&self) -> &'static dyn Scripts {
        &ExclusiveScripts
    }

    fn next(&mut self, queue: &mut WaiterQueue, now: Instant) -> Pick {
        if queue.is_empty() {
            return Pick::Nobody;
        }
        // A waiter a release handed the lock to asks first: its attempt
        // finds the hold (`exclusive/handoff.rs`).
        if let Some(w) = queue.iter().find(|w| w.want.handed && !w.want.blocked) {
            return Pick::Waiter(w.id);
        }
        match self.turn.holding_back(now) {
            // Yielding to other processes: their waiters go first; the head asks
            // when the yield ends, unless a message comes first.
            Some(left) => Pick::HoldBack(left),
            None => decisions::head_first(queue),
        }
    }

    fn granted(&mut self, waiting: usize) {
        self.turn.granted(waiting);
    }

    /// With direct handoff, a waiter that waits takes a place with every
    /// attempt, its first included: a release that hands it the lock before
    /// its process listens finds nobody to tell and takes the lock back
    /// (`lua/release.lua`), and the attempt the waiter sends once it listens
    /// finds the lock as it is.
    fn sending(&mut self, want: &mut Want, once: bool, config: &Config) -> bool {
        want.hands_off = Places::takes_places(want, config);
        let place = want.hands_off && !once;
        want.queued |= place;
        place
    }

    /// It listens from now on. A waiter handed the lock while its attempt
    /// was out (that attempt ran before the release) asks again at once.
    fn short(&mut self, want: &mut Want, ttl: Option<Duration>, _c: &Config) -> Then {
        // Another process holds it: a run of local grants is over.
        self.turn.other_held();
        want.listens = true;
        if want.placing {
            // Its place exists from this attempt on (a release that hands it
            // the lock runs after it).
            want.placed_at = want.tried_at;
            self.places().busy_for(ttl);
        }
        // A handoff's token stands only against the answer that was out when
        // its message came (`actors/lock/handoff.rs`, `answered`).
        want.handed_token = None;
        if std::mem::take(&mut want.handed) {
            return Then::Pump;
        }
        Then::Held(ttl)
    }

    fn also_listens(&self, want: &Want, name: &str) -> Option<String> {
        Places::channel(want, name)
    }

    fn place(&self, want: &Want) -> Option<Arc<str>> {
        want.queued.then(|| want.req.field.clone())
    }

    fn left(&mut self, places: Vec<Arc<str>>, _queue: &WaiterQueue) {
        if !places.is_empty() {
            self.places().left(places);
        }
    }

    /// With direct handoff the channels stay a while after the last waiter:
    /// a release hands the lock only to a process that hears it, so a
    /// process whose waiters come back to the lock in turns (each wait a new
    /// subscription otherwise) would be skipped as often as not. The unlock
    /// channel's subscription order, which the turns rely on without it,
    /// matters little here: waiters with a place go in the order they took it.
    fn lingers(&self, config: &Config) -> bool {
        config.direct_handoff
    }

    /// A release handed the lock to a waiter here: whatever this process
    /// yielded for is over.
    fn handed_off(&mut self) {
        self.turn.other_held();
    }

    fn tick_every(&self, queue: &WaiterQueue, _config: &Config) -> Option<Duration> {
        Places::every(queue)
    }

    fn tick(&mut self, queue: &WaiterQueue, name: &Arc<str>, shared: &Shared) -> Option<Chore> {
        self.places.as_mut()?.refresh(queue, name, shared)
    }

    fn chore(&mut self, _queue: &WaiterQueue, name: &Arc<str>, shared: &Shared) -> Option<Chore> {
        self.places.as_mut()?.leave(name, shared)
    }

    fn chore_done(&mut self, done: Box<dyn Any>, queue: &mut WaiterQueue, name: &str) -> bool {
        self.places().done(done, queue, name)
    }

    fn busy_with_chores(&self) -> bool {
        self.places.as_ref().is_some_and(|p| p.busy())
    }

    /// Another process released the lock: the next grant here starts a new
    /// run, and the head waiter asks after a random part of the jitter (none
    /// when nobody else listens).
    fn heard(&mut self, _channel: &str, _name: &str, _queue: &mut WaiterQueue) -> Heard {
        if self.echo.heard() {
            return Heard::Nothing;
        }
        self.turn.other_held();
        let delay = self.turn.wake_delay();
        match delay < PRECISION {
            true => Heard::Wake,
            false => Heard::WakeAfter(delay),
        }
    }

    fn subscribing(&mut self) {
        self.echo.forget();
    }

    fn resync(&mut self, _queue: &mut WaiterQueue) {
        self.echo.forget();
    }

    fn restarting(&mut self, _queue: &mut WaiterQueue) {
        self.echo.forget();
        if let Some(places) = &mut self.places {
            places.reset();
        }
    }

    /// While this process yields, its head waiter listens for the other
    /// processes' release.
    fn kept_channel(&self, name: &str) -> Option<String> {
        let yielding = self.turn.yielding();
        yielding.then(|| keys::channel(name))
    }

    /// The unlock channel stays subscribed for the holder's sake while it
    /// takes turns and few others listen (`turn.rs`, `KEEP_LISTENING`): a
    /// holder's subscription never makes another process's count of listeners
    /// wrong, as only the one process that holds counts (and subtracts itself).
    fn keeps_listening(&self, channel: &str, name: &str, holding: bool) -> bool {
        holding && self.turn.keeps_listening() && channel == keys::channel(name)
    }

    fn last_release(&self) -> LastRelease {
        if self.turn.refused || !self.turn.may_hand_over() {
            return LastRelease::Plain;
        }
        LastRelease::HandOver {
            count: self.turn.count_now(),
        }
    }

    fn handed(&mut self, how: Handed) {
        match how {
            Handed::Refused => self.turn.refused = true,
            Handed::Over(Some(others)) => self.turn.heard(others),
            Handed::Over(None) => {}
        }
    }

    /// A plain release published: yields to the processes that heard it when
    /// this process's run is over (the head waiter holds back, listening for
    /// their release).
    fn released(&mut self, freed: Freed) -> AfterRelease {
        if !freed.published {
            return AfterRelease::Nothing;
        }
        if freed.listening {
            self.echo.published();
        }
        if freed.nobody_waits {
            // Nobody queued: the channel is unsubscribed now that nothing here
            // holds or waits, and a yield would keep this process's next waiter
            // out until FALLBACK, since it would not hear the others' release
            // (measured: the lock sat idle; see docs/performance.md, "Why the
            // turn constants are what they are"). That waiter finds the lock
            // taken and subscribes as any does.
            self.turn.heard(freed.others);
            return AfterRelease::Nothing;
        }
        if !self.turn.released(freed.others, freed.now) {
            return AfterRelease::Nothing;
        }
        AfterRelease::Yield
    }
}

impl Exclusive {
    /// Its places' books, made if there are none.
    fn places(&mut self) -> &mut Places {
        self.places.get_or_insert_with(Box::default)
    }
}

/// The exclusive lock's scripts (the spin lock's too).
#[derive(Debug)]
pub(super) struct ExclusiveScripts;

impl Scripts for ExclusiveScripts {
    fn channel(&self, name: &str) -> String {
        keys::channel(name)
    }

    fn transfer(
        &self,
        shared: &Shared,
        g: Giveback,
        to: Attempt,
        count: bool,
    ) -> LocalBoxFuture<'static, RedisResult<TransferReply>> {
        let via = shared.coalescer.clone();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        let handing = shared.config.direct_handoff;
        async move {
            let call = wire::Transfer {
                release: release_of(&g, latch_ttl_ms, to.token_ttl_ms, handing),
                to: &to.field,
                lease_ms: to.lease_ms,
                token_ttl_ms: to.token_ttl_ms,
                count,
                delay_ms: to.delay_ms,
                place_ms: place_ms(&to),
            };
            via.call(&call).await
        }
        .boxed_local()
    }

    fn renewal(&self, _kind: AcquireKind) -> Renewal {
        Renewal::Hash
    }

    fn acquire(
        &self,
        shared: &Shared,
        a: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        let via = shared.coalescer.clone();
        async move {
            let call = wire::Acquire {
                name: &a.name,
                field: &a.field,
                lease_ms: a.lease_ms,
                token_ttl_ms: a.token_ttl_ms,
                new_owner: a.new_owner,
                reentrant: a.reentrant,
                delay_ms: a.delay_ms,
                place_ms: place_ms(&a),
            };
            via.call(&call).await
        }
        .boxed_local()
    }

    fn release(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>> {
        let via = shared.coalescer.clone();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        let token_ttl_ms = millis(shared.config.token_ttl);
        let handing = shared.config.direct_handoff;
        async move {
            let release = release_of(&g, latch_ttl_ms, token_ttl_ms, handing);
            via.call(&release).await
        }
        .boxed_local()
    }

    /// One release undoes exactly whatever the acquisition found (granted or
    /// re-entered: one hold more, then one less; held elsewhere: nothing, then
    /// nothing). One `EVAL` carrying the script on the command connection,
    /// never resent ([`wire::call_once`]), so that it needs nothing from the
    /// server's script cache and cannot land behind a later attempt.
    fn undo_abandoned(
        &self,
        shared: &Shared,
        g: Giveback,
    ) -> Option<LocalBoxFuture<'static, RedisResult<ReleaseReply>>> {
        let mut conn = shared.node.conn();
        let latch_ttl_ms = millis(shared.config.latch_ttl);
        let token_ttl_ms = millis(shared.config.token_ttl);
        let handing = shared.config.direct_handoff;
        Some(
            async move {
                let release = release_of(&g, latch_ttl_ms, token_ttl_ms, handing);
                wire::call_once(&mut conn, &release).await
            }
            .boxed_local(),
        )
    }
}

/// The release script call for `g`. With `handing` (`Config::direct_handoff`)
/// a release that frees the lock hands it to the first live place in its
/// handoff queue, if any; without, it frees the lock and publishes (a waiter
/// with a place hears that too).
fn release_of(
    g: &Giveback,
    latch_ttl_ms: u64,
    token_ttl_ms: u64,
    handing: bool,
) -> wire::Release<'_> {
    wire::Release {
        name: &g.name,
        field: &g.field,
        lease_ms: g.lease_ms,
        request_id: &g.request_id,
        latch_ttl_ms,
        retry: g.retry,
        hand_lease_ms: if handing { millis(HAND_LEASE) } else { 0 },
        token_ttl_ms,
    }
}

/// The place lifetime an attempt asks for: its waiter takes (or keeps) a
/// place in the handoff queue, or none (0).
fn place_ms(a: &Attempt) -> u64 {
    if a.queue {
        millis(PLACE_LIFE)
    } else {
        0
    }
}
