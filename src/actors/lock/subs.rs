//! What a lock actor is subscribed to: the channels its waiters (and, while it
//! takes turns, its holder) listen on, each a [`Channel`] of the waiting kit
//! (`actors/listen.rs`), and how many of the unlock messages still to come are
//! its own.
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
    /// Unlock messages this actor published itself and will hear back; they carry
    /// no news (the local release already handed over), so they are skipped.
    /// Only counted while subscribed: unsubscribed, they never come back.
    own_unlocks: u32,
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

    /// Forgets every channel (and so every message of its own still to come).
    pub(super) fn clear(&mut self) {
        self.channels = Vec::new();
        self.own_unlocks = 0;
    }

    /// This actor published an unlock message that it will hear back.
    pub(super) fn published_own(&mut self) {
        self.own_unlocks += 1;
    }

    /// An unlock message came: answers whether it is one of this actor's own
    /// (skipped; counted off).
    pub(super) fn heard_own(&mut self) -> bool {
        let own = self.own_unlocks > 0;
        self.own_unlocks = self.own_unlocks.saturating_sub(1);
        own
    }

    /// Messages may have been lost, or a new subscription starts after them:
    /// no message still to come is known to be this actor's own.
    pub(super) fn forget_own(&mut self) {
        self.own_unlocks = 0;
    }
}
