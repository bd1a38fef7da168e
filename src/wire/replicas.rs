//! Replica confirmation: a lock-changing script and a `WAIT` in one round trip,
//! and what a shortfall means for each kind of script.
//!
//! Redis replicates asynchronously: a grant the master answered may not have
//! reached any replica when the master dies, and the replica promoted in its place
//! lets a second holder in. With [`Config::sync_replicas`](crate::Config::sync_replicas)
//! set, every script that changes a lock is sent in a pipeline with
//! `WAIT <min> <timeout>` behind it, on the same connection, so the two share a
//! round trip and the `WAIT` covers the script's write (it counts the replicas that
//! acknowledged everything this connection wrote so far). What a shortfall means
//! depends on the script ([`Need`]): a grant or a renewal that too few replicas
//! confirmed is not trusted (the acquisition is answered with
//! [`LockError::NotReplicated`](crate::LockError::NotReplicated) and undone by the
//! lock actor, the renewal counts as failed); a release, a queue refresh or a
//! force-unlock is already done and cannot be taken back, so a shortfall there is
//! logged and the answer stands.
//!
//! A `WAIT` blocks the whole connection it is sent on: Redis reads nothing more
//! from that client until the `WAIT` answers, and the command connection is one
//! socket shared by every lock of the manager. While replicas confirm, a `WAIT`
//! lasts a replica round trip; when they are missing (a failover to a master left
//! with no replica, a frozen replica), each lasts its whole timeout, and calls
//! pipelined behind a few of them outlast the response timeout: a release was seen
//! answered "timed out" again and again for 5 s. So each connection has a budget
//! ([`Confirmation`]): at most `k` `WAIT`s on it at once, where `k` whole `WAIT`s
//! (each its timeout plus the [`WAIT_SLACK`] Redis may take beyond it) leave at
//! least one more before the response timeout, so that nothing queued behind
//! them times out. And once a `WAIT` found too few replicas, the
//! connection knows they are *short* until a `WAIT` finds enough again: then a
//! call that only hopes (a release) is sent without a `WAIT` at all (its change
//! stands; logged), and a call that must be confirmed takes a free place in the
//! budget to ask again, or, with none free, is refused `NotReplicated` at once
//! without being sent (nothing written). Calls already waiting for a place when the
//! connection turns short stop waiting and go the same way. A round trip with a
//! `WAIT` that failed (a timeout: its `WAIT` may still be blocking) also counts as
//! short.
//!
//! A master with AOF on can also be asked to have written the change to its own
//! disk: `WAITAOF 1 0 <timeout>` (Redis 7.2+) behind the `WAIT` ([`Confirm`]),
//! so a lock survives the master's restart from its AOF as well as a failover.
//! It is sent only with `appendfsync always`, where Redis fsyncs before it
//! answers and `WAITAOF` returns at once; under `everysec` it would hold every
//! lock change, and the shared connection, until the next fsync (up to a second),
//! and the operator chose to lose up to a second of writes anyway. Replicas are
//! still counted by `WAIT` (received), not by `WAITAOF`'s second number, which
//! counts only replicas running with AOF of their own. Chosen once, from the
//! master's `INFO` when the manager starts (`node/checks.rs`).

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use futures::future::{select, Either};
use redis::{Cmd, RedisError, RedisResult, Value};
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tracing::{info, warn};

use crate::config::{ReplicaSync, WAIT_SLACK};
use crate::durations::millis;
use crate::error::not_replicated;
use redis::aio::ConnectionLike;

/// How much a script's answer depends on its write reaching replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// It writes nothing (inspect): no `WAIT`.
    ReadOnly,
    /// Its write is done whatever the replicas say (a release, a refresh): a
    /// shortfall is logged, the answer stands.
    BestEffort,
    /// Its answer is only true once replicated (a grant, a renewal): a shortfall
    /// turns the answer into an error.
    Must,
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

/// Replica confirmation on one connection: what is required, and the budget of
/// `WAIT`s that may block it at once (see the module documentation). Shared by
/// every clone of the connection.
#[derive(Debug)]
pub(crate) struct Confirmation {
    /// How many replicas must confirm, and how long the master waits for them.
    sync: ReplicaSync,
    /// Places for `WAIT`s on the connection at once.
    places: Semaphore,
    /// The last `WAIT` found too few replicas (or failed).
    short: AtomicBool,
    /// How many replicas the last `WAIT` counted.
    acked: AtomicU32,
    /// Wakes the calls waiting for a place when the connection turns short.
    turned_short: Notify,
    /// `WAITAOF 1 0` follows the `WAIT` ([`Confirm::WaitAndAof`]).
    aof: bool,
}

/// How a call goes out on a connection that asks replicas to confirm.
enum Way<'a> {
    /// With a `WAIT`, in a place of the budget.
    Wait(SemaphorePermit<'a>),
    /// Without a `WAIT` (a call that only hopes, while replicas are short).
    Alone,
    /// Not at all (a call that must be confirmed, while replicas are short and
    /// no place is free).
    Refused,
}

impl Confirmation {
    /// Confirmation by `sync`, with the commands `confirm` names, on a
    /// connection whose calls time out after `response_timeout` (longer than
    /// `sync.timeout`, `Config::validate`).
    pub(crate) fn new(
        sync: ReplicaSync,
        response_timeout: Duration,
        confirm: Confirm,
    ) -> Confirmation {
        Confirmation {
            sync,
            places: Semaphore::new(budget(sync.timeout, response_timeout)),
            short: AtomicBool::new(false),
            acked: AtomicU32::new(0),
            turned_short: Notify::new(),
            aof: confirm == Confirm::WaitAndAof,
        }
    }

    /// Whether the last `WAIT` found too few replicas.
    fn is_short(&self) -> bool {
        self.short.load(Ordering::Acquire)
    }

    /// The way a call with `need` (not read-only) goes out now.
    async fn way(&self, need: Need) -> Way<'_> {
        // Listen before looking, so that turning short in between is heard.
        let mut turned = pin!(self.turned_short.notified());
        turned.as_mut().enable();
        if !self.is_short() {
            if let Ok(place) = self.places.try_acquire() {
                return Way::Wait(place);
            }
            if let Either::Left((Ok(place), _)) = select(pin!(self.places.acquire()), turned).await
            {
                if !self.is_short() {
                    return Way::Wait(place);
                }
            }
        }
        match need {
            Need::Must => match self.places.try_acquire() {
                // A grant may ask again whether the replicas are back.
                Ok(place) => Way::Wait(place),
                Err(_) => Way::Refused,
            },
            _ => Way::Alone,
        }
    }

    /// Remembers what a `WAIT` found.
    fn record(&self, confirmed: &Confirmed) {
        let (acked, failed) = match confirmed {
            Confirmed::NotAsked => return,
            Confirmed::Enough => {
                if self.short.swap(false, Ordering::AcqRel) {
                    info!(
                        wanted = self.sync.min,
                        "replicas confirm lock changes again"
                    );
                }
                return;
            }
            Confirmed::Short { acked, .. } => (*acked, None),
            Confirmed::Failed(e) => (0, Some(e)),
        };
        self.acked.store(acked, Ordering::Release);
        if !self.short.swap(true, Ordering::AcqRel) {
            match failed {
                Some(e) => warn!(
                    error = %e,
                    "a lock change with WAIT failed; until a WAIT confirms again, releases go without one and grants ask only within the WAIT budget"
                ),
                None => warn!(
                    acked,
                    wanted = self.sync.min,
                    "too few replicas confirm lock changes; until they do, releases go without WAIT and grants ask only within the WAIT budget"
                ),
            }
            self.turned_short.notify_waiters();
        }
    }

    /// How many replicas the last `WAIT` counted, and how many must: the answer
    /// for a call refused or sent alone while replicas are short.
    fn shortfall(&self) -> (u32, u32) {
        (self.acked.load(Ordering::Acquire), self.sync.min)
    }
}

/// How many `WAIT`s of `timeout` may block a connection at once so that a call
/// queued behind all of them still has a whole `WAIT` left of
/// `response_timeout`, counting the [`WAIT_SLACK`] Redis may take beyond each
/// timeout: at least one.
fn budget(timeout: Duration, response_timeout: Duration) -> usize {
    let whole = response_timeout.as_nanos() / (timeout + WAIT_SLACK).as_nanos();
    usize::try_from(whole.saturating_sub(1))
        .unwrap_or(usize::MAX)
        .clamp(1, Semaphore::MAX_PERMITS)
}

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
}

/// Sends `cmd`, followed by `WAIT` when the connection asks replicas to confirm
/// and `need` is not read-only, within the connection's budget of `WAIT`s (see
/// the module documentation); answers the script's reply as Redis sent it. A
/// call that must be confirmed while replicas are short and the budget is spent
/// is not sent: it is answered `NotReplicated` at once.
///
/// `confirmation` is the connection's own ([`ScriptConn::confirmation`]), passed
/// in rather than asked for here, so that this file needs nothing of `lua.rs`
/// (which names [`Confirmation`]).
///
/// [`ScriptConn::confirmation`]: super::ScriptConn::confirmation
pub(crate) async fn send<C: ConnectionLike>(
    conn: &mut C,
    confirmation: Option<std::sync::Arc<Confirmation>>,
    cmd: &Cmd,
    need: Need,
) -> RedisResult<(Value, Confirmed)> {
    let Some(confirmation) = confirmation.filter(|_| need != Need::ReadOnly) else {
        return Ok((conn.req_packed_command(cmd).await?, Confirmed::NotAsked));
    };
    let _place = match confirmation.way(need).await {
        Way::Wait(place) => place,
        Way::Alone => {
            let reply = conn.req_packed_command(cmd).await?;
            let (acked, wanted) = confirmation.shortfall();
            return Ok((reply, Confirmed::Short { acked, wanted }));
        }
        Way::Refused => {
            let (acked, wanted) = confirmation.shortfall();
            return Err(not_replicated(acked, wanted));
        }
    };
    let sync = confirmation.sync;
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone())
        .cmd("WAIT")
        .arg(sync.min)
        .arg(millis(sync.timeout));
    if confirmation.aof {
        pipe.cmd("WAITAOF").arg(1).arg(0).arg(millis(sync.timeout));
    }
    let count = if confirmation.aof { 3 } else { 2 };
    let replies = match conn.req_packed_commands(&pipe, 0, count).await {
        Ok(replies) => replies,
        Err(e) => {
            // Its WAIT may still block the connection (a timeout).
            confirmation.record(&Confirmed::Failed(e.clone()));
            return Err(e);
        }
    };
    let mut replies = replies.into_iter();
    let (Some(reply), Some(wait)) = (replies.next(), replies.next()) else {
        return Err(super::unexpected(
            "a script and WAIT gave fewer than two replies",
        ));
    };
    let confirmed = confirmed(wait, replies.next(), sync);
    confirmation.record(&confirmed);
    Ok((reply, confirmed))
}

/// Reads `WAIT`'s reply, and `WAITAOF`'s if it was sent, against what `sync`
/// requires.
fn confirmed(wait: Value, waitaof: Option<Value>, sync: ReplicaSync) -> Confirmed {
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
            _ => Confirmed::Failed(super::unexpected("WAITAOF returned an unknown shape")),
        },
        (Confirmed::Enough, Value::ServerError(e)) => Confirmed::Failed(e.into()),
        (Confirmed::Enough, _) => {
            Confirmed::Failed(super::unexpected("WAITAOF returned an unknown shape"))
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
        Value::ServerError(e) => Confirmed::Failed(e.into()),
        _ => Confirmed::Failed(super::unexpected("WAIT returned an unknown shape")),
    }
}

/// The reply a caller gets for a script's `reply` that replicas confirmed as
/// `confirmed`, given how much the answer needs them; `lock` names the key for
/// the log. A script that failed changed nothing to confirm: its error stands.
pub(crate) fn judge(
    need: Need,
    reply: Value,
    confirmed: &Confirmed,
    lock: &str,
) -> RedisResult<Value> {
    if matches!(reply, Value::ServerError(_)) {
        return Ok(reply);
    }
    match (need, confirmed) {
        (_, Confirmed::NotAsked | Confirmed::Enough) | (Need::ReadOnly, _) => Ok(reply),
        (Need::Must, Confirmed::Short { acked, wanted }) => Err(not_replicated(*acked, *wanted)),
        (Need::Must, Confirmed::Failed(e)) => Err(e.clone()),
        (Need::BestEffort, Confirmed::Short { acked, wanted }) => {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let grant = judge(Need::Must, Value::Int(1), &short, "acquire");
        let e = grant.expect_err("a grant two replicas did not confirm");
        assert!(crate::error::redis_is_transient(&e));
        assert!(judge(Need::BestEffort, Value::Int(0), &short, "release").is_ok());
        assert!(matches!(
            confirmed(Value::Int(3), None, sync(2)),
            Confirmed::Enough
        ));
    }

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

    #[test]
    fn the_budget_leaves_a_whole_wait_of_the_response_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(budget(ms(200), ms(400)), 1);
        assert_eq!(budget(ms(500), ms(2000)), 2);
        assert_eq!(budget(ms(10), ms(2000)), 17);
    }
}
