//! Settings of the Redis server that can break locks without any error, read once
//! when a manager starts and reported in the log.
//!
//! Under `maxmemory`, any eviction policy but `noeviction` may delete a lock key
//! to make room: `allkeys-*` any key, `volatile-*` keys with a TTL, which every
//! lock has. The lock is then free for the next taker while its holder still
//! believes it holds it, and nothing tells either of them. Only the server knows
//! its policy, so it is asked (`CONFIG GET`); a server that refuses the question
//! (an ACL without CONFIG, a managed service that renames it) is not checked.
//!
//! With `Config::sync_replicas`, the master must have the replicas it is asked to
//! wait for: a manager that waits for two replicas of a master with one would
//! refuse every grant, so that is refused once, at start, with the numbers. The
//! same `INFO` tells the server's version and whether it keeps an AOF, which
//! decide whether `WAITAOF` follows each `WAIT` (`wire/replicas.rs`).

use redis::aio::ConnectionLike;
use tracing::{debug, info, warn};

use crate::config::ReplicaSync;
use crate::error::LockError;
use crate::wire::{confirm_with, Confirm};

/// Checks, at start, that the server is a master with at least as many connected
/// replicas as `sync` wants confirmations from, and answers which commands
/// confirm a lock change there (`INFO`'s default sections, and `appendfsync`
/// when it matters).
pub(crate) async fn replicas_can_confirm<C: ConnectionLike>(
    conn: &mut C,
    sync: ReplicaSync,
) -> Result<Confirm, LockError> {
    // The default sections hold server, persistence and replication alike.
    let info: String = redis::cmd("INFO").query_async(conn).await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    if field("role").as_deref() != Some("master") {
        return Err(LockError::InvalidConfig(
            "sync_replicas: the server is not a master (its role is not master)".into(),
        ));
    }
    let connected: u32 = field("connected_slaves")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if connected < sync.min {
        // Not a configuration error: right after a failover the new master has no
        // replica until the old master comes back as one, and refusing to start
        // then failed every process for seconds. Grants wait for replicas within
        // each caller's wait instead (a shortfall is retried, and at the deadline
        // the waiter gets `NotReplicated`).
        warn!(
            connected,
            wanted = sync.min,
            "sync_replicas: the master has fewer connected replicas than each lock change \
             needs; grants wait for replicas within their wait"
        );
    }
    let version = field("redis_version").unwrap_or_default();
    let aof = field("aof_enabled").as_deref() == Some("1");
    let appendfsync = match aof {
        true => config_get(conn, "appendfsync").await,
        false => None,
    };
    let confirm = confirm_with(&version, aof, appendfsync.as_deref());
    match confirm {
        Confirm::Wait => {}
        Confirm::WaitOnly(why) => info!(
            version,
            "the master keeps an AOF, but lock changes are confirmed with WAIT alone \
             (replicas received them, not necessarily on disk): {why}"
        ),
        Confirm::WaitAndAof => info!(
            version,
            "the master keeps an AOF with appendfsync always: lock changes also wait for \
             WAITAOF 1 0 (written to the master's disk)"
        ),
    }
    Ok(confirm)
}

/// One `CONFIG GET` value, or `None` if the server will not say (an ACL without
/// CONFIG, a managed service that renames it).
async fn config_get<C: ConnectionLike>(conn: &mut C, name: &str) -> Option<String> {
    let pairs: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await
        .map_err(|e| debug!(error = %e, name, "cannot read a server setting"))
        .ok()?;
    pairs.get(1).cloned()
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
