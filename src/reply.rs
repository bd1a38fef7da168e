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

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Message, Recipient};
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
