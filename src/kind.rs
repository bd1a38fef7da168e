//! The kinds of lock, as words every layer uses: what an acquisition asks for
//! ([`AcquireKind`]) and which kind of lock actor serves it ([`Kind`]).
//!
//! What a kind *does* differently (its scripts, its channel, its wake rule, its
//! renewal) lives in its own file under `actors/lock/kinds/`; this file only names
//! the kinds and says which holds exclude which. Read and write acquisitions of one
//! name share one actor (the read-write kind) because each must see the other's
//! local holders: a writer waits for local readers, a reader's request for the
//! write lock is refused at once, and a writer's read request (a downgrade) goes
//! straight through.

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
    /// The spin lock (Redisson `getSpinLock`): the exclusive lock's Redis layout,
    /// but waiters never subscribe to a channel; they ask again after a growing
    /// delay ([`Config::spin_backoff`](crate::Config::spin_backoff)). For
    /// deployments that refuse SUBSCRIBE, or so many locks that a channel each
    /// would be too many.
    Spin,
}

impl AcquireKind {
    /// A short name: `exclusive`, `fair`, `read`, `write` or `spin`.
    pub fn as_str(self) -> &'static str {
        match self {
            AcquireKind::Exclusive => "exclusive",
            AcquireKind::Fair => "fair",
            AcquireKind::Read => "read",
            AcquireKind::Write => "write",
            AcquireKind::Spin => "spin",
        }
    }

    /// The kind of lock actor that serves this acquisition.
    pub(crate) fn actor_kind(self) -> Kind {
        match self {
            AcquireKind::Exclusive => Kind::Exclusive,
            AcquireKind::Fair => Kind::Fair,
            AcquireKind::Read | AcquireKind::Write => Kind::ReadWrite,
            AcquireKind::Spin => Kind::Spin,
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
    /// Serves [`AcquireKind::Spin`]: waiters poll with a backoff, never listen.
    Spin,
}

/// The setters that pick a kind, shared by the messages that carry one
/// ([`Acquire`](crate::Acquire) and [`Handle`](crate::Handle)): `$what` starts each
/// setter's doc line ("Take", "A handle whose acquisitions take").
macro_rules! impl_kind_setters {
    ($ty:ident, $what:literal) => {
        impl $ty {
            #[doc = concat!($what, " this kind of lock. Defaults to [`AcquireKind::Exclusive`](crate::AcquireKind::Exclusive).")]
            pub fn kind(mut self, kind: $crate::AcquireKind) -> $ty {
                self.kind = kind;
                self
            }

            #[doc = concat!($what, " the fair lock of this name: waiters are served in the order they first queued, across all processes (Redisson's fair lock).")]
            pub fn fair(self) -> $ty {
                self.kind($crate::AcquireKind::Fair)
            }

            #[doc = concat!($what, " a read hold of the read-write lock of this name: shared with other readers, and with the owner's own write hold (a downgrade).")]
            pub fn read(self) -> $ty {
                self.kind($crate::AcquireKind::Read)
            }

            #[doc = concat!($what, " the write lock of the read-write lock of this name. An owner that holds read holds of it (and not the write lock) is refused with [`LockError::UpgradeRefused`](crate::LockError::UpgradeRefused) at once.")]
            pub fn write(self) -> $ty {
                self.kind($crate::AcquireKind::Write)
            }

            #[doc = concat!($what, " the spin lock of this name (Redisson's spin lock): the same Redis key as the exclusive lock, so the two exclude each other, but a waiter asks again after a growing delay ([`Config::spin_backoff`](crate::Config::spin_backoff)) instead of subscribing to the unlock channel.")]
            #[doc(alias = "getSpinLock")]
            pub fn spin(self) -> $ty {
                self.kind($crate::AcquireKind::Spin)
            }
        }
    };
}
pub(crate) use impl_kind_setters;

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
            (Spin, Spin),
            (Spin, Exclusive),
        ] {
            assert!(held.excludes(wanted), "{held} vs {wanted}");
        }
    }
}
