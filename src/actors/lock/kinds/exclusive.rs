//! The exclusive reentrant lock (Redisson `getLock`): one owner at a time, no order
//! among waiters, every waiter listening on the lock's one unlock channel.
//!
//! Its acquire and release go through the manager's coalescer, so that those of
//! many locks that are ready at the same moment share one script call; the
//! watchdog renews its holdings many per call. Its state is the turn that
//! processes take on the lock (`exclusive/turn.rs`): runs of hand-overs inside
//! this process, then a yield to the others, and a random start after another
//! process's release.

mod turn;

use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use futures::FutureExt;
use redis::RedisResult;

use super::decisions::{self, Freed};
use super::echo::Echo;
use super::{AfterRelease, Attempt, Giveback, Handed, LastRelease, Policy, Scripts};
use crate::actors::lock::waiters::{WaiterQueue, Want};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{Heard, Pick, Then};
use crate::config::Config;
use crate::durations::millis;
use crate::keys;
use crate::kind::AcquireKind;
use crate::wire::{self, AcquireReply, ReleaseReply, TransferReply};
use turn::{Turn, PRECISION};

/// The exclusive lock's state: its turn, and its own unlock messages to come.
#[derive(Debug, Default)]
pub(in crate::actors::lock) struct Exclusive {
    /// This process's run of grants, and whether it yields to others.
    turn: Turn,
    /// Its own unlock messages still to come back.
    echo: Echo,
}

impl Policy for Exclusive {
    fn scripts(&self) -> &'static dyn Scripts {
        &ExclusiveScripts
    }

    fn next(&mut self, queue: &mut WaiterQueue, now: Instant) -> Pick {
        if queue.is_empty() {
            return Pick::Nobody;
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

    fn short(&mut self, want: &mut Want, ttl: Option<Duration>, _c: &Config) -> Then {
        // Another process holds it: a run of local grants is over.
        self.turn.other_held();
        want.listens = true;
        Then::Held(ttl)
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
    }

    /// While this process yields, its head waiter listens for the other
    /// processes' release.
    fn kept_channel(&self, name: &str) -> Option<String> {
        let yielding = self.turn.holding_back(Instant::now()).is_some();
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
        async move {
            let call = wire::Transfer {
                release: release_of(&g, latch_ttl_ms),
                to: &to.field,
                lease_ms: to.lease_ms,
                token_ttl_ms: to.token_ttl_ms,
                count,
                delay_ms: to.delay_ms,
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
        async move { via.call(&release_of(&g, latch_ttl_ms)).await }.boxed_local()
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
        Some(
            async move { wire::call_once(&mut conn, &release_of(&g, latch_ttl_ms)).await }
                .boxed_local(),
        )
    }
}

/// The release script call for `g`.
fn release_of(g: &Giveback, latch_ttl_ms: u64) -> wire::Release<'_> {
    wire::Release {
        name: &g.name,
        field: &g.field,
        lease_ms: g.lease_ms,
        request_id: &g.request_id,
        latch_ttl_ms,
        retry: g.retry,
    }
}
