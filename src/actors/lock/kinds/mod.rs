//! What a kind of lock keeps and decides, one file per kind, and the one list of
//! kinds.
//!
//! The lock actor (`super`) is the same skeleton for every kind: waiter queue,
//! attempt in flight, holdings, timers, supervision. A kind is two things:
//! - [`Scripts`], what it says to Redis: its acquire, release and (if it hands
//!   over) transfer scripts, the channel its waiters listen on, how the watchdog
//!   renews it. Stateless, so a retry loop may keep a `&'static` to it.
//! - [`Policy`], its own state and its decisions. The skeleton never asks a kind
//!   yes/no questions; at each event it calls a hook, which may change the kind's
//!   state (and the waiters' marks) and answers with a decision as data that the
//!   skeleton carries out ([`Pick`]: who tries; [`Then`]: what follows a busy
//!   answer; [`LastRelease`]: a plain release or a hand-over; [`Heard`]: what
//!   an unlock message means; [`AfterRelease`]; a [`Chore`]: Redis work of the
//!   kind's own, such as the fair lock's places). The waiting engine asks
//!   the waiting questions through the lock's policy (`waits.rs`).
//!
//! The kinds live in [`KindState`], an enum of their state structs, made by the
//! `kinds!` list below: a lock actor carries its kind inline (the largest kind
//! is 40 bytes; a `Box<dyn Policy>` would be a 16-byte pointer plus a heap block
//! of its own per lock actor, and the lock actor stays as small as it can be
//! because it lives as long as its lock is held: docs/performance.md, client
//! bytes per held lock). Hooks are reached through `Deref` to `dyn Policy`: one
//! indirect call per event, nothing next to the Redis round trip each event
//! stands for.
//!
//! A new kind of lock is a new file here with a state struct that implements
//! [`Policy`] (its hooks' defaults are those of a kind whose head waiter tries
//! and whose waiters listen on one channel) and a stateless one that implements
//! [`Scripts`], plus one line in `kinds!` (and the public `Kind` variant it
//! is named by).

mod decisions;
mod echo;
mod exclusive;
mod fair;
mod rw;
mod spin;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use redis::RedisResult;

use super::waiters::{WaiterQueue, Want};
use crate::actors::renewer::Renewal;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{Heard, Pick, Then};
use crate::config::Config;
use crate::kind::{AcquireKind, Kind};
use crate::wire::{AcquireReply, Place, ReleaseReply, TransferReply};
pub(super) use decisions::{AfterRelease, Chore, Freed, Handed, LastRelease};
pub(super) use exclusive::HAND_LEASE;

/// One acquisition attempt, as every kind's acquire script needs it.
#[derive(Debug, Clone)]
pub(super) struct Attempt {
    /// The lock name.
    pub(super) name: Arc<str>,
    /// What it takes (a kind this lock serves).
    pub(super) kind: AcquireKind,
    /// The hash field that will hold it.
    pub(super) field: Arc<str>,
    /// The lease to set, in ms.
    pub(super) lease_ms: u64,
    /// Fair lock: take a place in the queue when the lock cannot be taken now.
    pub(super) queue: bool,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(super) token_ttl_ms: u64,
    /// Its owner was made for this acquisition (no `Acquire::owner`), so it
    /// cannot hold the lock, and an earlier attempt of it found the key a lock
    /// (a first attempt checks both, which also refuses a key of another type):
    /// no re-entry check is needed.
    pub(super) new_owner: bool,
    /// `false`: a non-reentrant acquisition, refused by the script if its
    /// owner holds the lock already (the exclusive and fair scripts).
    pub(super) reentrant: bool,
    /// The lock-delay after a lapsed lease, in ms (0: none); the exclusive and
    /// spin scripts.
    pub(super) delay_ms: u64,
}

/// One release of a hold, as every kind's release script needs it.
#[derive(Debug, Clone)]
pub(super) struct Giveback {
    /// The lock name.
    pub(super) name: Arc<str>,
    /// What is given back.
    pub(super) kind: AcquireKind,
    /// The holder's hash field.
    pub(super) field: Arc<str>,
    /// The lease to set again when holds remain, in ms.
    pub(super) lease_ms: u64,
    /// Names this release in the latch key; a retry keeps it.
    pub(super) request_id: Arc<str>,
    /// An earlier attempt with this request id may have run.
    pub(super) retry: bool,
}

/// What a kind says to Redis; see the module documentation.
pub(super) trait Scripts: Sync {
    /// The channel this lock's waiters listen on; for a kind with a channel per
    /// waiter, the prefix of every waiter's channel.
    fn channel(&self, name: &str) -> String;

    /// How the watchdog renews a holding of `kind`.
    fn renewal(&self, kind: AcquireKind) -> Renewal;

    /// Runs one acquisition attempt.
    fn acquire(
        &self,
        shared: &Shared,
        attempt: Attempt,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>>;

    /// Gives back one hold.
    fn release(
        &self,
        shared: &Shared,
        giveback: Giveback,
    ) -> LocalBoxFuture<'static, RedisResult<ReleaseReply>>;

    /// Gives back the last hold of `giveback` and grants `to` in one call,
    /// without freeing the lock; with `count`, also counts who listens on the
    /// unlock channel. Only called after [`Policy::last_release`] said
    /// [`LastRelease::HandOver`].
    fn transfer(
        &self,
        _shared: &Shared,
        _giveback: Giveback,
        _to: Attempt,
        _count: bool,
    ) -> LocalBoxFuture<'static, RedisResult<TransferReply>> {
        Box::pin(futures::future::ready(Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "lockwarden: this kind of lock cannot be handed over",
        )))))
    }

    /// The give-back sent right behind an acquisition in flight whose waiter
    /// left, if one release undoes exactly whatever that acquisition did (every
    /// kind of this crate; see `LockActor::abandon`). `None`: a late grant is
    /// given back when its answer comes.
    fn undo_abandoned(
        &self,
        shared: &Shared,
        giveback: Giveback,
    ) -> Option<LocalBoxFuture<'static, RedisResult<ReleaseReply>>>;
}

/// A kind's own state and decisions; see the module documentation. The
/// defaults are those of a kind whose head waiter tries and whose waiters
/// listen on one channel once refused (the read-write lock uses them all).
pub(super) trait Policy {
    /// What it says to Redis.
    fn scripts(&self) -> &'static dyn Scripts;

    /// Who tries next, if anyone (the waiting engine's [`Pick`]); may answer
    /// try-once waiters that cannot win.
    fn next(&mut self, queue: &mut WaiterQueue, _now: Instant) -> Pick {
        decisions::head_first(queue)
    }

    /// The attempt of a waiter that wants `want` is about to be sent (`once`:
    /// its only one): marks it, and answers whether the attempt takes a place
    /// in a Redis queue if the lock is busy.
    fn sending(&mut self, _want: &mut Want, _once: bool, _config: &Config) -> bool {
        false
    }

    /// A waiter was granted the lock; `waiting` others wait here.
    fn granted(&mut self, _waiting: usize) {}

    /// A waiter came to an empty queue: a new wait begins.
    fn wait_begins(&mut self) {}

    /// Redis answered the attempt of a lasting waiter "busy" (the holder's
    /// lease has `ttl` left, if Redis said): marks it, and says what follows.
    /// The default: it listens on the lock's channel from now on, and every
    /// try-once waiter is answered, as its one attempt would find it held.
    fn short(&mut self, want: &mut Want, ttl: Option<Duration>, _config: &Config) -> Then {
        want.listens = true;
        Then::Held(ttl)
    }

    /// The channel a waiter that wants `want` listens on (`None`: none yet).
    fn channel_of(&self, want: &Want, name: &str) -> Option<String> {
        want.listens.then(|| self.scripts().channel(name))
    }

    /// A second channel a waiter that wants `want` listens on before it asks
    /// (the exclusive lock's handoff channel, once it may take a place).
    fn also_listens(&self, _want: &Want, _name: &str) -> Option<String> {
        None
    }

    /// A release handed the lock to a waiter here (the exclusive lock's direct
    /// handoff).
    fn handed_off(&mut self) {}

    /// Whether its subscriptions outlive the last waiter by the idle timeout.
    fn lingers(&self, _config: &Config) -> bool {
        false
    }

    /// The channel that is this waiter's alone, dropped when it leaves.
    fn own_channel(&self, _want: &Want, _name: &str) -> Option<String> {
        None
    }

    /// The place in a Redis queue this waiter holds, left when it leaves.
    fn place(&self, _want: &Want) -> Option<Arc<str>> {
        None
    }

    /// A channel listened on whoever waits (made if it is not).
    fn kept_channel(&self, _name: &str) -> Option<String> {
        None
    }

    /// Whether `channel`, listened on already, stays when nobody waits
    /// (`holding`: this process holds the lock).
    fn keeps_listening(&self, _channel: &str, _name: &str, _holding: bool) -> bool {
        false
    }

    /// An unlock message came on `channel`.
    fn heard(&mut self, _channel: &str, _name: &str, _queue: &mut WaiterQueue) -> Heard {
        Heard::Wake
    }

    /// The subscription to `channel` is live (the queue looks again after).
    fn subscribed(&mut self, _channel: &str, _name: &str, _queue: &mut WaiterQueue) {}

    /// A refresh of the Redis queue, or a busy answer, said where places stand.
    fn placed(&mut self, _stands: Vec<(Arc<str>, Place)>, _queue: &mut WaiterQueue, _name: &str) {}

    /// The lock is about to subscribe to a channel.
    fn subscribing(&mut self) {}

    /// Messages may have been lost (the subscriber reconnected): the caller
    /// then wakes the lock.
    fn resync(&mut self, _queue: &mut WaiterQueue) {}

    /// The actor restarts: calls in flight and timers are gone.
    fn restarting(&mut self, _queue: &mut WaiterQueue) {}

    /// The wake timer fired (a fallback retry or a deadline), or something
    /// woke the lock.
    fn timer_fired(&mut self, _queue: &mut WaiterQueue) {}

    /// Waiters with a place in a Redis queue left (their owner fields);
    /// `queue` is who remains.
    fn left(&mut self, _places: Vec<Arc<str>>, _queue: &WaiterQueue) {}

    /// The last hold of a holding is about to be given back, with a local
    /// waiter of another owner at the head and nothing else in flight.
    fn last_release(&self) -> LastRelease {
        LastRelease::Plain
    }

    /// How a hand-over went.
    fn handed(&mut self, _how: Handed) {}

    /// A plain release freed the lock; what follows.
    fn released(&mut self, _freed: decisions::Freed) -> AfterRelease {
        AfterRelease::Nothing
    }

    /// How often its [`Policy::tick`] must run while the queue is as it is.
    fn tick_every(&self, _queue: &WaiterQueue, _config: &Config) -> Option<Duration> {
        None
    }

    /// The periodic work of [`Policy::tick_every`].
    fn tick(&mut self, _queue: &WaiterQueue, _name: &Arc<str>, _shared: &Shared) -> Option<Chore> {
        None
    }

    /// Redis work the kind has pending (sent by the skeleton as it comes).
    fn chore(&mut self, _queue: &WaiterQueue, _name: &Arc<str>, _shared: &Shared) -> Option<Chore> {
        None
    }

    /// A chore's outcome; answers whether waiters may try now (else the
    /// skeleton just brings its timers in line).
    fn chore_done(&mut self, _done: Box<dyn Any>, _queue: &mut WaiterQueue, _name: &str) -> bool {
        false
    }

    /// Whether a chore is in flight (the actor must not retire).
    fn busy_with_chores(&self) -> bool {
        false
    }
}

/// Lists the kinds: each line maps a public [`Kind`] to its state struct. It
/// makes [`KindState`], its constructor, and the way to its hooks.
macro_rules! kinds {
    ($($variant:ident => $state:ty),* $(,)?) => {
        /// One lock actor's kind, with that kind's own state.
        #[derive(Debug)]
        pub(super) enum KindState {
            $(
                #[doc = concat!("The state of `Kind::", stringify!($variant), "`.")]
                $variant($state),
            )*
        }

        impl KindState {
            /// A fresh state of `kind`.
            pub(super) fn new(kind: Kind) -> KindState {
                match kind {
                    $(Kind::$variant => KindState::$variant(<$state>::default()),)*
                }
            }

            /// Which public kind this is.
            pub(super) fn kind(&self) -> Kind {
                match self {
                    $(KindState::$variant(_) => Kind::$variant,)*
                }
            }
        }

        impl std::ops::Deref for KindState {
            type Target = dyn Policy;

            fn deref(&self) -> &(dyn Policy + 'static) {
                match self {
                    $(KindState::$variant(k) => k,)*
                }
            }
        }

        impl std::ops::DerefMut for KindState {
            fn deref_mut(&mut self) -> &mut (dyn Policy + 'static) {
                match self {
                    $(KindState::$variant(k) => k,)*
                }
            }
        }
    };
}

kinds! {
    Exclusive => exclusive::Exclusive,
    Fair => fair::Fair,
    ReadWrite => rw::ReadWrite,
    Spin => spin::Spin,
}
