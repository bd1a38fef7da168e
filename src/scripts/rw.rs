//! The read-write lock's scripts: read and write acquisition, their releases, and
//! renewal of a holder's holds.
//!
//! The hash field given to these calls is the holder's: `<owner field>` for a
//! reader, `<owner field>:write` for the writer. Each script also needs the other
//! field of the same owner (a reader may be the writer, downgrading; a writer may
//! hold read holds, and then may not wait for the write lock), which is derived here.

use std::sync::LazyLock;

use redis::aio::ConnectionManager;
use redis::{RedisResult, Script};

use super::{acquire_reply, release_reply, AcquireReply, ReleaseReply};
use crate::keys;
use crate::lock::AcquireKind;

/// The compiled read-write lock scripts.
struct Scripts {
    /// `lua/rw_acquire_read.lua`
    acquire_read: Script,
    /// `lua/rw_acquire_write.lua`
    acquire_write: Script,
    /// `lua/rw_release_read.lua`
    release_read: Script,
    /// `lua/rw_release_write.lua`
    release_write: Script,
    /// `lua/rw_renew.lua`
    renew: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire_read: Script::new(include_str!("../../lua/rw_acquire_read.lua")),
    acquire_write: Script::new(include_str!("../../lua/rw_acquire_write.lua")),
    release_read: Script::new(include_str!("../../lua/rw_release_read.lua")),
    release_write: Script::new(include_str!("../../lua/rw_release_write.lua")),
    renew: Script::new(include_str!("../../lua/rw_renew.lua")),
});

/// The reader field of the writer field `<owner field>:write`.
fn reader_of(write_field: &str) -> &str {
    write_field.strip_suffix(":write").unwrap_or(write_field)
}

/// Runs `lua/rw_acquire_read.lua` for the reader field `field`.
pub(super) async fn acquire_read(
    mut conn: ConnectionManager,
    name: &str,
    field: &str,
    lease_ms: u64,
    token_ttl_ms: u64,
) -> RedisResult<AcquireReply> {
    let reply: Vec<redis::Value> = SCRIPTS
        .acquire_read
        .key(name)
        .key(keys::token(name))
        .key(keys::read_timeouts(name, field))
        .arg(lease_ms)
        .arg(field)
        .arg(keys::write_field(field))
        .arg(token_ttl_ms)
        .invoke_async(&mut conn)
        .await?;
    acquire_reply(&reply)
}

/// Runs `lua/rw_acquire_write.lua` for the writer field `field`.
pub(super) async fn acquire_write(
    mut conn: ConnectionManager,
    name: &str,
    field: &str,
    lease_ms: u64,
    token_ttl_ms: u64,
) -> RedisResult<AcquireReply> {
    let reply: Vec<redis::Value> = SCRIPTS
        .acquire_write
        .key(name)
        .key(keys::token(name))
        .arg(lease_ms)
        .arg(field)
        .arg(reader_of(field))
        .arg(token_ttl_ms)
        .invoke_async(&mut conn)
        .await?;
    acquire_reply(&reply)
}

/// Runs `lua/rw_release_read.lua` for the reader field `field`.
pub(super) async fn release_read(
    mut conn: ConnectionManager,
    name: &str,
    field: &str,
    request_id: &str,
    latch_ttl_ms: u64,
) -> RedisResult<ReleaseReply> {
    let (left, published): (i64, i64) = SCRIPTS
        .release_read
        .key(name)
        .key(keys::rw_channel(name))
        .key(keys::latch(name, request_id))
        .key(keys::read_timeouts(name, field))
        .key(keys::tagged(name))
        .arg(field)
        .arg(latch_ttl_ms)
        .arg(keys::WAKE_ONE)
        .invoke_async(&mut conn)
        .await?;
    Ok(release_reply(left, published == 1))
}

/// Runs `lua/rw_release_write.lua` for the writer field `field`.
pub(super) async fn release_write(
    mut conn: ConnectionManager,
    name: &str,
    field: &str,
    lease_ms: u64,
    request_id: &str,
    latch_ttl_ms: u64,
) -> RedisResult<ReleaseReply> {
    let (left, published): (i64, i64) = SCRIPTS
        .release_write
        .key(name)
        .key(keys::rw_channel(name))
        .key(keys::latch(name, request_id))
        .arg(lease_ms)
        .arg(field)
        .arg(latch_ttl_ms)
        .arg(keys::WAKE_ALL)
        .invoke_async(&mut conn)
        .await?;
    Ok(release_reply(left, published == 1))
}

/// Runs `lua/rw_renew.lua` for one holder (`kind` is Read or Write).
pub(super) async fn renew(
    mut conn: ConnectionManager,
    kind: AcquireKind,
    name: &str,
    field: &str,
    lease_ms: u64,
) -> RedisResult<bool> {
    let side = if kind == AcquireKind::Read {
        "read"
    } else {
        "write"
    };
    let held: i64 = SCRIPTS
        .renew
        .key(name)
        .key(keys::read_timeouts(name, field))
        .arg(lease_ms)
        .arg(field)
        .arg(side)
        .invoke_async(&mut conn)
        .await?;
    Ok(held == 1)
}
