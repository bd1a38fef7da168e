//! The kinds of lock: what an acquisition asks for ([`AcquireKind`]) and which
//! kind of lock actor serves it ([`Kind`]), with the rules that differ between them.
//!
//! Everything else about a lock (the waiter queue, the attempt in flight, timers,
//! renewal, supervision) is shared by every kind; what a kind decides is which
//! scripts run, which channel wakes a waiter, and which local holders stand in a
//! waiter's way. Read and write acquisitions of one name share one actor (the
//! read-write kind) because each must see the other's local holders: a writer
//! waits for local readers, a reader's request for the write lock is refused at
//! once, and a writer's read request (a downgrade) goes straight through.

use std::fmt;

/// What an acquisition takes: the plain exclusive lock, the fair lock, or one side
/// of the read-write lock. Guards and handles carry it. All kinds share Redisson's
/// Redis layout (`docs/protocol.md`), so the same kind of Redisson lock on the same
/// name excludes and wakes lockwarden's and the other way round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AcquireKind {
    /// The reentrant exclusive lock (Redisson `getLock`): one owner at a time, no
    /// order among waiters.
    #[default]
    Exclusive,
    /// The fair lock (Redisson `getFairLock`): exclusive, granted in the order the
    /// waiters first queued, across every process.
    Fair,
    /// A read hold of the read-write lock (Redisson `getReadWriteLock().readLock()`):
    /// shared with other readers, excluded by a writer of another owner.
    Read,
    /// The write side of the read-write lock: one owner, no readers but its own.
    Write,
}

impl AcquireKind {
    /// A short name: `exclusive`, `fair`, `read` or `write`.
    pub fn as_str(self) -> &'static str {
        match self {
            AcquireKind::Exclusive => "exclusive",
            AcquireKind::Fair => "fair",
            AcquireKind::Read => "read",
            AcquireKind::Write => "write",
        }
    }

    /// The kind of lock actor that serves this acquisition.
    pub(crate) fn actor_kind(self) -> Kind {
        match self {
            AcquireKind::Exclusive => Kind::Exclusive,
            AcquireKind::Fair => Kind::Fair,
            AcquireKind::Read | AcquireKind::Write => Kind::ReadWrite,
        }
    }

    /// Whether a live hold of kind `self` by one owner keeps another owner's
    /// acquisition of kind `wanted` from succeeding. Only readers share.
    pub(crate) fn excludes(self, wanted: AcquireKind) -> bool {
        !(self == AcquireKind::Read && wanted == AcquireKind::Read)
    }
}

impl fmt::Display for AcquireKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which kind of lock actor: one per (lock name, kind) in a manager's registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    /// Serves [`AcquireKind::Exclusive`].
    Exclusive,
    /// Serves [`AcquireKind::Fair`]: every waiter has a place in the Redis queue
    /// and its own channel.
    Fair,
    /// Serves [`AcquireKind::Read`] and [`AcquireKind::Write`] of one name.
    ReadWrite,
}

impl Kind {
    /// Whether an unlock message this actor published itself comes back to it on a
    /// channel it listens to, and can be skipped (the local release already handed
    /// over). A fair release is addressed to the head waiter's own channel, which
    /// may be a local waiter that must hear it.
    pub(crate) fn hears_own_unlocks(self) -> bool {
        self != Kind::Fair
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_readers_share() {
        use AcquireKind::*;
        assert!(!Read.excludes(Read));
        for (held, wanted) in [
            (Read, Write),
            (Write, Read),
            (Write, Write),
            (Exclusive, Exclusive),
            (Fair, Fair),
        ] {
            assert!(held.excludes(wanted), "{held} vs {wanted}");
        }
    }
}
