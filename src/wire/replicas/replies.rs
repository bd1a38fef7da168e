//! What a `WAIT` (and `WAITAOF`) reply says, and what the caller of a lock
//! change gets for it: a change that must be confirmed and was not becomes a
//! retryable [`LockError::NotReplicated`](crate::LockError::NotReplicated); one
//! that only hopes stands, logged.

use redis::{RedisError, RedisResult, Value};
use tracing::warn;

use super::Need;
use crate::config::ReplicaSync;
use crate::error::not_replicated;

/// What the replicas confirmed of one round trip.
#[derive(Debug, Clone)]
pub(crate) enum Confirmed {
    /// No confirmation was asked for (none configured, or a read-only script).
    NotAsked,
    /// At least the configured number of replicas acknowledged.
    Enough,
    /// Fewer did within the timeout.
    Short {
        /// How many acknowledged.
        acked: u32,
        /// How many were required.
        wanted: u32,
    },
    /// The `WAIT` itself failed (an ACL without it, say).
    Failed(RedisError),
    /// Confirmation is on but no replica could answer, so none was asked
    /// (`unconfirmed.rs`): the change stands, counted and logged, unless
    /// `refuse` (`Config::refuse_unconfirmed_grants`) and it is a grant.
    NoReplica {
        /// Refuse a grant rather than keep it unconfirmed.
        refuse: bool,
        /// How many replicas the configuration asks for.
        wanted: u32,
    },
}

/// Which commands confirm a lock change on the master in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirm {
    /// `WAIT` alone: the master has AOF off.
    Wait,
    /// `WAIT` alone although the master has AOF on, for this reason.
    WaitOnly(&'static str),
    /// `WAIT`, then `WAITAOF 1 0 <timeout>`: the master's own AOF too.
    WaitAndAof,
}

/// The commands for a master of `INFO`'s `redis_version` and `aof_enabled`,
/// with this `appendfsync` (`None`: the server would not say).
pub(crate) fn confirm_with(version: &str, aof: bool, appendfsync: Option<&str>) -> Confirm {
    if !aof {
        return Confirm::Wait;
    }
    let mut parts = version.split('.').map(|p| {
        let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().unwrap_or(0)
    });
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (7, 2) {
        return Confirm::WaitOnly("WAITAOF needs Redis 7.2 or later");
    }
    match appendfsync {
        Some(policy) if policy.eq_ignore_ascii_case("always") => Confirm::WaitAndAof,
        Some(_) => Confirm::WaitOnly(
            "appendfsync is not `always`: WAITAOF would hold each lock change until the next fsync",
        ),
        None => Confirm::WaitOnly("the master would not tell its appendfsync (CONFIG GET)"),
    }
}

/// Reads `WAIT`'s reply, and `WAITAOF`'s if it was sent, against what `sync`
/// requires.
pub(super) fn confirmed(wait: Value, waitaof: Option<Value>, sync: ReplicaSync) -> Confirmed {
    let replicas = counted(wait, sync);
    let Some(waitaof) = waitaof else {
        return replicas;
    };
    match (replicas, waitaof) {
        (Confirmed::Enough, Value::Array(counts)) => match counts.first() {
            Some(Value::Int(local)) if *local >= 1 => Confirmed::Enough,
            // The master's own disk did not confirm: the change is no better
            // than unreplicated, and takes the same path (undone, retried).
            Some(Value::Int(_)) => Confirmed::Short {
                acked: 0,
                wanted: sync.min,
            },
            _ => Confirmed::Failed(crate::wire::unexpected("WAITAOF returned an unknown shape")),
        },
        (Confirmed::Enough, Value::ServerError(e)) => Confirmed::Failed(e.into()),
        (Confirmed::Enough, _) => {
            Confirmed::Failed(crate::wire::unexpected("WAITAOF returned an unknown shape"))
        }
        (short, _) => short,
    }
}

/// Reads `WAIT`'s reply against what `sync` requires.
fn counted(wait: Value, sync: ReplicaSync) -> Confirmed {
    match wait {
        Value::Int(n) => {
            let acked = u32::try_from(n).unwrap_or(0);
            if acked >= sync.min {
                Confirmed::Enough
            } else {
                Confirmed::Short {
                    acked,
                    wanted: sync.min,
                }
            }
        }
        // The master turned replica while the WAIT blocked (a demoted master
        // that resumed learns it then): the change was not confirmed, and a
        // release must be redone where the deployment now points.
        Value::ServerError(e) if e.code() == "UNBLOCKED" => Confirmed::Short {
            acked: 0,
            wanted: sync.min,
        },
        Value::ServerError(e) => Confirmed::Failed(e.into()),
        _ => Confirmed::Failed(crate::wire::unexpected("WAIT returned an unknown shape")),
    }
}

/// The reply a caller gets for a script's `reply` that replicas confirmed as
/// `confirmed`, given how much the answer needs them; `lock` names the key for
/// the log. A script that failed changed nothing to confirm: its error stands.
///
/// `op` labels the change (`grant`, `release`, `renew`, `other`) where it is
/// counted unconfirmed (`unconfirmed.rs`).
pub(crate) fn judge(
    (need, op): (Need, &'static str),
    reply: Value,
    confirmed: &Confirmed,
    lock: &str,
) -> RedisResult<Value> {
    if matches!(reply, Value::ServerError(_)) {
        return Ok(reply);
    }
    match (need, confirmed) {
        (_, Confirmed::NotAsked | Confirmed::Enough) | (Need::ReadOnly, _) => Ok(reply),
        (_, Confirmed::NoReplica { refuse, wanted }) => {
            let granted =
                matches!(&reply, Value::Array(r) if matches!(r.first(), Some(Value::Int(1))));
            if op == "grant" && !granted {
                // Refused or busy: nothing was changed.
                return Ok(reply);
            }
            if *refuse && op == "grant" {
                // Given back by the caller, as any grant not confirmed.
                return Err(not_replicated(0, *wanted));
            }
            super::unconfirmed::record(op, lock);
            Ok(mark_unconfirmed(op, reply))
        }
        (Need::Must, Confirmed::Short { acked, wanted }) => Err(not_replicated(*acked, *wanted)),
        (Need::Must, Confirmed::Failed(e)) => Err(e.clone()),
        (Need::BestEffort, Confirmed::Short { acked, wanted }) => {
            crate::stats::record::unconfirmed(op);
            warn!(
                lock,
                acked, wanted, "a lock change was not confirmed by enough replicas; it stands"
            );
            Ok(reply)
        }
        (Need::BestEffort, Confirmed::Failed(e)) => {
            warn!(lock, error = %e, "WAIT after a lock change failed; the change stands");
            Ok(reply)
        }
    }
}

/// What a grant's reply carries, last, when no replica confirmed it: the
/// parse of an acquisition or a hand-over takes it off ([`unmark`]) and tells
/// the guard (`LockGuard::confirmed`).
const UNCONFIRMED: &str = "lockwarden:unconfirmed";

/// `reply` of an `op` made with no replica's confirmation, marked when it is
/// a grant or a hand-over (the only replies that make a guard).
fn mark_unconfirmed(op: &str, reply: Value) -> Value {
    match reply {
        Value::Array(mut items) if op == "grant" || op == "handover" => {
            items.push(Value::SimpleString(UNCONFIRMED.into()));
            Value::Array(items)
        }
        reply => reply,
    }
}

/// A grant's or a hand-over's reply items without the mark of
/// [`mark_unconfirmed`], and whether replicas confirmed it (no mark).
pub(crate) fn unmark(items: &[Value]) -> (&[Value], bool) {
    match items.split_last() {
        Some((Value::SimpleString(m), rest)) if m == UNCONFIRMED => (rest, false),
        _ => (items, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitaof_only_on_a_recent_master_that_fsyncs_every_write() {
        assert_eq!(confirm_with("7.2.4", false, None), Confirm::Wait);
        for old in ["7.0.15", "6.2.14", "7.1.242"] {
            assert!(matches!(
                confirm_with(old, true, Some("always")),
                Confirm::WaitOnly(_)
            ));
        }
        assert_eq!(
            confirm_with("7.2.0", true, Some("always")),
            Confirm::WaitAndAof
        );
        assert_eq!(
            confirm_with("8.0.1-rc1", true, Some("ALWAYS")),
            Confirm::WaitAndAof
        );
        for fsync in [Some("everysec"), Some("no"), None] {
            assert!(matches!(
                confirm_with("7.4.1", true, fsync),
                Confirm::WaitOnly(_)
            ));
        }
    }

    fn sync(min: u32) -> ReplicaSync {
        ReplicaSync {
            min,
            timeout: std::time::Duration::from_millis(10),
        }
    }

    #[test]
    fn a_grant_needs_enough_replicas_and_a_release_stands_anyway() {
        let short = confirmed(Value::Int(1), None, sync(2));
        assert!(matches!(
            short,
            Confirmed::Short {
                acked: 1,
                wanted: 2
            }
        ));
        let grant = judge((Need::Must, "grant"), Value::Int(1), &short, "acquire");
        let e = grant.expect_err("a grant two replicas did not confirm");
        assert!(crate::error::redis_is_transient(&e));
        assert!(judge(
            (Need::BestEffort, "other"),
            Value::Int(0),
            &short,
            "release"
        )
        .is_ok());
        assert!(matches!(
            confirmed(Value::Int(3), None, sync(2)),
            Confirmed::Enough
        ));
    }

    #[test]
    fn the_masters_own_disk_must_confirm_when_asked() {
        let both = |local| Value::Array(vec![Value::Int(local), Value::Int(0)]);
        assert!(matches!(
            confirmed(Value::Int(1), Some(both(1)), sync(1)),
            Confirmed::Enough
        ));
        assert!(matches!(
            confirmed(Value::Int(1), Some(both(0)), sync(1)),
            Confirmed::Short { acked: 0, .. }
        ));
        assert!(matches!(
            confirmed(Value::Int(0), Some(both(1)), sync(1)),
            Confirmed::Short { acked: 0, .. }
        ));
    }
}
