//! The [`LatchActor`]: the waiters of one count-down latch in this process.
//!
//! A latch (Redisson's `RCountDownLatch` layout: a string key, the name itself,
//! holding the count; absent means zero) opens for every waiter at once. The count
//! down that reaches zero publishes `0` on `redisson_countdownlatch__channel__{name}`
//! and a new count publishes `1`. The actor subscribes while anyone waits and opens
//! for all of its waiters when `0` arrives, without asking Redis again: the message
//! proves the count reached zero even if a new count was set right after. Since a
//! message can be lost (a reconnect, a failover), the count is also read after the
//! subscription is confirmed, after every [`Resync`] and on the fallback timer
//! (`Config::max_retry_interval`); one read at a time, however many wait.
//!
//! A latch whose key does not exist is open (Redisson's layout: absent means a
//! count of zero), so a latch waiter cannot hang on a lost key the way a
//! semaphore waiter can; its waits that last are still recorded for operators
//! (`actors/waiting/records.rs`).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::warn;

use super::listen::{self, Alarm, Channel, Listener};
use super::shared::{until_first, Shared, ShutDown};
use super::subscriber::{Resync, Unlocked};
use super::waiting::{self, Attempt, Queue, Waited, Waiting, Waits};
use crate::error::{redis_is_transient, LockError};
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire;
use crate::wire::waiting::WaitKind;

/// Wait until the latch's count is zero, up to `wait` (`None`: for ever). Answers
/// `true` once it is, `false` when the wait ran out first.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, LockError>")]
pub(crate) struct AwaitZero {
    /// How long to wait.
    pub(crate) wait: Option<Duration>,
}

/// See the module documentation.
pub(crate) struct LatchActor {
    /// The latch's name (its key).
    name: Arc<str>,
    /// Its channel and the subscription to it (`actors/listen.rs`).
    channel: Channel,
    /// The manager's connection, subscriber and settings.
    shared: Arc<Shared>,
    /// Everyone waiting here (they want nothing but the latch open).
    waiters: Queue<(), bool>,
    /// The read of the count in flight, and the failures of the last reads
    /// (their error is answered at a deadline).
    reading: Attempt,
    /// The fallback / deadline timer.
    timer: Alarm,
    /// The waiting records (`actors/waiting/records.rs`).
    waiting: Waiting,
}

impl LatchActor {
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>) -> LatchActor {
        LatchActor {
            waiting: Waiting::new(name.clone(), WaitKind::Sync(SynchronizerKind::Latch)),
            channel: Channel::new(keys::latch_channel(&name)),
            name,
            shared,
            waiters: Queue::default(),
            reading: Attempt::default(),
            timer: Alarm::default(),
        }
    }

    /// Answers every waiter: the latch is open.
    fn open(&mut self, ctx: &mut Context<Self>) {
        self.waiters.answer_all(|| Ok(true));
        self.reconcile(ctx);
    }

    /// Answers waiters that left or whose deadline passed; drops the subscription
    /// and the timer when nobody is left.
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        // A wait that ran out while Redis failed says so, not just "no".
        let last = self.reading.last_error().cloned();
        self.waiters.sweep(|_| match &last {
            Some(e) => Err(LockError::from(e.clone())),
            None => Ok(false),
        });
        if self.waiters.is_empty() {
            self.timer.cancel(ctx);
            self.channel.unsubscribe(&self.shared.subscriber);
        }
    }

    /// Reads the count (subscribing first if needed).
    fn check(&mut self, ctx: &mut Context<Self>) {
        self.reconcile(ctx);
        if self.waiters.is_empty() {
            return;
        }
        if !self.reading.wake() {
            return;
        }
        if self.channel.is_pending() {
            // Its confirmation reads the count.
            return;
        }
        if !self.channel.is_live() {
            // Subscribes, then reads the count: a count down to zero before the
            // subscription is seen by that read, one after it by its message.
            let (subscriber, name) = (
                self.shared.subscriber.clone(),
                self.channel.name().to_owned(),
            );
            listen::subscribe(self, &name, &subscriber, ctx);
            return;
        }
        self.reading.start();
        let name = self.name.clone();
        let mut conn = self.shared.node.conn();
        let read = async move { wire::read_number(&mut conn, &name).await };
        ctx.spawn(read.into_actor(self).map(|res, act, ctx| {
            act.reading.finish();
            match res {
                Ok(0) => {
                    act.reading.succeeded();
                    act.open(ctx);
                }
                Ok(_) => {
                    act.reading.succeeded();
                    if act.reading.again() {
                        act.check(ctx);
                    } else {
                        act.arm(ctx, act.shared.config.max_retry_interval);
                    }
                }
                Err(e) => {
                    warn!(latch = %act.name, error = %e, "reading a latch's count failed");
                    if redis_is_transient(&e) {
                        let delay = act.reading.failed(&act.shared.config, e);
                        act.arm(ctx, delay);
                    } else {
                        // It will repeat: every waiter gets it now.
                        act.waiters.answer_all(|| Err(LockError::from(e.clone())));
                        act.reconcile(ctx);
                    }
                }
            }
        }));
    }

    /// Wakes `check` after `delay`, or at the earliest deadline if sooner.
    fn arm(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let delay = until_first(delay, self.waiters.deadlines());
        self.timer
            .set(ctx, delay, |act: &mut Self| &mut act.timer, Self::check);
    }
}

impl Actor for LatchActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.channel.unsubscribe(&self.shared.subscriber);
    }
}

/// The manager shuts down: every waiter is answered `ShuttingDown` (new ones
/// are refused by `AwaitZero`).
impl Handler<ShutDown> for LatchActor {
    type Result = usize;

    fn handle(&mut self, _msg: ShutDown, ctx: &mut Context<Self>) -> usize {
        self.waiters.answer_all(|| Err(LockError::ShuttingDown));
        self.timer.cancel(ctx);
        0
    }
}

impl Waits for LatchActor {
    fn waiting(&mut self) -> &mut Waiting {
        &mut self.waiting
    }

    fn waiters_now(&self) -> Vec<Waited> {
        self.waiters.waited(|_| 1)
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Handler<AwaitZero> for LatchActor {
    type Result = ResponseFuture<Result<bool, LockError>>;

    fn handle(&mut self, msg: AwaitZero, ctx: &mut Context<Self>) -> Self::Result {
        if self.shared.is_shutting_down() {
            return Box::pin(async { Err(LockError::ShuttingDown) });
        }
        let rx = self.waiters.arrive((), msg.wait, false);
        waiting::watch(self, ctx);
        // Listening already, one read answers the newcomer (the count may be zero
        // now) without waiting for the next message; otherwise it subscribes first.
        self.check(ctx);
        if msg.wait.is_some() {
            self.arm(ctx, self.shared.config.max_retry_interval);
        }
        Box::pin(async move { rx.await.map_err(|_| LockError::Stopped)? })
    }
}

impl Handler<Unlocked> for LatchActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        if msg.wake_all {
            // "1": a new count was set; nothing opens.
            return;
        }
        // "0": the count reached zero.
        self.open(ctx);
    }
}

impl Listener for LatchActor {
    fn channel(&mut self, _name: &str) -> Option<&mut Channel> {
        Some(&mut self.channel)
    }

    /// Reads the count now that a count-down cannot go unheard.
    fn subscribed(&mut self, _name: &str, ctx: &mut Context<Self>) {
        self.reading.settle();
        self.check(ctx);
    }
}

impl Handler<Resync> for LatchActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.check(ctx);
    }
}
