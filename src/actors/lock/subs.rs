//! What a lock actor is subscribed to: the channels its waiters (and, while it
//! takes turns, its holder) listen on, each pending or routed.
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
    On,
}

/// The channels this lock subscribed to, with their state: none while nobody
/// waits, one for an exclusive or read-write lock, one per local waiter for a
/// fair lock. A Vec, not a map: every lock actor has this field, and an empty
/// Vec is half the size of an empty map (bytes kept by every held lock).
#[derive(Debug, Default)]
pub(super) struct Subs(Vec<(String, Sub)>);

impl Subs {
    pub(super) fn get(&self, channel: &str) -> Option<Sub> {
        self.0.iter().find(|(c, _)| c == channel).map(|(_, s)| *s)
    }

    pub(super) fn contains_key(&self, channel: &str) -> bool {
        self.get(channel).is_some()
    }

    pub(super) fn insert(&mut self, channel: String, sub: Sub) {
        match self.0.iter_mut().find(|(c, _)| *c == channel) {
            Some((_, s)) => *s = sub,
            None => self.0.push((channel, sub)),
        }
    }

    pub(super) fn remove(&mut self, channel: &str) {
        self.0.retain(|(c, _)| c != channel);
        if self.0.is_empty() {
            // A held lock keeps no room for subscriptions it no longer has.
            self.0 = Vec::new();
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn clear(&mut self) {
        self.0 = Vec::new();
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, &Sub)> {
        self.0.iter().map(|(c, s)| (c, s))
    }
}
