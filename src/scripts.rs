//! The Lua scripts in `lua/`, each built once as a `redis::Script`, behind typed calls.
//!
//! A `redis::Script` hashes its source once and sends EVALSHA, falling back to
//! loading the script when Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH),
//! so callers never see a missing script. Everything that changes a lock goes through
//! these scripts: each runs atomically in Redis, which is what makes the hash, its
//! TTL, the fencing counter and the unlock message change together.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};

use crate::keys;

/// The compiled scripts, shared by every manager in the process.
struct Scripts {
    /// `lua/acquire.lua`
    acquire: Script,
    /// `lua/release.lua`
    release: Script,
    /// `lua/renew.lua`
    renew: Script,
    /// `lua/force_release.lua`
    force_release: Script,
    /// `lua/inspect.lua`
    inspect: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(include_str!("../lua/acquire.lua")),
    release: Script::new(include_str!("../lua/release.lua")),
    renew: Script::new(include_str!("../lua/renew.lua")),
    force_release: Script::new(include_str!("../lua/force_release.lua")),
    inspect: Script::new(include_str!("../lua/inspect.lua")),
});

/// What an acquisition attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The caller holds the lock now.
    Acquired {
        /// The new fencing token.
        token: u64,
        /// The caller's hold count after this acquisition.
        holds: u32,
    },
    /// Another owner holds it; it frees by itself within this time at the latest
    /// (`None`: the key has no expiry, so only a release frees it).
    Busy { ttl: Option<Duration> },
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The last hold was given back: the lock is deleted and a waiter was woken.
    Released,
    /// The caller still holds the lock this many times.
    StillHeld(u32),
    /// The caller did not hold the lock; nothing changed.
    NotHeld,
}

/// Converts a PTTL answer: a positive number of ms, or -1 (no expiry).
fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

fn unexpected(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, what))
}

/// Runs `lua/acquire.lua` for one owner field.
pub(crate) async fn acquire(
    mut conn: ConnectionManager,
    name: &str,
    owner_field: &str,
    lease_ms: u64,
) -> RedisResult<AcquireReply> {
    let reply: Vec<i64> = SCRIPTS
        .acquire
        .key(name)
        .key(keys::token(name))
        .arg(lease_ms)
        .arg(owner_field)
        .invoke_async(&mut conn)
        .await?;
    match reply.as_slice() {
        [1, token, holds] => Ok(AcquireReply::Acquired {
            token: u64::try_from(*token).map_err(|_| unexpected("negative fencing token"))?,
            holds: u32::try_from(*holds).map_err(|_| unexpected("hold count out of range"))?,
        }),
        [0, pttl] => Ok(AcquireReply::Busy {
            ttl: ttl_from_pttl(*pttl),
        }),
        _ => Err(unexpected("acquire script returned an unknown shape")),
    }
}

/// Runs `lua/release.lua`: one hold of `owner_field` is given back.
pub(crate) async fn release(
    mut conn: ConnectionManager,
    name: &str,
    owner_field: &str,
    lease_ms: u64,
    request_id: &str,
    latch_ttl_ms: u64,
) -> RedisResult<ReleaseReply> {
    let left: i64 = SCRIPTS
        .release
        .key(name)
        .key(keys::channel(name))
        .key(keys::latch(name, request_id))
        .arg(lease_ms)
        .arg(owner_field)
        .arg(latch_ttl_ms)
        .arg(keys::WAKE_ONE)
        .invoke_async(&mut conn)
        .await?;
    Ok(match left {
        0 => ReleaseReply::Released,
        n if n > 0 => ReleaseReply::StillHeld(u32::try_from(n).unwrap_or(u32::MAX)),
        _ => ReleaseReply::NotHeld,
    })
}

/// Runs `lua/renew.lua` over `(lock name, owner field)` pairs: one round trip for
/// all of them. Returns, in order, whether each is still held.
pub(crate) async fn renew(
    mut conn: ConnectionManager,
    locks: &[(&str, &str)],
    lease_ms: u64,
) -> RedisResult<Vec<bool>> {
    let mut call = SCRIPTS.renew.prepare_invoke();
    call.arg(lease_ms);
    for (name, field) in locks {
        call.key(*name).arg(*field);
    }
    let held: Vec<i64> = call.invoke_async(&mut conn).await?;
    if held.len() != locks.len() {
        return Err(unexpected(
            "renew script returned the wrong number of answers",
        ));
    }
    Ok(held.into_iter().map(|h| h == 1).collect())
}

/// Runs `lua/force_release.lua`. Returns whether a lock was deleted.
pub(crate) async fn force_release(mut conn: ConnectionManager, name: &str) -> RedisResult<bool> {
    let deleted: i64 = SCRIPTS
        .force_release
        .key(name)
        .key(keys::channel(name))
        .arg(keys::WAKE_ONE)
        .invoke_async(&mut conn)
        .await?;
    Ok(deleted == 1)
}

/// What `lua/inspect.lua` saw: the remaining TTL and the hash's fields and values,
/// or `None` when there is no such key.
pub(crate) type Inspected = Option<(Option<Duration>, Vec<(String, String)>)>;

/// Runs `lua/inspect.lua`.
pub(crate) async fn inspect(mut conn: ConnectionManager, name: &str) -> RedisResult<Inspected> {
    let reply: redis::Value = SCRIPTS.inspect.key(name).invoke_async(&mut conn).await?;
    let redis::Value::Array(parts) = reply else {
        return Err(unexpected("inspect script returned an unknown shape"));
    };
    match parts.as_slice() {
        [redis::Value::Int(-2)] => Ok(None),
        [redis::Value::Int(pttl), fields] => {
            let flat: Vec<String> = redis::from_redis_value_ref(fields)?;
            let pairs = flat
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            Ok(Some((ttl_from_pttl(*pttl), pairs)))
        }
        _ => Err(unexpected("inspect script returned an unknown shape")),
    }
}
