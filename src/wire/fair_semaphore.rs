//! The fair semaphore's scripts as typed calls (`lua/fair_sem_*.lua`): take
//! permits or a place in the queue, keep the places of live waiters, leave the
//! queue, and give permits back telling the queue's head.
//!
//! The permits are the plain semaphore's (one string key, the name itself, as
//! Redisson's `RSemaphore` keeps them), so plain and fair holders share them. The
//! queue is lockwarden's own, laid out as Redisson's fair lock lays out its
//! queue: a list of waiter ids ([`keys::sem_queue`]), a zset of the places'
//! expiries on the server's clock ([`keys::sem_timeouts`]) and a channel per
//! waiter ([`keys::sem_waiter_channel`]). Every script but the leave first drops
//! lapsed waiters from the head of the queue (`lua/fair_sem_prelude.lua`).

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::synchronizer::{SemAdded, SemTake, Undone, MAX_PERMITS};
use super::{answers, flag, unexpected, Invocation, Once, Place, ScriptCall};
use crate::keys;

/// Each gets the ACL helpers, the number reader and the fair semaphore's prelude
/// in front: Redis scripts cannot include one another.
macro_rules! fair_sem_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Lua::new(concat!(
                include_str!("../../lua/acl_prelude.lua"),
                include_str!("../../lua/number_prelude.lua"),
                include_str!("../../lua/once_prelude.lua"),
                include_str!("../../lua/fair_sem_prelude.lua"),
                include_str!($file)
            ))
        })
    };
}

static ACQUIRE: LazyLock<Lua> = fair_sem_script!("../../lua/fair_sem_acquire.lua");
static REFRESH: LazyLock<Lua> = fair_sem_script!("../../lua/fair_sem_refresh.lua");
static LEAVE: LazyLock<Lua> = fair_sem_script!("../../lua/fair_sem_leave.lua");
static RELEASE: LazyLock<Lua> = fair_sem_script!("../../lua/fair_sem_release.lua");
static UNDO: LazyLock<Lua> = fair_sem_script!("../../lua/fair_sem_undo.lua");

/// The keys every fair semaphore script starts with: the permits, the queue,
/// the places, the waiters' channel prefix.
fn queue_keys(script: &'static Lua, name: &str) -> Invocation {
    Invocation::new(script)
        .key(name)
        .key(keys::sem_queue(name))
        .key(keys::sem_timeouts(name))
        .key(keys::sem_channels(name))
}

/// Take `permits` of the fair semaphore `name` for the waiter `waiter` if it is
/// at the head of the queue (or the queue is empty), else (with `queue`) take or
/// keep its place.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairSemAcquire<'a> {
    /// The semaphore (its key).
    pub(crate) name: &'a str,
    /// The waiter id, `<client id>:<n>`.
    pub(crate) waiter: &'a str,
    /// How many, at least 1.
    pub(crate) permits: u32,
    /// How long a place lasts without a refresh, in ms.
    pub(crate) place_ms: u64,
    /// Take a place when the permits cannot be taken now (not for a try-once).
    pub(crate) queue: bool,
    /// How long Redis remembers what a copy of this take did (its op id is the
    /// waiter id), in ms.
    pub(crate) once_ttl_ms: u64,
}

impl ScriptCall for FairSemAcquire<'_> {
    type Reply = SemTake;

    fn invocation(&self) -> Invocation {
        queue_keys(&ACQUIRE, self.name)
            .must_replicate()
            .key(keys::semaphore_channel(self.name))
            .key(keys::op_marker(self.name, self.waiter))
            .arg(self.permits)
            .arg(self.waiter)
            .arg(self.place_ms)
            .arg(flag(self.queue))
            .arg(self.once_ttl_ms)
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
            _ => Err(unexpected(
                "fair semaphore acquire returned an unknown shape",
            )),
        }
    }
}

/// Keep the places of these waiters (at least one) and say where each stands
/// ([`Place::Head`]: at the head with some permits available).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairSemRefresh<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The waiter ids.
    pub(crate) waiters: &'a [&'a str],
    /// How long a place lasts without a refresh, in ms.
    pub(crate) place_ms: u64,
}

impl ScriptCall for FairSemRefresh<'_> {
    type Reply = Vec<Place>;

    fn invocation(&self) -> Invocation {
        let mut call = queue_keys(&REFRESH, self.name).arg(self.place_ms);
        for waiter in self.waiters {
            call = call.arg(*waiter);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<Vec<Place>> {
        let what = "fair semaphore refresh returned the wrong number of answers";
        answers(reply, self.waiters.len(), what)?
            .into_iter()
            .map(|p| match p {
                0 => Ok(Place::None),
                1 => Ok(Place::Kept),
                2 => Ok(Place::Head),
                _ => Err(unexpected(
                    "fair semaphore refresh returned an unknown place",
                )),
            })
            .collect()
    }
}

/// These waiters (at least one) leave the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairSemLeave<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The waiter ids.
    pub(crate) waiters: &'a [&'a str],
}

impl ScriptCall for FairSemLeave<'_> {
    type Reply = ();

    fn invocation(&self) -> Invocation {
        let mut call = queue_keys(&LEAVE, self.name);
        for waiter in self.waiters {
            call = call.arg(*waiter);
        }
        call
    }

    fn parse(&self, _reply: Value) -> RedisResult<()> {
        Ok(())
    }
}

/// Add `permits` to the fair semaphore `name` (a release, or new permits),
/// telling plain waiters and the head of the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairSemRelease<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// How many, at least 1.
    pub(crate) permits: u32,
    /// This give-back's op id, the same for each of its tries.
    pub(crate) once: Once<'a>,
}

impl ScriptCall for FairSemRelease<'_> {
    type Reply = SemAdded;

    fn invocation(&self) -> Invocation {
        queue_keys(&RELEASE, self.name)
            .key(keys::semaphore_channel(self.name))
            .key(self.once.marker(self.name))
            .arg(self.permits)
            .arg(MAX_PERMITS)
            .arg(self.once.ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<SemAdded> {
        SemAdded::parse(&reply, "fair semaphore release")
    }
}

/// A fair waiter left while a take of its id may have run unseen, or its
/// grant found nobody: it leaves the queue, its permits go back if a copy
/// took them, and a later copy takes nothing (`lua/fair_sem_undo.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairSemUndo<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The waiter id (its op id).
    pub(crate) waiter: &'a str,
    /// The permits its attempts asked for.
    pub(crate) permits: u32,
    /// How long Redis remembers the undo, in ms.
    pub(crate) once_ttl_ms: u64,
}

impl ScriptCall for FairSemUndo<'_> {
    type Reply = Undone;

    fn invocation(&self) -> Invocation {
        queue_keys(&UNDO, self.name)
            .key(keys::semaphore_channel(self.name))
            .key(keys::op_marker(self.name, self.waiter))
            .arg(self.waiter)
            .arg(self.permits)
            .arg(self.once_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<Undone> {
        Undone::parse(&reply)
    }
}

/// What [`read_sem_queue`] reads: `TIME`, the queue, the places with scores.
type QueueRead = ((u64, u64), Vec<String>, Vec<(String, f64)>);

/// A fair semaphore's queue as it stands: the server's time (ms) and the waiter
/// ids, head first, each with the server time (ms) its place lapses at (`None`:
/// no place, about to be dropped). Three reads in one round trip; not atomic
/// with any change, which is good enough for a status screen.
pub(crate) async fn read_sem_queue<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    name: &str,
) -> RedisResult<(u64, Vec<(String, Option<u64>)>)> {
    let (time, ids, places): QueueRead = redis::pipe()
        .cmd("TIME")
        .cmd("LRANGE")
        .arg(keys::sem_queue(name))
        .arg(0)
        .arg(-1)
        .cmd("ZRANGE")
        .arg(keys::sem_timeouts(name))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(conn)
        .await?;
    let now_ms = time.0 * 1000 + time.1 / 1000;
    let queue = ids
        .into_iter()
        .map(|id| {
            let until = places
                .iter()
                .find(|(p, _)| *p == id)
                .map(|(_, s)| *s as u64);
            (id, until)
        })
        .collect();
    Ok((now_ms, queue))
}
