//! Finding the deployment at start: what is waited out and what is refused.
//!
//! A process that starts while its deployment is changing hands (a Sentinel
//! failover: for a few seconds the Sentinels name a dead master or none; a cluster
//! whose slots are not all served while a replica takes over) must not fail at
//! once with the same words a mistyped master name gets. Starting is part of the
//! caller's wait (`Config::start_wait`): a condition that passes by itself is
//! waited out, said once in the log, and a condition a person must fix is refused
//! at once with words that say which. A standalone server is not waited for: its
//! first connection is named at once (`diagnose.rs`), a refused one included,
//! since a restart and a wrong port look the same.
//!
//! Once connected, a lock manager reads the one server setting that can break
//! locks without any error, and reports it in the log: under `maxmemory`, any
//! eviction policy but `noeviction` may delete a lock key to make room
//! (`allkeys-*` any key, `volatile-*` keys with a TTL, which every lock has).
//! The lock is then free for the next taker while its holder still believes it
//! holds it, and nothing tells either of them. Only the server knows its
//! policy, so it is asked (`CONFIG GET`); a server that refuses the question
//! (an ACL without CONFIG, a managed service that renames it) is not checked.

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::RedisError;
use tracing::{debug, info, warn};

use crate::config::Config;
use crate::error::{LockError, FAILOVER_IN_PROGRESS};

/// The pause between two tries while a failover is waited out: about as often as
/// the Follower looks the master up again after a failed call.
const PAUSE: Duration = Duration::from_millis(250);

/// What to do after a failed try to reach the deployment.
pub(super) enum Verdict {
    /// It is changing hands: try again (the reason, for the log).
    Wait(String),
    /// A person must fix this: the error to answer now.
    Refuse(LockError),
    /// Neither: answer the error as it is.
    Fail,
}

/// Judges the error of a failed try, asking the Sentinels where that decides.
pub(super) async fn judge(config: &Config, e: &RedisError) -> Verdict {
    // Only what a failover looks like is worth a wait: no master named, or none
    // that answers. A refused password or another answer of a live server is not.
    let changing_hands = e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel
        || e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.code() == Some("READONLY");
    if let Some((name, _)) = config.sentinel.as_ref().filter(|_| changing_hands) {
        return match super::sentinel::monitored(config).await {
            Some(true) => Verdict::Wait(format!(
                "{FAILOVER_IN_PROGRESS}, waiting for the new master: the Sentinels monitor \
                 '{name}' but name no master that answers ({e})"
            )),
            Some(false) => Verdict::Refuse(LockError::InvalidConfig(format!(
                "no Sentinel monitors a master named '{name}' (check the master name)"
            ))),
            None => Verdict::Fail,
        };
    }
    if config.cluster.is_some() && e.to_string().contains("cluster_state is not ok") {
        return Verdict::Wait(format!(
            "{FAILOVER_IN_PROGRESS} or a slot move: the cluster does not serve every \
             slot yet, waiting ({e})"
        ));
    }
    Verdict::Fail
}

/// Tries `attempt` until it succeeds, or fails in a way not worth waiting out, or
/// `config.start_wait` has passed.
pub(super) async fn until_found<T, F, Fut>(config: &Config, mut attempt: F) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, RedisError>>,
{
    let deadline = Instant::now().checked_add(config.start_wait);
    let mut waiting = false;
    loop {
        let e = match attempt().await {
            Ok(found) => {
                if waiting {
                    info!("found the deployment; starting");
                }
                return Ok(found);
            }
            Err(e) => e,
        };
        let out_of_time = deadline.is_some_and(|d| Instant::now() + PAUSE >= d);
        match judge(config, &e).await {
            Verdict::Refuse(refused) => return Err(refused),
            Verdict::Wait(why) if !out_of_time => {
                if !waiting {
                    warn!("{why}");
                    waiting = true;
                }
                tokio::time::sleep(PAUSE).await;
            }
            Verdict::Wait(why) => {
                let waited = config.start_wait;
                return Err(LockError::from(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("still not found after waiting {waited:?} to start: {why}"),
                ))));
            }
            Verdict::Fail => return Err(LockError::from(e)),
        }
    }
}

/// Reads `maxmemory` and `maxmemory-policy` and warns, once, if locks can be
/// evicted. Never fails: the check is advice, not a condition to start.
pub(crate) async fn warn_if_locks_can_be_evicted<C: ConnectionLike>(conn: &mut C) {
    let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory*")
        .query_async(conn)
        .await;
    let pairs = match reply {
        Ok(pairs) => pairs,
        Err(e) => {
            debug!(error = %e, "cannot read maxmemory-policy; eviction of locks not checked");
            return;
        }
    };
    let get = |name: &str| {
        pairs
            .chunks_exact(2)
            .find(|kv| kv[0].eq_ignore_ascii_case(name))
            .map(|kv| kv[1].as_str())
    };
    let policy = get("maxmemory-policy").unwrap_or("noeviction");
    let limit = get("maxmemory").unwrap_or("0");
    if evicts_locks(policy) {
        warn!(
            policy,
            maxmemory = limit,
            "Redis may evict lock keys under memory pressure (maxmemory-policy {policy}): an \
             evicted lock is free for others while its holder believes it holds it; use \
             noeviction for the locks' Redis (docs/operations.md)"
        );
    }
}

/// Whether this policy may delete a lock key: every policy but `noeviction`.
fn evicts_locks(policy: &str) -> bool {
    !policy.eq_ignore_ascii_case("noeviction")
}

#[cfg(test)]
mod tests {
    use super::evicts_locks;

    #[test]
    fn only_noeviction_keeps_locks() {
        assert!(!evicts_locks("noeviction"));
        for p in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-ttl",
        ] {
            assert!(evicts_locks(p), "{p}");
        }
    }
}
