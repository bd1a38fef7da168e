//! The waiting kit: what every actor that makes callers wait for something in
//! Redis shares, one part per file, so that a new synchronizer is an actor
//! that owns these parts and adds only its own decisions and scripts.
//!
//! - `queue.rs`: the [`Queue`] of waiting callers in arrival order, each with
//!   its deadline, whether it only tries once, the last error it met and where
//!   its answer goes; sweeping out those that left or ran out of time.
//! - `attempt.rs`: the [`Attempt`] in flight (one call to Redis at a time per
//!   actor, however many wait), whether a wake arrived meanwhile, and the run
//!   of failures that sets the backoff.
//! - `places.rs`: [`Places`], for a fair (FIFO across processes) synchronizer:
//!   its waiters' places in a Redis queue, refreshed every third of their lease
//!   on the server's clock, left at once when a waiter gives up, lapsing when
//!   its process dies.
//! - `records.rs`: [`Waiting`], the waits that last made visible in Redis for
//!   operators, and the warning for a missing semaphore key.
//! - `once.rs`: changes that count once ([`send_once`]): permits given back,
//!   a waiter's take undone, a count-down, each under an op id its script
//!   remembers, retried only while a repeat is sure to be recognised.
//! - `deadlock.rs`: this process's long lock waits ([`LocalWaits`]) and one
//!   deadlock check of a wait ([`check`]): over this process, then over Redis.
//!
//! - `engine/`: the [`Engine`](engine::Engine), the waiting loop every
//!   synchronizer runs, as a state machine (events in, effects out as data),
//!   with the exactly-once rules; each synchronizer's differences are a
//!   [`Policy`](engine::Policy).
//! - `runner.rs`: [`SyncActor`], the one actor, generic over its policy, that
//!   runs an engine and carries out its effects ([`Calls`]: a policy's Redis
//!   side).
//!
//! The channels a waiting actor listens on and its alarms are the kit's too;
//! they live in `actors/listen.rs` ([`Channel`](crate::actors::listen::Channel),
//! [`Alarm`](crate::actors::listen::Alarm)). The semaphores and the latch are
//! policies run by [`SyncActor`]; the lock is a policy too
//! (`actors/lock/waits.rs`), run by the lock actor itself, which has messages
//! and a grant no synchronizer has (docs/design/synchronizers.md, "The waiting
//! kit"); its fair kind uses the places.

mod attempt;
mod deadlock;
pub(crate) mod engine;
mod once;
mod places;
pub(crate) mod queue;
mod records;
mod runner;

pub(crate) use attempt::Attempt;
pub(crate) use deadlock::{check, Checked, LocalWaits, Published};
pub(crate) use once::{once, op_id, send_once, Unsettled};
pub(crate) use places::{keep_refreshing, leave, PlaceCalls, Placed, Places};
pub(crate) use queue::{on_leaving, timeout, Queue};
pub(crate) use records::{ended, watch, Waited, Waiting, Waits};
pub(crate) use runner::{Calls, SyncActor};
