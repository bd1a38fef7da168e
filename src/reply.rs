//! The answer channel of the messages that give something back: a guard's
//! release, and permits returned to a semaphore.
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
