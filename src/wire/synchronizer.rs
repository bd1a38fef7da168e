//! The synchronizers' scripts as typed calls: the semaphore's (`lua/sem_*.lua`)
//! and the count-down latch's (`lua/latch_*.lua`), in Redisson's layout.
//!
//! Both keep their state in one string key, the name itself: a semaphore's
//! available permits, a latch's count. Every change that may let a waiter through
//! publishes on the synchronizer's channel (`keys::semaphore_channel`,
//! `keys::latch_channel`) in the same script, so a waiter that reads the key after
//! subscribing cannot miss it. Plain reads (`available`, `count`) are a GET and need
//! no script: [`read_number`]. A synchronizer's key is labelled with its kind
//! once it is made ([`label`]), for operators ([`SyncInspect`]).

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};

use super::lua::Lua;
use super::{unexpected, Invocation, Once, ScriptCall};
use crate::keys;
use crate::sync_view::{Looked, SynchronizerKind};

// Every script gets `lua/acl_prelude.lua` in front (`need`: the writes and the
// PUBLISH asked for before the first write), and those that read the number at the
// key `lua/number_prelude.lua` too (a key that holds no number is refused the same
// way by each); Redis scripts cannot include one another.
static SEM_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/number_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/sem_acquire.lua")
    ))
});
static SEM_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/number_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/sem_release.lua")
    ))
});
static SEM_TRY_SET: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/sem_try_set.lua")
    ))
});
static SEM_DRAIN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/number_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/sem_drain.lua")
    ))
});
static SEM_UNDO: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/number_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/sem_undo.lua")
    ))
});
static LATCH_SET: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/latch_set.lua")
    ))
});
static LATCH_COUNT_DOWN: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/number_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/latch_count_down.lua")
    ))
});
static SYNC_INSPECT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/sync_inspect.lua")));

/// The most permits a semaphore key may hold: Redisson reads the key as a Java
/// `int`, so a larger number would break a Java service sharing the semaphore.
pub(crate) const MAX_PERMITS: u64 = i32::MAX as u64;

/// Take `permits` of semaphore `name` if that many are available.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemAcquire<'a> {
    /// The semaphore (its key).
    pub(crate) name: &'a str,
    /// How many, at least 1.
    pub(crate) permits: u32,
    /// The waiter's op id, the same for each of its attempts.
    pub(crate) once: Once<'a>,
}

/// What a take attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemTake {
    /// Taken; this many are left available.
    Taken { left: u64 },
    /// Too few available (this many); nothing changed. `missing`: the key does
    /// not exist at all, so no release will come.
    Short { available: u64, missing: bool },
}

impl ScriptCall for SemAcquire<'_> {
    type Reply = SemTake;

    fn invocation(&self) -> Invocation {
        Invocation::new(&SEM_ACQUIRE)
            .must_replicate()
            .key(self.name)
            .key(keys::semaphore_channel(self.name))
            .key(self.once.marker(self.name))
            .arg(self.permits)
            .arg(self.once.ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<SemTake> {
        let got: Vec<i64> = redis::from_redis_value_ref(&reply)?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        match got.as_slice() {
            [1, left] => Ok(SemTake::Taken { left: count(*left) }),
            [0, available, missing] => Ok(SemTake::Short {
                available: count(*available),
                missing: *missing == 1,
            }),
            _ => Err(unexpected("semaphore acquire returned an unknown shape")),
        }
    }
}

/// Add `permits` to semaphore `name` (a release, or new permits) and wake its
/// waiters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemRelease<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// How many, at least 1.
    pub(crate) permits: u32,
    /// This give-back's op id, the same for each of its tries.
    pub(crate) once: Once<'a>,
}

/// What adding permits did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemAdded {
    /// Added; this many are available now. `created`: the key was absent, so
    /// this call made the semaphore.
    Available { now: u64, created: bool },
    /// Refused: the sum would pass [`MAX_PERMITS`]; this many are available.
    Overflow(u64),
}

impl SemAdded {
    /// Reads a release script's reply (`[1, now, created]` or `[-1, have]`),
    /// the plain and the fair semaphore's alike; `script` names it in the error.
    pub(crate) fn parse(reply: &Value, script: &'static str) -> RedisResult<SemAdded> {
        let parts: Vec<i64> = redis::from_redis_value_ref(reply)?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        match parts.as_slice() {
            [1, now, created] => Ok(SemAdded::Available {
                now: n(*now),
                created: *created == 1,
            }),
            [-1, have] => Ok(SemAdded::Overflow(n(*have))),
            _ => Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                script,
                "returned an unknown shape".to_owned(),
            ))),
        }
    }
}

impl ScriptCall for SemRelease<'_> {
    type Reply = SemAdded;

    fn invocation(&self) -> Invocation {
        Invocation::new(&SEM_RELEASE)
            .key(self.name)
            .key(keys::semaphore_channel(self.name))
            .key(self.once.marker(self.name))
            .arg(self.permits)
            .arg(MAX_PERMITS)
            .arg(self.once.ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<SemAdded> {
        SemAdded::parse(&reply, "semaphore release")
    }
}

/// A waiter of semaphore `name` left while a take of its op id may have run
/// unseen, or its grant found nobody: give the permits back if a copy took
/// them, and keep a later copy from taking any (`lua/sem_undo.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemUndo<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The permits its attempts asked for.
    pub(crate) permits: u32,
    /// The waiter's op id.
    pub(crate) once: Once<'a>,
}

/// What undoing a waiter's take did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undone {
    /// A copy had taken the permits: they are back.
    GaveBack,
    /// No copy had taken any: none will.
    Cancelled,
    /// A copy of this undo ran before.
    Already,
}

impl Undone {
    /// Reads an undo script's answer (1, 0 or 2).
    pub(crate) fn parse(reply: &Value) -> RedisResult<Undone> {
        match redis::from_redis_value_ref::<i64>(reply)? {
            1 => Ok(Undone::GaveBack),
            0 => Ok(Undone::Cancelled),
            2 => Ok(Undone::Already),
            _ => Err(unexpected("an undo returned an unknown answer")),
        }
    }
}

impl ScriptCall for SemUndo<'_> {
    type Reply = Undone;

    fn invocation(&self) -> Invocation {
        Invocation::new(&SEM_UNDO)
            .key(self.name)
            .key(keys::semaphore_channel(self.name))
            .key(self.once.marker(self.name))
            .arg(self.permits)
            .arg(self.once.ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<Undone> {
        Undone::parse(&reply)
    }
}

/// Give semaphore `name` its first permits unless it has a value already.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemTrySet<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The permits (at most [`MAX_PERMITS`]).
    pub(crate) permits: u32,
}

impl ScriptCall for SemTrySet<'_> {
    /// Whether it was set.
    type Reply = bool;

    fn invocation(&self) -> Invocation {
        Invocation::new(&SEM_TRY_SET)
            .must_replicate()
            .key(self.name)
            .key(keys::semaphore_channel(self.name))
            .arg(self.permits)
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        Ok(redis::from_redis_value_ref::<i64>(&reply)? == 1)
    }
}

/// Take every available permit of semaphore `name`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SemDrain<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// This drain's op id, the same for each of its tries.
    pub(crate) once: Once<'a>,
}

impl ScriptCall for SemDrain<'_> {
    /// How many were taken.
    type Reply = u64;

    fn invocation(&self) -> Invocation {
        Invocation::new(&SEM_DRAIN)
            .must_replicate()
            .key(self.name)
            .key(self.once.marker(self.name))
            .arg(self.once.ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<u64> {
        Ok(u64::try_from(redis::from_redis_value_ref::<i64>(&reply)?).unwrap_or(0))
    }
}

/// Give latch `name` its count unless it has one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchSet<'a> {
    /// The latch.
    pub(crate) name: &'a str,
    /// The count, at least 1 and at most `i64::MAX` (a Java `long`).
    pub(crate) count: u64,
}

impl ScriptCall for LatchSet<'_> {
    /// Whether it was set.
    type Reply = bool;

    fn invocation(&self) -> Invocation {
        Invocation::new(&LATCH_SET)
            .must_replicate()
            .key(self.name)
            .key(keys::latch_channel(self.name))
            .arg(self.count)
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        Ok(redis::from_redis_value_ref::<i64>(&reply)? == 1)
    }
}

/// Count latch `name` down by one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LatchCountDown<'a> {
    /// The latch.
    pub(crate) name: &'a str,
    /// This count-down's op id, the same for each of its tries.
    pub(crate) once: Once<'a>,
}

/// What a count-down did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountedDown {
    /// This many are left; 0: this call opened the latch.
    Left(u64),
    /// The latch was open already.
    WasOpen,
}

impl ScriptCall for LatchCountDown<'_> {
    type Reply = CountedDown;

    fn invocation(&self) -> Invocation {
        Invocation::new(&LATCH_COUNT_DOWN)
            .key(self.name)
            .key(keys::latch_channel(self.name))
            .key(self.once.marker(self.name))
            .arg(self.once.ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<CountedDown> {
        let left: i64 = redis::from_redis_value_ref(&reply)?;
        Ok(u64::try_from(left).map_or(CountedDown::WasOpen, CountedDown::Left))
    }
}

/// The number a synchronizer's key holds (a semaphore's permits, a latch's count);
/// absent or below zero reads as 0, as Redisson reads it. Anything else is an
/// error that names the key and what it holds (read as 0, a latch or a
/// semaphore would wait on it for ever).
pub(crate) async fn read_number<C: ConnectionLike>(conn: &mut C, name: &str) -> RedisResult<u64> {
    let value: Option<Vec<u8>> = redis::cmd("GET").arg(name).query_async(conn).await?;
    let Some(value) = value else { return Ok(0) };
    let value = String::from_utf8_lossy(&value);
    match value.trim().parse::<i64>() {
        Ok(n) => Ok(u64::try_from(n).unwrap_or(0)),
        Err(_) => Err(crate::error::not_a_number(name, &value)),
    }
}

/// Whether a synchronizer's key exists: a latch with none is open, whether it was
/// never set or has counted down (Redisson deletes it at zero).
pub(crate) async fn key_exists<C: ConnectionLike>(conn: &mut C, name: &str) -> RedisResult<bool> {
    let n: i64 = redis::cmd("EXISTS").arg(name).query_async(conn).await?;
    Ok(n == 1)
}

/// Writes the kind label of synchronizer `name` (`keys::kind_label`) after a call
/// made its key, or deletes it (`None`) after a latch opened. The label is for
/// operators only, written beside the synchronizer rather than by its scripts:
/// a script must declare every key it touches, and Redis refuses the whole
/// call to a user whose ACL does not cover one of them, so a label inside the
/// scripts would break every ACL written before it. So a failure here (no
/// right to the label's key, a connection lost after the call) is logged and
/// the synchronizer's call stands; operators then see the key by what waits on
/// it only (`sync_view.rs`).
pub(crate) async fn label<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
    kind: Option<SynchronizerKind>,
) {
    let key = keys::kind_label(name);
    let mut cmd = redis::cmd(if kind.is_some() { "SET" } else { "DEL" });
    cmd.arg(&key);
    if let Some(kind) = kind {
        cmd.arg(kind.as_str());
    }
    if let Err(e) = cmd.exec_async(conn).await {
        tracing::warn!(
            synchronizer = name,
            label = %key,
            error = %e,
            "could not write the kind label (the ACL lacks the label's key?): operators see \
             this synchronizer only while something waits on it"
        );
    }
}

/// One look at a key that may be a semaphore or a latch: its value, TTL, kind
/// label and a permit-expirable semaphore's permits out (`lua/sync_inspect.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SyncInspect<'a> {
    /// The name (the key).
    pub(crate) name: &'a str,
}

impl ScriptCall for SyncInspect<'_> {
    type Reply = Looked;

    fn invocation(&self) -> Invocation {
        Invocation::new(&SYNC_INSPECT)
            .read_only()
            .key(self.name)
            .key(keys::kind_label(self.name))
            .key(keys::permit_timeouts(self.name))
    }

    fn parse(&self, reply: Value) -> RedisResult<Looked> {
        // The value may be any bytes (an application's string under the name).
        let (value, pttl, label, taken): (Option<Vec<u8>>, i64, Option<String>, i64) =
            redis::from_redis_value_ref(&reply)?;
        Ok(Looked {
            value: value.and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok()),
            ttl: super::ttl_from_pttl(pttl),
            label,
            taken: u64::try_from(taken).ok(),
        })
    }
}
