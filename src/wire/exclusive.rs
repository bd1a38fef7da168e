//! The exclusive lock's scripts: acquire (`lua/acquire.lua`), release
//! (`lua/release.lua`) and the watchdog's renewal of many hashes at once
//! (`lua/renew.lua`, which also renews fair locks: their hash is the same).
//!
//! Acquire and release may share a round trip with others of their kind (they
//! carry a [`BatchOp`]); renewal takes many locks in one call by itself.

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::{
    acquire_reply, answers, flag, release_reply, unexpected, AcquireReply, BatchOp, Invocation,
    ReleaseReply, ScriptCall,
};
use crate::keys;

pub(super) static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/acquire.lua")));
pub(super) static RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/release.lua")));
static RENEW: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/renew.lua")));

/// Take the exclusive lock `name` for the owner field `field`, or re-enter it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquire<'a> {
    /// The lock name (the hash key).
    pub(crate) name: &'a str,
    /// The owner field that will hold it.
    pub(crate) field: &'a str,
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(crate) token_ttl_ms: u64,
}

impl ScriptCall for Acquire<'_> {
    type Reply = AcquireReply;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&ACQUIRE)
            .must_replicate()
            .key(self.name)
            .key(keys::token(self.name))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(self.token_ttl_ms);
        call.batch = Some(BatchOp::Acquire);
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<AcquireReply> {
        acquire_reply(reply)
    }
}

/// Give back one hold of the exclusive lock `name` by `field`; a retry with the
/// same request id is answered from the release latch, never applied twice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Release<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The owner field giving back a hold.
    pub(crate) field: &'a str,
    /// The lease to set again when holds remain, in ms.
    pub(crate) lease_ms: u64,
    /// Names this release in the latch key.
    pub(crate) request_id: &'a str,
    /// How long the latch remembers the outcome, in ms.
    pub(crate) latch_ttl_ms: u64,
    /// An earlier attempt with this request id may have run: read the latch.
    pub(crate) retry: bool,
}

impl ScriptCall for Release<'_> {
    type Reply = ReleaseReply;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&RELEASE)
            .key(self.name)
            .key(keys::channel(self.name))
            .key(keys::latch(self.name, self.request_id))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(self.latch_ttl_ms)
            .arg(keys::WAKE_ONE)
            .arg(flag(self.retry));
        call.batch = Some(BatchOp::Release);
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<ReleaseReply> {
        match reply {
            Value::Int(left) => Ok(release_reply(left, true)),
            _ => Err(unexpected("release script returned an unknown shape")),
        }
    }
}

/// Extend the lease of many exclusive or fair locks, each held by its own owner
/// field, in one call. Answers, in order, whether each is still held. All the locks
/// of one call must be of one node group (one slot on a cluster).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RenewHashes<'a> {
    /// `(lock name, owner field)` pairs.
    pub(crate) locks: &'a [(&'a str, &'a str)],
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
}

impl ScriptCall for RenewHashes<'_> {
    type Reply = Vec<bool>;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&RENEW).must_replicate().arg(self.lease_ms);
        for (name, field) in self.locks {
            call = call.key(*name).arg(*field);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<Vec<bool>> {
        let held = answers(
            reply,
            self.locks.len(),
            "renew script returned the wrong number of answers",
        )?;
        Ok(held.into_iter().map(|h| h == 1).collect())
    }
}
