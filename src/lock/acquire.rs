//! Acquisition: when the head waiter may ask Redis, what each answer means, and how
//! waiters are woken again (unlock message, fallback timer, deadline).
//!
//! At most one attempt per lock is in flight, and none while another local owner
//! holds the lock, so local waiters never stampede Redis. An attempt whose reply was
//! lost has an unknown outcome: before anyone tries again, the actor reads the owner's
//! hold count and gives back a hold the lost attempt may have taken, so that nobody
//! is told "acquired" on a count that does not match its guards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, warn};

use super::holding::Claim;
use super::{LockActor, Sub, Waiter};
use crate::config::{backoff, millis};
use crate::error::{redis_is_protocol_error, redis_is_transient, LockError};
use crate::keys::Owner;
use crate::scripts::{self, AcquireReply};
use crate::subscriber::Subscribe;

/// The acquisition attempt in flight: enough to undo its grant if its waiter left.
#[derive(Debug)]
pub(super) struct Attempt {
    waiter: u64,
    owner: Owner,
    field: Arc<str>,
    lease: Option<Duration>,
}

/// An acquisition attempt whose reply was lost: it may or may not have taken a hold.
#[derive(Debug, Clone)]
pub(super) struct Unresolved {
    owner: Owner,
    field: Arc<str>,
}

impl Attempt {
    /// This attempt, as one whose reply was lost.
    fn unresolved(self) -> Unresolved {
        Unresolved {
            owner: self.owner,
            field: self.field,
        }
    }
}

impl Unresolved {
    /// The attempt made for this waiter.
    pub(super) fn of(w: &Waiter) -> Unresolved {
        Unresolved {
            owner: w.owner,
            field: w.field.clone(),
        }
    }
}

impl LockActor {
    /// Lets the head waiter try, if nothing forbids it; otherwise settles timers.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.attempt.is_some() || self.resolving {
            return;
        }
        if self.unresolved.is_some() {
            // First find out what the lost attempt did. In-flight releases of the
            // same owner would blur the count, so wait for them (they pump again).
            if self.releases == 0 {
                self.resolve(ctx);
            }
            self.settle(ctx);
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
            self.queue.fail_try_once(None);
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
    pub(super) fn on_attempt(
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
                self.last_error = None;
                match self.queue.take(attempt.waiter) {
                    Some(w) => {
                        let waited = w.since.elapsed();
                        w.span
                            .in_scope(|| debug!(token, holds, ?waited, "acquired"));
                        let claim = Claim {
                            owner: w.owner,
                            field: w.field.clone(),
                            lease: w.lease,
                            on_lost: w.on_lost,
                        };
                        let guard = self.grant(claim, token, sent, ctx);
                        // If the caller is gone the guard comes back and is dropped
                        // here, which releases it at once.
                        let _ = w.reply.send(Ok(guard));
                    }
                    None => {
                        // The waiter gave up while its attempt was in flight. The
                        // grant is real, so it is undone through the normal path: a
                        // guard that is dropped at once releases its hold.
                        debug!(lock = %self.name, "granted to a waiter that left; releasing");
                        let claim = Claim {
                            owner: attempt.owner,
                            field: attempt.field,
                            lease: attempt.lease,
                            on_lost: None,
                        };
                        drop(self.grant(claim, token, sent, ctx));
                    }
                }
                self.pump(ctx);
            }
            Ok(AcquireReply::Busy { ttl }) => {
                self.failures = 0;
                self.last_error = None;
                self.queue.fail_try_once(None);
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
            Err(e) if redis_is_protocol_error(&e) => {
                self.unresolved = Some(attempt.unresolved());
                self.restart(&e, ctx);
            }
            Err(e) if redis_is_transient(&e) => {
                let delay = self.next_backoff();
                warn!(lock = %self.name, error = %e, retry_in = ?delay, "acquire attempt failed; will retry");
                if !e.is_connection_refusal() {
                    // The script may have run with its reply lost.
                    self.unresolved = Some(attempt.unresolved());
                }
                self.queue.fail_try_once(Some(&e));
                self.last_error = Some(e);
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

    /// Subscribes to the unlock channel, then retries at once: the lock may have
    /// been released between the failed attempt and the subscription.
    pub(super) fn subscribe(&mut self, ctx: &mut Context<Self>) {
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
    pub(super) fn wake(&mut self, ctx: &mut Context<Self>) {
        if self.attempt.is_some() {
            self.woken = true;
        } else {
            self.pump(ctx);
        }
    }

    /// Arms the wake timer at the sooner of `retry` from now and the nearest waiter
    /// deadline; with neither, no timer.
    pub(super) fn schedule(&mut self, retry: Option<Duration>, ctx: &mut Context<Self>) {
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
                let expired = act.queue.expire(Instant::now(), act.last_error.as_ref());
                for _ in 0..expired {
                    act.shared.counters.timeout();
                }
                act.pump(ctx);
            }));
        }
    }

    /// The delay before the next try after a Redis error: doubling with each
    /// consecutive failure, capped and jittered (see `Config::reconnect_backoff`).
    fn next_backoff(&mut self) -> Duration {
        let config = &self.shared.config;
        let delay = backoff(config.reconnect_min, config.reconnect_max, self.failures);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// Finds out what an attempt with a lost reply did, and undoes it if it took a
    /// hold: the owner's count in Redis is compared with the guards that exist here.
    /// A hold that no guard accounts for is given back at once; nothing is granted
    /// from an unknown outcome (its fencing token is unknown too).
    pub(super) fn resolve(&mut self, ctx: &mut Context<Self>) {
        let Some(u) = self.unresolved.clone() else {
            return;
        };
        self.resolving = true;
        let held_here = self.holding.as_ref().filter(|h| h.owner == u.owner);
        let expected = held_here.map_or(0, |h| h.guards);
        let lease = held_here.map_or(self.shared.config.watchdog_lease, |h| h.lease);
        let latch_ms = millis(self.shared.config.latch_ttl);
        let conn = self.shared.conn.clone();
        let name = self.name.clone();
        let fut = async move {
            let mut c = conn.clone();
            let count: Option<u32> = redis::cmd("HGET")
                .arg(&*name)
                .arg(&*u.field)
                .query_async(&mut c)
                .await?;
            if count.unwrap_or(0) <= expected {
                return Ok(false);
            }
            let request_id = uuid::Uuid::new_v4().to_string();
            scripts::release(conn, &name, &u.field, millis(lease), &request_id, latch_ms).await?;
            Ok::<_, redis::RedisError>(true)
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            act.resolving = false;
            match res {
                Ok(undone) => {
                    if undone {
                        debug!(lock = %act.name, "an attempt with a lost reply had taken a hold; gave it back");
                    }
                    act.unresolved = None;
                    act.pump(ctx);
                }
                Err(e) if redis_is_transient(&e) => {
                    let delay = act.next_backoff();
                    debug!(lock = %act.name, error = %e, retry_in = ?delay, "cannot check the lost attempt yet");
                    act.schedule(Some(delay), ctx);
                }
                Err(e) => {
                    // Not a lock hash any more: there is no hold of ours to undo.
                    warn!(lock = %act.name, error = %e, "could not check a lost attempt");
                    act.unresolved = None;
                    act.pump(ctx);
                }
            }
        }));
    }
}
