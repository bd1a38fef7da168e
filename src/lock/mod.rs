//! The [`LockActor`]: one per lock name, owning that lock's waiters, timers and the
//! local view of who holds it.
//!
//! Everything that happens to one lock in this process is serialised through its
//! actor, which is what keeps the rules simple: at most one acquisition attempt is in
//! flight per lock (local waiters never stampede Redis), a waiter behind a local
//! holder of another owner does not ask Redis at all (the local release hands over),
//! and the watchdog, the fallback retry and the waiters' deadlines are timers the
//! actor keeps and cancels. The Redis side is only ever changed by the scripts in
//! [`crate::scripts`]; this file decides when to run them and what their answers
//! mean for the waiters and holders.

mod holding;
mod waiters;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::WeakAddr;
use tracing::{debug, warn};

use crate::config::{backoff, millis};
use crate::error::{redis_is_transient, LockError, LostReason};
use crate::guard::{LockGuard, ReleaseOutcome};
use crate::keys::{self, Owner};
use crate::manager::{Idle, LockManager, Shared};
use crate::scripts::{self, AcquireReply, ReleaseReply};
use crate::subscriber::{Resync, Subscribe, Unlocked, Unsubscribe};

use holding::{Holding, LostHoldings};
pub(crate) use waiters::Waiter;
use waiters::WaiterQueue;

/// Queue a waiter (sent by the manager only, which counts them for the idle handshake).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Enqueue(pub(crate) Waiter);

/// The caller of this waiter went away: forget it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Cancel {
    pub(crate) waiter: u64,
}

/// Give back one hold (sent by a guard).
#[derive(Message, Debug)]
#[rtype(result = "Result<ReleaseOutcome, LockError>")]
pub(crate) struct Release {
    /// The holding the guard belongs to.
    pub(crate) epoch: u64,
}

/// The acquisition attempt in flight: enough to undo its grant if its waiter left.
#[derive(Debug)]
struct Attempt {
    waiter: u64,
    owner: Owner,
    field: Arc<str>,
    lease: Option<Duration>,
}

/// State of this lock's channel subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// Not subscribed.
    Off,
    /// Asked the subscriber; no answer yet.
    Pending,
    /// Routed (and subscribed, or to be subscribed on reconnect).
    On,
}

/// The actor of one lock name; see the module documentation.
pub(crate) struct LockActor {
    /// The lock name (also the lock key).
    name: Arc<str>,
    /// This lock's unlock channel.
    channel: String,
    /// Connection, config, client id, subscriber and counters of the manager.
    shared: Arc<Shared>,
    /// The manager, weakly: a lock actor must not keep its manager alive.
    manager: WeakAddr<LockManager>,
    /// Local waiters, head first.
    queue: WaiterQueue,
    /// The local owner holding the lock, if any.
    holding: Option<Holding>,
    /// Lost holdings whose guards are still alive.
    lost: LostHoldings,
    /// Next holding epoch.
    next_epoch: u64,
    /// The waiter whose acquisition attempt is in flight.
    attempt: Option<u64>,
    /// An unlock (or resync) arrived while an attempt was in flight: if that attempt
    /// finds the lock busy, try again at once rather than sleep.
    woken: bool,
    /// Unlock messages this actor published itself and will hear back; they carry
    /// no news (the local release already handed over), so they are skipped.
    own_unlocks: u32,
    /// Channel subscription state.
    sub: Sub,
    /// Fallback retry / deadline timer.
    wake_timer: Option<SpawnHandle>,
    /// Watchdog interval while a watchdog holding exists.
    renew_timer: Option<SpawnHandle>,
    /// A renewal is in flight.
    renewing: bool,
    /// Fires when the holding's `valid_until` passes without a successful renewal.
    expiry_timer: Option<SpawnHandle>,
    /// Release scripts in flight.
    releases: u32,
    /// Stops the actor after a quiet period.
    idle_timer: Option<SpawnHandle>,
    /// Enqueue messages received, echoed to the manager in the idle handshake.
    received: u64,
    /// Consecutive Redis errors of acquisition attempts, for the backoff.
    failures: u32,
}

impl LockActor {
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>, manager: WeakAddr<LockManager>) -> Self {
        LockActor {
            channel: keys::channel(&name),
            name,
            shared,
            manager,
            queue: WaiterQueue::default(),
            holding: None,
            lost: LostHoldings::default(),
            next_epoch: 1,
            attempt: None,
            woken: false,
            own_unlocks: 0,
            sub: Sub::Off,
            wake_timer: None,
            renew_timer: None,
            renewing: false,
            expiry_timer: None,
            releases: 0,
            idle_timer: None,
            received: 0,
            failures: 0,
        }
    }

    /// Lets the head waiter try, if nothing forbids it; otherwise settles timers.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.attempt.is_some() {
            return;
        }
        self.queue.remove_gone();
        let Some(head) = self.queue.front() else {
            self.settle(ctx);
            return;
        };
        if self.holding.as_ref().is_some_and(|h| h.owner != head.owner) {
            // Held here by another owner: asking Redis cannot succeed, and the local
            // release will call pump again.
            self.queue.fail_try_once();
            self.settle(ctx);
            return;
        }
        let attempt = Attempt {
            waiter: head.id,
            owner: head.owner,
            field: head.field.clone(),
            lease: head.lease,
        };
        let lease_ms = millis(attempt.lease.unwrap_or(self.shared.config.watchdog_lease));
        self.attempt = Some(attempt.waiter);
        self.woken = false;
        let conn = self.shared.conn.clone();
        let name = self.name.clone();
        let sent = Instant::now();
        let field = attempt.field.clone();
        let fut = async move { scripts::acquire(conn, &name, &field, lease_ms).await };
        ctx.spawn(
            fut.into_actor(self)
                .map(move |res, act, ctx| act.on_attempt(attempt, sent, res, ctx)),
        );
        self.settle(ctx);
    }

    /// Handles the answer to an acquisition attempt.
    fn on_attempt(
        &mut self,
        attempt: Attempt,
        sent: Instant,
        res: redis::RedisResult<AcquireReply>,
        ctx: &mut Context<Self>,
    ) {
        self.attempt = None;
        let woken = std::mem::take(&mut self.woken);
        match res {
            Ok(AcquireReply::Acquired { token, holds }) => {
                self.failures = 0;
                match self.queue.take(attempt.waiter) {
                    Some(w) => {
                        let waited = w.since.elapsed();
                        w.span
                            .in_scope(|| debug!(token, holds, ?waited, "acquired"));
                        let guard = self.grant(w.owner, w.field.clone(), w.lease, token, sent, ctx);
                        // If the caller is gone the guard comes back and is dropped
                        // here, which releases it at once.
                        let _ = w.reply.send(Ok(guard));
                    }
                    None => {
                        // The waiter gave up while its attempt was in flight. The
                        // grant is real, so it is undone through the normal path: a
                        // guard that is dropped at once releases its hold.
                        debug!(lock = %self.name, "granted to a waiter that left; releasing");
                        let Attempt {
                            owner,
                            field,
                            lease,
                            ..
                        } = attempt;
                        drop(self.grant(owner, field, lease, token, sent, ctx));
                    }
                }
                self.pump(ctx);
            }
            Ok(AcquireReply::Busy { ttl }) => {
                self.failures = 0;
                self.queue.fail_try_once();
                if self.queue.is_empty() {
                    self.settle(ctx);
                } else if woken {
                    self.pump(ctx);
                } else if self.sub == Sub::Off {
                    self.subscribe(ctx);
                } else {
                    let retry = ttl.map_or(self.shared.config.max_retry_interval, |t| {
                        t.min(self.shared.config.max_retry_interval)
                    });
                    self.schedule(Some(retry), ctx);
                }
            }
            Err(e) if redis_is_transient(&e) => {
                let delay = backoff(
                    self.shared.config.reconnect_min,
                    self.shared.config.reconnect_max,
                    self.failures,
                );
                self.failures = self.failures.saturating_add(1);
                warn!(lock = %self.name, error = %e, retry_in = ?delay, "acquire attempt failed; will retry");
                self.schedule(Some(delay), ctx);
            }
            Err(e) => {
                // An error that will repeat (wrong key type, script error): every
                // waiter would get the same, so all get it now.
                warn!(lock = %self.name, error = %e, "acquire attempt refused by Redis");
                self.queue.fail_all(|| LockError::Redis(e.clone()));
                self.settle(ctx);
            }
        }
    }

    /// Records a successful acquisition and makes its guard.
    fn grant(
        &mut self,
        owner: Owner,
        field: Arc<str>,
        lease: Option<Duration>,
        token: u64,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) -> LockGuard {
        self.shared.counters.acquired();
        let lease_len = lease.unwrap_or(self.shared.config.watchdog_lease);
        if self.holding.as_ref().is_some_and(|h| h.owner != owner) {
            // Only a lost holding can be replaced; `pump` never lets another owner
            // try while a live one exists.
            self.lose(LostReason::OwnerGone, ctx);
        }
        let fresh_epoch = self.next_epoch;
        let h = self.holding.get_or_insert_with(|| {
            self.next_epoch += 1;
            Holding::new(fresh_epoch, owner, field.clone(), lease_len)
        });
        let epoch = h.epoch;
        h.guards += 1;
        h.lease = lease_len;
        h.valid_until = sent + lease_len;
        h.watchdog |= lease.is_none();
        let lost_rx = h.lost_tx.subscribe();
        let watchdog = h.watchdog;
        self.arm_expiry(ctx);
        if watchdog && self.renew_timer.is_none() {
            let every = self.shared.config.renew_every();
            self.renew_timer = Some(ctx.run_interval(every, |act, ctx| act.renew(ctx)));
        }
        LockGuard::new(
            ctx.address(),
            self.name.clone(),
            owner,
            field,
            token,
            lease,
            epoch,
            lost_rx,
        )
    }

    /// Arms (or re-arms) the timer that declares the holding lost when its
    /// `valid_until` passes.
    fn arm_expiry(&mut self, ctx: &mut Context<Self>) {
        if let Some(t) = self.expiry_timer.take() {
            ctx.cancel_future(t);
        }
        let Some(h) = &self.holding else { return };
        let epoch = h.epoch;
        let reason = if h.watchdog {
            LostReason::Unreachable
        } else {
            LostReason::LeaseExpired
        };
        let delay = h.valid_until.saturating_duration_since(Instant::now());
        self.expiry_timer = Some(ctx.run_later(delay, move |act, ctx| {
            act.expiry_timer = None;
            let due = act
                .holding
                .as_ref()
                .is_some_and(|h| h.epoch == epoch && Instant::now() >= h.valid_until);
            if due {
                act.lose(reason, ctx);
            } else {
                act.arm_expiry(ctx);
            }
        }));
    }

    /// The holding is lost: tell its guards, stop renewing, let waiters try.
    fn lose(&mut self, reason: LostReason, ctx: &mut Context<Self>) {
        let Some(h) = self.holding.take() else { return };
        self.shared.counters.lost();
        warn!(lock = %self.name, owner = %h.owner, %reason, "lock lost while held");
        let _ = h.lost_tx.send(Some(reason));
        self.lost.insert(h.epoch, reason, h.guards);
        self.stop_holding_timers(ctx);
        self.pump(ctx);
    }

    fn stop_holding_timers(&mut self, ctx: &mut Context<Self>) {
        for t in [self.renew_timer.take(), self.expiry_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(t);
        }
    }

    /// The watchdog tick: extend the lease of a watchdog holding.
    fn renew(&mut self, ctx: &mut Context<Self>) {
        let Some(h) = self.holding.as_ref().filter(|h| h.watchdog) else {
            return;
        };
        if self.renewing {
            return;
        }
        self.renewing = true;
        let epoch = h.epoch;
        let field = h.field.clone();
        let lease = self.shared.config.watchdog_lease;
        let conn = self.shared.conn.clone();
        let name = self.name.clone();
        let sent = Instant::now();
        let fut = async move { scripts::renew(conn, &[(&name, &field)], millis(lease)).await };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            act.renewing = false;
            if act.holding.as_ref().is_none_or(|h| h.epoch != epoch) {
                return; // released or lost meanwhile: a late reply revives nothing
            }
            match res.as_deref() {
                Ok([true]) => {
                    if let Some(h) = act.holding.as_mut() {
                        h.lease = lease;
                        h.valid_until = sent + lease;
                    }
                    act.arm_expiry(ctx);
                }
                Ok(_) => act.lose(LostReason::OwnerGone, ctx),
                Err(e) => {
                    act.shared.counters.renewal_failed();
                    warn!(lock = %act.name, error = %e, "renewal failed; retrying until the lease runs out");
                }
            }
        }));
    }

    /// Subscribes to the unlock channel, then retries at once: the lock may have
    /// been released between the failed attempt and the subscription.
    fn subscribe(&mut self, ctx: &mut Context<Self>) {
        self.sub = Sub::Pending;
        self.own_unlocks = 0;
        let msg = Subscribe {
            channel: self.channel.clone(),
            unlocked: ctx.address().recipient(),
            resync: ctx.address().recipient(),
        };
        ctx.spawn(
            self.shared
                .subscriber
                .send(msg)
                .into_actor(self)
                .map(|res, act, ctx| {
                    if res.is_err() {
                        warn!(lock = %act.name, "subscriber is gone; waiters rely on timers");
                    }
                    act.sub = Sub::On;
                    act.wake(ctx);
                }),
        );
    }

    /// Something suggests the lock may be free: retry now (or right after the
    /// attempt in flight).
    fn wake(&mut self, ctx: &mut Context<Self>) {
        if self.attempt.is_some() {
            self.woken = true;
        } else {
            self.pump(ctx);
        }
    }

    /// Arms the wake timer at the sooner of `retry` from now and the nearest waiter
    /// deadline; with neither, no timer.
    fn schedule(&mut self, retry: Option<Duration>, ctx: &mut Context<Self>) {
        if let Some(t) = self.wake_timer.take() {
            ctx.cancel_future(t);
        }
        let now = Instant::now();
        let at = [retry.map(|r| now + r), self.queue.nearest_deadline()]
            .into_iter()
            .flatten()
            .min();
        if let Some(at) = at {
            let delay = at.saturating_duration_since(now);
            self.wake_timer = Some(ctx.run_later(delay, |act, ctx| {
                act.wake_timer = None;
                let expired = act.queue.expire(Instant::now());
                for _ in 0..expired {
                    act.shared.counters.timeout();
                }
                act.pump(ctx);
            }));
        }
    }

    /// Brings timers and the subscription in line with what is left to do: keeps a
    /// deadline timer while waiters wait, unsubscribes when none do, and starts the
    /// idle countdown when nothing at all is going on.
    fn settle(&mut self, ctx: &mut Context<Self>) {
        if self.queue.is_empty() {
            if let Some(t) = self.wake_timer.take() {
                ctx.cancel_future(t);
            }
            if self.sub == Sub::On {
                self.shared.subscriber.do_send(Unsubscribe {
                    channel: self.channel.clone(),
                });
                self.sub = Sub::Off;
                self.own_unlocks = 0;
            }
        } else if self.wake_timer.is_none() {
            self.schedule(None, ctx);
        }
        let idle = self.queue.is_empty()
            && self.holding.is_none()
            && self.lost.is_empty()
            && self.attempt.is_none()
            && self.releases == 0
            && self.sub == Sub::Off;
        match (idle, self.idle_timer.is_some()) {
            (true, false) => {
                let after = self.shared.config.idle_timeout;
                self.idle_timer = Some(ctx.run_later(after, |act, ctx| {
                    act.idle_timer = None;
                    act.on_idle(ctx);
                }));
            }
            (false, true) => {
                if let Some(t) = self.idle_timer.take() {
                    ctx.cancel_future(t);
                }
            }
            _ => {}
        }
    }

    /// Idle for a while: ask the manager to retire this actor. The manager agrees
    /// only if it has sent nothing this actor has not seen, so no request is lost.
    fn on_idle(&mut self, ctx: &mut Context<Self>) {
        let Some(manager) = self.manager.upgrade() else {
            ctx.stop();
            return;
        };
        let msg = Idle {
            name: self.name.clone(),
            received: self.received,
        };
        ctx.spawn(manager.send(msg).into_actor(self).map(|res, act, ctx| {
            if res.unwrap_or(true) {
                debug!(lock = %act.name, "idle lock actor stopped");
                ctx.stop();
            } else {
                act.settle(ctx);
            }
        }));
    }

    /// Runs the release script for one hold of the live holding.
    fn release_hold(
        &mut self,
        epoch: u64,
    ) -> ResponseActFuture<Self, Result<ReleaseOutcome, LockError>> {
        let Some(h) = self.holding.as_mut().filter(|h| h.epoch == epoch) else {
            return Box::pin(fut::ready(Err(LockError::NotHeld)));
        };
        h.guards = h.guards.saturating_sub(1);
        let (field, lease) = (h.field.clone(), h.lease);
        self.releases += 1;
        let config = self.shared.config.clone();
        let conn = self.shared.conn.clone();
        let name = self.name.clone();
        let request_id = uuid::Uuid::new_v4().to_string();
        let sent = Instant::now();
        // A release whose reply was lost is retried with the same request id: the
        // latch in Redis returns the first outcome, so it is never applied twice.
        let fut = async move {
            let mut tries = 0u32;
            loop {
                let res = scripts::release(
                    conn.clone(),
                    &name,
                    &field,
                    millis(lease),
                    &request_id,
                    millis(config.latch_ttl),
                )
                .await;
                match res {
                    Err(e) if redis_is_transient(&e) && sent.elapsed() < config.latch_ttl / 2 => {
                        let delay = backoff(config.reconnect_min, config.reconnect_max, tries);
                        tries += 1;
                        debug!(error = %e, retry_in = ?delay, "release failed; retrying with the same request id");
                        tokio::time::sleep(delay).await;
                    }
                    other => return other,
                }
            }
        };
        Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            act.releases -= 1;
            let out = act.on_released(epoch, sent, res, ctx);
            act.pump(ctx);
            out
        }))
    }

    /// Applies a release script's answer to the local view.
    fn on_released(
        &mut self,
        epoch: u64,
        sent: Instant,
        res: redis::RedisResult<ReleaseReply>,
        ctx: &mut Context<Self>,
    ) -> Result<ReleaseOutcome, LockError> {
        let live = self.holding.as_ref().is_some_and(|h| h.epoch == epoch);
        let guards_left = self.holding.as_ref().map_or(0, |h| h.guards);
        match res {
            Ok(ReleaseReply::Released) => {
                self.shared.counters.released();
                if self.sub == Sub::On {
                    self.own_unlocks += 1;
                }
                if live {
                    if guards_left == 0 {
                        self.holding = None;
                        self.stop_holding_timers(ctx);
                    } else {
                        // Redis counted fewer holds than guards exist here: something
                        // outside this manager released them. They are not held.
                        self.lose(LostReason::OwnerGone, ctx);
                    }
                }
                Ok(ReleaseOutcome::Released)
            }
            Ok(ReleaseReply::StillHeld(holds)) => {
                self.shared.counters.released();
                if live {
                    if let Some(h) = self.holding.as_mut() {
                        h.valid_until = sent + h.lease;
                    }
                    self.arm_expiry(ctx);
                    if guards_left == 0 {
                        // Redis holds more than the guards here account for (an
                        // attempt whose reply was lost): give those back too.
                        debug!(lock = %self.name, holds, "releasing holds no guard accounts for");
                        let fut = self.release_hold(epoch);
                        ctx.spawn(fut.map(|_, _, _| ()));
                    }
                }
                Ok(ReleaseOutcome::StillHeld { holds })
            }
            Ok(ReleaseReply::NotHeld) => {
                if live {
                    self.lose(LostReason::OwnerGone, ctx);
                    // The guard that asked was already counted out of the holding.
                }
                Err(LockError::NotHeld)
            }
            Err(e) => {
                warn!(lock = %self.name, error = %e, "release failed; the lock frees when its lease runs out");
                if live && guards_left == 0 {
                    // Stop renewing so that the lock expires within one lease.
                    self.holding = None;
                    self.stop_holding_timers(ctx);
                }
                Err(LockError::Redis(e))
            }
        }
    }
}

impl Actor for LockActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.settle(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        // Whatever is still queued will never be served by this actor.
        self.queue.fail_all(|| LockError::Stopped);
        if let Some(h) = self.holding.take() {
            let _ = h.lost_tx.send(Some(LostReason::ManagerStopped));
        }
    }
}

impl Handler<Enqueue> for LockActor {
    type Result = ();

    fn handle(&mut self, Enqueue(waiter): Enqueue, ctx: &mut Context<Self>) {
        self.received += 1;
        let reentrant = self
            .holding
            .as_ref()
            .is_some_and(|h| h.owner == waiter.owner);
        self.queue.push(waiter, reentrant);
        self.pump(ctx);
    }
}

impl Handler<Cancel> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Cancel, ctx: &mut Context<Self>) {
        if self.queue.take(msg.waiter).is_some() {
            debug!(lock = %self.name, waiter = msg.waiter, "waiter left");
        }
        self.pump(ctx);
    }
}

impl Handler<Release> for LockActor {
    type Result = ResponseActFuture<Self, Result<ReleaseOutcome, LockError>>;

    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(reason) = self.lost.release_one(msg.epoch) {
            self.settle(ctx);
            return Box::pin(fut::ready(Err(LockError::Lost(reason))));
        }
        self.release_hold(msg.epoch)
    }
}

impl Handler<Unlocked> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Unlocked, ctx: &mut Context<Self>) {
        // An exclusive lock admits one holder either way, so "wake all" and "wake
        // one" both mean: let the head waiter try.
        tracing::trace!(lock = %self.name, wake_all = msg.wake_all, "unlock message");
        if self.own_unlocks > 0 {
            self.own_unlocks -= 1;
            return;
        }
        self.wake(ctx);
    }
}

impl Handler<Resync> for LockActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.own_unlocks = 0;
        self.wake(ctx);
    }
}
