//! [`Lua`]: one script of `lua/` in the two forms a deployment may need, and
//! [`ScriptConn`], the connection that says which form it needs.
//!
//! A script that wakes waiters publishes on the lock's channel. On a standalone
//! server, a Sentinel-managed master and a cluster without sharded pub/sub that is
//! `PUBLISH`; on a Redis 7+ cluster it is `SPUBLISH`, so the message travels only
//! within the shard that owns the lock's slot, where the waiters (lockwarden's and
//! Redisson's alike) hold their `SSUBSCRIBE`. Redisson passes the command name to its
//! scripts as an argument; here the scripts keep their argument lists (the bench's
//! raw client and the batch script share them byte for byte) and each script is
//! compiled twice instead, the second time with every `'publish'` command and ACL
//! check turned into `'spublish'`. Both are plain `redis::Script`s, loaded on a node
//! the first time it answers NOSCRIPT.

use redis::aio::ConnectionLike;
use redis::Script;

use std::sync::Arc;

use super::replicas::{Confirmation, Lanes};

/// Which publish command the scripts must use on a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Publish {
    /// `PUBLISH`: every deployment but a cluster with sharded pub/sub.
    #[default]
    Plain,
    /// `SPUBLISH`: a Redis 7+ cluster, where waiters subscribe per shard.
    Sharded,
}

/// A connection scripts run on: redis-rs's `ConnectionLike`, plus the publish
/// command its deployment's waiters listen to, and its lanes for confirmed
/// changes ([`Lanes`], `wire/replicas/lanes.rs`).
pub(crate) trait ScriptConn: ConnectionLike + Lanes + Clone + Send + 'static {
    /// The publish command of this connection's deployment.
    fn publish(&self) -> Publish;

    /// How many replicas must confirm a change of `key` (a script's first key,
    /// which a cluster routes it by), how long to wait for them, and how many
    /// `WAIT`s may block the connection at once (`replicas/`); `None`, the
    /// default, asks none.
    fn confirmation(&self, _key: Option<&str>) -> Option<Arc<Confirmation>> {
        None
    }

    /// The hash slot of `key` on a cluster, where one pipeline may hold the
    /// commands of one slot only; `None`, the default, elsewhere.
    fn slot_of(&self, _key: &str) -> Option<u16> {
        None
    }
}

/// One script, compiled for both publish commands.
#[derive(Debug)]
pub(crate) struct Lua {
    /// With `PUBLISH`, as written in `lua/`.
    plain: Script,
    /// With `SPUBLISH`.
    sharded: Script,
    /// The text of `plain`, for a call that must not depend on the server's
    /// script cache ([`Lua::code`]).
    plain_code: String,
    /// The text of `sharded`.
    sharded_code: String,
}

impl Lua {
    /// Compiles `code` (the text of `lua/`, preludes included) in both forms.
    pub(crate) fn new(code: &str) -> Lua {
        let sharded_code = sharded(code);
        Lua {
            plain: Script::new(code),
            sharded: Script::new(&sharded_code),
            plain_code: code.to_owned(),
            sharded_code,
        }
    }

    /// The text of the form for `publish`: what `EVAL` sends when a call must
    /// run as one command, never resent after a NOSCRIPT (`call_once`).
    pub(crate) fn code(&self, publish: Publish) -> &str {
        match publish {
            Publish::Plain => &self.plain_code,
            Publish::Sharded => &self.sharded_code,
        }
    }

    /// The form for `publish`.
    pub(crate) fn get(&self, publish: Publish) -> &Script {
        match publish {
            Publish::Plain => &self.plain,
            Publish::Sharded => &self.sharded,
        }
    }
}

/// `code` with every publish turned into a sharded publish, and every count of a
/// channel's subscribers (`PUBSUB NUMSUB`, `lua/transfer.lua`) into the count of
/// its shard's (`PUBSUB SHARDNUMSUB`). The scripts only ever write these as quoted
/// lower-case words (`redis.call('publish', ...)`, `acl('publish', ...)`); a test
/// checks that nothing plain is left.
fn sharded(code: &str) -> String {
    code.replace("'publish'", "'spublish'")
        .replace("'numsub'", "'shardnumsub'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sharded_forms_never_publish_plainly() {
        for code in [
            include_str!("../../lua/acquire.lua"),
            include_str!("../../lua/release.lua"),
            include_str!("../../lua/fair_acquire.lua"),
            include_str!("../../lua/fair_release.lua"),
            include_str!("../../lua/rw_acquire_read.lua"),
            include_str!("../../lua/rw_acquire_write.lua"),
            include_str!("../../lua/sem_acquire.lua"),
            include_str!("../../lua/force_release.lua"),
            include_str!("../../lua/rw_release_write.lua"),
            include_str!("../../lua/transfer.lua"),
            include_str!("../../lua/sem_release.lua"),
            include_str!("../../lua/sem_try_set.lua"),
            include_str!("../../lua/latch_set.lua"),
            include_str!("../../lua/latch_count_down.lua"),
            include_str!("../../lua/expirable_acquire.lua"),
            include_str!("../../lua/expirable_release.lua"),
            include_str!("../../lua/expirable_renew.lua"),
            include_str!("../../lua/fair_sem_prelude.lua"),
            include_str!("../../lua/fair_sem_acquire.lua"),
            include_str!("../../lua/fair_sem_refresh.lua"),
            include_str!("../../lua/fair_sem_leave.lua"),
            include_str!("../../lua/fair_sem_release.lua"),
            include_str!("../../lua/fair_sem_undo.lua"),
            include_str!("../../lua/sem_undo.lua"),
        ] {
            let sharded = sharded(code).to_lowercase();
            assert!(sharded.contains("'spublish'"));
            let plain_left = sharded.replace("spublish", "");
            assert!(
                !plain_left.contains("call('publish'") && !plain_left.contains("acl('publish'"),
                "a plain PUBLISH call is left"
            );
            assert!(!sharded.contains("'numsub'"), "a plain NUMSUB is left");
        }
    }
}
