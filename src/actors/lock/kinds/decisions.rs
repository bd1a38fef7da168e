//! The decisions a kind's hooks answer with, as data the lock actor carries out
//! (who tries is the waiting engine's [`Pick`], the word every synchronizer
//! answers that question with), and the decisions most kinds share (the head waiter tries; a busy answer is
//! followed by listening on the lock's channel).
//!
//! Data rather than calls back into the actor, so that a kind never reaches into
//! the skeleton, and so that its decisions can be tested with a queue and no
//! actor, no timer and no Redis (`tests.rs` beside this file).

use std::any::Any;
use std::time::Duration;

use futures::future::LocalBoxFuture;

use super::Scripts;
use crate::actors::lock::holding::Holdings;
use crate::actors::lock::waiters::WaiterQueue;
use crate::actors::waiting::engine::Pick;

/// A busy answer, as the kind needs it.
#[derive(Debug)]
pub(in crate::actors::lock) struct BusyAnswer<'a> {
    /// The waiter whose attempt it was.
    pub(in crate::actors::lock) waiter: u64,
    /// That waiter's owner field.
    pub(in crate::actors::lock) field: &'a str,
    /// The attempt may have taken a place in a Redis queue.
    pub(in crate::actors::lock) placed: bool,
    /// How long the holder's lease has left, if Redis said.
    pub(in crate::actors::lock) ttl: Option<Duration>,
    /// The field at the head of the Redis queue, if the kind has one.
    pub(in crate::actors::lock) head: Option<String>,
    /// An unlock message (or a resync) came while the attempt was in flight.
    pub(in crate::actors::lock) woken: bool,
    /// The lock's name.
    pub(in crate::actors::lock) name: &'a str,
}

/// What follows a busy answer ([`Policy::busy`](super::Policy::busy)).
#[derive(Debug, PartialEq, Eq)]
pub(in crate::actors::lock) struct OnBusy {
    /// How the waiters learn when to try again.
    pub(in crate::actors::lock) retry: Retry,
    /// Other waiters may try at once as well (each makes its own attempt).
    pub(in crate::actors::lock) then_pump: bool,
}

/// How waiters learn when to try again after a busy answer.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::actors::lock) enum Retry {
    /// Try again now (something woke the lock while the attempt was out).
    Now,
    /// Try again after this delay (the spin lock's backoff).
    After(Duration),
    /// Listen on this channel: subscribe if not yet, else fall back to the
    /// retry timer (the holder's lease, at most `Config::max_retry_interval`).
    Listen(String),
    /// Only the fallback retry timer.
    Fallback,
}

/// What an unlock message (or a live subscription) means.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::actors::lock) enum Heard {
    /// Nothing (this process's own release, already handed on).
    Nothing,
    /// Let a waiter try now, or right after the attempt in flight.
    Wake,
    /// The same, after this delay (a random start among processes).
    WakeAfter(Duration),
    /// Waiters marked due by the kind try now.
    Pump,
}

/// How the last hold of a holding is given back.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::actors::lock) enum LastRelease {
    /// A release script that frees the lock.
    Plain,
    /// Handed to the local head waiter in one call; `count`: the call also
    /// counts who listens on the unlock channel.
    HandOver {
        /// Count the listeners too (a command more).
        count: bool,
    },
}

/// How a hand-over went, for the kind's books.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::actors::lock) enum Handed {
    /// Redis refused it (no right to count listeners): release plainly from now.
    Refused,
    /// Handed over; `Some(n)`: n other processes listen.
    Over(Option<u32>),
}

/// A plain release that freed the lock, for [`Policy::released`](super::Policy::released).
#[derive(Debug, Clone, Copy)]
pub(in crate::actors::lock) struct Freed {
    /// It published an unlock message.
    pub(in crate::actors::lock) published: bool,
    /// How many other processes heard it.
    pub(in crate::actors::lock) others: u32,
    /// This process listens on the lock's channel (it will hear it too).
    pub(in crate::actors::lock) listening: bool,
    /// No local waiter is queued.
    pub(in crate::actors::lock) nobody_waits: bool,
    /// When.
    pub(in crate::actors::lock) now: std::time::Instant,
}

/// What follows a release that freed the lock.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::actors::lock) enum AfterRelease {
    /// Nothing more.
    Nothing,
    /// Yield to the other processes: listen on the lock's channel for their
    /// release, and let the head try after `fallback` if none comes.
    Yield {
        /// When the head asks anyway.
        fallback: Duration,
    },
}

/// Redis work of a kind's own (the fair lock's places): the skeleton spawns it
/// and hands its outcome back to [`Policy::chore_done`](super::Policy::chore_done).
/// The outcome is the kind's own type, opaque to the skeleton.
pub(in crate::actors::lock) struct Chore(
    pub(in crate::actors::lock) LocalBoxFuture<'static, Box<dyn Any>>,
);

impl std::fmt::Debug for Chore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Chore")
    }
}

/// The head waiter tries, unless a local holder it cannot share with holds the
/// lock (asking Redis cannot succeed then, and the local release lets it try):
/// then nobody can win now, and the skeleton answers every try-once waiter.
pub(in crate::actors::lock) fn head_first(queue: &WaiterQueue, holdings: &Holdings) -> Pick {
    let Some(head) = queue.front() else {
        return Pick::Nobody;
    };
    if holdings.blocks(head.want.req.owner, head.want.req.kind) {
        return Pick::Blocked;
    }
    Pick::Waiter(head.want.req.id)
}

/// After a busy answer: the lock is held, so every try-once waiter's one attempt
/// would say so and is answered now; a wake meanwhile means try again at once;
/// otherwise the waiters listen on the lock's channel.
pub(in crate::actors::lock) fn listen_for_release(
    scripts: &dyn Scripts,
    answer: BusyAnswer<'_>,
    queue: &mut WaiterQueue,
) -> OnBusy {
    let _nobody_placed = queue.fail_try_once(|_| true, None);
    let retry = match answer.woken {
        true => Retry::Now,
        false => Retry::Listen(scripts.channel(answer.name)),
    };
    OnBusy {
        retry,
        then_pump: false,
    }
}
