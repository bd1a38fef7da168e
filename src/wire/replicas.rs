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

use redis::{Cmd, RedisError, RedisResult, Value};
use tracing::warn;

use super::lua::ScriptConn;
use crate::config::{millis, ReplicaSync};
use crate::error::not_replicated;

/// How much a script's answer depends on its write reaching replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// It writes nothing (inspect): no `WAIT`.
    ReadOnly,
    /// Its write is done whatever the replicas say (a release, a refresh): a
    /// shortfall is logged, the answer stands.
    Hope,
    /// Its answer is only true once replicated (a grant, a renewal): a shortfall
    /// turns the answer into an error.
    Must,
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
/// and `need` is not read-only; answers the script's reply as Redis sent it.
pub(crate) async fn send<C: ScriptConn>(
    conn: &mut C,
    cmd: &Cmd,
    need: Need,
) -> RedisResult<(Value, Confirmed)> {
    let Some(sync) = conn.sync().filter(|_| need != Need::ReadOnly) else {
        return Ok((conn.req_packed_command(cmd).await?, Confirmed::NotAsked));
    };
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone())
        .cmd("WAIT")
        .arg(sync.min)
        .arg(millis(sync.timeout));
    let mut replies = conn.req_packed_commands(&pipe, 0, 2).await?.into_iter();
    let (Some(reply), Some(wait)) = (replies.next(), replies.next()) else {
        return Err(super::unexpected(
            "a script and WAIT gave fewer than two replies",
        ));
    };
    Ok((reply, confirmed(wait, sync)))
}

/// Reads `WAIT`'s reply against what `sync` requires.
fn confirmed(wait: Value, sync: ReplicaSync) -> Confirmed {
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
        (Need::Hope, Confirmed::Short { acked, wanted }) => {
            warn!(
                lock,
                acked, wanted, "a lock change was not confirmed by enough replicas; it stands"
            );
            Ok(reply)
        }
        (Need::Hope, Confirmed::Failed(e)) => {
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
        let short = confirmed(Value::Int(1), sync(2));
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
        assert!(judge(Need::Hope, Value::Int(0), &short, "release").is_ok());
        assert!(matches!(
            confirmed(Value::Int(3), sync(2)),
            Confirmed::Enough
        ));
    }
}
