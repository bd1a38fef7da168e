//! The held lock: what this manager knows while one of its owners holds the lock,
//! and the lock actor's work on it (grant, watchdog renewal, expiry, release, loss).
//!
//! Redis is the truth about who holds a lock; this is the local cache that lets the
//! actor renew it, report its loss, and hand it to the next local waiter without
//! asking Redis first. Each holding gets an epoch: guards carry it, so a guard from a
//! holding that was lost can never act on a later holding of the same owner.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::{LockActor, Sub};
use crate::config::{backoff, millis};
use crate::error::{redis_is_protocol_error, redis_is_transient, LockError, LostReason};
use crate::guard::{LockGuard, LockLost, ReleaseOutcome};
use crate::keys::Owner;
use crate::scripts::{self, ReleaseReply};

/// The live holding of the lock by one local owner.
#[derive(Debug)]
pub(crate) struct Holding {
    /// Distinguishes this holding from earlier ones of the same lock.
    pub(crate) epoch: u64,
    /// The holding owner.
    pub(crate) owner: Owner,
    /// Its owner field.
    pub(crate) field: Arc<str>,
    /// Guards of this holding not yet released (equals the Redis hold count unless
    /// something outside this manager changed it).
    pub(crate) guards: u32,
    /// Whether the watchdog renews it (some guard was taken without a lease).
    pub(crate) watchdog: bool,
    /// The lease last set in Redis, used again when a release leaves holds.
    pub(crate) lease: Duration,
    /// Until when the lock is surely held: the send time of the last successful
    /// acquisition or renewal plus its lease, on this process's monotonic clock.
    pub(crate) valid_until: Instant,
    /// Tells the guards when the lock is lost.
    pub(crate) lost_tx: watch::Sender<Option<LostReason>>,
    /// Actors that asked for a [`LockLost`] message.
    pub(crate) watchers: Vec<Recipient<LockLost>>,
}

impl Holding {
    pub(crate) fn new(epoch: u64, owner: Owner, field: Arc<str>, lease: Duration) -> Holding {
        Holding {
            epoch,
            owner,
            field,
            guards: 0,
            watchdog: false,
            lease,
            valid_until: Instant::now(),
            lost_tx: watch::Sender::new(None),
            watchers: Vec::new(),
        }
    }
}

/// Who a successful acquisition belongs to.
#[derive(Debug)]
pub(super) struct Claim {
    /// The owner that now holds the lock.
    pub(super) owner: Owner,
    /// Its owner field.
    pub(super) field: Arc<str>,
    /// The explicit lease, or `None` for watchdog mode.
    pub(super) lease: Option<Duration>,
    /// Who else to tell if the lock is lost.
    pub(super) on_lost: Option<Recipient<LockLost>>,
}

/// Holdings that were lost while guards of them are still alive: their release
/// must answer "lost" without touching Redis, where the lock may belong to someone
/// else by now.
#[derive(Debug, Default)]
pub(crate) struct LostHoldings {
    /// epoch -> (why, guards not yet released)
    by_epoch: HashMap<u64, (LostReason, u32)>,
}

impl LostHoldings {
    pub(crate) fn insert(&mut self, epoch: u64, reason: LostReason, guards: u32) {
        if guards > 0 {
            self.by_epoch.insert(epoch, (reason, guards));
        }
    }

    /// Accounts for one released guard of a lost holding; returns why it was lost.
    pub(crate) fn release_one(&mut self, epoch: u64) -> Option<LostReason> {
        let (reason, guards) = self.by_epoch.get_mut(&epoch)?;
        let reason = *reason;
        *guards -= 1;
        if *guards == 0 {
            self.by_epoch.remove(&epoch);
        }
        Some(reason)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_epoch.is_empty()
    }
}

impl LockActor {
    /// Records a successful acquisition and makes its guard.
    pub(super) fn grant(
        &mut self,
        claim: Claim,
        token: u64,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) -> LockGuard {
        let Claim {
            owner,
            field,
            lease,
            on_lost,
        } = claim;
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
        h.watchers.extend(on_lost);
        let lost_rx = h.lost_tx.subscribe();
        let watchdog = h.watchdog;
        self.arm_expiry(ctx);
        if watchdog {
            self.start_watchdog(ctx);
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

    /// Restarts the holding's timers (after an actor restart): the expiry timer, and
    /// for a watchdog holding the renewal interval plus one renewal now.
    pub(super) fn resume_holding(&mut self, ctx: &mut Context<Self>) {
        self.arm_expiry(ctx);
        if self.holding.as_ref().is_some_and(|h| h.watchdog) {
            self.start_watchdog(ctx);
            self.renew(ctx);
        }
    }

    /// Starts the watchdog interval unless it runs already.
    fn start_watchdog(&mut self, ctx: &mut Context<Self>) {
        if self.renew_timer.is_none() {
            let every = self.shared.config.renew_every();
            self.renew_timer = Some(ctx.run_interval(every, |act, ctx| act.renew(ctx)));
        }
    }

    /// Arms (or re-arms) the timer that declares the holding lost when its
    /// `valid_until` passes.
    pub(super) fn arm_expiry(&mut self, ctx: &mut Context<Self>) {
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
    pub(super) fn lose(&mut self, reason: LostReason, ctx: &mut Context<Self>) {
        let Some(h) = self.holding.take() else { return };
        self.shared.counters.lost();
        warn!(lock = %self.name, owner = %h.owner, %reason, "lock lost while held");
        let _ = h.lost_tx.send(Some(reason));
        for watcher in &h.watchers {
            watcher.do_send(LockLost {
                name: self.name.to_string(),
                owner: h.owner,
                owner_field: h.field.to_string(),
                reason,
            });
        }
        self.lost.insert(h.epoch, reason, h.guards);
        self.stop_holding_timers(ctx);
        self.pump(ctx);
    }

    pub(super) fn stop_holding_timers(&mut self, ctx: &mut Context<Self>) {
        for t in [self.renew_timer.take(), self.expiry_timer.take()]
            .into_iter()
            .flatten()
        {
            ctx.cancel_future(t);
        }
    }

    /// The watchdog tick: extend the lease of a watchdog holding.
    pub(super) fn renew(&mut self, ctx: &mut Context<Self>) {
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
                Err(e) if redis_is_protocol_error(e) => act.restart(e, ctx),
                Err(e) => {
                    act.shared.counters.renewal_failed();
                    warn!(lock = %act.name, error = %e, "renewal failed; retrying until the lease runs out");
                }
            }
        }));
    }

    /// Runs the release script for one hold of the live holding.
    pub(super) fn release_hold(
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
    pub(super) fn on_released(
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
            Err(e) if redis_is_protocol_error(&e) => {
                self.restart(&e, ctx);
                Err(LockError::Redis(e))
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
