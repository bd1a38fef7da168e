//! The semaphores' side of the synchronizer actor: the [`TakePermits`] message
//! every kind of semaphore answers, the [`Grant`] a take gives, and the three
//! semaphore policies of the waiting engine (`actors/waiting/engine/`), each
//! run by the one [`SyncActor`]: [`Plain`] and [`Expirable`] (`plain.rs`) and
//! [`Fair`] (`fair.rs`). Giving permits back and the permit-expirable
//! holdings are in `permits.rs`.
//!
//! A semaphore is not a lock (nobody owns a permit; Redisson's `RSemaphore` keeps
//! only a number), so it is a policy of the synchronizer actor rather than a
//! kind file of the lock actor, but it follows the same waiting rules: waiters
//! are woken by the channel `redisson_sc:{name}` (every release publishes the
//! permits available), with a fallback timer (`Config::max_retry_interval`)
//! since pub/sub may lose a message, and a resync after the subscriber
//! reconnects. Local waiters do not stampede Redis: only the head of the queue
//! asks, one attempt at a time; a wake that arrives while it is in flight makes
//! it ask once more.
//!
//! **Starvation.** Waiters of one process are served strictly in arrival order:
//! a head asking for five permits is not overtaken by a later local waiter asking
//! for one, and a try-once call ([`TakePermits`] with a zero wait) that finds
//! waiters queued here answers "no" without asking Redis, since what is free is
//! promised to the head. Across processes Redisson's layout has no queue (a key and
//! a channel), so there every process's head competes on each release, as
//! Redisson's own waiters do; a process whose head wants many permits still gets
//! them once enough are free at one moment, but a steady stream of single-permit
//! takers elsewhere can delay it without bound. Where that matters, give the large
//! takers their own semaphore or hold the small ones to the same process, or
//! use the fair semaphore.

pub(crate) mod fair;
pub(crate) mod permits;
mod plain;

use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::actors::waiting::engine::Event;
use crate::actors::waiting::{on_leaving, Calls, SyncActor};
use crate::error::LockError;
pub(crate) use fair::Fair;
pub(crate) use plain::{Expirable, Plain};

/// Take `permits` of the semaphore, waiting up to `wait` (`None`: until taken;
/// zero: one attempt). Answers on `reply` once they are taken. Sent with
/// [`take`], which makes both channels.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct TakePermits {
    /// How many, at least 1 (checked by the caller).
    pub(crate) permits: u32,
    /// How long to wait.
    pub(crate) wait: Option<Duration>,
    /// A permit-expirable semaphore's lease (`None`: the watchdog renews them);
    /// ignored by a plain one.
    pub(crate) lease: Option<Duration>,
    /// Where the answer goes: the caller's end is dropped when it stops
    /// waiting, so a grant that finds nobody goes back.
    pub(crate) reply: oneshot::Sender<Result<Grant, LockError>>,
    /// Resolves when the caller stops waiting (or has its answer): its waiter
    /// is swept at once (a fair waiter's place leaves Redis's queue at once).
    pub(crate) gone: oneshot::Receiver<()>,
}

/// Sends [`TakePermits`] to a semaphore's actor (either kind, or the fair one)
/// and waits for the answer; dropping this future takes the waiter out at once
/// ([`LockError::Stopped`] if the actor stopped first).
pub(crate) async fn take(
    to: &Recipient<TakePermits>,
    permits: u32,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<Grant, LockError> {
    let (reply, answer) = oneshot::channel();
    // Dropped with this future: the actor hears it through `gone`.
    let (_here, gone) = oneshot::channel::<()>();
    to.do_send(TakePermits {
        permits,
        wait,
        lease,
        reply,
        gone,
    });
    answer.await.unwrap_or(Err(LockError::Stopped))
}

/// What a take gave: nothing more for a plain semaphore; the permits' ids and
/// their holding for a permit-expirable one (`permits.rs`).
#[derive(Debug)]
pub(crate) struct Grant {
    /// The permit-expirable semaphore's holding.
    pub(crate) permits: Option<permits::Granted>,
}

/// A semaphore policy: what a waiter of it wants, made from a take.
pub(crate) trait Takes: Calls<Grant = Grant> {
    /// Its give-backs run the fair release script (which tells the head of
    /// its queue) rather than the plain one.
    const FAIR: bool = false;

    /// What a take of `permits` (with `lease`, for a permit-expirable one)
    /// wants.
    fn want(&self, permits: u32, lease: Option<Duration>) -> Self::Want;
}

impl<P: Takes> Handler<TakePermits> for SyncActor<P> {
    type Result = ();

    fn handle(&mut self, msg: TakePermits, ctx: &mut Context<Self>) {
        let TakePermits {
            permits,
            wait,
            lease,
            reply,
            gone,
        } = msg;
        if self.shared.is_shutting_down() {
            let _ = reply.send(Err(LockError::ShuttingDown));
            return;
        }
        // A caller that stops waiting is swept at once (its take undone if
        // an attempt of it is out).
        on_leaving(gone, ctx, |act: &mut Self, ctx| act.run(Event::Left, ctx));
        let want = self.engine.policy().want(permits, lease);
        self.run(Event::Arrive { want, wait, reply }, ctx);
    }
}
