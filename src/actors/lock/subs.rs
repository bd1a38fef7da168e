//! What a lock actor is subscribed to: the channels its waiters (and, while it
//! takes turns, its holder) listen on, each pending or routed, and how many of
//! the unlock messages still to come are its own.
//!
//! Kept apart from the actor because every lock actor carries it, held or not:
//! its size is paid once per held lock, so it is a small Vec, not a map.

/// State of one channel subscription of this lock (a channel not in [`Subs`]
/// is not subscribed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sub {
    /// Asked the subscriber; no answer yet.
    Pending,
    /// Routed (and subscribed, or to be subscribed on reconnect).
    Routed,
}

/// The channels this lock subscribed to, with their state: none while nobody
/// waits, one for an exclusive or read-write lock, one per local waiter for a
/// fair lock. A Vec, not a map: every lock actor has this field, and an empty
/// Vec is half the size of an empty map (bytes kept by every held lock).
#[derive(Debug, Default)]
pub(super) struct Subs {
    channels: Vec<(String, Sub)>,
    /// Unlock messages this actor published itself and will hear back; they carry
    /// no news (the local release already handed over), so they are skipped.
    /// Only counted while subscribed: unsubscribed, they never come back.
    own_unlocks: u32,
}

impl Subs {
    pub(super) fn get(&self, channel: &str) -> Option<Sub> {
        let found = self.channels.iter().find(|(c, _)| c == channel);
        found.map(|(_, s)| *s)
    }

    pub(super) fn contains_key(&self, channel: &str) -> bool {
        self.get(channel).is_some()
    }

    pub(super) fn insert(&mut self, channel: String, sub: Sub) {
        match self.channels.iter_mut().find(|(c, _)| *c == channel) {
            Some((_, s)) => *s = sub,
            None => self.channels.push((channel, sub)),
        }
    }

    pub(super) fn remove(&mut self, channel: &str) {
        self.channels.retain(|(c, _)| c != channel);
        if self.channels.is_empty() {
            // A held lock keeps no room for subscriptions it no longer has.
            self.clear();
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }

    /// Forgets every channel (and so every message of its own still to come).
    pub(super) fn clear(&mut self) {
        self.channels = Vec::new();
        self.own_unlocks = 0;
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Sub)> {
        self.channels.iter().map(|(c, s)| (c, s))
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
