//! The release path of a held lock: a guard's [`Release`] message, the
//! release laid out ([`Releasing`]) and sent (or, at the last hold with a local
//! waiter, the hand-over in `handover.rs`, when the kind says so), its retries
//! until it is answered or the lease is over ([`with_latch`]), and what the
//! answer means ([`Releases::answered`]: the caller's answer, and [`Then`],
//! what follows for the holding, the waiters and the turn). The lock actor's
//! glue in `mod.rs` spawns the call and carries out what follows. The holding
//! itself (grant, expiry, loss) is `holding.rs`.
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

use super::holding::{Held, Holdings};
use super::kinds::{Giveback, Scripts};
use super::LockActor;
use crate::actors::shared::Shared;
use crate::config::Config;
use crate::durations::{backoff, millis};
use crate::error::{redis_is_protocol_error, redis_is_transient, LockError};
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

/// One release about to be sent: the hold given back, and whether it is the
/// holding's last (only that one may hand the lock over or outlive its latch).
pub(super) struct Releasing {
    /// The hold, as the kind's release script takes it.
    pub(super) giveback: Giveback,
    /// It gives back the holding's last hold.
    pub(super) last: bool,
    /// When it was sent.
    pub(super) sent: Instant,
    /// When the holding's lease ends (a last release tries until then).
    lease_end: Instant,
}

impl Releasing {
    /// Counts one guard of holding `epoch` out, and lays out its release;
    /// `None` if the holding is gone.
    pub(super) fn of(
        held: &mut Held,
        epoch: u64,
        name: &Arc<str>,
        shared: &Shared,
    ) -> Option<Self> {
        let h = held.holdings.get_mut(epoch)?;
        h.guards = h.guards.saturating_sub(1);
        let (kind, field, lease, last) = (h.kind, h.field.clone(), h.lease, h.guards == 0);
        let sent = Instant::now();
        let lease_end = held.lease_end(epoch, sent, shared).unwrap_or(sent + lease);
        let giveback = Giveback {
            name: name.clone(),
            kind,
            field,
            lease_ms: millis(lease),
            request_id: Arc::from(crate::random::request_id()),
            retry: false,
        };
        Some(Releasing {
            giveback,
            last,
            sent,
            lease_end,
        })
    }

    /// Sends it, retried with the same request id until it is answered
    /// ([`with_latch`]).
    pub(super) fn send(
        self,
        scripts: &'static dyn Scripts,
        shared: Arc<Shared>,
    ) -> impl Future<Output = redis::RedisResult<ReleaseReply>> {
        // Only the last hold's release may outlive its latch: see `with_latch`.
        let until = self.last.then_some(self.lease_end);
        let Releasing { giveback, sent, .. } = self;
        async move {
            let config = shared.config.clone();
            let (res, late) = with_latch(config, sent, until, |retry| {
                let giveback = Giveback {
                    retry,
                    ..giveback.clone()
                };
                scripts.release(&shared, giveback)
            })
            .await;
            match res {
                // A retry past the latch's lifetime no longer learns what an
                // earlier attempt did. Finding the owner gone then means that
                // attempt freed the lock (or its lease ended): either way it is
                // free and nobody else's hold was touched.
                Ok(ReleaseReply::NotHeld) if late => {
                    info!(lock = %giveback.name, "release settled after Redis came back: the lock was already free");
                    Ok(ReleaseReply::Released {
                        published: false,
                        heard: 0,
                    })
                }
                res => res,
            }
        }
    }
}

/// What the lock actor does after a release's answer, beside answering its
/// caller, in this order.
#[derive(Debug)]
pub(super) enum Then {
    /// The lock is free: the kind's books learn it.
    Freed { published: bool, heard: u32 },
    /// The holding ended here: its renewal stops.
    Forget,
    /// The holding is lost (its guards are told): Redis counted fewer holds
    /// than guards exist here, so something outside this manager released them.
    Lose,
    /// Still held: the lease counts from the release's send.
    Renew,
    /// Redis holds more than the guards here account for (an attempt whose
    /// reply was lost): those are given back too.
    ReleaseAgain,
    /// Redis answered in a shape the protocol does not allow: the actor restarts.
    Restart(String),
}

impl Releases {
    /// A release script for holding `epoch` was answered with `res`: what its
    /// caller gets, and what follows for the holding (read from `holdings`).
    pub(super) fn answered(
        &mut self,
        holdings: &Holdings,
        epoch: u64,
        res: redis::RedisResult<ReleaseReply>,
        name: &str,
        shared: &Shared,
    ) -> (Result<ReleaseOutcome, LockError>, Vec<Then>) {
        self.done();
        let live = holdings.get(epoch).is_some();
        let guards_left = holdings.get(epoch).map_or(0, |h| h.guards);
        match res {
            Ok(ReleaseReply::Released { published, heard }) => {
                shared.counters.released();
                // Room for both at once: a release answers on every pair.
                let mut then = Vec::with_capacity(2);
                then.push(Then::Freed { published, heard });
                if live {
                    then.push(if guards_left == 0 {
                        Then::Forget
                    } else {
                        Then::Lose
                    });
                }
                (Ok(ReleaseOutcome::Released), then)
            }
            Ok(ReleaseReply::StillHeld(holds)) => {
                shared.counters.released();
                let mut then = Vec::with_capacity(2);
                if live {
                    then.push(Then::Renew);
                    if guards_left == 0 {
                        debug!(lock = %name, holds, "releasing holds no guard accounts for");
                        then.push(Then::ReleaseAgain);
                    }
                }
                (Ok(ReleaseOutcome::StillHeld { holds }), then)
            }
            // The guard that asked was already counted out of the holding.
            Ok(ReleaseReply::NotHeld) => (Err(LockError::NotHeld), vec![Then::Lose]),
            Err(e) if redis_is_protocol_error(&e) => {
                let why = e.to_string();
                (Err(LockError::from(e)), vec![Then::Restart(why)])
            }
            Err(e) => {
                warn!(lock = %name, error = %e, "release failed; the lock frees when its lease runs out");
                // Renewal stops, so that the lock expires within one lease.
                let then = if live && guards_left == 0 {
                    vec![Then::Forget]
                } else {
                    Vec::new()
                };
                (Err(LockError::from(e)), then)
            }
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
