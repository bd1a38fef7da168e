//! The decisions a kind's hooks answer with, as data the lock actor carries out
//! (who tries is the waiting engine's [`Pick`], the word every synchronizer
//! answers that question with), and the decisions most kinds share (the head
//! waiter tries; a try-once waiter that cannot win is answered).
//!
//! Data rather than calls back into the actor, so that a kind never reaches into
//! the skeleton, and so that its decisions can be tested with a queue and no
//! actor, no timer and no Redis (`tests.rs` beside this file).

use std::any::Any;

use futures::future::LocalBoxFuture;

use crate::actors::lock::waiters::{Waiter, WaiterQueue};
use crate::actors::waiting::engine::Pick;
use crate::actors::waiting::timeout;

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
    /// release, the head holding back until the kind's fallback if none comes.
    Yield,
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
/// then nobody can win now, and the engine answers every try-once waiter.
pub(in crate::actors::lock) fn head_first(queue: &WaiterQueue) -> Pick {
    let Some(head) = queue.front() else {
        return Pick::Nobody;
    };
    if head.want.blocked {
        return Pick::Blocked;
    }
    Pick::Waiter(head.id)
}

/// Answers the try-once waiters not asking that `pick` accepts: their one
/// attempt would find the lock held (no holder is read, so that a try stays
/// one round trip).
pub(in crate::actors::lock) fn answer_try_once(
    queue: &mut WaiterQueue,
    pick: impl Fn(&Waiter) -> bool,
) {
    let tried = queue.take_where(|w| w.once && !w.want.asking && pick(w));
    for w in tried {
        let waited = w.since.elapsed();
        crate::actors::lock::waiters::fail(w, timeout(waited));
    }
}
