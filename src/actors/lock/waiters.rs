//! What a lock's waiter is: the manager's [`Request`], and the lock's marks
//! of it ([`Want`]), kept in the waiting engine's queue (`waits.rs`).
//!
//! A waiter is the kit's: a reply channel, a deadline, and what the lock wants
//! of it. The engine decides who asks and answers refusals and timeouts; this
//! file makes a request into a waiter, answers the ones the lock refuses
//! before they queue, and answers a wait that ran out naming who kept it out
//! ([`WhoHolds`]): the holder is read once per batch of expired waiters,
//! bounded, and only then, so a wait that succeeds costs nothing more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{warn, Span};

use super::holding::{keeps_out, Holdings};
use super::LockActor;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::Mark;
use crate::actors::waiting::queue::{self, Queue};
use crate::actors::waiting::{Waited, Waiting, Waits};
use crate::error::{LockError, HOLDER_READ_LIMIT};
use crate::guard::LockGuard;
use crate::keys::Owner;
use crate::kind::AcquireKind;
use crate::node::Conn;
use crate::view::Holder;
use crate::wire::waiting::WaitKind;

/// One pending acquisition: a waiter of the engine's queue, holding the
/// request and the lock's marks of it ([`Want`]); the engine's
/// `Waiter<LockWaits>`, named here without the policy so that the kinds,
/// which the policy reads, can name it.
pub(crate) type Waiter = queue::Waiter<Mark<Want>, LockGuard>;

/// The lock's waiters, head first (the engine's `Waiters<LockWaits>`).
pub(crate) type WaiterQueue = Queue<Mark<Want>, LockGuard>;

/// What a lock's waiter wants, and the lock's marks of it (the engine's own
/// marks are around it: [`Mark`]).
#[derive(Debug, Clone)]
pub(crate) struct Want {
    /// What was asked.
    pub(crate) req: Request,
    /// When its latest attempt was sent (a retry may skip checks the first
    /// attempt made).
    pub(crate) tried_at: Option<Instant>,
    /// It goes before those already waiting: a re-entry by a holder here,
    /// which must not wait behind those who wait for that holder.
    pub(crate) first: bool,
    /// A local holding of another owner keeps it out (asking Redis is
    /// pointless: the local release lets it ask). Kept current by the actor
    /// before every event.
    pub(crate) blocked: bool,
    /// It was refused once and listens for a release from then on (an
    /// acquisition that is granted at once never waits for a subscription).
    pub(crate) listens: bool,
    /// Its attempt out skips the re-entry check: its owner was made for it
    /// and an earlier attempt saw the key a lock hash.
    pub(crate) new_owner_now: bool,
    /// Fair lock: its attempt out takes a place in the Redis queue if the lock
    /// is busy.
    pub(crate) placing: bool,
    /// Fair lock: an attempt that may have queued it in Redis was sent, so it
    /// may have a place there.
    pub(crate) queued: bool,
    /// Fair lock: when its last busy answer said the holder's lease ends (a
    /// lease that runs out publishes nothing, so it asks again then).
    pub(crate) retry_at: Option<Instant>,
    /// Fair lock: it should try now (new, told it is at the head, or a timer or
    /// resync asked); the other kinds let the head try whenever the queue looks.
    pub(crate) try_now: bool,
    /// Exclusive lock with direct handoff: once it listens, its attempts take
    /// (or keep) a place in the handoff queue (`kinds/exclusive/handoff.rs`).
    pub(crate) hands_off: bool,
    /// Exclusive lock: when the latest call that found (or made) its place in
    /// the handoff queue was sent. A release that hands it the lock ran after
    /// that, so its short lease ends no sooner than this plus the handoff lease.
    pub(crate) placed_at: Option<Instant>,
    /// Exclusive lock: a release handed it the lock while its attempt was out
    /// (or the handoff could not be granted from the message alone): its next
    /// attempt, sent at once, finds the hold.
    pub(crate) handed: bool,
    /// Exclusive lock: the fencing token of a handoff whose message came while
    /// its attempt was out (a busy answer to that attempt ran before the
    /// release, so the message's grant stands: `actors/lock/handoff.rs`).
    pub(crate) handed_token: Option<u64>,
    /// It came with no deadline while another owner of this process held the
    /// lock: it may be waiting for itself, and is looked at once it has waited
    /// [`Config::stall_warning`](crate::Config::stall_warning) (`timers.rs`).
    pub(crate) stall_watch: bool,
}

impl Want {
    /// This waiter has waited [`Config::stall_warning`](crate::Config::stall_warning)
    /// without a deadline: if another owner of this process (one of
    /// `holdings`) still keeps it out, warns that it may be waiting for itself.
    pub(super) fn warn_if_stalled(&self, holdings: &Holdings, name: &str) {
        let (owner, kind) = (self.req.owner, self.req.kind);
        let mut holdings = holdings.iter();
        if let Some(h) = holdings.find(|h| keeps_out((h.owner, h.kind), owner, kind)) {
            self.req.span.in_scope(|| {
                warn!(
                    lock = %name,
                    waited = ?self.req.since.elapsed(),
                    holder = %h.owner,
                    waiter = %owner,
                    "waiting, with no deadline, for a lock that another owner of this same \
                     process holds; if the same task holds it, it waits for itself forever: \
                     pass the holder's Owner to re-enter (Acquire::owner), or give the wait a \
                     deadline (Acquire::wait)"
                )
            });
        }
    }
}

/// Where the outcome of an acquisition goes.
pub(crate) type Reply = oneshot::Sender<Result<LockGuard, LockError>>;

/// What the manager hands a lock actor for one acquisition (in
/// [`Enqueue`](super::Enqueue), beside its [`Reply`]): the request alone. The
/// waiter's bookkeeping is the lock actor's (`waits::join`).
#[derive(Debug, Clone)]
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
    /// The task it was made in, whose unit of work its guard joins
    /// (`src/unit.rs`); `None` outside a task or when detached.
    pub(crate) task: Option<tokio::task::Id>,
}

/// The want of a request, not tried yet; `first`: it goes before those
/// waiting (a re-entry); `blocked`: a local holding keeps it out.
pub(crate) fn want(req: Request, first: bool, blocked: bool) -> Want {
    Want {
        req,
        tried_at: None,
        first,
        blocked,
        listens: false,
        new_owner_now: false,
        placing: false,
        queued: false,
        retry_at: None,
        try_now: true,
        hands_off: false,
        placed_at: None,
        handed: false,
        handed_token: None,
        stall_watch: false,
    }
}

/// Answers a request the lock refuses before it queues (a closed channel
/// means nobody listens any more, which is fine: nothing was done for it).
pub(crate) fn refuse(kind: AcquireKind, reply: Reply, err: LockError) {
    crate::stats::record::failed(kind, &err);
    let _ = reply.send(Err(err));
}

/// Answers `w` with an error.
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
    pub(crate) fn answer(self, timed_out: Vec<(Waiter, Duration)>) {
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

/// The lock's waits that last are recorded for operators (`actors/waiting/records.rs`),
/// each with the owner field it will hold the lock under.
impl Waits for LockActor {
    fn waiting(&mut self) -> &mut Waiting {
        let name = &self.name;
        self.wait
            .records
            .get_or_insert_with(|| Box::new(Waiting::new(name.clone(), WaitKind::Lock)))
    }

    /// The waiters that wait (not a single attempt), with the owner field each
    /// will hold the lock under.
    fn waiters_now(&self) -> Vec<Waited> {
        let waits = self.wait.side.waiters().filter(|w| !w.once);
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
        self.wait.records = None;
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
        task: None,
    }
}

/// A test's waiter for `req`, answered on `reply`.
#[cfg(test)]
pub(crate) fn test_waiter(req: Request, reply: Reply) -> Waiter {
    let once = req.wait.is_some_and(|w| w.is_zero());
    let (id, since) = (req.id, req.since);
    let mark = Mark::of(want(req, false, false));
    queue::Waiter::new(id, since, None, once, mark, reply)
}
