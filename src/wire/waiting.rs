//! Waiting records: who has waited long on a name, kept in Redis for operators
//! (`lockwarden status`, `list`, `top`) and for deadlock detection across
//! processes, which needs "who waits for what" by name.
//!
//! The layout is lockwarden's own (Redisson neither writes nor reads it): one
//! zset per name, `lockwarden_waiters:{<name>}` (`keys::waiters`), in the
//! name's slot so one read serves `status NAME` on a cluster. A member is one
//! waiter, `<owner field>|<since ms>|<wants>|<kind>`: the owner field
//! (`<client id>:<n>`, so the client registry names its host, pid and label),
//! when it started waiting (Unix ms, the waiter's clock), how many permits it
//! wants (1 for a latch or a lock), and the kind letter (`x` lock, `s`
//! semaphore, `p` permit-expirable semaphore, `l` latch, `c` a lock's
//! election candidate). A lock's waiter
//! records the owner field it will hold the lock under. A candidate
//! (`Leader::campaign`) waits on its leader lock for as long as it runs, by
//! design: its own letter lets readers show it apart rather than as a wait
//! that grows for ever, and a reader that predates the letter skips its
//! record as one it did not write (it sees no waiter there, which is what a
//! candidate is not). The score is when the record expires
//! (Unix ms, the waiter's clock): the waiter refreshes it while it waits and
//! removes it when the wait ends, so a process that dies leaves records that
//! readers ignore after their expiry and the next writer prunes. The key's own
//! TTL (that of the newest refresh) removes what nobody prunes.
//!
//! Plain commands, not a script: a user whose ACL predates these keys gets
//! NOPERM here and nowhere else (the caller logs it and goes on waiting).
//! Clocks: expiries are compared with the reader's wall clock; the records
//! live [`RECORD_TTL`], far longer than any sane skew.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::keys;
use crate::sync_view::SynchronizerKind;

/// How long a record lives unless refreshed: three refreshes
/// (`actors/waiting/records.rs` refreshes every third of it), so one slow or failed
/// refresh does not make a live waiter vanish from `status`.
pub(crate) const RECORD_TTL: Duration = Duration::from_secs(30);

/// What a recorded waiter waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitKind {
    /// A lock of any kind.
    Lock,
    /// A semaphore, a permit-expirable one or a latch.
    Sync(SynchronizerKind),
}

impl WaitKind {
    /// The member's kind letter (`c` instead of `x` for a candidate: see
    /// [`Record::candidate`]).
    fn letter(self) -> char {
        match self {
            WaitKind::Lock => 'x',
            WaitKind::Sync(SynchronizerKind::PermitSemaphore) => 'p',
            WaitKind::Sync(SynchronizerKind::Latch) => 'l',
            WaitKind::Sync(_) => 's',
        }
    }

    /// The kind a letter names.
    fn from_letter(letter: &str) -> Option<WaitKind> {
        Some(match letter {
            "x" => WaitKind::Lock,
            "p" => WaitKind::Sync(SynchronizerKind::PermitSemaphore),
            "l" => WaitKind::Sync(SynchronizerKind::Latch),
            "s" => WaitKind::Sync(SynchronizerKind::Semaphore),
            _ => return None,
        })
    }
}

/// One waiter's record, as it is written and read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// `<client id>:<n>`.
    pub(crate) owner_field: String,
    /// When it started waiting, Unix ms.
    pub(crate) since_ms: u64,
    /// Permits it wants (1 for a latch).
    pub(crate) wants: u64,
    /// What it waits on.
    pub(crate) kind: WaitKind,
    /// A lock's waiter that is an election candidate, waiting for as long as
    /// it runs (written as the kind letter `c`).
    pub(crate) candidate: bool,
}

impl Record {
    /// The zset member for it.
    pub(crate) fn member(&self) -> String {
        let kind = match (self.kind, self.candidate) {
            (WaitKind::Lock, true) => 'c',
            (kind, _) => kind.letter(),
        };
        format!(
            "{}|{}|{}|{kind}",
            self.owner_field, self.since_ms, self.wants
        )
    }

    /// A member read back; `None` for one lockwarden did not write.
    pub(crate) fn parse(member: &str) -> Option<Record> {
        let mut parts = member.rsplitn(4, '|');
        let (kind, candidate) = match parts.next()? {
            "c" => (WaitKind::Lock, true),
            letter => (WaitKind::from_letter(letter)?, false),
        };
        let wants = parts.next()?.parse().ok()?;
        let since_ms = parts.next()?.parse().ok()?;
        let owner_field = parts.next()?.to_string();
        Some(Record {
            owner_field,
            since_ms,
            wants,
            kind,
            candidate,
        })
    }
}

/// Now, Unix ms, on this machine's clock.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Writes `name`'s records of one process in one pipeline: prunes the expired
/// ones (anyone's), removes `gone`, adds or refreshes `live` until
/// [`RECORD_TTL`] from now, and sets the key's TTL to match.
pub(crate) async fn write<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
    live: &[String],
    gone: &[String],
) -> RedisResult<()> {
    let key = keys::waiters(name);
    let now = now_ms();
    let expiry = now + RECORD_TTL.as_millis() as u64;
    let mut pipe = redis::pipe();
    pipe.cmd("ZREMRANGEBYSCORE")
        .arg(&key)
        .arg("-inf")
        .arg(now)
        .ignore();
    if !gone.is_empty() {
        pipe.cmd("ZREM").arg(&key).arg(gone).ignore();
    }
    if !live.is_empty() {
        let mut add = redis::cmd("ZADD");
        add.arg(&key);
        for m in live {
            add.arg(expiry).arg(m);
        }
        pipe.add_command(add).ignore();
        pipe.cmd("PEXPIRE")
            .arg(&key)
            .arg(RECORD_TTL.as_millis() as u64)
            .ignore();
    }
    pipe.exec_async(conn).await
}

/// The unexpired records of `name`, oldest wait first, each with the time left
/// before it expires unless refreshed. Members lockwarden did not write are
/// skipped.
pub(crate) async fn read<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
) -> RedisResult<Vec<(Record, Duration)>> {
    let now = now_ms();
    let found: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
        .arg(keys::waiters(name))
        .arg(format!("({now}"))
        .arg("+inf")
        .arg("WITHSCORES")
        .query_async(conn)
        .await?;
    let mut records: Vec<(Record, Duration)> = found
        .into_iter()
        .filter_map(|(m, expiry)| {
            let left = Duration::from_millis((expiry as u64).saturating_sub(now));
            Some((Record::parse(&m)?, left))
        })
        .collect();
    records.sort_by_key(|(r, _)| r.since_ms);
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reads_back_as_written() {
        let r = Record {
            owner_field: "6f1c1a2e-0000-4000-8000-000000000000:7".into(),
            since_ms: 1_790_000_000_123,
            wants: 2,
            kind: WaitKind::Sync(SynchronizerKind::PermitSemaphore),
            candidate: false,
        };
        assert_eq!(Record::parse(&r.member()), Some(r.clone()));
        assert_eq!(
            r.member(),
            "6f1c1a2e-0000-4000-8000-000000000000:7|1790000000123|2|p"
        );
    }

    #[test]
    fn a_lock_waiter_keeps_its_owner_field() {
        let r = Record {
            owner_field: "6f1c1a2e-0000-4000-8000-000000000000:9:write".into(),
            since_ms: 5,
            wants: 1,
            kind: WaitKind::Lock,
            candidate: false,
        };
        assert_eq!(Record::parse(&r.member()), Some(r.clone()));
    }

    /// A candidate's record reads back as one, and a waiter's record of the
    /// letters before candidates reads back as a plain waiter.
    #[test]
    fn a_candidate_reads_back_apart_from_waiters() {
        let r = Record {
            owner_field: "6f1c1a2e-0000-4000-8000-000000000000:3".into(),
            since_ms: 5,
            wants: 1,
            kind: WaitKind::Lock,
            candidate: true,
        };
        assert_eq!(r.member(), "6f1c1a2e-0000-4000-8000-000000000000:3|5|1|c");
        assert_eq!(Record::parse(&r.member()), Some(r.clone()));
        let waiter = Record::parse("6f1c1a2e-0000-4000-8000-000000000000:3|5|1|x");
        assert_eq!(
            waiter.map(|w| (w.kind, w.candidate)),
            Some((WaitKind::Lock, false))
        );
    }

    #[test]
    fn foreign_members_are_skipped() {
        for m in ["", "x", "a|b|c|s", "a|1|2|z", "a|1|x|s"] {
            assert_eq!(Record::parse(m), None, "{m}");
        }
    }
}
