//! The queue part of the waiting kit: callers waiting in one actor, in the
//! order they arrived, each with what it wants (`P`, the actor's own: permits
//! for a semaphore, nothing for a latch) and where its answer (`R`) goes.
//!
//! The queue knows the rules every waiting actor applies alike: a caller that
//! went away (its future dropped) is forgotten; one whose deadline passed is
//! answered, with the transient error its last attempt met if there was one
//! (a wait that ran out while Redis failed says so, not just "no"), else with
//! what the actor says a timeout is; a try-once caller (zero wait) is never
//! expired here, since its one attempt answers it. What the actor decides,
//! which waiter asks Redis and what an answer means, stays in the actor.
//! [`on_leaving`] tells the actor at once when a caller stops waiting.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use actix::fut::wrap_future;
use actix::prelude::*;
use tokio::sync::oneshot;

use super::records::Waited;
use super::Waiting;
use crate::error::LockError;

/// One waiting caller.
#[derive(Debug)]
pub(crate) struct Waiter<P, R> {
    /// Its id in the waiting records (`records.rs`), unique in the process.
    pub(crate) id: u64,
    /// When it arrived, for the `Timeout` it may get and its record.
    pub(crate) since: Instant,
    /// When it gives up (`None`: never).
    pub(crate) deadline: Option<Instant>,
    /// A single attempt (zero wait): answered by that attempt, never expired.
    pub(crate) once: bool,
    /// The transient Redis error its last attempt met, answered at its deadline.
    pub(crate) last_error: Option<LockError>,
    /// What it waits for, in the actor's own terms.
    pub(crate) want: P,
    /// Where its answer goes; closed when the caller went away.
    tx: oneshot::Sender<Result<R, LockError>>,
}

impl<P, R> Waiter<P, R> {
    /// A waiter the actor makes itself, to [`push`](Queue::push) or keep
    /// until it is queued: `id` and `since` its own (a lock's come with the
    /// manager's request), `deadline` as it counts it.
    pub(crate) fn new(
        id: u64,
        since: Instant,
        deadline: Option<Instant>,
        once: bool,
        want: P,
        tx: oneshot::Sender<Result<R, LockError>>,
    ) -> Self {
        Waiter {
            id,
            since,
            deadline,
            once,
            last_error: None,
            want,
            tx,
        }
    }

    /// Its caller went away: nobody reads an answer.
    pub(crate) fn is_gone(&self) -> bool {
        self.tx.is_closed()
    }

    /// Answers it. Gives the answer back if the caller went away meanwhile (a
    /// grant then goes back where it came from).
    pub(crate) fn answer(self, answer: Result<R, LockError>) -> Result<(), Result<R, LockError>> {
        self.tx.send(answer)
    }
}

/// "Not within the wait": no holder to name (synchronizers have none).
pub(crate) fn timeout(waited: Duration) -> LockError {
    LockError::Timeout {
        waited,
        holder: None,
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Queue<P, R> {
    /// Head first.
    waiters: VecDeque<Waiter<P, R>>,
}

impl<P, R> Default for Queue<P, R> {
    fn default() -> Self {
        Queue {
            waiters: VecDeque::new(),
        }
    }
}

impl<P, R> Queue<P, R> {
    /// As [`arrive_with`](Self::arrive_with), making the answer channel
    /// (the queue's own tests); answers its receiving end.
    #[cfg(test)]
    pub(crate) fn arrive(
        &mut self,
        want: P,
        wait: Option<Duration>,
        once: bool,
    ) -> oneshot::Receiver<Result<R, LockError>> {
        let (tx, rx) = oneshot::channel();
        self.arrive_with(want, wait, once, tx);
        rx
    }

    /// A caller arrives wanting `want` for up to `wait` (`None`: for ever),
    /// its answer to go on `tx`. `once`: it makes a single attempt, answered
    /// by that attempt (a zero wait on a semaphore); a latch, which makes no
    /// attempt of its own per waiter, expires a zero wait at the first sweep
    /// instead. The caller's dropping its end of `tx` is seen here
    /// ([`Waiter::is_gone`]), which actix's `ResponseFuture` would hide (it
    /// runs to its end whoever waits for it). Answers the new waiter.
    pub(crate) fn arrive_with(
        &mut self,
        want: P,
        wait: Option<Duration>,
        once: bool,
        tx: oneshot::Sender<Result<R, LockError>>,
    ) -> &mut Waiter<P, R> {
        let now = Instant::now();
        let deadline = wait.and_then(|w| now.checked_add(w));
        let w = Waiter::new(Waiting::next_id(), now, deadline, once, want, tx);
        self.push(w, false);
        let Some(last) = self.waiters.back_mut() else {
            unreachable!("a waiter was just queued")
        };
        last
    }

    /// Queues a waiter made with [`Waiter::new`]: last, or first when `front`
    /// (a lock's re-entry by its holder, which must not wait behind those who
    /// wait for that holder).
    pub(crate) fn push(&mut self, w: Waiter<P, R>, front: bool) {
        // Most actors have one waiter at a time; a VecDeque's first push would
        // make room for four, kept for as long as the actor lives.
        self.waiters.reserve_exact(1);
        if front {
            self.waiters.push_front(w);
        } else {
            self.waiters.push_back(w);
        }
    }

    /// How many wait.
    pub(crate) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Nobody waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// The waiter that arrived first.
    pub(crate) fn front(&self) -> Option<&Waiter<P, R>> {
        self.waiters.front()
    }

    /// Takes out the waiter that arrived first.
    pub(crate) fn pop_front(&mut self) -> Option<Waiter<P, R>> {
        self.waiters.pop_front()
    }

    /// Takes out the waiter with this id.
    pub(crate) fn remove(&mut self, id: u64) -> Option<Waiter<P, R>> {
        let at = self.waiters.iter().position(|w| w.id == id)?;
        let w = self.waiters.remove(at);
        self.shrink_if_empty();
        w
    }

    /// Takes out, unanswered and in order, every waiter `pick` accepts: the
    /// actor answers them itself (a lock first reads who holds it, to name the
    /// holder in a timeout).
    pub(crate) fn take_where(&mut self, pick: impl Fn(&Waiter<P, R>) -> bool) -> Vec<Waiter<P, R>> {
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(self.waiters.len());
        for w in self.waiters.drain(..) {
            if pick(&w) {
                out.push(w);
            } else {
                kept.push_back(w);
            }
        }
        self.waiters = kept;
        self.shrink_if_empty();
        out
    }

    /// An empty queue keeps no room: an actor that holds (a lock) may live
    /// long with nobody waiting.
    fn shrink_if_empty(&mut self) {
        if self.waiters.is_empty() {
            self.waiters = VecDeque::new();
        }
    }

    /// The waiter with this id.
    pub(crate) fn get(&self, id: u64) -> Option<&Waiter<P, R>> {
        self.waiters.iter().find(|w| w.id == id)
    }

    /// The waiter with this id.
    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut Waiter<P, R>> {
        self.waiters.iter_mut().find(|w| w.id == id)
    }

    /// The waiters, head first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Waiter<P, R>> {
        self.waiters.iter()
    }

    /// The waiters, head first, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Waiter<P, R>> {
        self.waiters.iter_mut()
    }

    /// How many wait for more than one attempt.
    pub(crate) fn lasting(&self) -> usize {
        self.waiters.iter().filter(|w| !w.once).count()
    }

    /// The deadlines of those that have one, for the actor's alarm.
    pub(crate) fn deadlines(&self) -> impl Iterator<Item = Instant> + '_ {
        self.waiters.iter().filter_map(|w| w.deadline)
    }

    /// Forgets the waiters whose caller went away and answers those whose
    /// deadline passed: with their last error if they have one, else with
    /// `expired(waited)`; `told` hears each error answered. Answers what the
    /// waiters taken out wanted (a fair waiter's place must be left).
    pub(crate) fn sweep(
        &mut self,
        expired: impl Fn(Duration) -> Result<R, LockError>,
        told: impl Fn(&P, &LockError),
    ) -> Vec<P> {
        let now = Instant::now();
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(self.waiters.len());
        for mut w in self.waiters.drain(..) {
            if w.is_gone() {
                out.push(w.want);
                continue;
            }
            if !w.once && w.deadline.is_some_and(|d| d <= now) {
                let answer = match w.last_error.take() {
                    Some(e) => Err(e),
                    None => expired(now - w.since),
                };
                if let Err(e) = &answer {
                    told(&w.want, e);
                }
                let _ = w.tx.send(answer);
                out.push(w.want);
                continue;
            }
            kept.push_back(w);
        }
        self.waiters = kept;
        out
    }

    /// Answers every waiter with `answer` and empties the queue (the latch
    /// opens; the manager shuts down). Answers what they wanted.
    pub(crate) fn answer_all(&mut self, answer: impl Fn() -> Result<R, LockError>) -> Vec<P> {
        let mut out = Vec::with_capacity(self.waiters.len());
        for w in self.waiters.drain(..) {
            let _ = w.tx.send(answer());
            out.push(w.want);
        }
        out
    }

    /// The waits to record (`records.rs`): those that last and whose caller is
    /// still there, each wanting `wants(&want)` permits.
    pub(crate) fn waited(&self, wants: impl Fn(&P) -> u64) -> Vec<Waited> {
        let waits = self.waiters.iter().filter(|w| !w.once && !w.is_gone());
        waits
            .map(|w| Waited {
                id: w.id,
                since: w.since,
                wants: wants(&w.want),
                owner_field: None,
                candidate: false,
            })
            .collect()
    }
}

/// Runs `then` on the actor as soon as `gone` resolves: the caller's end of it
/// is dropped when the caller stops waiting (its future dropped, a `select!`
/// that took another branch) or has its answer. A queued waiter whose caller
/// left is then swept at once (and leaves a Redis queue at once), rather than at
/// the next timer.
pub(crate) fn on_leaving<A>(
    gone: oneshot::Receiver<()>,
    ctx: &mut Context<A>,
    then: fn(&mut A, &mut Context<A>),
) where
    A: Actor<Context = Context<A>>,
{
    let left = async move {
        let _ = gone.await;
    };
    ctx.spawn(wrap_future::<_, A>(left).map(move |_, act, ctx| then(act, ctx)));
}

#[cfg(test)]
mod tests {
    use super::*;

    type Q = Queue<u32, ()>;

    /// Waiters keep their arrival order; a try-once waiter is never expired by
    /// a sweep (its one attempt answers it) while one whose deadline passed is
    /// answered with its last error when it has one.
    #[tokio::test]
    async fn a_sweep_answers_the_expired_and_keeps_the_order() {
        let mut q = Q::default();
        let a = q.arrive(1, Some(Duration::ZERO), true);
        let b = q.arrive(2, None, false);
        let c = q.arrive(3, Some(Duration::from_millis(1)), false);
        q.iter_mut().last().expect("queued").last_error = Some(LockError::Stopped);
        let d = q.arrive(4, Some(Duration::from_millis(1)), false);
        drop(b);
        std::thread::sleep(Duration::from_millis(5));
        let told = std::cell::Cell::new(0);
        let out = q.sweep(|w| Err(timeout(w)), |_, _| told.set(told.get() + 1));
        assert_eq!(told.get(), 2, "each error answered is told");
        assert_eq!(out, vec![2, 3, 4]);
        assert_eq!(q.iter().map(|w| w.want).collect::<Vec<_>>(), vec![1]);
        assert!(matches!(c.await, Ok(Err(LockError::Stopped))));
        assert!(matches!(d.await, Ok(Err(LockError::Timeout { .. }))));
        assert_eq!(q.lasting(), 0);
        drop(a);
    }

    /// A waiter pushed at the front (a lock's re-entry) goes before those
    /// already waiting; one taken out is handed back unanswered.
    #[tokio::test]
    async fn the_front_goes_first_and_a_taken_waiter_comes_back_unanswered() {
        let mut q = Q::default();
        let now = Instant::now();
        let (tx, mut late) = oneshot::channel();
        q.push(Waiter::new(10, now, Some(now), false, 1, tx), false);
        let (tx, _once) = oneshot::channel();
        q.push(Waiter::new(11, now, Some(now), true, 2, tx), false);
        let (tx, _first) = oneshot::channel();
        q.push(Waiter::new(12, now, None, false, 3, tx), true);
        assert_eq!(q.iter().map(|w| w.id).collect::<Vec<_>>(), vec![12, 10, 11]);
        let expired = q.take_where(|w| w.id == 10);
        assert_eq!(expired.iter().map(|w| w.id).collect::<Vec<_>>(), vec![10]);
        assert!(late.try_recv().is_err(), "not answered by the queue");
        assert_eq!(q.len(), 2);
        drop(expired);
        assert!(q.remove(12).is_some() && q.remove(11).is_some() && q.is_empty());
    }

    /// Only the waits that last and whose caller is there are recorded.
    #[test]
    fn only_lasting_waits_are_recorded() {
        let mut q = Q::default();
        let _once = q.arrive(1, Some(Duration::ZERO), true);
        let _kept = q.arrive(5, None, false);
        let gone = q.arrive(7, None, false);
        drop(gone);
        let waited = q.waited(|p| u64::from(*p));
        assert_eq!(waited.len(), 1);
        assert_eq!(waited[0].wants, 5);
    }
}
