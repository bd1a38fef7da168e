//! The fair lock's scripts: acquire (or take a place in the queue), release (waking
//! the head), refresh the places of live waiters, and leave the queue.
//!
//! Every one of them first drops waiters whose place lapsed from the head of the
//! queue, on the Redis server's clock, and tells the new head when that leaves the
//! lock free: that is what keeps a waiter whose process died from holding up the
//! queue for longer than one place lease. Renewal of a held fair lock is the
//! exclusive lock's ([`RenewHashes`](super::RenewHashes)): the hash is the same.

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::{
    acquire_reply, answers, flag, release_reply, unexpected, AcquireReply, Invocation,
    ReleaseReply, ScriptCall,
};
use crate::keys;

/// Those that drop lapsed waiters get `lua/acl_prelude.lua` (the ACL helpers) and
/// `lua/fair_prelude.lua` in front: Redis scripts cannot include one another, and
/// those rules must be the same code in every script that applies them.
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/fair_prelude.lua"),
        include_str!("../../lua/fair_acquire.lua")
    ))
});
static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/fair_prelude.lua"),
        include_str!("../../lua/fair_release.lua")
    ))
});
static REFRESH: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/fair_prelude.lua"),
        include_str!("../../lua/fair_refresh.lua")
    ))
});
static LEAVE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/fair_leave.lua")));

/// The keys every fair script starts with: the hash, the queue, the deadlines.
fn fair_keys(script: &'static Lua, name: &str) -> Invocation {
    Invocation::new(script)
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
}

/// Where a refreshed waiter stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// It has no place in the queue (it lapsed, or was never taken).
    None,
    /// Its place is kept for another place lease.
    Kept,
    /// It is at the head of the queue and the lock is free: it should try now.
    Head,
}

/// Take the fair lock `name` for `field`, or (with `queue`) take a place in its
/// queue when that cannot be done now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairAcquire<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The owner field.
    pub(crate) field: &'a str,
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
    /// How long a place lasts without a refresh, in ms.
    pub(crate) place_ms: u64,
    /// Take a place when the lock cannot be taken now (not for a one-shot try).
    pub(crate) queue: bool,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(crate) token_ttl_ms: u64,
    /// `false`: refuse (not grant) a re-entry by an owner that holds the lock.
    pub(crate) reentrant: bool,
}

impl ScriptCall for FairAcquire<'_> {
    type Reply = AcquireReply;

    fn invocation(&self) -> Invocation {
        fair_keys(&ACQUIRE, self.name)
            .must_replicate()
            .key(keys::token(self.name))
            .key(keys::channel(self.name))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(self.place_ms)
            .arg(flag(self.queue))
            .arg(self.token_ttl_ms)
            .arg(flag(!self.reentrant))
    }

    fn parse(&self, reply: Value) -> RedisResult<AcquireReply> {
        acquire_reply(reply)
    }
}

/// Give back one hold of the fair lock `name`; at zero the queue's head is told.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairRelease<'a> {
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
}

impl ScriptCall for FairRelease<'_> {
    type Reply = ReleaseReply;

    fn invocation(&self) -> Invocation {
        fair_keys(&RELEASE, self.name)
            .must_replicate()
            .key(keys::latch(self.name, self.request_id))
            .key(keys::channel(self.name))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(self.latch_ttl_ms)
            .arg(keys::WAKE_ONE)
            // Every call reads the latch first: a resend is a retry as it is.
            .kept(None, self.lease_ms, self.latch_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<ReleaseReply> {
        match reply {
            Value::Int(left) => Ok(release_reply(left, true)),
            _ => Err(unexpected("fair release script returned an unknown shape")),
        }
    }
}

/// Keep the places of these waiters (at least one) and say where each stands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairRefresh<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The waiters' owner fields.
    pub(crate) fields: &'a [&'a str],
    /// How long a place lasts without a refresh, in ms.
    pub(crate) place_ms: u64,
}

impl ScriptCall for FairRefresh<'_> {
    type Reply = Vec<Place>;

    fn invocation(&self) -> Invocation {
        let mut call = fair_keys(&REFRESH, self.name)
            .key(keys::channel(self.name))
            .arg(self.place_ms);
        for field in self.fields {
            call = call.arg(*field);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<Vec<Place>> {
        let what = "refresh script returned the wrong number of answers";
        answers(reply, self.fields.len(), what)?
            .into_iter()
            .map(|p| match p {
                0 => Ok(Place::None),
                1 => Ok(Place::Kept),
                2 => Ok(Place::Head),
                _ => Err(unexpected("refresh script returned an unknown place")),
            })
            .collect()
    }
}

/// These waiters (at least one) leave the queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FairLeave<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The waiters' owner fields.
    pub(crate) fields: &'a [&'a str],
}

impl ScriptCall for FairLeave<'_> {
    type Reply = ();

    fn invocation(&self) -> Invocation {
        let mut call = fair_keys(&LEAVE, self.name).key(keys::channel(self.name));
        for field in self.fields {
            call = call.arg(*field);
        }
        call
    }

    fn parse(&self, _reply: Value) -> RedisResult<()> {
        Ok(())
    }
}
