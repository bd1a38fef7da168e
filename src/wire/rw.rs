//! The read-write lock's scripts: read and write acquisition, their releases, and
//! renewal of one holder's holds.
//!
//! The hash field given to these calls is the holder's: `<owner field>` for a
//! reader, `<owner field>:write` for the writer. Each script also needs the other
//! field of the same owner (a reader may be the writer, downgrading; a writer may
//! hold read holds, and then may not wait for the write lock), which is derived here.

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::{acquire_reply, release_pair, AcquireReply, Invocation, ReleaseReply, ScriptCall};
use crate::keys;

// Each script gets `lua/acl_prelude.lua` in front (its ACL helpers): Redis scripts
// cannot include one another.
pub(super) static ACQUIRE_READ: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/rw_acquire_read.lua")
    ))
});
pub(super) static ACQUIRE_WRITE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/rw_acquire_write.lua")
    ))
});
static RELEASE_READ: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/rw_release_read.lua")
    ))
});
static RELEASE_WRITE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/rw_release_write.lua")
    ))
});
static RENEW: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/rw_renew.lua")
    ))
});

/// The reader field of the writer field `<owner field>:write`.
fn reader_of(write_field: &str) -> &str {
    write_field.strip_suffix(":write").unwrap_or(write_field)
}

/// Take a read hold of the read-write lock `name` for the reader field `field`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadAcquire<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The reader field.
    pub(crate) field: &'a str,
    /// The hold's lease, in ms.
    pub(crate) lease_ms: u64,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(crate) token_ttl_ms: u64,
}

impl ScriptCall for ReadAcquire<'_> {
    type Reply = AcquireReply;

    fn invocation(&self) -> Invocation {
        Invocation::new(&ACQUIRE_READ)
            .must_replicate()
            .key(self.name)
            .key(keys::token(self.name))
            .key(keys::read_timeouts(self.name, self.field))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(crate::kind::write_field(self.field))
            .arg(self.token_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<AcquireReply> {
        acquire_reply(reply)
    }
}

/// Take the write lock of the read-write lock `name` for the writer field `field`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteAcquire<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The writer field (`<owner field>:write`).
    pub(crate) field: &'a str,
    /// The lease, in ms.
    pub(crate) lease_ms: u64,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(crate) token_ttl_ms: u64,
}

impl ScriptCall for WriteAcquire<'_> {
    type Reply = AcquireReply;

    fn invocation(&self) -> Invocation {
        Invocation::new(&ACQUIRE_WRITE)
            .must_replicate()
            .key(self.name)
            .key(keys::token(self.name))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(reader_of(self.field))
            .arg(self.token_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<AcquireReply> {
        acquire_reply(reply)
    }
}

/// Give back one read hold; when none is left at all, the lock frees.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadRelease<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The reader field.
    pub(crate) field: &'a str,
    /// Names this release in the latch key.
    pub(crate) request_id: &'a str,
    /// How long the latch remembers the outcome, in ms.
    pub(crate) latch_ttl_ms: u64,
}

impl ScriptCall for ReadRelease<'_> {
    type Reply = ReleaseReply;

    fn invocation(&self) -> Invocation {
        Invocation::new(&RELEASE_READ)
            .must_replicate()
            .key(self.name)
            .key(keys::rw_channel(self.name))
            .key(keys::latch(self.name, self.request_id))
            .key(keys::read_timeouts(self.name, self.field))
            .key(keys::tagged(self.name))
            .arg(self.field)
            .arg(self.latch_ttl_ms)
            .arg(keys::WAKE_ONE)
            // Every call reads the latch first: a resend is a retry as it is.
            // A read hold has no lease of its own here: half the latch's
            // lifetime bounds its resends.
            .kept(None, u64::MAX, self.latch_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<ReleaseReply> {
        release_pair(reply)
    }
}

/// Give back one hold of the write lock; at zero, every waiter may try.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteRelease<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The writer field.
    pub(crate) field: &'a str,
    /// The lease to set again when holds remain, in ms.
    pub(crate) lease_ms: u64,
    /// Names this release in the latch key.
    pub(crate) request_id: &'a str,
    /// How long the latch remembers the outcome, in ms.
    pub(crate) latch_ttl_ms: u64,
}

impl ScriptCall for WriteRelease<'_> {
    type Reply = ReleaseReply;

    fn invocation(&self) -> Invocation {
        Invocation::new(&RELEASE_WRITE)
            .must_replicate()
            .key(self.name)
            .key(keys::rw_channel(self.name))
            .key(keys::latch(self.name, self.request_id))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(self.latch_ttl_ms)
            .arg(keys::WAKE_ALL)
            // Every call reads the latch first: a resend is a retry as it is.
            .kept(None, self.lease_ms, self.latch_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<ReleaseReply> {
        release_pair(reply)
    }
}

/// Extend one read-write holder's lease; answers whether it still holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RwRenew<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The holder's field (`:write` after it for the writer).
    pub(crate) field: &'a str,
    /// Whether it is the writer.
    pub(crate) write: bool,
    /// The lease to set, in ms.
    pub(crate) lease_ms: u64,
}

impl ScriptCall for RwRenew<'_> {
    type Reply = bool;

    fn invocation(&self) -> Invocation {
        Invocation::new(&RENEW)
            .must_replicate()
            .key(self.name)
            .key(keys::read_timeouts(self.name, self.field))
            .arg(self.lease_ms)
            .arg(self.field)
            .arg(if self.write { "write" } else { "read" })
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        let held: i64 = redis::from_redis_value_ref(&reply)?;
        Ok(held == 1)
    }
}
