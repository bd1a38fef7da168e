//! The Lua scripts in `lua/`, each built once as a `redis::Script`, behind typed calls.
//!
//! A `redis::Script` hashes its source once and sends EVALSHA, falling back to
//! loading the script when Redis answers NOSCRIPT (after a restart or SCRIPT FLUSH),
//! so callers never see a missing script. Everything that changes a lock goes through
//! these scripts: each runs atomically in Redis, which is what makes the hash, its
//! TTL, the fencing counter and the unlock message change together.
//!
//! This file holds the exclusive lock's scripts, the ones every kind shares
//! (force release, inspect) and the typed answers; `fair` and `rw` hold the fair and
//! read-write locks' scripts. [`acquire`], [`release`] and [`renew`] pick the script
//! of a kind, so the lock actor asks the same three questions of every kind. The
//! exclusive lock's acquire and release go through the [`Coalescer`] (`batch`), which
//! sends those that are ready at the same moment as one script call.

mod batch;
mod fair;
mod rw;

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};

pub(crate) use batch::Coalescer;
pub(crate) use fair::{leave as fair_leave, refresh as fair_refresh, Place};

use crate::inspect::QueuedWaiter;
use crate::keys;
use crate::lock::AcquireKind;

/// The compiled scripts of this file, shared by every manager in the process.
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
    acquire: Script::new(include_str!("../../lua/acquire.lua")),
    release: Script::new(include_str!("../../lua/release.lua")),
    renew: Script::new(include_str!("../../lua/renew.lua")),
    force_release: Script::new(include_str!("../../lua/force_release.lua")),
    inspect: Script::new(include_str!("../../lua/inspect.lua")),
});

/// What an acquisition attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The caller holds the lock now.
    Acquired {
        /// The new fencing token.
        token: u64,
        /// The caller's hold count (of this kind) after this acquisition.
        holds: u32,
    },
    /// Another owner holds it (or, for a fair lock, waits before the caller).
    Busy {
        /// How long until that may change at the latest: the lock frees by itself
        /// or the fair queue's head loses its place (`None`: no bound, only a
        /// release frees it).
        ttl: Option<Duration>,
        /// The owner field at the head of the fair queue, if any.
        head: Option<String>,
    },
    /// The caller holds read holds and asked for the write lock: refused.
    UpgradeRefused,
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The owner's last hold (of this kind) was given back.
    Released {
        /// Whether an unlock message was published (the lock freed, or a write
        /// lock became readable).
        published: bool,
    },
    /// The caller still holds the lock this many times.
    StillHeld(u32),
    /// The caller did not hold the lock; nothing changed.
    NotHeld,
}

/// The options of one acquisition attempt beyond owner and lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptOpts {
    /// Fair lock: how long a place in the queue lasts without a refresh.
    pub(crate) place_ms: u64,
    /// Fair lock: take a place in the queue when the lock cannot be taken now.
    pub(crate) queue: bool,
    /// Every kind: how long the fencing token counter lives after a grant.
    pub(crate) token_ttl_ms: u64,
}

/// Converts a PTTL answer: a positive number of ms, or -1 (no expiry).
fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

fn unexpected(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, what))
}

/// Reads `{1, token, holds}` / `{0, pttl[, head]}` / `{-1}`, the answer shape of
/// every acquire script.
fn acquire_reply(reply: &[redis::Value]) -> RedisResult<AcquireReply> {
    use redis::Value::Int;
    match reply {
        [Int(1), Int(token), Int(holds)] => Ok(AcquireReply::Acquired {
            token: u64::try_from(*token).map_err(|_| unexpected("negative fencing token"))?,
            holds: u32::try_from(*holds).map_err(|_| unexpected("hold count out of range"))?,
        }),
        [Int(0), Int(pttl)] => Ok(AcquireReply::Busy {
            ttl: ttl_from_pttl(*pttl),
            head: None,
        }),
        [Int(0), Int(wait), head] => {
            let head: String = redis::from_redis_value_ref(head)?;
            Ok(AcquireReply::Busy {
                ttl: ttl_from_pttl(*wait),
                head: Some(head).filter(|h| !h.is_empty()),
            })
        }
        [Int(-1)] => Ok(AcquireReply::UpgradeRefused),
        _ => Err(unexpected("acquire script returned an unknown shape")),
    }
}

/// Reads the remaining hold count of a release script: 0 released (and published),
/// > 0 still held, -1 not held.
fn release_reply(left: i64, published: bool) -> ReleaseReply {
    match left {
        0 => ReleaseReply::Released { published },
        n if n > 0 => ReleaseReply::StillHeld(u32::try_from(n).unwrap_or(u32::MAX)),
        _ => ReleaseReply::NotHeld,
    }
}

/// One acquisition attempt of `kind` for the hash field `field` (`<owner field>`,
/// or `<owner field>:write` for a writer).
pub(crate) async fn acquire(
    via: Coalescer,
    kind: AcquireKind,
    name: &str,
    field: &str,
    lease_ms: u64,
    opts: AttemptOpts,
) -> RedisResult<AcquireReply> {
    let conn = via.conn();
    match kind {
        AcquireKind::Exclusive => {
            acquire_exclusive(&via, name, field, lease_ms, opts.token_ttl_ms).await
        }
        AcquireKind::Fair => fair::acquire(conn, name, field, lease_ms, opts).await,
        AcquireKind::Read => rw::acquire_read(conn, name, field, lease_ms, opts.token_ttl_ms).await,
        AcquireKind::Write => {
            rw::acquire_write(conn, name, field, lease_ms, opts.token_ttl_ms).await
        }
    }
}

/// Gives back one hold of `kind` of the hash field `field`; a retry with the same
/// `request_id` returns the first outcome. `retry` says that an earlier attempt with
/// this id may have run: only then does the exclusive script read its latch.
// One argument over clippy's limit: each is one script argument, and bundling them
// would only move the list elsewhere.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release(
    via: Coalescer,
    kind: AcquireKind,
    name: &str,
    field: &str,
    lease_ms: u64,
    request_id: &str,
    latch_ttl_ms: u64,
    retry: bool,
) -> RedisResult<ReleaseReply> {
    let conn = via.conn();
    match kind {
        AcquireKind::Exclusive => {
            release_exclusive(&via, name, field, lease_ms, request_id, latch_ttl_ms, retry).await
        }
        AcquireKind::Fair => {
            fair::release(conn, name, field, lease_ms, request_id, latch_ttl_ms).await
        }
        AcquireKind::Read => rw::release_read(conn, name, field, request_id, latch_ttl_ms).await,
        AcquireKind::Write => {
            rw::release_write(conn, name, field, lease_ms, request_id, latch_ttl_ms).await
        }
    }
}

/// Extends the lease of one holder of `kind`; answers whether it still holds.
pub(crate) async fn renew(
    conn: ConnectionManager,
    kind: AcquireKind,
    name: &str,
    field: &str,
    lease_ms: u64,
) -> RedisResult<bool> {
    match kind {
        AcquireKind::Exclusive | AcquireKind::Fair => {
            let held = renew_many(conn, &[(name, field)], lease_ms).await?;
            Ok(held == [true])
        }
        AcquireKind::Read | AcquireKind::Write => {
            rw::renew(conn, kind, name, field, lease_ms).await
        }
    }
}

/// Runs `lua/acquire.lua` for one owner field, through the coalescer.
async fn acquire_exclusive(
    via: &Coalescer,
    name: &str,
    owner_field: &str,
    lease_ms: u64,
    token_ttl_ms: u64,
) -> RedisResult<AcquireReply> {
    let keys = vec![name.to_string(), keys::token(name)];
    let args = vec![
        lease_ms.to_string(),
        owner_field.to_string(),
        token_ttl_ms.to_string(),
    ];
    match via.run(batch::Call::Acquire, keys, args).await? {
        redis::Value::Array(reply) => acquire_reply(&reply),
        _ => Err(unexpected("acquire script returned an unknown shape")),
    }
}

/// Runs `lua/release.lua` through the coalescer: one hold of `owner_field` is given
/// back.
async fn release_exclusive(
    via: &Coalescer,
    name: &str,
    owner_field: &str,
    lease_ms: u64,
    request_id: &str,
    latch_ttl_ms: u64,
    retry: bool,
) -> RedisResult<ReleaseReply> {
    let keys = vec![
        name.to_string(),
        keys::channel(name),
        keys::latch(name, request_id),
    ];
    let args = vec![
        lease_ms.to_string(),
        owner_field.to_string(),
        latch_ttl_ms.to_string(),
        keys::WAKE_ONE.to_string(),
        if retry { "1" } else { "0" }.to_string(),
    ];
    match via.run(batch::Call::Release, keys, args).await? {
        redis::Value::Int(left) => Ok(release_reply(left, true)),
        _ => Err(unexpected("release script returned an unknown shape")),
    }
}

/// Runs `lua/renew.lua` over `(lock name, owner field)` pairs: one round trip for
/// all of them. Returns, in order, whether each is still held.
pub(crate) async fn renew_many(
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

/// Runs `lua/force_release.lua`, which serves every kind. Returns whether a lock
/// was deleted.
pub(crate) async fn force_release(mut conn: ConnectionManager, name: &str) -> RedisResult<bool> {
    let deleted: i64 = SCRIPTS
        .force_release
        .key(name)
        .key(keys::channel(name))
        .key(keys::rw_channel(name))
        .key(keys::fair_queue(name))
        .arg(keys::WAKE_ONE)
        .arg(keys::WAKE_ALL)
        .invoke_async(&mut conn)
        .await?;
    Ok(deleted == 1)
}

/// What `lua/inspect.lua` saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inspected {
    /// Whether the lock key exists.
    pub(crate) exists: bool,
    /// Its remaining TTL; `None` when it has none (or does not exist).
    pub(crate) ttl: Option<Duration>,
    /// The hash's fields and values.
    pub(crate) fields: Vec<(String, String)>,
    /// The fair queue, head first: each waiter's owner field and the time left
    /// before its place lapses (zero once lapsed, `None` with no deadline).
    pub(crate) queue: Vec<QueuedWaiter>,
}

/// Reads the queue part of `lua/inspect.lua`'s answer: owner field, ms left, ...
fn queued_waiters(flat: &redis::Value) -> RedisResult<Vec<QueuedWaiter>> {
    let redis::Value::Array(items) = flat else {
        return Err(unexpected("inspect script returned an unknown queue shape"));
    };
    items
        .chunks_exact(2)
        .map(|pair| {
            let owner_field: String = redis::from_redis_value_ref(&pair[0])?;
            let left: i64 = redis::from_redis_value_ref(&pair[1])?;
            Ok(QueuedWaiter {
                owner_field,
                expires_in: (left != -1).then(|| Duration::from_millis(left.max(0) as u64)),
            })
        })
        .collect()
}

/// Runs `lua/inspect.lua`.
pub(crate) async fn inspect(mut conn: ConnectionManager, name: &str) -> RedisResult<Inspected> {
    let reply: redis::Value = SCRIPTS
        .inspect
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .invoke_async(&mut conn)
        .await?;
    let redis::Value::Array(parts) = reply else {
        return Err(unexpected("inspect script returned an unknown shape"));
    };
    match parts.as_slice() {
        [redis::Value::Int(pttl), fields, queue] => {
            let flat: Vec<String> = redis::from_redis_value_ref(fields)?;
            let fields = flat
                .chunks_exact(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect();
            Ok(Inspected {
                exists: *pttl != -2,
                ttl: ttl_from_pttl(*pttl),
                fields,
                queue: queued_waiters(queue)?,
            })
        }
        _ => Err(unexpected("inspect script returned an unknown shape")),
    }
}
