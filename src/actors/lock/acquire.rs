//! Acquisition's Redis calls: [`Calls`] makes every call the lock's waiting
//! side sends (an attempt, the give-back of an attempt whose waiter left, the
//! check of an attempt whose answer was lost) and reads what a grant or a
//! timeout tells. The lock actor is the waiting engine's runner (its glue in
//! `mod.rs`): it hands each event to the engine (`actors/waiting/engine/`,
//! with the lock's policy in `waits.rs`), spawns the calls made here, and
//! hands their answers back to the engine.
//!
//! What only a lock does with them: a waiter that leaves while its attempt is
//! out has that attempt given back by a release sent right behind it
//! ([`Calls::undo`]), so that Redis undoes a late grant even if this process
//! is gone by the time Redis runs it; an attempt whose answer is lost is
//! checked by the owner's hold count before anyone asks again
//! ([`Calls::resolve`]); a timeout names who holds the lock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::LocalBoxFuture;
use redis::RedisResult;
use tracing::debug;

use super::holding::{Claim, Holdings};
use super::kinds::{self, Giveback, Scripts};
use super::waiters::{Want, WhoHolds};
use super::waits::LockWaits;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{Event, Taken, Waiter};
use crate::durations::millis;
use crate::wire::{self, AcquireReply, ReleaseReply};

/// The acquisition calls of one lock: its name, the manager's connection and
/// config, and its kind's scripts.
pub(super) struct Calls<'a> {
    pub(super) name: &'a Arc<str>,
    pub(super) shared: &'a Arc<Shared>,
    pub(super) scripts: &'static dyn Scripts,
}

impl Calls<'_> {
    /// The acquisition attempt `want` asks for, laid out for its kind's script.
    pub(super) fn attempt_of(&self, want: &Want) -> kinds::Attempt {
        let config = &self.shared.config;
        kinds::Attempt {
            name: self.name.clone(),
            kind: want.req.kind,
            field: want.req.field.clone(),
            lease_ms: millis(want.req.lease.unwrap_or(config.watchdog_lease)),
            queue: want.placing,
            token_ttl_ms: millis(config.token_ttl),
            new_owner: want.new_owner_now,
            reentrant: want.req.reentrant,
            delay_ms: millis(config.lock_delay),
        }
    }

    /// One acquisition attempt for `want`.
    pub(super) fn attempt(
        &self,
        want: &Want,
    ) -> LocalBoxFuture<'static, RedisResult<AcquireReply>> {
        self.scripts.acquire(self.shared, self.attempt_of(want))
    }

    /// A hold of `want`'s field with `lease`, to give back (a fresh request id:
    /// it is sent once).
    fn giveback(&self, want: &Want, lease: Duration) -> Giveback {
        Giveback {
            name: self.name.clone(),
            kind: want.req.kind,
            field: want.req.field.clone(),
            lease_ms: millis(lease),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        }
    }

    /// Redis granted a waiter the lock: records it (metrics, its span) and
    /// says what the holding claims, with the fencing token and whether a
    /// replica confirmed it. `None`: nothing was won (a lock's grant always
    /// comes of its own answer).
    pub(super) fn granted(&self, taken: &mut Taken<LockWaits>) -> Option<(Claim, u64, bool)> {
        let won = taken.won.take()?;
        let req = &mut taken.waiter.want.want.req;
        let waited = req.since.elapsed();
        let metric = super::holding::metric_name(self.shared, self.name);
        crate::stats::record::acquired(req.kind, waited, metric);
        let (token, holds) = (won.token, won.holds);
        req.span
            .in_scope(|| debug!(token, holds, ?waited, "acquired"));
        let claim = Claim {
            kind: req.kind,
            owner: req.owner,
            field: req.field.clone(),
            lease: req.lease,
            on_lost: req.on_lost.take(),
            task: req.task,
        };
        Some((claim, won.token, won.confirmed))
    }

    /// The waiter of `want` left while its attempt was out: an owner-checked
    /// release of its field, to send right behind the attempt, so that Redis
    /// runs it next whenever it runs the acquisition: a grant that lands
    /// after the waiter left is undone even if this process exits before the
    /// answer comes (a frozen server runs both when it resumes). It is one
    /// `EVAL` carrying the script, never resent ([`wire::call_once`]), so that
    /// it needs nothing from the server's script cache and cannot land behind
    /// a later attempt. Every kind's acquisition is undone exactly by one
    /// release of its field (`Scripts::undo_abandoned` says how); a
    /// non-reentrant one only while its owner holds nothing here (its refused
    /// re-entry followed by a release would take the hold it had): `None`.
    /// Either way, an answer that says it took is checked after
    /// ([`Self::resolve`]).
    pub(super) fn undo(
        &self,
        want: &Want,
        holdings: &Holdings,
    ) -> Option<LocalBoxFuture<'static, RedisResult<ReleaseReply>>> {
        let req = &want.req;
        let holding = holdings.of(req.owner, req.kind);
        if !req.reentrant && holding.is_some_and(|h| h.guards > 0) {
            return None;
        }
        let lease = req.lease.unwrap_or(self.shared.config.watchdog_lease);
        let giveback = self.giveback(want, lease);
        self.scripts.undo_abandoned(self.shared, giveback)
    }

    /// Finds out what an attempt with a lost reply did, and undoes it if it
    /// took a hold: the owner's count in Redis is compared with the guards
    /// that exist here. A hold that no guard accounts for is given back at
    /// once (the answer: `true`); nothing is granted from an unknown outcome
    /// (its fencing token is unknown too). Sent only while no release is out,
    /// which would blur that count.
    pub(super) fn resolve(
        &self,
        want: &Want,
        holdings: &Holdings,
    ) -> impl Future<Output = RedisResult<bool>> + 'static {
        let req = &want.req;
        let held_here = holdings.of(req.owner, req.kind);
        let expected = held_here.map_or(0, |h| h.guards);
        let lease = held_here.map_or(self.shared.config.watchdog_lease, |h| h.lease);
        let mut conn = self.shared.node.conn();
        let (name, field) = (self.name.clone(), req.field.clone());
        let release = self
            .scripts
            .release(self.shared, self.giveback(want, lease));
        async move {
            if wire::hold_count(&mut conn, &name, &field).await? <= expected {
                return Ok(false);
            }
            release.await?;
            Ok(true)
        }
    }

    /// These waiters' deadlines passed with nothing to tell them but a
    /// timeout: each is told who held the lock then.
    pub(super) fn timed_out(&self, waiters: Vec<(Waiter<LockWaits>, Duration)>) {
        for _ in &waiters {
            self.shared.counters.timeout();
        }
        let who = WhoHolds {
            conn: self.shared.node.conn(),
            name: self.name.clone(),
            ours: format!("{}:", self.shared.client_id),
        };
        who.answer(waiters);
    }
}

/// A hand-over's answer, as the engine's event for the attempt of `waiter`:
/// granted with `token` (and `confirmed` by a replica), or not (`unknown`: it
/// may have been, and is checked).
pub(super) fn handed_to(
    waiter: u64,
    sent: Instant,
    granted: Option<(u64, bool)>,
    unknown: bool,
) -> Event<LockWaits> {
    match granted {
        Some((token, confirmed)) => Event::Answered {
            waiter,
            reply: Ok(AcquireReply::Acquired {
                token,
                holds: 1,
                confirmed,
            }),
            sent,
        },
        None => Event::Withdrawn { waiter, unknown },
    }
}
