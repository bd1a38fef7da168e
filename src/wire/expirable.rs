//! The permit-expirable semaphore's scripts as typed calls (`lua/expirable_*.lua`), in
//! Redisson's `RPermitExpirableSemaphore` layout with expiries on the Redis clock.
//!
//! Permits carry ids: 32 hex digits here, stored as the 16 bytes they spell, which
//! is how Redisson stores its own, so either side can give back the other's. The
//! watchdog renews one holder's permits per call ([`ExpirableRenew`], through the
//! renewer's table like a read-write lock's holders).

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::{unexpected, Invocation, Once, ScriptCall};
use crate::keys;

// Each script gets `lua/acl_prelude.lua` in front (`need`: its writes and the
// PUBLISH asked for before the first write); Redis scripts cannot include one
// another.
static XSEM_ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/expirable_acquire.lua")
    ))
});
static XSEM_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/once_prelude.lua"),
        include_str!("../../lua/expirable_release.lua")
    ))
});
static XSEM_RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/expirable_renew.lua")
    ))
});

/// Redisson's expiry score for a permit taken without a lease: it never expires.
const NO_EXPIRY: &str = "922337203685477";

/// Take permits of semaphore `name`, one per id, each expiring `lease_ms` after the
/// server's clock now (reclaiming expired permits first).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpirableAcquire<'a> {
    /// The semaphore (its key).
    pub(crate) name: &'a str,
    /// The new permits' ids (none: only reclaim and report).
    pub(crate) ids: &'a [String],
    /// Their lease, in ms.
    pub(crate) lease_ms: u64,
    /// The waiter's op id, the same for each of its attempts.
    pub(crate) once: Once<'a>,
}

/// What a take attempt of the permit-expirable semaphore found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpirableTake {
    /// Taken; this many are left available.
    Taken { left: u64 },
    /// Too few available; `expires_in_ms` until the nearest permit expires, if any
    /// will; `missing`: the key does not exist at all.
    Short {
        available: u64,
        expires_in_ms: Option<u64>,
        missing: bool,
    },
}

impl ScriptCall for ExpirableAcquire<'_> {
    type Reply = ExpirableTake;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&XSEM_ACQUIRE)
            .must_replicate()
            .key(self.name)
            .key(keys::permit_timeouts(self.name))
            .key(keys::semaphore_channel(self.name))
            .key(self.once.marker(self.name))
            .arg(self.ids.len())
            .arg(self.lease_ms)
            .arg(NO_EXPIRY)
            .arg(self.once.ttl_ms);
        for id in self.ids {
            call = call.arg(id);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<ExpirableTake> {
        let n: Vec<i64> = redis::from_redis_value_ref(&reply)?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        match n.as_slice() {
            [1, left] => Ok(ExpirableTake::Taken { left: count(*left) }),
            [0, available, wait, missing] => Ok(ExpirableTake::Short {
                available: count(*available),
                expires_in_ms: u64::try_from(*wait).ok(),
                missing: *missing == 1,
            }),
            _ => Err(unexpected("permit acquire returned an unknown shape")),
        }
    }
}

/// Give back permits of semaphore `name` by id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpirableRelease<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The permits' ids.
    pub(crate) ids: &'a [String],
    /// The op id: a release's own (a retry answers what the first copy gave
    /// back), or, for an undo, the waiter's.
    pub(crate) once: Once<'a>,
    /// An undo (a waiter that left after a lost reply, or whose grant found
    /// nobody): its op id is marked so that a late copy of its take takes
    /// nothing.
    pub(crate) undo: bool,
}

impl ScriptCall for ExpirableRelease<'_> {
    /// How many were still taken (and came back).
    type Reply = usize;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&XSEM_RELEASE)
            .key(self.name)
            .key(keys::permit_timeouts(self.name))
            .key(keys::semaphore_channel(self.name));
        call = call
            .key(self.once.marker(self.name))
            .arg(self.once.ttl_ms)
            .arg(if self.undo { "undo" } else { "release" });
        for id in self.ids {
            call = call.arg(id);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<usize> {
        let n: i64 = redis::from_redis_value_ref(&reply)?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}

/// Extend the expiry of one holder's permits (ids separated by `,`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpirableRenew<'a> {
    /// The semaphore.
    pub(crate) name: &'a str,
    /// The holder's permit ids, comma-separated.
    pub(crate) ids: &'a str,
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
}

impl ScriptCall for ExpirableRenew<'_> {
    /// Whether every permit was still taken.
    type Reply = bool;

    fn invocation(&self) -> Invocation {
        Invocation::new(&XSEM_RENEW)
            .must_replicate()
            .key(self.name)
            .key(keys::permit_timeouts(self.name))
            .key(keys::semaphore_channel(self.name))
            .arg(self.lease_ms)
            .arg(self.ids)
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        Ok(redis::from_redis_value_ref::<i64>(&reply)? == 1)
    }
}
