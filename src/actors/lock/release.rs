//! The release path of a held lock, in one file: a guard's [`Release`] message,
//! the release script (or, at the last hold with a local waiter, the hand-over in
//! `handover.rs`, when the kind says so), its retries until it is answered or the lease is over
//! ([`with_latch`]), and what the answer means for the holding, the waiters and
//! the turn. The holding itself (grant, expiry, loss) is `holding.rs`.
//!
//! A release has one name per layer it crosses, each the shape that layer
//! needs: the guard sends [`Release`] (which hold, by epoch); this file makes it
//! a [`Giveback`] (name, field, lease and request id, owned, so that a retry
//! resends it), which the kind's rules turn into their script call
//! (`wire::Release`, or the fair or read-write one); the script answers a
//! [`ReleaseReply`] (released, still held, not held), and the caller gets a
//! [`ReleaseOutcome`] or a `LockError`.
//!
//! A release is counted in [`Releases`] while in flight: the check of an
//! attempt whose reply was lost waits for it (the owner's hold count would be
//! blurred), and so does a handover.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, info, warn};

use super::kinds::{AfterRelease, Freed, Giveback};
use super::LockActor;
use crate::config::Config;
use crate::durations::{backoff, millis};
use crate::error::{redis_is_protocol_error, redis_is_transient, LockError, LostReason};
use crate::guard::{Release, ReleaseOutcome};
use crate::wire::ReleaseReply;

/// The release scripts of a lock in flight (plain releases and handovers).
/// While one is out, the owner's hold count in Redis is about to change, so a
/// check of a lost attempt, a handover and the idle countdown wait for it.
#[derive(Debug, Default)]
pub(super) struct Releases(u32);

impl Releases {
    /// A release script was sent.
    pub(super) fn start(&mut self) {
        self.0 += 1;
    }

    /// A release script was answered (or given up).
    pub(super) fn done(&mut self) {
        self.0 = self.0.saturating_sub(1);
    }

    /// No release script is out.
    pub(super) fn none(&self) -> bool {
        self.0 == 0
    }
}

impl Handler<Release> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Release, ctx: &mut Context<Self>) {
        let Release { epoch, reply } = msg;
        if let Some(reason) = self.held.lost.release_one(epoch) {
            self.reconcile(ctx);
            reply.send(Err(LockError::Lost(reason)));
            return;
        }
        let released = self.release_hold(epoch, ctx);
        ctx.spawn(released.map(move |outcome, _, _| reply.send(outcome)));
    }
}

impl LockActor {
    /// Runs the release script for one hold of a live holding.
    pub(super) fn release_hold(
        &mut self,
        epoch: u64,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<ReleaseOutcome, LockError>> {
        let Some(h) = self.held.holdings.get_mut(epoch) else {
            return Box::pin(fut::ready(Err(LockError::NotHeld)));
        };
        h.guards = h.guards.saturating_sub(1);
        let (kind, field, lease, last) = (h.kind, h.field.clone(), h.lease, h.guards == 0);
        let sent = Instant::now();
        let lease_end = self.held.lease_end(epoch, sent, &self.shared);
        let lease_end = lease_end.unwrap_or(sent + lease);
        let giveback = Giveback {
            name: self.name.clone(),
            kind,
            field,
            lease_ms: millis(lease),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        };
        if last {
            if let Some(handover) = self.hand_over(epoch, &giveback, ctx) {
                return handover;
            }
        }
        self.releases.start();
        let (scripts, shared) = (self.wait.side.kind().scripts(), self.shared.clone());
        // Only the last hold's release may outlive its latch: see `with_latch`.
        let until = last.then_some(lease_end);
        let fut = with_latch(self.shared.config.clone(), sent, until, move |retry| {
            scripts.release(
                &shared,
                Giveback {
                    retry,
                    ..giveback.clone()
                },
            )
        });
        Box::pin(fut.into_actor(self).map(move |(res, late), act, ctx| {
            act.releases.done();
            let res = match res {
                // A retry past the latch's lifetime no longer learns what an
                // earlier attempt did. Finding the owner gone then means that
                // attempt freed the lock (or its lease ended): either way it is
                // free and nobody else's hold was touched.
                Ok(ReleaseReply::NotHeld) if late => {
                    info!(lock = %act.name, "release settled after Redis came back: the lock was already free");
                    Ok(ReleaseReply::Released {
                        published: false,
                        heard: 0,
                    })
                }
                res => res,
            };
            let out = act.on_released(epoch, sent, res, ctx);
            act.look(ctx);
            out
        }))
    }

    /// A release freed the lock: the kind's books, then the holding.
    fn on_freed(&mut self, epoch: u64, published: bool, heard: u32, ctx: &mut Context<Self>) {
        let live = self.held.holdings.get(epoch).is_some();
        let guards_left = self.held.holdings.get(epoch).map_or(0, |h| h.guards);
        self.shared.counters.released();
        let channel = self.channel();
        let listening = self.listening(&channel);
        let freed = Freed {
            published,
            others: heard.saturating_sub(u32::from(listening)),
            listening,
            nobody_waits: !self.wait.side.has_waiters(),
            now: Instant::now(),
        };
        let after = self.with_kind(|kind, _| kind.released(freed));
        self.after_release(after, ctx);
        if live {
            if guards_left == 0 {
                self.forget(epoch);
                self.arm_expiry(ctx);
            } else {
                // Redis counted fewer holds than guards exist here: something
                // outside this manager released them. They are not held.
                self.lose(epoch, LostReason::OwnerGone, ctx);
            }
        }
    }

    /// Applies a release script's answer to the local view.
    pub(super) fn on_released(
        &mut self,
        epoch: u64,
        sent: Instant,
        res: redis::RedisResult<ReleaseReply>,
        ctx: &mut Context<Self>,
    ) -> Result<ReleaseOutcome, LockError> {
        let live = self.held.holdings.get(epoch).is_some();
        let guards_left = self.held.holdings.get(epoch).map_or(0, |h| h.guards);
        match res {
            Ok(ReleaseReply::Released { published, heard }) => {
                self.on_freed(epoch, published, heard, ctx);
                Ok(ReleaseOutcome::Released)
            }
            Ok(ReleaseReply::StillHeld(holds)) => {
                self.shared.counters.released();
                if let Some(h) = self.held.holdings.get_mut(epoch) {
                    h.valid_until = sent + h.lease;
                    self.arm_expiry(ctx);
                    if guards_left == 0 {
                        // Redis holds more than the guards here account for (an
                        // attempt whose reply was lost): give those back too.
                        debug!(lock = %self.name, holds, "releasing holds no guard accounts for");
                        let fut = self.release_hold(epoch, ctx);
                        ctx.spawn(fut.map(|_, _, _| ()));
                    }
                }
                Ok(ReleaseOutcome::StillHeld { holds })
            }
            Ok(ReleaseReply::NotHeld) => {
                // The guard that asked was already counted out of the holding.
                self.lose(epoch, LostReason::OwnerGone, ctx);
                Err(LockError::NotHeld)
            }
            Err(e) if redis_is_protocol_error(&e) => {
                self.life.restart(&self.name, &e, ctx);
                Err(LockError::from(e))
            }
            Err(e) => {
                warn!(lock = %self.name, error = %e, "release failed; the lock frees when its lease runs out");
                if live && guards_left == 0 {
                    // Stop renewing so that the lock expires within one lease.
                    self.forget(epoch);
                    self.arm_expiry(ctx);
                }
                Err(LockError::from(e))
            }
        }
    }

    /// Carries out what the kind decided after a release freed the lock: a
    /// yield holds the head waiter back, listening for the other processes'
    /// release.
    fn after_release(&mut self, after: AfterRelease, ctx: &mut Context<Self>) {
        // The kind holds its head back until the fallback and keeps the
        // channel while it does; the engine learns it as the queue looks.
        if after == AfterRelease::Yield {
            self.run(crate::actors::waiting::engine::Event::Look, ctx);
        }
    }
}

/// The longest pause between two tries of a release. Every waiter is blind until
/// the release lands, so after a failover it should land within moments of the new
/// master taking over (a Sentinel failover takes 2-4 s; with the reconnect
/// backoff's 2 s steps a release landed up to 2 s after it), and a try against a
/// master that is still gone fails at once, so trying often costs little.
const RELEASE_RETRY_MAX: Duration = Duration::from_millis(250);

/// Runs a release (`once(retry)`) until it is answered or fails for good, and says
/// whether the answer came from a try made after the latch could have expired.
///
/// A release whose reply was lost is retried with the same request id: the latch in
/// Redis answers with the first outcome, so it is never applied twice. That holds
/// for half the latch's lifetime after `sent`, while the latch surely remains.
/// A failover or a restart can take longer than that, and a release given up then
/// leaves the lock blind for the rest of its lease (every waiter waits it out). So
/// the release of a holding's *last* hold goes on trying until `until` (the end of
/// its lease: past it the lock is free anyway). Such a late try cannot double a
/// release: the last hold's earlier attempt either freed the lock (the owner field
/// is gone, and the late try answers "not held", which the caller reads as freed)
/// or did nothing (the late try frees it). Releases that leave holds behind stop
/// at the latch's half-life, as a second decrement would take a hold nobody gave.
pub(super) async fn with_latch<T, F, Fut>(
    config: Arc<Config>,
    sent: Instant,
    until: Option<Instant>,
    mut once: F,
) -> (redis::RedisResult<T>, bool)
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let latched = sent + config.latch_ttl / 2;
    let limit = until.map_or(latched, |u| u.max(latched));
    let mut tries = 0u32;
    loop {
        let now = Instant::now();
        let late = now >= latched;
        // One try is bounded too: against a server that is gone, a call can wait
        // out the connection's own reconnect attempts, seconds past the lease.
        let tried = tokio::time::timeout(limit.saturating_duration_since(now), once(tries > 0))
            .await
            .unwrap_or_else(|_| {
                Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to the release before the lease ended",
                )))
            });
        match tried {
            Err(e) if redis_is_transient(&e) => {
                let longest = config.reconnect_max.min(RELEASE_RETRY_MAX);
                let delay = backoff(config.reconnect_min, longest, tries);
                if Instant::now() + delay >= limit {
                    return (Err(e), late);
                }
                if tries == 0 {
                    // The first failure says why; later ones repeat it at debug.
                    warn!(error = %e, retry_in = ?delay, "release failed; retrying until the lease ends");
                } else {
                    debug!(error = %e, retry_in = ?delay, "release failed; retrying with the same request id");
                }
                tries += 1;
                tokio::time::sleep(delay).await;
            }
            other => return (other, late),
        }
    }
}
