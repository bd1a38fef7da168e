//! [`LostSignal`]: how a holding tells its guards that the lock was lost.
//!
//! A held lock needs a one-shot broadcast from its lock actor to every guard of the
//! holding: "lost, and why", or "the holding ended normally". A `tokio::sync::watch`
//! channel does that, but it carries eight `Notify`s and costs about 350 bytes per
//! holding, which at 100,000 held locks is a tenth of the client's memory for them.
//! This is the same idea in one small allocation: a state under a mutex (only ever
//! held for a read or a write) and one `Notify` for the guards that await a loss.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::error::LostReason;

/// What guards of a holding can learn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The holding stands.
    Held,
    /// The lock was lost while held.
    Lost(LostReason),
    /// The holding ended without a loss (its last guard released it).
    Ended,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: Notify,
}

/// The holding's end of the signal; dropping it without [`LostSignal::lose`] tells
/// the guards that the holding ended without a loss.
#[derive(Debug)]
pub(crate) struct LostSignal(Arc<Inner>);

/// A guard's end of the signal.
#[derive(Debug, Clone)]
pub(crate) struct LostWatch(Arc<Inner>);

impl Inner {
    fn set(&self, to: State) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if *state == State::Held {
            *state = to;
            drop(state);
            self.changed.notify_waiters();
        }
    }

    fn get(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl LostSignal {
    pub(crate) fn new() -> LostSignal {
        LostSignal(Arc::new(Inner {
            state: Mutex::new(State::Held),
            changed: Notify::new(),
        }))
    }

    /// A receiving end for one more guard.
    pub(crate) fn watch(&self) -> LostWatch {
        LostWatch(self.0.clone())
    }

    /// The lock was lost: every guard learns why (only the first reason counts).
    pub(crate) fn lose(&self, reason: LostReason) {
        self.0.set(State::Lost(reason));
    }
}

impl Drop for LostSignal {
    fn drop(&mut self) {
        self.0.set(State::Ended);
    }
}

impl LostWatch {
    /// Why the lock was lost, if it was.
    pub(crate) fn lost(&self) -> Option<LostReason> {
        match self.0.get() {
            State::Lost(reason) => Some(reason),
            State::Held | State::Ended => None,
        }
    }

    /// Waits for the holding to end: `Some(reason)` if the lock was lost, `None`
    /// if the holding ended without a loss.
    pub(crate) async fn ended(&self) -> Option<LostReason> {
        loop {
            // Registered before the state is read, so a change between the read
            // and the wait cannot be missed.
            let changed = self.0.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.0.get() {
                State::Lost(reason) => return Some(reason),
                State::Ended => return None,
                State::Held => changed.await,
            }
        }
    }
}
