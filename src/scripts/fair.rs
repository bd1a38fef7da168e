//! The fair lock's scripts: acquire (or queue), release (waking the head), refresh
//! the places of live waiters, and leave the queue.
//!
//! Every one of them first drops waiters whose place lapsed from the head of the
//! queue, on the Redis server's clock, and tells the new head when that leaves the
//! lock free: that is what keeps a waiter whose process died from holding up the
//! queue for longer than one place lease. Renewal of a held fair lock is the
//! exclusive lock's (`lua/renew.lua`): the hash is the same.

use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};

use super::{acquire_reply, release_reply, unexpected, AcquireReply, AttemptOpts, ReleaseReply};
use crate::keys;

/// The compiled fair-lock scripts. Those that drop lapsed waiters get
/// `lua/fair_prelude.lua` in front: Redis scripts cannot include one another, and
/// that rule must be the same code in every script that applies it.
struct Scripts {
    /// `lua/fair_acquire.lua`
    acquire: Script,
    /// `lua/fair_release.lua`
    release: Script,
    /// `lua/fair_refresh.lua`
    refresh: Script,
    /// `lua/fair_leave.lua`
    leave: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(concat!(
        include_str!("../../lua/fair_prelude.lua"),
        include_str!("../../lua/fair_acquire.lua")
    )),
    release: Script::new(concat!(
        include_str!("../../lua/fair_prelude.lua"),
        include_str!("../../lua/fair_release.lua")
    )),
    refresh: Script::new(concat!(
        include_str!("../../lua/fair_prelude.lua"),
        include_str!("../../lua/fair_refresh.lua")
    )),
    leave: Script::new(include_str!("../../lua/fair_leave.lua")),
});

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

/// Runs `lua/fair_acquire.lua`.
pub(super) async fn acquire(
    mut conn: ConnectionManager,
    name: &str,
    owner_field: &str,
    lease_ms: u64,
    opts: AttemptOpts,
) -> RedisResult<AcquireReply> {
    let reply: Vec<redis::Value> = SCRIPTS
        .acquire
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::token(name))
        .key(keys::channel(name))
        .arg(lease_ms)
        .arg(owner_field)
        .arg(opts.place_ms)
        .arg(if opts.queue { "1" } else { "0" })
        .arg(opts.token_ttl_ms)
        .invoke_async(&mut conn)
        .await?;
    acquire_reply(&reply)
}

/// Runs `lua/fair_release.lua`.
pub(super) async fn release(
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
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::latch(name, request_id))
        .key(keys::channel(name))
        .arg(lease_ms)
        .arg(owner_field)
        .arg(latch_ttl_ms)
        .arg(keys::WAKE_ONE)
        .invoke_async(&mut conn)
        .await?;
    Ok(release_reply(left, true))
}

/// Runs `lua/fair_refresh.lua` for the waiters with these owner fields (at least
/// one); answers where each stands, in order.
pub(crate) async fn refresh(
    mut conn: ConnectionManager,
    name: &str,
    owner_fields: &[&str],
    place_ms: u64,
) -> RedisResult<Vec<Place>> {
    let mut call = SCRIPTS.refresh.prepare_invoke();
    call.key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::channel(name))
        .arg(place_ms);
    for field in owner_fields {
        call.arg(*field);
    }
    let places: Vec<i64> = call.invoke_async(&mut conn).await?;
    if places.len() != owner_fields.len() {
        return Err(unexpected(
            "refresh script returned the wrong number of answers",
        ));
    }
    places
        .into_iter()
        .map(|p| match p {
            0 => Ok(Place::None),
            1 => Ok(Place::Kept),
            2 => Ok(Place::Head),
            _ => Err(unexpected("refresh script returned an unknown place")),
        })
        .collect()
}

/// Runs `lua/fair_leave.lua`: these waiters (at least one) leave the queue.
pub(crate) async fn leave(
    mut conn: ConnectionManager,
    name: &str,
    owner_fields: &[&str],
) -> RedisResult<()> {
    let mut call = SCRIPTS.leave.prepare_invoke();
    call.key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::channel(name));
    for field in owner_fields {
        call.arg(*field);
    }
    let _left: i64 = call.invoke_async(&mut conn).await?;
    Ok(())
}
