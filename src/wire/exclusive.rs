//! The exclusive lock's scripts: acquire (`lua/acquire.lua`), release
//! (`lua/release.lua`) and the watchdog's renewal of many hashes at once
//! (`lua/renew.lua`, which also renews fair locks: their hash is the same).
//!
//! Acquire and release may share a round trip with others of their kind (they
//! carry a [`BatchOp`]); renewal takes many locks in one call by itself.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Value};

use super::batch::with_lock_ops;
use super::lua::Lua;
use super::{
    acquire_reply, answers, flag, release_reply, unexpected, AcquireReply, BatchOp, Invocation,
    ReleaseReply, ScriptCall,
};
use crate::keys;

/// The grant and the release, each behind `lua/token_prelude.lua` (the fencing
/// token a grant and a direct handoff make alike): Redis scripts cannot include
/// one another.
pub(super) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/token_prelude.lua"),
        include_str!("../../lua/acquire.lua")
    ))
});
pub(super) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/token_prelude.lua"),
        include_str!("../../lua/release.lua")
    ))
});
pub(super) static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/renew.lua")));
pub(super) static PLACES: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/handoff_places.lua")));
pub(super) static TRANSFER: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(&with_lock_ops(include_str!("../../lua/transfer.lua"))));

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
    /// The owner field was made for this acquisition (it cannot hold the lock)
    /// and an earlier attempt found the key a lock hash: a busy lock need not be
    /// asked whether it is a re-entry (one command less per refusal, the common
    /// answer under contention).
    pub(crate) new_owner: bool,
    /// `false`: refuse (not grant) a re-entry by an owner that holds the lock
    /// (a non-reentrant lock). Moot for a new owner, which cannot hold it.
    pub(crate) reentrant: bool,
    /// The lock-delay after a lapsed lease, in ms (0: none).
    pub(crate) delay_ms: u64,
    /// How long the caller's place in the handoff queue lives, in ms (0: it
    /// takes none). Only for a field made for this wait: a hold of it is then
    /// reported as the handoff it waits for (`lua/acquire.lua`, `ARGV[6]`).
    pub(crate) place_ms: u64,
}

impl ScriptCall for Acquire<'_> {
    type Reply = AcquireReply;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&ACQUIRE)
            .must_replicate()
            .key(self.name)
            .key(keys::token(self.name))
            .num(self.lease_ms)
            .arg(self.field)
            .num(self.token_ttl_ms)
            .word(match (self.new_owner, self.reentrant) {
                (true, _) => "1",
                (false, true) => "0",
                (false, false) => "2",
            })
            .num(self.delay_ms);
        call.batch = Some(BatchOp::Acquire);
        if self.place_ms > 0 {
            // The handoff's keys only when a place is taken: an ACL that
            // predates them would refuse every acquisition otherwise.
            call = call
                .key(keys::handoff_queue(self.name))
                .key(keys::handoff_timeouts(self.name))
                .num(self.place_ms);
            call.batch = Some(BatchOp::AcquirePlacing);
        }
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
    /// The lease a direct handoff gives the waiter it makes the holder, in ms
    /// (`lua/release.lua`, `ARGV[7]`); 0: no handoff (the handoff's keys are
    /// not sent, so an ACL that predates them still allows the release).
    pub(crate) hand_lease_ms: u64,
    /// How long the fencing token counter lives after a handoff, in ms.
    pub(crate) token_ttl_ms: u64,
}

impl ScriptCall for Release<'_> {
    type Reply = ReleaseReply;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&RELEASE)
            .must_replicate()
            .key(self.name)
            .key(keys::channel(self.name))
            .key(keys::latch(self.name, self.request_id))
            .num(self.lease_ms)
            .arg(self.field)
            .num(self.latch_ttl_ms)
            .word(keys::WAKE_ONE)
            .word(flag(self.retry));
        call.batch = Some(BatchOp::Release);
        if self.hand_lease_ms > 0 {
            call = call
                .key(keys::token(self.name))
                .key(keys::handoff_queue(self.name))
                .key(keys::handoff_timeouts(self.name))
                .word("0")
                .num(self.hand_lease_ms)
                .num(self.token_ttl_ms);
            call.batch = Some(BatchOp::ReleaseHanding);
        }
        // ARGV[5], the retry flag, is set on a resend: it reads the latch.
        call.kept(Some(4), self.lease_ms, self.latch_ttl_ms)
    }

    fn parse(&self, reply: Value) -> RedisResult<ReleaseReply> {
        match reply {
            Value::Int(left) => Ok(release_reply(left, true)),
            Value::Array(freed) => match freed.as_slice() {
                [Value::Int(0), Value::Int(heard)] => Ok(ReleaseReply::Released {
                    published: true,
                    heard: u32::try_from(*heard).unwrap_or(0),
                }),
                // Handed to a waiter with a place: nothing was published.
                [Value::Int(0), Value::Int(waiting), Value::Int(1)] => Ok(ReleaseReply::Released {
                    published: false,
                    heard: u32::try_from(*waiting).unwrap_or(0),
                }),
                _ => Err(unexpected("release script returned an unknown shape")),
            },
            _ => Err(unexpected("release script returned an unknown shape")),
        }
    }
}

/// The holder's last release and the next local owner's acquisition of the
/// exclusive lock `name` in one call (`lua/transfer.lua`): the lock passes from
/// `release.field` to `to` without being freed, and nobody is woken.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transfer<'a> {
    /// The release, as [`Release`] has it (its `name` is the lock's).
    pub(crate) release: Release<'a>,
    /// The new owner's field.
    pub(crate) to: &'a str,
    /// The new owner's lease, in ms.
    pub(crate) lease_ms: u64,
    /// How long the fencing token counter lives after this grant, in ms.
    pub(crate) token_ttl_ms: u64,
    /// Also count the subscriptions on the unlock channel (one more command).
    pub(crate) count: bool,
    /// The new owner's lock-delay after a lapsed lease, in ms (0: none).
    pub(crate) delay_ms: u64,
    /// The new owner may have a place in the handoff queue, which it leaves
    /// (its lifetime in ms, as [`Acquire::place_ms`]; 0: it has none).
    pub(crate) place_ms: u64,
}

/// What a [`Transfer`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransferReply {
    /// The new owner holds the lock (one hold).
    HandedOver {
        /// Its fencing token.
        token: u64,
        /// How many subscriptions listen on the lock's unlock channel, when
        /// counted.
        listening: Option<u32>,
        /// False when no replica could confirm it (`AcquireReply::Acquired`).
        confirmed: bool,
    },
    /// Nothing was handed over; the release did this. `Released` only comes from
    /// a retry answered by the latch: whether the new owner holds the lock is then
    /// not known.
    Release(ReleaseReply),
}

impl ScriptCall for Transfer<'_> {
    type Reply = TransferReply;

    fn invocation(&self) -> Invocation {
        let r = &self.release;
        // Must be confirmed like any grant: the new owner's hold is what it says.
        let mut call = Invocation::new(&TRANSFER)
            .must_replicate()
            .key(r.name)
            .key(keys::channel(r.name))
            .key(keys::latch(r.name, r.request_id))
            .key(keys::token(r.name))
            .num(r.lease_ms)
            .arg(r.field)
            .num(r.latch_ttl_ms)
            .word(keys::WAKE_ONE)
            .word(flag(r.retry))
            .arg(self.to)
            .num(self.lease_ms)
            .num(self.token_ttl_ms)
            .word(flag(self.count))
            .num(self.delay_ms);
        if self.place_ms > 0 {
            call = call
                .key(keys::handoff_queue(r.name))
                .key(keys::handoff_timeouts(r.name))
                .num(self.place_ms);
        }
        // Kept unconfirmed, only its release half is sent again: on the master
        // that ran the hand-over the latch answers it; on one that never saw
        // it, the old owner's hold goes and waiters are woken. The grant is not
        // redone: the new owner's hold there would be one its renewals may
        // already have found gone, a lock held by nobody for a whole lease.
        call.redo = r.invocation().redo_as_other();
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<TransferReply> {
        use redis::Value::Int;
        match reply {
            Int(left) => Ok(TransferReply::Release(release_reply(left, true))),
            Value::Array(done) => match super::unmark(&done) {
                ([Int(0), Int(token), rest @ ..], confirmed) if rest.len() <= 1 => {
                    Ok(TransferReply::HandedOver {
                        confirmed,
                        token: u64::try_from(*token)
                            .map_err(|_| unexpected("negative fencing token"))?,
                        listening: match rest {
                            [Int(n)] => Some(u32::try_from(*n).unwrap_or(0)),
                            _ => None,
                        },
                    })
                }
                _ => Err(unexpected("transfer script returned an unknown shape")),
            },
            _ => Err(unexpected("transfer script returned an unknown shape")),
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
    /// The holders give their locks a lock-delay: read each hash's mark, treat a
    /// hold past its lease end as lost, and keep the delay beyond the new lease.
    pub(crate) marked: bool,
}

impl ScriptCall for RenewHashes<'_> {
    type Reply = Vec<bool>;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&RENEW).must_replicate().num(self.lease_ms);
        for (name, field) in self.locks {
            call = call.key(*name).arg(*field);
        }
        if self.marked {
            call = call.arg("1");
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

/// Keep (`life_ms` > 0) or give up (0) the places of `fields` in the handoff
/// queue of the exclusive lock `name` (`lua/handoff_places.lua`). Answers, in
/// order, whether each had one. Never makes a place, and writes nothing a
/// replica must confirm: a place lost to a failover only makes its waiter ask.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandoffPlaces<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
    /// The waiters' owner fields.
    pub(crate) fields: &'a [&'a str],
    /// How long a kept place lives from now, in ms; 0: they leave.
    pub(crate) life_ms: u64,
}

/// What a [`HandoffPlaces`] call found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlacesKept {
    /// The lock's remaining lease, when it is held with one (not asked when
    /// giving places up).
    pub(crate) ttl: Option<Duration>,
    /// Per field, whether it had a place.
    pub(crate) had: Vec<bool>,
}

impl ScriptCall for HandoffPlaces<'_> {
    type Reply = PlacesKept;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&PLACES)
            .key(keys::handoff_queue(self.name))
            .key(keys::handoff_timeouts(self.name))
            .key(self.name)
            .arg(self.life_ms);
        for field in self.fields {
            call = call.arg(*field);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<PlacesKept> {
        let all = answers(
            reply,
            self.fields.len() + 1,
            "handoff places script returned the wrong number of answers",
        )?;
        let ttl = u64::try_from(all[0]).ok().map(Duration::from_millis);
        let had = all[1..].iter().map(|&h| h == 1).collect();
        Ok(PlacesKept { ttl, had })
    }
}
