//! The local waiter queue of one lock: pending acquisitions in arrival order,
//! kept in the waiting kit's `Queue` (`actors/waiting/queue.rs`).
//!
//! A waiter is the kit's: a reply channel, a deadline, and what the lock wants of
//! it ([`Want`]: the request its attempt needs, kind, owner, lease, and the lock's
//! marks). The queue itself never talks to Redis; the lock actor decides when the
//! head may try. Waiters whose caller went away are noticed here (their reply
//! channel is closed) and dropped without an answer.
//!
//! A fair-lock waiter also has a place in the Redis queue once its first attempt is
//! sent (`queued`): whoever removes it from this queue gets its owner field back in
//! [`Gone`], so that the lock actor can take it out of the Redis queue too.
//!
//! A wait that runs out names who kept it out ([`WhoHolds`]): the holder is read
//! once per sweep of expired waiters, bounded, and only then, so a wait that
//! succeeds costs nothing more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::Span;

use super::LockActor;
use crate::actors::shared::Shared;
use crate::actors::waiting::queue::{self, Queue};
use crate::actors::waiting::{Waited, Waiting, Waits};
use crate::error::{LockError, HOLDER_READ_LIMIT};
use crate::guard::LockGuard;
use crate::keys::Owner;
use crate::kind::AcquireKind;
use crate::node::Conn;
use crate::view::Holder;
use crate::wire::waiting::WaitKind;

/// How long an attempt may go unanswered before a waiter whose deadline passes is
/// told that Redis did not answer rather than that the lock is held.
const SILENCE: Duration = Duration::from_millis(100);

/// One pending acquisition: a waiter of the kit's queue, holding the request
/// and the lock's marks of it ([`Want`]).
pub(crate) type Waiter = queue::Waiter<Want, LockGuard>;

/// What a lock's waiter wants, and the lock actor's marks of it.
#[derive(Debug)]
pub(crate) struct Want {
    /// What was asked.
    pub(crate) req: Request,
    /// When its latest attempt was sent (while that attempt is in flight, how
    /// long Redis has been silent).
    pub(crate) tried_at: Option<Instant>,
    /// Fair lock: an attempt that may have queued it in Redis was sent, so it may
    /// have a place there.
    pub(crate) queued: bool,
    /// Fair lock: it should try now (new, told it is at the head, or a timer or
    /// resync asked); the other kinds let the head try whenever the actor pumps.
    pub(crate) try_now: bool,
}

/// Where the outcome of an acquisition goes.
pub(crate) type Reply = oneshot::Sender<Result<LockGuard, LockError>>;

/// What the manager hands a lock actor for one acquisition (in
/// [`Enqueue`](super::Enqueue), beside its [`Reply`]): the request alone. The
/// waiter's bookkeeping is the lock actor's, made in [`waiter`].
#[derive(Debug)]
pub(crate) struct Request {
    /// Unique within the manager; what cancels it and matches attempt results.
    pub(crate) id: u64,
    /// What it takes (a kind the lock actor serves).
    pub(crate) kind: AcquireKind,
    /// The owner that will hold the lock.
    pub(crate) owner: Owner,
    /// The owner was made for this acquisition (none was given): it holds
    /// nothing, and every attempt made for it is resolved before the next is
    /// sent, so it never holds the lock while it waits.
    pub(crate) new_owner: bool,
    /// `false` for a non-reentrant acquisition: refused if its owner holds the
    /// lock already.
    pub(crate) reentrant: bool,
    /// The hash field it will hold: `<client id>:<owner>`, with `:write` after it
    /// for a writer; computed once.
    pub(crate) field: Arc<str>,
    /// Owners on whose behalf it also waits (a nested command's outer holder):
    /// a deadlock check counts the wait as theirs too.
    pub(crate) behalf: Vec<String>,
    /// The explicit lease, or `None` for watchdog mode.
    pub(crate) lease: Option<Duration>,
    /// How long to wait: `None` until acquired, zero for one attempt.
    pub(crate) wait: Option<Duration>,
    /// When the request arrived, for the reported wait time.
    pub(crate) since: Instant,
    /// Who else to tell if the lock is lost while held.
    pub(crate) on_lost: Option<actix::Recipient<crate::guard::LockLost>>,
    /// The acquisition's tracing span.
    pub(crate) span: Span,
    /// An election candidate's campaign: recorded as a candidate, not as a
    /// wait that grows for ever.
    pub(crate) candidate: bool,
}

/// The waiter of a request, not tried yet, answered on `reply`.
pub(crate) fn waiter(req: Request, reply: Reply) -> Waiter {
    // A zero wait is answered by its one attempt, not by a timer (which would
    // fire before the attempt returns). A wait too long to represent is the
    // same as no deadline.
    let deadline = req
        .wait
        .filter(|w| !w.is_zero())
        .and_then(|w| req.since.checked_add(w));
    let once = req.wait.is_some_and(|w| w.is_zero());
    let want = Want {
        tried_at: None,
        queued: false,
        try_now: true,
        req,
    };
    queue::Waiter::new(want.req.id, want.req.since, deadline, once, want, reply)
}

/// Answers `w` with an error (a closed channel means nobody listens any more,
/// which is fine: there is nothing to undo for a failure).
pub(crate) fn fail(w: Waiter, err: LockError) {
    crate::stats::record::failed(w.want.req.kind, &err);
    let _ = w.answer(Err(err));
}

/// Answers "timed out" with the time waited and who held the lock then.
fn time_out(w: Waiter, waited: Duration, holder: Option<Box<Holder>>) {
    w.want
        .req
        .span
        .in_scope(|| tracing::debug!(?waited, "gave up waiting"));
    fail(w, LockError::Timeout { waited, holder });
}

/// How waiters whose wait ran out learn who held the lock: one look at it
/// ([`crate::wire::inspect_lock`]) on the manager's connection, at most
/// [`HOLDER_READ_LIMIT`] long. Their wait is measured when it ran out, not when
/// the answer leaves.
#[derive(Debug)]
pub(crate) struct WhoHolds {
    /// The manager's command connection.
    pub(crate) conn: Conn,
    /// The lock name.
    pub(crate) name: Arc<str>,
    /// `<client id>:` of this manager, to mark its own holders.
    pub(crate) ours: String,
}

impl WhoHolds {
    /// Answers `timed_out` (waiters and the time each waited), after one bounded
    /// read of the holder (a writer first: it is what a read-write lock's waiter
    /// waits for). On the caller's actix arbiter; an unanswered read names none.
    fn answer(self, timed_out: Vec<(Waiter, Duration)>) {
        actix::spawn(async move {
            let WhoHolds {
                mut conn,
                name,
                ours,
            } = self;
            let read = crate::wire::inspect_lock(&mut conn, &name, Some(&ours));
            let holder = match tokio::time::timeout(HOLDER_READ_LIMIT, read).await {
                Ok(Ok(info)) => {
                    let mut holders = info.holders;
                    let at = holders.iter().position(Holder::is_writer).unwrap_or(0);
                    (at < holders.len()).then(|| Box::new(holders.swap_remove(at)))
                }
                Ok(Err(e)) => {
                    tracing::debug!(lock = %name, error = %e, "could not read who holds the lock for a timeout");
                    None
                }
                Err(_) => None,
            };
            for (w, waited) in timed_out {
                time_out(w, waited, holder.clone());
            }
        });
    }
}

/// Owner fields of removed waiters that may have a place in a fair lock's queue.
#[derive(Debug, Default)]
#[must_use = "waiters with a place in the fair queue must leave it"]
pub(crate) struct Gone {
    /// How many waiters were removed.
    pub(crate) count: usize,
    /// The owner fields of those that may have a place in the Redis queue.
    pub(crate) queued: Vec<Arc<str>>,
}

impl Gone {
    /// The one waiter `w`, taken out of the queue by its caller.
    pub(crate) fn of(w: &Waiter) -> Gone {
        let mut gone = Gone::default();
        gone.add(w);
        gone
    }

    fn add(&mut self, w: &Waiter) {
        self.count += 1;
        if w.want.queued {
            self.queued.push(w.want.req.field.clone());
        }
    }

    fn of_all(ws: &[Waiter]) -> Gone {
        let mut gone = Gone::default();
        ws.iter().for_each(|w| gone.add(w));
        gone
    }
}

/// The lock's waiters: the kit's [`Queue`], with the lock's rules for
/// answering those it takes out (a timeout names the holder; a failure is
/// counted in the statistics; a fair waiter's place is handed back in [`Gone`]).
#[derive(Debug, Default)]
pub(crate) struct WaiterQueue {
    /// Head first; a waiter's id is its request's.
    items: Queue<Want, LockGuard>,
}

impl WaiterQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Appends a waiter; a re-entry by the current holder goes first instead, since
    /// making it wait behind others who wait for that holder would deadlock.
    pub(crate) fn push(&mut self, waiter: Waiter, reentrant: bool) {
        self.items.push(waiter, reentrant);
    }

    pub(crate) fn front(&self) -> Option<&Waiter> {
        self.items.front()
    }

    /// The waiter with this id, if it is still queued.
    pub(crate) fn find(&self, id: u64) -> Option<&Waiter> {
        self.items.get(id)
    }

    /// Removes and returns the waiter with this id, if it is still queued.
    pub(crate) fn take(&mut self, id: u64) -> Option<Waiter> {
        self.items.remove(id)
    }

    /// The first waiter that `pick` accepts.
    pub(crate) fn first(&self, pick: impl Fn(&Waiter) -> bool) -> Option<&Waiter> {
        self.items.iter().find(|w| pick(w))
    }

    /// Every waiter, head first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.items.iter()
    }

    /// Every waiter, head first, to change their marks.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Waiter> {
        self.items.iter_mut()
    }

    /// The waiter with this id, if it is still queued, to change its marks.
    pub(crate) fn find_mut(&mut self, id: u64) -> Option<&mut Waiter> {
        self.items.get_mut(id)
    }

    /// Drops waiters whose caller stopped listening, but `keep` (the one whose
    /// attempt is in flight: its `Cancel` deals with it).
    pub(crate) fn remove_gone(&mut self, keep: Option<u64>) -> Gone {
        let gone = self.items.take_where(|w| w.is_gone() && Some(w.id) != keep);
        Gone::of_all(&gone)
    }

    /// Answers every waiter whose deadline is at or before `now`: with `cause`, the
    /// Redis error the last attempt met (it says why), or else "timed out", naming
    /// the holder `who` reads.
    pub(crate) fn expire(
        &mut self,
        now: Instant,
        cause: Option<&redis::RedisError>,
        who: impl FnOnce() -> WhoHolds,
    ) -> Gone {
        let expired = self.items.take_expired(now);
        answer(expired, cause, Some(who))
    }

    /// Answers the try-once waiters that `pick` accepts, whose one attempt was just
    /// made: with `cause` if it failed with a Redis error, else "timed out" (the lock
    /// was held; no holder is read, so that a try stays one round trip).
    pub(crate) fn fail_try_once(
        &mut self,
        pick: impl Fn(&Waiter) -> bool,
        cause: Option<&redis::RedisError>,
    ) -> Gone {
        let tried = self.items.take_where(|w| w.once && pick(w));
        answer(tried, cause, None::<fn() -> WhoHolds>)
    }

    /// Fails every waiter with a copy of one error.
    pub(crate) fn fail_all(&mut self, err: impl Fn() -> LockError) -> Gone {
        let all = self.items.take_where(|_| true);
        let gone = Gone::of_all(&all);
        all.into_iter().for_each(|w| fail(w, err()));
        gone
    }

    /// The error a waiter gets at its deadline when the attempt in flight (for
    /// waiter `asking`) has had no answer for a while (Redis frozen, a network
    /// partition): without it the waiter would be told the lock is held
    /// elsewhere, which nobody said. An attempt normally answers in well under
    /// a millisecond; past [`SILENCE`] it is not a busy lock that stands in the
    /// way. The send time is kept in the waiter, not the actor: a held lock has
    /// no waiters, so it costs nothing per held lock.
    pub(crate) fn silence(&self, asking: Option<u64>, now: Instant) -> Option<redis::RedisError> {
        let since = self.find(asking?)?.want.tried_at?;
        let quiet = now.saturating_duration_since(since);
        (quiet >= SILENCE).then(|| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "Redis did not answer the acquisition attempt for {} ms before the wait ran out (is it reachable?)",
                    quiet.as_millis()
                ),
            ))
        })
    }

    /// The earliest deadline of any waiter.
    pub(crate) fn nearest_deadline(&self) -> Option<Instant> {
        self.items.iter().filter_map(|w| w.deadline).min()
    }
}

/// Answers the waiters taken out: with `cause` when their attempt met a Redis
/// error, else "timed out", naming the holder `who` reads if given.
fn answer(
    taken: Vec<Waiter>,
    cause: Option<&redis::RedisError>,
    who: Option<impl FnOnce() -> WhoHolds>,
) -> Gone {
    let gone = Gone::of_all(&taken);
    let mut timed_out = Vec::new();
    for w in taken {
        match cause {
            Some(e) => fail(w, LockError::from(e.clone())),
            None => {
                let waited = w.want.req.since.elapsed();
                timed_out.push((w, waited));
            }
        }
    }
    match who {
        Some(who) if !timed_out.is_empty() => who().answer(timed_out),
        _ => timed_out
            .into_iter()
            .for_each(|(w, waited)| time_out(w, waited, None)),
    }
    gone
}

/// The lock's waits that last are recorded for operators (`actors/waiting/records.rs`),
/// each with the owner field it will hold the lock under.
impl Waits for LockActor {
    fn waiting(&mut self) -> &mut Waiting {
        let name = &self.name;
        self.wait
            .waiting
            .get_or_insert_with(|| Box::new(Waiting::new(name.clone(), WaitKind::Lock)))
    }

    /// The waiters that wait (not a single attempt), with the owner field each
    /// will hold the lock under.
    fn waiters_now(&self) -> Vec<Waited> {
        let waits = self.wait.queue.iter().filter(|w| !w.once);
        waits
            .filter(|w| !w.is_gone())
            .map(|w| Waited {
                id: w.id,
                since: w.since,
                wants: 1,
                owner_field: Some(w.want.req.field.clone()),
                candidate: w.want.req.candidate,
            })
            .collect()
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn idle(&mut self) {
        self.wait.waiting = None;
    }
}

/// A test's request: an exclusive, reentrant wait for ever by a fresh owner
/// under `field`, arrived now; a test changes what it needs.
#[cfg(test)]
pub(crate) fn test_request(id: u64, field: &str) -> Request {
    Request {
        id,
        kind: AcquireKind::Exclusive,
        owner: crate::keys::Owner::default(),
        new_owner: false,
        reentrant: true,
        field: Arc::from(field),
        behalf: Vec::new(),
        lease: None,
        wait: None,
        since: Instant::now(),
        on_lost: None,
        span: Span::none(),
        candidate: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiter `id` that waits for ever, answered on a channel nobody reads.
    fn waiting(id: u64) -> Waiter {
        let (reply, _) = oneshot::channel();
        let req = test_request(id, "client:1");
        waiter(req, reply)
    }

    /// A wait that runs out while its attempt has gone unanswered past
    /// `SILENCE` is told Redis did not answer (not that the lock is held); an
    /// attempt just sent, or none in flight, says nothing.
    #[test]
    fn an_unanswered_attempt_is_named_at_the_deadline() {
        let mut q = WaiterQueue::default();
        q.push(waiting(1), false);
        let now = Instant::now();
        assert!(q.silence(Some(1), now).is_none(), "not sent yet");
        q.find_mut(1).expect("queued").want.tried_at = Some(now);
        assert!(q.silence(Some(1), now).is_none(), "just sent");
        let later = now + SILENCE;
        let e = q.silence(Some(1), later).expect("silent for SILENCE");
        assert!(e.to_string().contains("did not answer"), "{e}");
        assert!(q.silence(None, later).is_none(), "nothing in flight");
    }
}
