//! What a lock actor is subscribed to: the channels its waiters (and, while it
//! takes turns, its holder) listen on, each a [`Channel`] of the waiting kit
//! (`actors/listen.rs`). Which unlock messages still to come are its own is
//! its kind's business (`kinds/echo.rs`).
//!
//! Kept apart from the actor because every lock actor carries it, held or not:
//! its size is paid once per held lock, so it is a small Vec, not a map.

use crate::actors::listen::Channel;

/// The channels this lock subscribed to: none while nobody waits, one for an
/// exclusive or read-write lock, one per local waiter for a fair lock. A Vec,
/// not a map: every lock actor has this field, and an empty Vec is half the
/// size of an empty map (bytes kept by every held lock).
#[derive(Debug, Default)]
pub(super) struct Subs {
    channels: Vec<Channel>,
}

impl Subs {
    /// The channel `name`, if this lock has it (asked for or made).
    pub(super) fn get_mut(&mut self, name: &str) -> Option<&mut Channel> {
        self.channels.iter_mut().find(|c| c.name() == name)
    }

    /// Whether the subscription to `name` is made.
    pub(super) fn is_live(&self, name: &str) -> bool {
        self.channels
            .iter()
            .any(|c| c.name() == name && c.is_live())
    }

    pub(super) fn contains_key(&self, name: &str) -> bool {
        self.channels.iter().any(|c| c.name() == name)
    }

    /// Adds the channel `name`, not subscribed yet.
    pub(super) fn add(&mut self, name: String) {
        if !self.contains_key(&name) {
            self.channels.push(Channel::new(name));
        }
    }

    /// Takes out the live channels `needed` says are no longer needed (a
    /// subscription still asked for is kept until its answer), for the caller to
    /// unsubscribe.
    pub(super) fn take_unneeded(&mut self, needed: impl Fn(&str) -> bool) -> Vec<Channel> {
        let (gone, kept) = std::mem::take(&mut self.channels)
            .into_iter()
            .partition(|c| c.is_live() && !needed(c.name()));
        self.channels = kept;
        if self.channels.is_empty() {
            // A held lock keeps no room for subscriptions it no longer has.
            self.clear();
        }
        gone
    }

    pub(super) fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Forgets every channel.
    pub(super) fn clear(&mut self) {
        self.channels = Vec::new();
    }
}
