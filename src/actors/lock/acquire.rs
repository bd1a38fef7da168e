//! Acquisition: when the head waiter may ask Redis, what each answer means, and how
//! waiters are woken again (unlock message, fallback timer, deadline).
//!
//! At most one attempt per lock is in flight, and none while a local holder the
//! waiter cannot share with holds the lock, so local waiters never stampede Redis.
//! Which waiter tries is the kind's choice ([`Pick`]), and so is what follows a
//! busy answer ([`OnBusy`]): this file carries out both.
//! An attempt whose reply was lost has an unknown outcome: before anyone tries
//! again, the actor reads the owner's hold count and gives back a hold the lost
//! attempt may have taken, so that nobody is told "acquired" on a count that does
//! not match its guards. A waiter that leaves while its attempt is in flight has
//! that attempt given back at once, by a release sent right behind it on the same
//! connection ([`LockActor::abandon`]), so that Redis undoes a late grant even if
//! this process is gone by the time Redis runs it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, warn};

use super::attempts::{Abandoning, InFlight, Unresolved};
use super::holding::Claim;
use super::kinds::{self, BusyAnswer, Giveback, OnBusy, Retry};
use super::waiters::{self, Gone};
use super::LockActor;
use crate::actors::listen::{self, Alarm};
use crate::actors::waiting::engine::Pick;
use crate::durations::millis;
use crate::error::{redis_is_protocol_error, redis_is_transient, replica_shortfall, LockError};
use crate::wire::{self, AcquireReply};

impl LockActor {
    /// Lets the waiter whose turn it is try (the kind decides who), if nothing
    /// forbids it; otherwise brings timers and subscriptions in line
    /// ([`LockActor::reconcile`]).
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        self.send_chores(ctx);
        if self.wait.attempts.in_progress() {
            return;
        }
        if self.wait.attempts.has_unresolved() {
            // First find out what the lost attempt did. In-flight releases of the
            // same owner would blur the count, so wait for them (they pump again).
            if self.releases.none() {
                self.resolve(ctx);
            }
            self.reconcile(ctx);
            return;
        }
        // The waiter whose attempt is in flight stays until its `Cancel` comes,
        // which gives that attempt back at once (`abandon`).
        let gone = self.wait.queue.remove_gone(self.wait.attempts.in_flight());
        self.left(gone);
        let picked = match self
            .kind
            .next(&mut self.wait.queue, &self.held.holdings, Instant::now())
        {
            Pick::Waiter(id) => Some(id),
            Pick::HoldBack(left) => {
                self.schedule(Some(left), ctx);
                None
            }
            Pick::Blocked => {
                // A local holder keeps the queue out: nobody can win now.
                // Nothing is in flight here, so no try-once waiter is asking.
                let gone = self.wait.queue.fail_try_once(|_| true, None);
                self.left(gone);
                None
            }
            Pick::Nobody => None,
        };
        let Some((attempt, call)) = picked.and_then(|id| self.start_attempt(id)) else {
            self.reconcile(ctx);
            return;
        };
        self.wait.attempts.sent_acquisition();
        let sent = Instant::now();
        let fut = self.kind.scripts().acquire(&self.shared, call);
        ctx.spawn(
            fut.into_actor(self)
                .map(move |res, act, ctx| act.on_attempt(attempt, sent, res, ctx)),
        );
        self.reconcile(ctx);
    }

    /// Makes the waiter `id` the one whose attempt is in flight and lays out that
    /// attempt; the caller sends it (an acquisition, or a handover in
    /// `handover.rs`). The kind marks the waiter, and says whether the attempt
    /// takes a place in a Redis queue.
    pub(super) fn start_attempt(&mut self, id: u64) -> Option<(InFlight, kinds::Attempt)> {
        let known_lock = self.wait.attempts.saw_lock();
        let w = self.wait.queue.find_mut(id)?;
        let queue = self.kind.sending(w);
        // A retry (the first attempt found the key a lock hash, or got an error),
        // or an earlier attempt of this actor found it one: a key that turns into
        // another type under a live lock actor then reads as busy, not WRONGTYPE.
        let new_owner = w.want.req.new_owner && (w.want.tried_at.is_some() || known_lock);
        w.want.tried_at = Some(Instant::now());
        let attempt = InFlight {
            waiter: w.want.req.id,
            kind: w.want.req.kind,
            owner: w.want.req.owner,
            field: w.want.req.field.clone(),
            lease: w.want.req.lease,
            queue,
        };
        let call = kinds::Attempt {
            name: self.name.clone(),
            kind: attempt.kind,
            field: attempt.field.clone(),
            lease_ms: millis(attempt.lease.unwrap_or(self.shared.config.watchdog_lease)),
            queue,
            token_ttl_ms: millis(self.shared.config.token_ttl),
            new_owner,
            reentrant: w.want.req.reentrant,
            delay_ms: millis(self.shared.config.lock_delay),
        };
        self.wait.attempts.sent(attempt.waiter);
        Some((attempt, call))
    }

    /// Handles the answer to an acquisition attempt.
    pub(super) fn on_attempt(
        &mut self,
        attempt: InFlight,
        sent: Instant,
        res: redis::RedisResult<AcquireReply>,
        ctx: &mut Context<Self>,
    ) {
        let abandoned = self.wait.attempts.was_abandoned();
        let woken = self.wait.attempts.answered();
        match res {
            Ok(AcquireReply::Acquired { token, .. }) if abandoned => {
                // Its waiter left while it was in flight, and the give-back sent
                // right behind it on the same connection has undone it: nobody
                // is granted this. The owner's hold count is still checked
                // before the next attempt, as for a lost reply, in case the
                // give-back went out first (an acquisition still queued in the
                // coalescer when the waiter left).
                self.wait.attempts.redis_answered(true);
                debug!(lock = %self.name, token, "granted to a waiter that left; given back behind it");
                self.wait.attempts.lost(attempt);
                self.pump(ctx);
            }
            Ok(AcquireReply::Acquired {
                token,
                holds,
                confirmed,
            }) => {
                self.wait.attempts.redis_answered(true);
                self.on_granted(attempt, (token, confirmed), holds, sent, ctx);
                self.pump(ctx);
            }
            Ok(refused @ (AcquireReply::UpgradeRefused | AcquireReply::ReentryRefused)) => {
                self.wait.attempts.redis_answered(false);
                if let Some(w) = self.wait.queue.take(attempt.waiter) {
                    // A fair waiter refused a re-entry leaves its place.
                    self.left(Gone::of(&w));
                    let refusal = match refused {
                        AcquireReply::UpgradeRefused => LockError::UpgradeRefused,
                        _ => LockError::ReentryRefused,
                    };
                    waiters::fail(w, refusal);
                }
                self.pump(ctx);
            }
            Ok(AcquireReply::Busy { ttl, head }) => {
                self.wait.attempts.redis_answered(true);
                self.on_busy(attempt, ttl, head, woken, ctx);
            }
            Err(e) => self.on_attempt_failed(attempt, e, ctx),
        }
    }

    /// Redis granted the attempt (`confirmed`: by a replica, when confirmation
    /// is on): its waiter gets a guard, or, if it left meanwhile, the grant is
    /// undone through the normal path.
    fn on_granted(
        &mut self,
        attempt: InFlight,
        (token, confirmed): (u64, bool),
        holds: u32,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) {
        let Some(mut w) = self.wait.queue.take(attempt.waiter) else {
            // The waiter gave up while its attempt was in flight. The grant is
            // real, so it is undone through the normal path: a guard that is
            // dropped at once releases its hold.
            debug!(lock = %self.name, "granted to a waiter that left; releasing");
            let claim = Claim {
                kind: attempt.kind,
                owner: attempt.owner,
                field: attempt.field,
                lease: attempt.lease,
                on_lost: None,
            };
            drop(self.grant(claim, token, sent, ctx));
            return;
        };
        self.kind.granted(self.wait.queue.len());
        let waited = w.want.req.since.elapsed();
        crate::stats::record::acquired(w.want.req.kind, waited, self.metric_name());
        w.want
            .req
            .span
            .in_scope(|| debug!(token, holds, ?waited, "acquired"));
        let claim = Claim {
            kind: w.want.req.kind,
            owner: w.want.req.owner,
            field: w.want.req.field.clone(),
            lease: w.want.req.lease,
            on_lost: w.want.req.on_lost.take(),
        };
        let guard = self
            .grant(claim, token, sent, ctx)
            .confirmed_by_replica(confirmed);
        // If the caller is gone the guard comes back and is dropped here, which
        // releases it at once.
        let _ = w.answer(Ok(guard));
    }

    /// The attempt failed with a Redis error.
    fn on_attempt_failed(
        &mut self,
        attempt: InFlight,
        e: redis::RedisError,
        ctx: &mut Context<Self>,
    ) {
        if redis_is_protocol_error(&e) {
            self.wait.attempts.lost(attempt);
            self.life.restart(&self.name, &e, ctx);
        } else if redis_is_transient(&e) {
            // What stands in the way now, told to a waiter whose deadline passes.
            let delay = self.wait.attempts.failed(&self.shared.config, e.clone());
            warn!(lock = %self.name, error = %e, retry_in = ?delay, "acquire attempt failed; will retry");
            if !e.is_connection_refusal() {
                // The script may have run with its reply lost.
                self.wait.attempts.lost(attempt);
            }
            let gone = self.wait.queue.fail_try_once(|_| true, Some(&e));
            self.left(gone);
            // A grant too few replicas confirmed is real on the master: give
            // it back now rather than at the next attempt, so that nothing
            // holds it while the caller is told it was not granted.
            let undo_now = replica_shortfall(&e).is_some() && self.releases.none();
            self.schedule(Some(delay), ctx);
            if undo_now {
                self.resolve(ctx);
            }
        } else {
            // An error that will repeat (wrong key type, script error): every
            // waiter would get the same, so all get it now.
            warn!(lock = %self.name, error = %e, "acquire attempt refused by Redis");
            let gone = self.wait.queue.fail_all(|| LockError::from(e.clone()));
            self.left(gone);
            self.reconcile(ctx);
        }
    }

    /// The waiter `w` left (its caller dropped the wait). If its acquisition is
    /// the one in flight, an owner-checked release of its field is sent now,
    /// right behind it on the same connection, so that Redis runs it next
    /// whenever it runs the acquisition: a grant that lands after the waiter
    /// left is undone even if this process exits before the answer comes (a
    /// frozen server runs both when it resumes); a give-back that waited for the
    /// answer would leave the hold for its whole lease once the process is gone.
    /// It is one `EVAL` carrying the script, never resent ([`wire::call_once`]),
    /// so that it needs nothing from the server's script cache and cannot land
    /// behind a later attempt. Every kind's acquisition is undone exactly by one
    /// release of its field (granted or re-entered: one hold more, then one
    /// less; held elsewhere: nothing, then nothing; the kind's
    /// `Scripts::undo_abandoned` says how); a non-reentrant one only while its
    /// owner holds nothing here (its refused re-entry followed by a release
    /// would take the hold it had).
    pub(super) fn abandon(&mut self, w: &super::Waiter, ctx: &mut Context<Self>) {
        self.abandon_attempt(Abandoning::of(w), ctx);
    }

    /// [`LockActor::abandon`] for what it needs of the waiter.
    fn abandon_attempt(&mut self, w: Abandoning, ctx: &mut Context<Self>) {
        if self.wait.attempts.in_flight() != Some(w.id) {
            return;
        }
        let holds = self
            .held
            .holdings
            .of(w.owner, w.kind)
            .is_some_and(|h| h.guards > 0);
        if !w.reentrant && holds {
            return;
        }
        let giveback = Giveback {
            name: self.name.clone(),
            kind: w.kind,
            field: w.field.clone(),
            lease_ms: millis(w.lease.unwrap_or(self.shared.config.watchdog_lease)),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        };
        let Some(undo) = self.kind.scripts().undo_abandoned(&self.shared, giveback) else {
            return;
        };
        if !self.wait.attempts.abandon(w.id) {
            return;
        }
        let unsettled = Box::new(Unresolved {
            kind: w.kind,
            owner: w.owner,
            field: w.field,
        });
        ctx.spawn(undo.into_actor(self).map(move |res, act, ctx| match res {
            Ok(reply) => {
                debug!(lock = %act.name, ?reply, "gave back the attempt of a waiter that left")
            }
            Err(e) => {
                // Not known to have run: what the attempt did is checked by the
                // owner's hold count, as for a lost reply.
                warn!(lock = %act.name, error = %e, "could not give back the attempt of a waiter that left; checking it");
                act.wait.attempts.unsettled(unsettled);
                act.pump(ctx);
            }
        }));
    }

    /// The lock could not be taken: the kind answers try-once waiters and says
    /// how the waiters learn when to try again ([`OnBusy`]); this carries it
    /// out (subscribe to the channel the first time, else arm the fallback
    /// timer at the time Redis says things may change).
    fn on_busy(
        &mut self,
        attempt: InFlight,
        ttl: Option<Duration>,
        head: Option<String>,
        woken: bool,
        ctx: &mut Context<Self>,
    ) {
        let answer = BusyAnswer {
            waiter: attempt.waiter,
            field: &attempt.field,
            placed: attempt.queue,
            ttl,
            head,
            woken,
            name: &self.name,
        };
        let OnBusy { retry, then_pump } =
            self.kind
                .busy(answer, &mut self.wait.queue, &self.shared.config);
        if self.wait.queue.is_empty() {
            self.reconcile(ctx);
            return;
        }
        let fallback = || {
            let longest = self.shared.config.max_retry_interval;
            ttl.map_or(longest, |t| t.min(longest))
        };
        match retry {
            Retry::Now => return self.pump(ctx),
            Retry::After(delay) => return self.schedule(Some(delay), ctx),
            Retry::Listen(channel) if !self.wait.subs.contains_key(&channel) => {
                self.subscribe(channel, ctx)
            }
            Retry::Listen(_) | Retry::Fallback => self.schedule(Some(fallback()), ctx),
        }
        if then_pump {
            self.pump(ctx);
        }
    }

    /// Subscribes to a waiter's channel, then retries at once: the lock may have
    /// been released between the failed attempt and the subscription.
    pub(super) fn subscribe(&mut self, channel: String, ctx: &mut Context<Self>) {
        self.kind.subscribing();
        self.wait.subs.add(channel.clone());
        let subscriber = self.shared.subscriber.clone();
        listen::subscribe(self, &channel, &subscriber, ctx);
    }

    /// Something suggests the lock may be free: retry now (or right after the
    /// attempt in flight).
    pub(super) fn wake(&mut self, ctx: &mut Context<Self>) {
        if !self.wait.attempts.wake() {
            self.pump(ctx);
        }
    }

    /// Arms the wake timer at the sooner of `retry` from now and the nearest waiter
    /// deadline; with neither, no timer.
    pub(super) fn schedule(&mut self, retry: Option<Duration>, ctx: &mut Context<Self>) {
        self.send_chores(ctx);
        self.timers.wake.cancel(ctx);
        if !self.wait.queue.is_empty() {
            // Someone waits: a wait that lasts is recorded for operators (only
            // here, not at every enqueue: a lock granted at once costs nothing).
            crate::actors::waiting::watch(self, ctx);
            self.watch_for_deadlocks(ctx);
        }
        let now = Instant::now();
        let at = [retry.map(|r| now + r), self.wait.queue.nearest_deadline()]
            .into_iter()
            .flatten()
            .min();
        if let Some(at) = at {
            let delay = at.saturating_duration_since(now);
            let slot: fn(&mut Self) -> &mut Alarm = |act| &mut act.timers.wake;
            self.timers.wake.set(ctx, delay, slot, |act, ctx| {
                let now = Instant::now();
                // A waiter whose attempt is in flight when its deadline passes
                // leaves as a cancelled one does: its attempt is given back
                // right behind it, so that a grant Redis makes later (a frozen
                // server that resumes after this process exited) holds nothing.
                let asking = act
                    .wait
                    .attempts
                    .in_flight()
                    .and_then(|id| act.wait.queue.find(id));
                if let Some(a) = asking.filter(|w| w.deadline.is_some_and(|d| d <= now)) {
                    let a = Abandoning::of(a);
                    act.abandon_attempt(a, ctx);
                }
                let asking = act.wait.attempts.in_flight();
                let silence = act.wait.queue.silence(asking, now);
                let cause = act.wait.attempts.last_error().or(silence.as_ref());
                let who = || super::waiters::WhoHolds {
                    conn: act.shared.node.conn(),
                    name: act.name.clone(),
                    ours: format!("{}:", act.shared.client_id),
                };
                let expired = act.wait.queue.expire(now, cause, who);
                for _ in 0..expired.count {
                    act.shared.counters.timeout();
                }
                act.left(expired);
                act.kind.timer_fired(&mut act.wait.queue);
                act.pump(ctx);
            });
        }
    }

    /// Finds out what an attempt with a lost reply did, and undoes it if it took a
    /// hold: the owner's count in Redis is compared with the guards that exist here.
    /// A hold that no guard accounts for is given back at once; nothing is granted
    /// from an unknown outcome (its fencing token is unknown too).
    pub(super) fn resolve(&mut self, ctx: &mut Context<Self>) {
        let Some(u) = self.wait.attempts.check() else {
            return;
        };
        let held_here = self.held.holdings.of(u.owner, u.kind);
        let expected = held_here.map_or(0, |h| h.guards);
        let lease = held_here.map_or(self.shared.config.watchdog_lease, |h| h.lease);
        let mut conn = self.shared.node.conn();
        let name = self.name.clone();
        let giveback = Giveback {
            name: name.clone(),
            kind: u.kind,
            field: u.field.clone(),
            lease_ms: millis(lease),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        };
        let release = self.kind.scripts().release(&self.shared, giveback);
        let fut = async move {
            if wire::hold_count(&mut conn, &name, &u.field).await? <= expected {
                return Ok(false);
            }
            release.await?;
            Ok::<_, redis::RedisError>(true)
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            match res {
                Ok(undone) => {
                    if undone {
                        debug!(lock = %act.name, "an attempt with a lost reply had taken a hold; gave it back");
                    }
                    act.wait.attempts.checked(true);
                    act.pump(ctx);
                }
                Err(e) if redis_is_transient(&e) => {
                    act.wait.attempts.checked(false);
                    // This is what stands in the way now: a waiter whose deadline
                    // passes is told this error, not the one that lost the reply.
                    let delay = act.wait.attempts.failed(&act.shared.config, e.clone());
                    debug!(lock = %act.name, error = %e, retry_in = ?delay, "cannot check the lost attempt yet");
                    act.schedule(Some(delay), ctx);
                }
                Err(e) => {
                    // Not a lock hash any more: there is no hold of ours to undo.
                    warn!(lock = %act.name, error = %e, "could not check a lost attempt");
                    act.wait.attempts.checked(true);
                    act.pump(ctx);
                }
            }
        }));
    }
}
