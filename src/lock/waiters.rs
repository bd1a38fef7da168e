//! The local waiter queue of one lock: pending acquisitions in arrival order.
//!
//! A waiter is a reply channel plus what its attempt needs (owner, lease) and when it
//! gives up. The queue itself never talks to Redis; the lock actor decides when the
//! head may try. Waiters whose caller went away are noticed here (their reply channel
//! is closed) and dropped without an answer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::Span;

use crate::error::LockError;
use crate::guard::LockGuard;
use crate::keys::Owner;

/// One pending acquisition.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// Unique within the manager; used to cancel it and to match attempt results.
    pub(crate) id: u64,
    /// The owner that will hold the lock.
    pub(crate) owner: Owner,
    /// `<client id>:<owner>`, computed once.
    pub(crate) field: Arc<str>,
    /// The explicit lease, or `None` for watchdog mode.
    pub(crate) lease: Option<Duration>,
    /// When to give up; `None` waits until acquired.
    pub(crate) deadline: Option<Instant>,
    /// A zero wait: answered after its first attempt, whatever it found.
    pub(crate) try_once: bool,
    /// When the request arrived, for the reported wait time.
    pub(crate) since: Instant,
    /// Who else to tell if the lock is lost while held.
    pub(crate) on_lost: Option<actix::Recipient<crate::guard::LockLost>>,
    /// Where the outcome goes.
    pub(crate) reply: oneshot::Sender<Result<LockGuard, LockError>>,
    /// The acquisition's tracing span.
    pub(crate) span: Span,
}

impl Waiter {
    /// Answers with an error (a closed channel means nobody listens any more, which
    /// is fine: there is nothing to undo for a failure).
    pub(crate) fn fail(self, err: LockError) {
        let _ = self.reply.send(Err(err));
    }

    /// Answers "timed out" with the time waited.
    pub(crate) fn time_out(self) {
        let waited = self.since.elapsed();
        self.span
            .in_scope(|| tracing::debug!(?waited, "gave up waiting"));
        self.fail(LockError::Timeout { waited });
    }
}

/// The queue; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct WaiterQueue {
    /// Head first.
    items: VecDeque<Waiter>,
}

impl WaiterQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Appends a waiter; a re-entry by the current holder goes first instead, since
    /// making it wait behind others who wait for that holder would deadlock.
    pub(crate) fn push(&mut self, waiter: Waiter, reentrant: bool) {
        if reentrant {
            self.items.push_front(waiter);
        } else {
            self.items.push_back(waiter);
        }
    }

    pub(crate) fn front(&self) -> Option<&Waiter> {
        self.items.front()
    }

    /// The waiter with this id, if it is still queued.
    pub(crate) fn find(&self, id: u64) -> Option<&Waiter> {
        self.items.iter().find(|w| w.id == id)
    }

    /// Removes and returns the waiter with this id, if it is still queued.
    pub(crate) fn take(&mut self, id: u64) -> Option<Waiter> {
        let at = self.items.iter().position(|w| w.id == id)?;
        self.items.remove(at)
    }

    /// Drops waiters whose caller stopped listening. Returns how many.
    pub(crate) fn remove_gone(&mut self) -> usize {
        let before = self.items.len();
        self.items.retain(|w| !w.reply.is_closed());
        before - self.items.len()
    }

    /// Answers every waiter whose deadline is at or before `now`: with `cause`, the
    /// Redis error the last attempt met (it says why), or else "timed out".
    /// Returns how many.
    pub(crate) fn expire(&mut self, now: Instant, cause: Option<&redis::RedisError>) -> usize {
        self.answer_where(|w| w.deadline.is_some_and(|d| d <= now), cause)
    }

    /// Answers every try-once waiter, whose one attempt was just made: with `cause`
    /// if it failed with a Redis error, else "timed out" (the lock was held).
    pub(crate) fn fail_try_once(&mut self, cause: Option<&redis::RedisError>) -> usize {
        self.answer_where(|w| w.try_once, cause)
    }

    fn answer_where(
        &mut self,
        pick: impl Fn(&Waiter) -> bool,
        cause: Option<&redis::RedisError>,
    ) -> usize {
        let mut answered = 0;
        let mut kept = VecDeque::with_capacity(self.items.len());
        for w in self.items.drain(..) {
            if !pick(&w) {
                kept.push_back(w);
                continue;
            }
            match cause {
                Some(e) => w.fail(LockError::Redis(e.clone())),
                None => w.time_out(),
            }
            answered += 1;
        }
        self.items = kept;
        answered
    }

    /// Fails every waiter with a copy of one error.
    pub(crate) fn fail_all(&mut self, err: impl Fn() -> LockError) {
        for w in self.items.drain(..) {
            w.fail(err());
        }
    }

    /// The earliest deadline of any waiter.
    pub(crate) fn nearest_deadline(&self) -> Option<Instant> {
        self.items.iter().filter_map(|w| w.deadline).min()
    }
}
