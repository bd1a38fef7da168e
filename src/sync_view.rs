//! The read model of a semaphore or a count-down latch, for operators
//! ([`Admin::synchronizer`](crate::Admin::synchronizer), `lockwarden list`,
//! `status` and `top`).
//!
//! Redisson keeps a semaphore's available permits and a latch's count alike, as an
//! integer string at the name, so the key alone cannot say which it is. The kind
//! comes from the best evidence there is, in this order: the label lockwarden writes
//! beside every synchronizer it creates (`keys::kind_label`); a permit-expirable
//! semaphore's set of taken permits; who listens on which channel (a semaphore's
//! waiters on `redisson_sc:{name}`, a latch's on its own channel). A key with none
//! of these (made by Redisson and idle, or an application's counter) is a
//! [`SynchronizerKind::Counter`].
//!
//! Who waits comes from the waiting records lockwarden keeps beside the key
//! (`wire/waiting.rs`): a waiter shows there once it has waited a second. They
//! also show a semaphore whose key is gone while waiters wait on it
//! ([`SynchronizerSummary::key_missing`]), which the key alone cannot.

use std::time::{Duration, SystemTime};

use crate::client::{client_id_of, ClientInfo};

/// What kind of synchronizer a key is, as far as Redis shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SynchronizerKind {
    /// A semaphore ([`Semaphore`](crate::Semaphore), Redisson's `RSemaphore`): the
    /// value is the available permits.
    Semaphore,
    /// A permit-expirable semaphore ([`PermitSemaphore`](crate::PermitSemaphore),
    /// Redisson's `RPermitExpirableSemaphore`): the value is the available permits.
    PermitSemaphore,
    /// A count-down latch ([`Latch`](crate::Latch), Redisson's `RCountDownLatch`):
    /// the value is the count.
    Latch,
    /// An integer string that nothing labels as either: a semaphore or latch made by
    /// a client that writes no label (Redisson) and that nobody waits on now, or an
    /// application's counter.
    Counter,
}

impl SynchronizerKind {
    /// A short name: `semaphore`, `permit-semaphore`, `latch` or `counter`; the
    /// first three are also the label's text in Redis.
    pub fn as_str(self) -> &'static str {
        match self {
            SynchronizerKind::Semaphore => "semaphore",
            SynchronizerKind::PermitSemaphore => "permit-semaphore",
            SynchronizerKind::Latch => "latch",
            SynchronizerKind::Counter => "counter",
        }
    }

    /// The kind a label's text names; `None` for any other text.
    fn from_label(label: &str) -> Option<SynchronizerKind> {
        [
            SynchronizerKind::Semaphore,
            SynchronizerKind::PermitSemaphore,
            SynchronizerKind::Latch,
        ]
        .into_iter()
        .find(|k| k.as_str() == label)
    }

    /// Whether its waiters listen on the semaphore channel (else the latch's).
    fn is_semaphore(self) -> bool {
        matches!(
            self,
            SynchronizerKind::Semaphore | SynchronizerKind::PermitSemaphore
        )
    }
}

/// One semaphore or count-down latch, as an operator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SynchronizerSummary {
    /// The name (its key).
    pub name: String,
    /// Its kind.
    pub kind: SynchronizerKind,
    /// Whether the kind is lockwarden's label (`false`: told from the permits set or
    /// from who waits, or not told at all).
    pub labelled: bool,
    /// The number at the key: a semaphore's available permits, a latch's count
    /// (below zero only when something wrote it so).
    pub value: i64,
    /// A permit-expirable semaphore's permits taken and not expired; `None` for
    /// the other kinds, and for one with no permit out.
    pub taken: Option<u64>,
    /// Time until the key expires; `None` when it has no expiry.
    pub ttl: Option<Duration>,
    /// How many connections listen on its channel: roughly how many processes wait
    /// on it (one per process, as with locks). A counter's is the sum of both
    /// channels.
    pub waiting: u64,
    /// The waiters recorded in Redis (those that have waited at least a second,
    /// of managers recent enough to record them), oldest first; empty when none
    /// are, or when the Redis user may not read the records.
    pub waiters: Vec<RecordedWaiter>,
    /// The key does not exist, yet waiters are recorded on it: a semaphore
    /// whose key was deleted or lost with Redis's data. They wait until someone
    /// adds permits ([`value`](Self::value) reads 0 then).
    pub key_missing: bool,
    /// A fair semaphore's queue, head first (`Semaphore::fair`: its waiters
    /// listen on channels of their own, so [`waiting`](Self::waiting) does not
    /// count them). Read by [`Admin::synchronizer`](crate::Admin::synchronizer)
    /// only; empty in lists, for other kinds, and when the Redis user may not
    /// read the queue.
    pub queue: Vec<crate::view::QueuedWaiter>,
}

/// One waiter of a lock, semaphore or latch, from its waiting record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordedWaiter {
    /// `<client id>:<n>`: the waiting manager's client id and the wait's number
    /// in that process; for a lock's waiter, the owner field it will hold the
    /// lock under (`:write` after it for a writer).
    pub owner_field: String,
    /// Permits it wants (1 for a lock's or a latch's waiter).
    pub wants: u64,
    /// When it started waiting (the waiter's clock).
    pub since: SystemTime,
    /// Time before the record lapses unless the waiter refreshes it (it does
    /// every 10 s while it waits).
    pub expires_in: Duration,
    /// Who the waiting manager is (host, pid, label...), from its registry
    /// entry; `None` when there is no valid one.
    pub client: Option<ClientInfo>,
    /// An election candidate ([`Leader`](crate::Leader)) rather than a waiter:
    /// it waits on its leader lock for as long as it runs, by design, so its
    /// wait growing says nothing is stuck.
    pub candidate: bool,
}

impl RecordedWaiter {
    /// The client id part of its owner field.
    pub fn client_id(&self) -> Option<&str> {
        client_id_of(&self.owner_field)
    }

    /// Who waits, for people: [`ClientInfo::describe`] or [`UNKNOWN_CLIENT`](crate::UNKNOWN_CLIENT).
    pub fn who(&self) -> String {
        ClientInfo::describe_or_unknown(self.client.as_ref())
    }
}

/// What `lua/sync_inspect.lua` saw at a key.
#[derive(Debug, Clone, Default)]
pub(crate) struct Looked {
    /// The key's integer; `None` when it is absent, not a string, or not an
    /// integer.
    pub(crate) value: Option<i64>,
    /// Its TTL; `None` when it has none.
    pub(crate) ttl: Option<Duration>,
    /// The kind label's text.
    pub(crate) label: Option<String>,
    /// Unexpired permits in the permit-expirable set; `None` when there is no set.
    pub(crate) taken: Option<u64>,
}

impl Looked {
    /// The synchronizer at `name`, given how many listen on its semaphore channel
    /// and on its latch channel; `None` when the key holds no integer.
    pub(crate) fn into_summary(
        self,
        name: &str,
        on_semaphore: u64,
        on_latch: u64,
    ) -> Option<SynchronizerSummary> {
        let value = self.value?;
        let labelled = self.label.as_deref().and_then(SynchronizerKind::from_label);
        let kind = labelled.unwrap_or(if self.taken.is_some() {
            SynchronizerKind::PermitSemaphore
        } else if on_semaphore > 0 && on_latch == 0 {
            SynchronizerKind::Semaphore
        } else if on_latch > 0 && on_semaphore == 0 {
            SynchronizerKind::Latch
        } else {
            SynchronizerKind::Counter
        });
        let waiting = match kind {
            SynchronizerKind::Counter => on_semaphore + on_latch,
            k if k.is_semaphore() => on_semaphore,
            _ => on_latch,
        };
        Some(SynchronizerSummary {
            name: name.to_string(),
            kind,
            labelled: labelled.is_some(),
            value,
            taken: self
                .taken
                .filter(|_| kind == SynchronizerKind::PermitSemaphore),
            ttl: self.ttl,
            waiting,
            waiters: Vec::new(),
            key_missing: false,
            queue: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn looked(value: i64, label: Option<&str>, taken: Option<u64>) -> Looked {
        Looked {
            value: Some(value),
            label: label.map(str::to_string),
            taken,
            ..Looked::default()
        }
    }

    #[test]
    fn the_label_comes_first_then_the_permit_set_then_who_listens() {
        let kind = |l: Looked, s, c| l.into_summary("x", s, c).map(|s| (s.kind, s.labelled));
        use SynchronizerKind::*;
        assert_eq!(
            kind(looked(2, Some("latch"), None), 3, 0),
            Some((Latch, true))
        );
        assert_eq!(
            kind(looked(2, None, Some(1)), 0, 0),
            Some((PermitSemaphore, false))
        );
        assert_eq!(kind(looked(2, None, None), 1, 0), Some((Semaphore, false)));
        assert_eq!(kind(looked(2, None, None), 0, 2), Some((Latch, false)));
        assert_eq!(kind(looked(2, None, None), 0, 0), Some((Counter, false)));
        assert_eq!(kind(looked(2, None, None), 1, 1), Some((Counter, false)));
        assert_eq!(
            kind(looked(2, Some("other"), None), 0, 0),
            Some((Counter, false))
        );
        assert_eq!(
            kind(Looked::default(), 1, 0),
            None,
            "no integer, no synchronizer"
        );
    }

    #[test]
    fn waiting_counts_the_kinds_own_channel() {
        let s = looked(0, Some("semaphore"), None)
            .into_summary("x", 4, 1)
            .expect("an integer");
        assert_eq!(s.waiting, 4);
        let c = looked(0, None, None)
            .into_summary("x", 2, 3)
            .expect("an integer");
        assert_eq!((c.kind, c.waiting), (SynchronizerKind::Counter, 5));
    }
}
