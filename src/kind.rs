//! The kinds of lock, as words every layer uses: what an acquisition asks for
//! ([`AcquireKind`]) and which kind of lock actor serves it ([`Kind`]), with every
//! fact that makes a kind what it is: its name, its letter in a deadlock record,
//! its metric label, which holds it excludes, whom its waiter waits for, and
//! which re-entries and upgrades it allows.
//!
//! Each fact is a method with a `match` that names every kind, so that a new kind
//! does not compile until each fact is decided for it. A letter is read back
//! through the one table [`AcquireKind::ALL`], so a letter no kind has is refused
//! rather than taken for some kind. What a kind *does* differently (its scripts,
//! its channel, its wake rule, its renewal) lives in its own file under
//! `actors/lock/kinds/`.
//! Read and write acquisitions of one name share one actor (the read-write kind)
//! because each must see the other's local holders: a writer waits for local
//! readers, a reader's request for the write lock is refused at once, and a
//! writer's read request (a downgrade) goes straight through.

use std::fmt;

/// The hash field of a read-write lock's writer: `<owner field>:write`. Here,
/// not in `keys.rs`, because it is what the write kind's hold is named by
/// (`AcquireKind::hold_field`), and `keys.rs` sits above this file.
pub(crate) fn write_field(owner_field: &str) -> String {
    format!("{owner_field}:write")
}

/// Whether a hash field is a read-write lock's writer (`<owner field>:write`).
pub(crate) fn is_write_field(field: &str) -> bool {
    field.ends_with(":write")
}

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
    /// Every kind, the table text is read back through.
    pub(crate) const ALL: [AcquireKind; 5] = [
        AcquireKind::Exclusive,
        AcquireKind::Fair,
        AcquireKind::Read,
        AcquireKind::Write,
        AcquireKind::Spin,
    ];

    /// A short name: `exclusive`, `fair`, `read`, `write` or `spin`; also the
    /// value of its `kind` label in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            AcquireKind::Exclusive => "exclusive",
            AcquireKind::Fair => "fair",
            AcquireKind::Read => "read",
            AcquireKind::Write => "write",
            AcquireKind::Spin => "spin",
        }
    }

    /// Its letter in a deadlock wait record (`wire/deadlock.rs`, docs/protocol.md):
    /// other processes read it, so a letter never changes once written.
    pub(crate) fn letter(self) -> char {
        match self {
            AcquireKind::Exclusive => 'x',
            AcquireKind::Fair => 'f',
            AcquireKind::Read => 'r',
            AcquireKind::Write => 'w',
            AcquireKind::Spin => 's',
        }
    }

    /// The kind whose [`letter`](AcquireKind::letter) `text` is; `None` for any
    /// other text (a newer writer's kind is not mistaken for one of these).
    pub(crate) fn from_letter(text: &str) -> Option<AcquireKind> {
        let mut chars = text.chars();
        let (first, rest) = (chars.next()?, chars.next());
        AcquireKind::ALL
            .into_iter()
            .find(|k| rest.is_none() && k.letter() == first)
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
        match self {
            AcquireKind::Read => match wanted {
                AcquireKind::Read => false,
                AcquireKind::Exclusive
                | AcquireKind::Fair
                | AcquireKind::Write
                | AcquireKind::Spin => true,
            },
            AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Write | AcquireKind::Spin => {
                true
            }
        }
    }

    /// Whether a waiter of this kind waits for another owner's hold that the
    /// lock's hash shows as `holder_field`. A reader waits only for the writer
    /// (every other field of a read-write hash is a reader, which it shares
    /// with); every other kind waits for any holder. The deadlock walk asks
    /// this, as it sees fields, not holds.
    pub(crate) fn waits_for_holder(self, holder_field: &str) -> bool {
        match self {
            AcquireKind::Read => is_write_field(holder_field),
            AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Write | AcquireKind::Spin => {
                true
            }
        }
    }

    /// Whether a waiter of this kind also waits for the waiters queued ahead
    /// of it in the lock's Redis queue: only the fair lock grants in order.
    pub(crate) fn waits_for_queue_ahead(self) -> bool {
        match self {
            AcquireKind::Fair => true,
            AcquireKind::Exclusive | AcquireKind::Read | AcquireKind::Write | AcquireKind::Spin => {
                false
            }
        }
    }

    /// The hash field a hold of this kind takes for the owner field
    /// `owner_field`: the writer marks its own (`<owner field>:write`), so that
    /// it and its owner's read holds are two fields of one hash.
    pub(crate) fn hold_field(self, owner_field: String) -> String {
        match self {
            AcquireKind::Write => write_field(&owner_field),
            AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Read | AcquireKind::Spin => {
                owner_field
            }
        }
    }

    /// What a queued waiter whose record keeps only its hold `field` (the
    /// waiters' records, `wire/waiting.rs`) is taken to want: the write lock
    /// for a writer's field, else the exclusive lock. A reader or a fair waiter
    /// taken for exclusive is seen waiting for more than it does, never less,
    /// so a cycle it is in is not missed.
    pub(crate) fn of_hold_field(field: &str) -> AcquireKind {
        if is_write_field(field) {
            AcquireKind::Write
        } else {
            AcquireKind::Exclusive
        }
    }

    /// Whether an owner's acquisition of kind `self` goes through at once on a
    /// hold of kind `held` the same owner has: the same kind again (a re-entry),
    /// or a read request by the writer (a downgrade).
    pub(crate) fn reenters(self, held: AcquireKind) -> bool {
        match self {
            AcquireKind::Read => match held {
                AcquireKind::Read | AcquireKind::Write => true,
                AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Spin => false,
            },
            AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Write | AcquireKind::Spin => {
                self == held
            }
        }
    }

    /// The kind whose hold, with no hold of `self`, makes an owner's request for
    /// `self` an upgrade: a reader asking for the write lock would wait for its
    /// own read holds, so it is refused (`LockError::UpgradeRefused`).
    pub(crate) fn upgrade_from(self) -> Option<AcquireKind> {
        match self {
            AcquireKind::Write => Some(AcquireKind::Read),
            AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Read | AcquireKind::Spin => {
                None
            }
        }
    }

    /// Whether this kind may be taken without re-entry
    /// (`Acquire::non_reentrant`): Redisson has non-reentrant exclusive and fair
    /// locks, and the spin lock shares the exclusive script, but no
    /// non-reentrant read-write lock.
    pub(crate) fn may_refuse_reentry(self) -> bool {
        match self {
            AcquireKind::Exclusive | AcquireKind::Fair | AcquireKind::Spin => true,
            AcquireKind::Read | AcquireKind::Write => false,
        }
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

/// `$mac!($name, "kind" => <label of $kind>, $k => $v, ...)`: a metric with the
/// kind's `kind` label (docs/operations.md, "Metrics"). The label is its
/// [`AcquireKind::as_str`], written out here as a literal because the `metrics`
/// macros make a static key, with nothing allocated per call, only from
/// literals; a unit test checks that each literal is the kind's name.
macro_rules! by_kind_label {
    ($kind:expr, $($mac:ident)::+!($name:literal $(, $k:literal => $v:literal)*)) => {
        match $kind {
            $crate::AcquireKind::Exclusive => $($mac)::+!($name, "kind" => "exclusive" $(, $k => $v)*),
            $crate::AcquireKind::Fair => $($mac)::+!($name, "kind" => "fair" $(, $k => $v)*),
            $crate::AcquireKind::Read => $($mac)::+!($name, "kind" => "read" $(, $k => $v)*),
            $crate::AcquireKind::Write => $($mac)::+!($name, "kind" => "write" $(, $k => $v)*),
            $crate::AcquireKind::Spin => $($mac)::+!($name, "kind" => "spin" $(, $k => $v)*),
        }
    };
}
pub(crate) use by_kind_label;

#[cfg(test)]
mod tests {
    use super::AcquireKind::*;
    use super::*;

    /// Each kind's place in [`AcquireKind::ALL`]: a new kind does not compile
    /// here until it has one, and then fails below until `ALL` lists it.
    fn position(kind: AcquireKind) -> usize {
        match kind {
            Exclusive => 0,
            Fair => 1,
            Read => 2,
            Write => 3,
            Spin => 4,
        }
    }

    #[test]
    fn all_lists_every_kind_once() {
        for (at, kind) in AcquireKind::ALL.into_iter().enumerate() {
            assert_eq!(position(kind), at, "{kind}");
        }
    }

    #[test]
    fn letters_and_names_round_trip_and_stay_as_written() {
        let letters: String = AcquireKind::ALL.iter().map(|k| k.letter()).collect();
        let names: Vec<&str> = AcquireKind::ALL.iter().map(|k| k.as_str()).collect();
        // Wire and ops formats: Redis records, metric labels, JSON output.
        assert_eq!(letters, "xfrws");
        assert_eq!(names, ["exclusive", "fair", "read", "write", "spin"]);
        for kind in AcquireKind::ALL {
            let letter = kind.letter().to_string();
            assert_eq!(AcquireKind::from_letter(&letter), Some(kind));
            let named = AcquireKind::ALL
                .into_iter()
                .filter(|k| k.as_str() == kind.as_str());
            assert_eq!(named.collect::<Vec<_>>(), [kind], "one kind per name");
            assert_eq!(kind.to_string(), kind.as_str());
        }
        for text in ["", "q", "X", "xf", "exclusive"] {
            assert_eq!(AcquireKind::from_letter(text), None, "{text:?}");
        }
    }

    #[test]
    fn the_metric_label_is_the_name() {
        macro_rules! label {
            ($name:literal, "kind" => $label:literal) => {
                $label
            };
        }
        for kind in AcquireKind::ALL {
            assert_eq!(by_kind_label!(kind, label!("m")), kind.as_str());
        }
    }

    #[test]
    fn only_readers_share() {
        for held in AcquireKind::ALL {
            for wanted in AcquireKind::ALL {
                let shared = held == Read && wanted == Read;
                assert_eq!(held.excludes(wanted), !shared, "{held} vs {wanted}");
            }
        }
    }

    #[test]
    fn a_waiter_waits_for_the_holders_it_excludes() {
        let (reader, writer) = ("id:1", write_field("id:1"));
        for kind in AcquireKind::ALL {
            // The field shows a writer, or a holder of the waiter's own hash
            // that is not one (a reader, or the exclusive lock's holder).
            let other = if kind.actor_kind() == Kind::ReadWrite {
                Read
            } else {
                kind
            };
            assert_eq!(
                kind.waits_for_holder(&writer),
                Write.excludes(kind),
                "{kind}"
            );
            assert_eq!(
                kind.waits_for_holder(reader),
                other.excludes(kind),
                "{kind}"
            );
            assert_eq!(kind.waits_for_queue_ahead(), kind == Fair, "{kind}");
        }
    }

    #[test]
    fn only_the_writer_marks_its_field() {
        for kind in AcquireKind::ALL {
            let field = kind.hold_field("id:1".into());
            assert_eq!(field != "id:1", kind == Write, "{kind}");
            let seen = AcquireKind::of_hold_field(&field);
            assert_eq!(seen, if kind == Write { Write } else { Exclusive });
        }
    }

    #[test]
    fn reentry_downgrade_and_upgrade() {
        for wanted in AcquireKind::ALL {
            for held in AcquireKind::ALL {
                let through = wanted == held || (wanted, held) == (Read, Write);
                assert_eq!(wanted.reenters(held), through, "{wanted} on {held}");
            }
            let upgrade = (wanted == Write).then_some(Read);
            assert_eq!(wanted.upgrade_from(), upgrade, "{wanted}");
            let rw = wanted.actor_kind() == Kind::ReadWrite;
            assert_eq!(wanted.may_refuse_reentry(), !rw, "{wanted}");
        }
    }
}
