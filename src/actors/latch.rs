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
//! (`actors/waiting.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;
use tracing::warn;

use super::listen::{self, Alarm, Channel, Listener};
use super::shared::{until_first, Shared, ShutDown};
use super::subscriber::{Resync, Unlocked};
use super::waiting::{self, Waited, Waiting, Waits};
use crate::durations::backoff;
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

/// One waiting caller.
#[derive(Debug)]
struct Waiter {
    /// Its id in the waiting records.
    id: u64,
    /// When it arrived.
    since: Instant,
    /// When it gives up.
    deadline: Option<Instant>,
    /// Where its answer goes.
    tx: oneshot::Sender<Result<bool, LockError>>,
}

/// See the module documentation.
pub(crate) struct LatchActor {
    /// The latch's name (its key).
    name: Arc<str>,
    /// Its channel and the subscription to it (`actors/listen.rs`).
    channel: Channel,
    /// The manager's connection, subscriber and settings.
    shared: Arc<Shared>,
    /// Everyone waiting here.
    waiters: Vec<Waiter>,
    /// A read of the count is in flight.
    reading: bool,
    /// A reason to read arrived meanwhile: read again when it is answered.
    again: bool,
    /// The fallback / deadline timer.
    timer: Alarm,
    /// The error of the last read, if it failed (answered at a deadline).
    last_error: Option<redis::RedisError>,
    /// Failed reads in a row, for the backoff.
    failures: u32,
    /// The waiting records (`actors/waiting.rs`).
    waiting: Waiting,
}

impl LatchActor {
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>) -> LatchActor {
        LatchActor {
            waiting: Waiting::new(name.clone(), WaitKind::Sync(SynchronizerKind::Latch)),
            channel: Channel::new(keys::latch_channel(&name)),
            name,
            shared,
            waiters: Vec::new(),
            reading: false,
            again: false,
            timer: Alarm::default(),
            last_error: None,
            failures: 0,
        }
    }

    /// Answers every waiter: the latch is open.
    fn open(&mut self, ctx: &mut Context<Self>) {
        for w in self.waiters.drain(..) {
            let _ = w.tx.send(Ok(true));
        }
        self.reconcile(ctx);
    }

    /// Answers waiters that left or whose deadline passed; drops the subscription
    /// and the timer when nobody is left.
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let last = self.last_error.as_ref();
        let mut kept = Vec::with_capacity(self.waiters.len());
        for w in self.waiters.drain(..) {
            if w.tx.is_closed() {
                continue;
            }
            if w.deadline.is_some_and(|d| d <= now) {
                // A wait that ran out while Redis failed says so, not just "no".
                let answer = match last {
                    Some(e) => Err(LockError::from(e.clone())),
                    None => Ok(false),
                };
                let _ = w.tx.send(answer);
                continue;
            }
            kept.push(w);
        }
        self.waiters = kept;
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
        if self.reading || self.channel.is_pending() {
            self.again = true;
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
        self.reading = true;
        self.again = false;
        let name = self.name.clone();
        let mut conn = self.shared.node.conn();
        let read = async move { wire::read_number(&mut conn, &name).await };
        ctx.spawn(read.into_actor(self).map(|res, act, ctx| {
            act.reading = false;
            match res {
                Ok(0) => {
                    act.last_error = None;
                    act.failures = 0;
                    act.open(ctx);
                }
                Ok(_) => {
                    act.last_error = None;
                    act.failures = 0;
                    if act.again {
                        act.check(ctx);
                    } else {
                        act.arm(ctx, act.shared.config.max_retry_interval);
                    }
                }
                Err(e) => {
                    warn!(latch = %act.name, error = %e, "reading a latch's count failed");
                    let transient = redis_is_transient(&e);
                    act.last_error = Some(e);
                    if transient {
                        let delay = backoff(
                            act.shared.config.reconnect_min,
                            act.shared.config.reconnect_max,
                            act.failures,
                        );
                        act.failures = act.failures.saturating_add(1);
                        act.arm(ctx, delay);
                    } else {
                        // It will repeat: every waiter gets it now.
                        for w in act.waiters.drain(..) {
                            let err = act.last_error.clone().map(LockError::from);
                            let _ = w.tx.send(Err(err.unwrap_or(LockError::Stopped)));
                        }
                        act.reconcile(ctx);
                    }
                }
            }
        }));
    }

    /// Wakes `check` after `delay`, or at the earliest deadline if sooner.
    fn arm(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let delay = until_first(delay, self.waiters.iter().filter_map(|w| w.deadline));
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
        for w in self.waiters.drain(..) {
            let _ = w.tx.send(Err(LockError::ShuttingDown));
        }
        self.timer.cancel(ctx);
        0
    }
}

impl Waits for LatchActor {
    fn waiting(&mut self) -> &mut Waiting {
        &mut self.waiting
    }

    fn waiters_now(&self) -> Vec<Waited> {
        let waits = self.waiters.iter().filter(|w| !w.tx.is_closed());
        waits
            .map(|w| Waited {
                id: w.id,
                since: w.since,
                wants: 1,
                owner_field: None,
            })
            .collect()
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
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        self.waiters.push(Waiter {
            id: Waiting::next_id(),
            since: now,
            deadline: msg.wait.and_then(|w| Instant::now().checked_add(w)),
            tx,
        });
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
        self.again = false;
        self.check(ctx);
    }
}

impl Handler<Resync> for LatchActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.check(ctx);
    }
}
