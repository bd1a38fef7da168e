//! Replica confirmation's fast lane, on a connection to one server: while
//! replicas answer within a round trip, several lock changes at once each carry
//! `CLIENT ID` and a short `WAIT` ([`FAST_WAIT`]) instead of queueing for the
//! one place a whole `WAIT` has. A short `WAIT` that runs out closes the lane
//! and its change asks again with a whole `WAIT`, counted only on the very
//! connection its script ran on (same `CLIENT ID`, same count of [`Moves`]).
//! The module documentation of `wire/replicas/` says why the budget is sized
//! as it is.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{select, Either};
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Value};
use tokio::sync::{Semaphore, SemaphorePermit};
use tracing::debug;

use super::replies::confirmed;
use super::{budget, push_waits, Confirmation, Confirmed};
use crate::config::{ReplicaSync, WAIT_SLACK};

/// Replica confirmation's fast path: while replicas answer quickly, a script
/// goes with `CLIENT ID` and a short `WAIT` behind it, several at once; a short
/// `WAIT` that runs out is not a shortfall yet but is asked again with the
/// whole timeout, on the very connection (see [`Confirmation::fast`]).
#[derive(Debug)]
pub(super) struct Fast {
    /// The short `WAIT`'s timeout ([`FAST_WAIT`]).
    timeout: Duration,
    /// Places for short `WAIT`s at once, one budget per lane.
    places: Vec<Semaphore>,
    /// A short `WAIT` ran out: the fast path is closed until a whole `WAIT`
    /// confirms again or the replicas are counted anew.
    closed: AtomicBool,
    /// The connection's moves to another server: with the `CLIENT ID`, it
    /// tells whether the second `WAIT` went on the connection the script's
    /// write went on.
    moves: Moves,
}

/// How many times a connection moved to another server (a Sentinel failover,
/// or a lane replaced by a fresh connection), read here and written by the
/// connection that moves (`node/sentinel/`'s Follower; a standalone or cluster
/// connection never moves, its count stays 0). It is a fact of the connection,
/// as its `CLIENT ID` is of the server: replica confirmation only reads it, to
/// tell whether two calls went to the same server, since two servers may hand
/// out equal client ids.
#[derive(Debug, Clone, Default)]
pub(crate) struct Moves(Arc<AtomicU64>);

impl Moves {
    /// A view of `count`, which the moving connection raises before each move.
    pub(crate) fn of(count: Arc<AtomicU64>) -> Moves {
        Moves(count)
    }

    /// The count now.
    fn seen(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// How long a fast-path `WAIT` waits: replicas acknowledge within a round trip
/// when healthy (well under a millisecond on a LAN, a few across zones), so
/// one that takes longer is asked again with the whole timeout rather than
/// holding the connection. Redis may end it up to [`WAIT_SLACK`] late.
const FAST_WAIT: Duration = Duration::from_millis(50);

impl Confirmation {
    /// The same, with a fast path for a connection to one server: while the
    /// replicas answer, a lock change goes with `CLIENT ID` and a `WAIT` of
    /// [`FAST_WAIT`] behind it, as many at once as leave, each lasting its
    /// whole [`FAST_WAIT`] and slack, one whole `WAIT` and one more before the
    /// response timeout (5 with the defaults, against 1 whole `WAIT`: under
    /// load the changes do not queue for the one place). A short `WAIT` that
    /// runs out closes the fast path (until a whole `WAIT` confirms again) and
    /// its call asks again, `CLIENT ID` and a whole `WAIT`, within the
    /// ordinary budget: counted only if that `CLIENT ID`, and the connection's
    /// `moves` (counted when it moves to another server, whose client ids
    /// may equal the old one's), are the script's (a reconnect in between
    /// would have the second `WAIT` cover nothing of it). A short `WAIT` running
    /// out is not a shortfall: only a whole one doubts replicas. No fast path
    /// when the response timeout leaves no room for it.
    pub(crate) fn fast(mut self, moves: Moves, response_timeout: Duration) -> Confirmation {
        let room = response_timeout.saturating_sub(self.sync.timeout + WAIT_SLACK);
        let places = budget(FAST_WAIT, room);
        if room > 2 * (FAST_WAIT + WAIT_SLACK) {
            self.fast = Some(Fast {
                timeout: FAST_WAIT,
                places: self.places.iter().map(|_| Semaphore::new(places)).collect(),
                closed: AtomicBool::new(false),
                moves,
            });
        }
        self
    }

    /// Lets short `WAIT`s out again.
    pub(super) fn reopen_fast(&self) {
        if let Some(fast) = &self.fast {
            if fast.closed.swap(false, Ordering::AcqRel) {
                debug!("replicas answer again: lock changes ask with short WAITs");
            }
        }
    }

    /// A place for a short `WAIT` on `lane`, while the fast path is open
    /// (waiting for one until it closes or the connection turns short).
    pub(super) async fn fast_place(&self, lane: usize) -> Option<SemaphorePermit<'_>> {
        let fast = self.fast.as_ref()?;
        let places = &fast.places[lane];
        let open = || !fast.closed.load(Ordering::Acquire) && !self.is_short();
        if !open() {
            return None;
        }
        let mut turned = pin!(self.turned_short.notified());
        turned.as_mut().enable();
        if let Ok(place) = places.try_acquire() {
            return Some(place);
        }
        match select(pin!(places.acquire()), turned).await {
            Either::Left((Ok(place), _)) if open() => Some(place),
            _ => None,
        }
    }
}

impl Fast {
    /// Whether a short `WAIT` ran out and the fast path is closed.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Free places for short `WAIT`s on `lane`.
    pub(super) fn free(&self, lane: usize) -> usize {
        self.places[lane].available_permits()
    }
}

/// [`send`](fn@super::send) on the fast path ([`Confirmation::fast`]), in `place` of `lane`
/// (whose budget a second `WAIT` takes a place in): the script,
/// `CLIENT ID` and a short `WAIT` in one pipeline; if that `WAIT` runs out, the
/// fast path closes and the call asks again with a whole one.
pub(super) async fn send_fast<C: ConnectionLike>(
    conn: &mut C,
    confirmation: &Confirmation,
    cmd: &Cmd,
    place: SemaphorePermit<'_>,
    lane: usize,
) -> RedisResult<(Value, Confirmed)> {
    let Some(fast) = confirmation.fast.as_ref() else {
        return Err(crate::wire::unexpected("a fast WAIT without a fast path"));
    };
    let moved = fast.moves.seen();
    let sync = ReplicaSync {
        min: confirmation.required(),
        timeout: fast.timeout,
    };
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone()).cmd("CLIENT").arg("ID");
    let count = 2 + push_waits(&mut pipe, sync, confirmation.aof);
    let replies = conn.req_packed_commands(&pipe, 0, count).await;
    drop(place);
    let mut replies = replies?.into_iter();
    let (Some(reply), Some(id), Some(wait)) = (replies.next(), replies.next(), replies.next())
    else {
        return Err(crate::wire::unexpected(
            "a script, CLIENT ID and WAIT gave fewer than three replies",
        ));
    };
    if matches!(reply, Value::ServerError(_)) {
        // It changed nothing (NOSCRIPT, a script error): nothing to confirm.
        return Ok((reply, Confirmed::NotAsked));
    }
    let confirmed = confirmed(wait, replies.next(), sync);
    if matches!(confirmed, Confirmed::Enough) {
        confirmation.record(&confirmed);
        return Ok((reply, confirmed));
    }
    // Slower than a healthy replica: not a shortfall yet. Close the fast path
    // and ask again with the whole timeout, within the ordinary budget.
    if !fast.closed.swap(true, Ordering::AcqRel) {
        debug!(
            ?confirmed,
            "a short WAIT ran out: lock changes ask with whole WAITs until replicas answer again"
        );
    }
    let again = match confirmation.places[lane].try_acquire() {
        Ok(_place) => {
            let mut pipe = redis::pipe();
            let sync = ReplicaSync {
                min: confirmation.required(),
                ..confirmation.sync
            };
            pipe.cmd("CLIENT").arg("ID");
            let count = 1 + push_waits(&mut pipe, sync, confirmation.aof);
            let again = match conn.req_packed_commands(&pipe, 0, count).await {
                Ok(replies) => {
                    let mut replies = replies.into_iter();
                    let same = replies.next().as_ref().and_then(client_id) == client_id(&id)
                        && client_id(&id).is_some()
                        && fast.moves.seen() == moved;
                    match replies.next() {
                        // Another connection than the script's (a reconnect
                        // or a move in between): its WAIT covers nothing of it.
                        Some(_) if !same => Confirmed::Short {
                            acked: 0,
                            wanted: sync.min,
                        },
                        Some(wait) => self::confirmed(wait, replies.next(), sync),
                        None => Confirmed::Failed(crate::wire::unexpected("WAIT gave no reply")),
                    }
                }
                Err(e) => Confirmed::Failed(e),
            };
            confirmation.record(&again);
            again
        }
        // The budget is spent on whole WAITs: unconfirmed (a grant is undone
        // and retried, a release redone), as a call refused while short.
        Err(_) => {
            let (acked, wanted) = confirmation.shortfall();
            Confirmed::Short {
                acked,
                wanted: wanted.max(sync.min),
            }
        }
    };
    Ok((reply, again))
}

/// The client id in a `CLIENT ID` reply.
fn client_id(reply: &Value) -> Option<i64> {
    match reply {
        Value::Int(id) => Some(*id),
        _ => None,
    }
}
