//! The answer channel of the messages that give something back: a guard's
//! release, and permits returned to a semaphore; and [`within`], the bound a
//! guard's release answers within while the give-back goes on behind it.
//!
//! actix drops, unhandled, a message sent with `send` whose sender stopped
//! waiting for the answer. For a release that leaves a lock behind: a caller
//! that gave up on `guard.release()` after its first poll (a timeout around
//! it, a `select!` that took another branch) had already marked the guard
//! released, so the guard's drop sent nothing either, and the watchdog went on
//! renewing a hold that nobody had any more (a `--redlock` process kept a
//! server's lock for its whole life this way). These messages are therefore
//! sent with `do_send`, which actix always delivers, and answer through the
//! [`Reply`] they carry.
//!
//! [`on_asker_gone`] is the other direction: an actor that keeps a caller's
//! answer channel learns when the caller stops waiting, with no task between
//! them.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use actix::{Message, Recipient};
use futures::task::ArcWake;
use futures::FutureExt;
use tokio::sync::oneshot;

use crate::error::LockError;

/// Where the answer to a give-back message goes, if anyone waits for it.
pub(crate) struct Reply<T>(Option<oneshot::Sender<T>>);

impl<T> Reply<T> {
    /// Nobody waits: the message comes from a drop.
    pub(crate) fn nobody() -> Reply<T> {
        Reply(None)
    }

    /// Answers (nothing happens if the asker is gone).
    pub(crate) fn send(self, answer: T) {
        if let Some(tx) = self.0 {
            let _ = tx.send(answer);
        }
    }
}

impl<T> std::fmt::Debug for Reply<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Reply"
        } else {
            "Reply(nobody)"
        })
    }
}

/// Calls `gone` once the receiving end of `reply` is dropped unanswered (its
/// caller stopped waiting: dropped the `send` future, or its actor stopped).
/// `false`, and `gone` is never called, when the caller is gone already.
///
/// No task watches the channel: tokio's oneshot wakes the sender's waker when
/// the receiver is dropped, and the waker registered here is `gone` itself.
/// An answer sent first disarms it (the channel then never wakes its sender).
/// The one poll is made outside tokio's cooperative budget, which, spent,
/// would answer "not yet" without registering the waker.
pub(crate) fn on_asker_gone<T>(
    reply: &mut oneshot::Sender<T>,
    gone: impl Fn() + Send + Sync + 'static,
) -> bool {
    let waker = futures::task::waker(Arc::new(Gone(gone)));
    let mut cx = std::task::Context::from_waker(&waker);
    let closed = std::future::poll_fn(|_| Poll::Ready(reply.poll_closed(&mut cx).is_ready()));
    !tokio::task::unconstrained(closed)
        .now_or_never()
        .unwrap_or(false)
}

/// The waker of [`on_asker_gone`].
struct Gone<F>(F);

impl<F: Fn() + Send + Sync + 'static> ArcWake for Gone<F> {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        (arc_self.0)();
    }
}

/// Sends the message `make` builds around a reply, handled whatever becomes
/// of this future, and waits for the answer ([`LockError::Stopped`] if the
/// actor stopped first).
pub(crate) async fn ask<M, T>(
    to: &Recipient<M>,
    make: impl FnOnce(Reply<Result<T, LockError>>) -> M,
) -> Result<T, LockError>
where
    M: Message<Result = ()> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    to.do_send(make(Reply(Some(tx))));
    rx.await.unwrap_or(Err(LockError::Stopped))
}

/// As [`ask`], but the message is sent now, not when the answer is first
/// awaited: whatever is sent to the same actor after this call comes after it
/// (a `Settle` waits for it, say), and the answer needs no borrow of `to`.
pub(crate) fn ask_now<M, T>(
    to: &Recipient<M>,
    make: impl FnOnce(Reply<Result<T, LockError>>) -> M,
) -> impl std::future::Future<Output = Result<T, LockError>> + Send + 'static
where
    M: Message<Result = ()> + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    to.do_send(make(Reply(Some(tx))));
    async move { rx.await.unwrap_or(Err(LockError::Stopped)) }
}

/// What a bounded give-back gives back (or, for a latch, counts down), for
/// its log lines and its metric.
#[derive(Clone, Debug)]
pub(crate) struct Giving {
    /// `"lock"`, `"permits"` or `"count-down"`: the metric's `of` label and
    /// the log's field.
    pub(crate) of: &'static str,
    /// The lock's or the semaphore's name.
    pub(crate) name: Arc<str>,
    /// What a late failure leaves behind, said in its log line.
    pub(crate) if_it_fails: &'static str,
}

/// Waits at most `bound` for `answer`: the answer to a give-back already sent
/// (with [`ask_now`]: its actor carries it out whether or not anyone listens),
/// or a change that runs in the caller's future (a count-down), which then
/// moves to a task of its own. `Ok(None)` when the bound passed first: the
/// change goes on, counted in `lockwarden_releases_pending_total` and logged
/// now, and its outcome is logged when it comes, so a caller on a request path
/// can answer without losing sight of it.
pub(crate) async fn within<T>(
    bound: Duration,
    giving: Giving,
    answer: impl Future<Output = Result<T, LockError>> + Send + 'static,
) -> Result<Option<T>, LockError>
where
    T: Debug + Send + 'static,
{
    let mut answer = Box::pin(answer);
    match tokio::time::timeout(bound, &mut answer).await {
        Ok(outcome) => outcome.map(Some),
        Err(_) => {
            pending(giving, bound, answer);
            Ok(None)
        }
    }
}

/// A change whose answer did not come within its caller's bound: counted,
/// logged now, and `answer` driven to its end in a task of its own (it only
/// listens when an actor keeps at the change), its outcome logged.
fn pending<T>(
    giving: Giving,
    waited: Duration,
    answer: impl Future<Output = Result<T, LockError>> + Send + 'static,
) where
    T: Debug + Send + 'static,
{
    let Giving {
        of,
        name,
        if_it_fails,
    } = giving;
    metrics::counter!("lockwarden_releases_pending_total", "of" => of).increment(1);
    tracing::warn!(
        of,
        name = %name,
        ?waited,
        "the change had no answer from Redis in time; it goes on in the background"
    );
    tokio::spawn(async move {
        let began = Instant::now();
        match answer.await {
            Ok(outcome) => tracing::info!(
                of,
                name = %name,
                ?outcome,
                after = ?waited + began.elapsed(),
                "a change answered late is done"
            ),
            Err(e) => tracing::warn!(
                of,
                name = %name,
                error = %e,
                "a change answered late failed ({if_it_fails})"
            ),
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::on_asker_gone;

    /// A counter of calls, and the callback that counts.
    fn counted() -> (Arc<AtomicUsize>, impl Fn() + Send + Sync + 'static) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        (calls, move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[test]
    fn a_caller_that_stops_waiting_is_reported_once() {
        let (mut tx, rx) = oneshot::channel::<u32>();
        let (calls, gone) = counted();
        assert!(on_asker_gone(&mut tx, gone));
        assert_eq!(calls.load(Ordering::SeqCst), 0, "nobody left yet");
        drop(rx);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(tx.send(7).is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn an_answered_caller_is_never_reported() {
        let (mut tx, mut rx) = oneshot::channel::<u32>();
        let (calls, gone) = counted();
        assert!(on_asker_gone(&mut tx, gone));
        tx.send(7).expect("the caller waits");
        assert_eq!(rx.try_recv(), Ok(7));
        drop(rx);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_caller_gone_already_is_said_at_once_and_not_reported() {
        let (mut tx, rx) = oneshot::channel::<u32>();
        drop(rx);
        let (calls, gone) = counted();
        assert!(!on_asker_gone(&mut tx, gone));
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }

    /// Armed by a task that has spent tokio's cooperative budget (a lock
    /// actor busy with many answers in one poll): still armed, not reported.
    #[test]
    fn a_spent_budget_does_not_keep_the_watch_from_arming() {
        use futures::FutureExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let calls = rt.block_on(async {
            while tokio::task::consume_budget().now_or_never().is_some() {}
            let (mut tx, rx) = oneshot::channel::<u32>();
            let (calls, gone) = counted();
            assert!(on_asker_gone(&mut tx, gone));
            assert_eq!(
                calls.load(Ordering::SeqCst),
                0,
                "reported before anyone left"
            );
            drop(rx);
            calls
        });
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
