//! The scripts that serve every kind of lock by name: one consistent look at a
//! lock's keys (`lua/inspect.lua`) and the operator's force release
//! (`lua/force_release.lua`); [`inspect_lock`], that look with who each holder
//! is (for `Inspect`, and for a wait that ran out).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{RedisResult, Value};

use super::lua::{Lua, ScriptConn};
use super::registry::read_clients;
use super::{ttl_from_pttl, unexpected, Invocation, ScriptCall};
use crate::keys;
use crate::view::{attach_clients, Holder, Inspected, LockInfo, QueuedWaiter};

static FORCE_RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/force_release.lua")
    ))
});
static INSPECT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/inspect.lua")));

/// Delete the lock `name` whatever its kind and whoever holds it, waking its
/// waiters the way that kind's waiters listen. Answers whether there was one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForceRelease<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
}

impl ScriptCall for ForceRelease<'_> {
    type Reply = bool;

    fn invocation(&self) -> Invocation {
        Invocation::new(&FORCE_RELEASE)
            .must_replicate()
            .key(self.name)
            .key(keys::channel(self.name))
            .key(keys::rw_channel(self.name))
            .key(keys::fair_queue(self.name))
            .arg(keys::WAKE_ONE)
            .arg(keys::WAKE_ALL)
    }

    fn parse(&self, reply: Value) -> RedisResult<bool> {
        let deleted: i64 = redis::from_redis_value_ref(&reply)?;
        Ok(deleted == 1)
    }
}

/// Read the lock `name`'s hash, TTL and fair queue in one consistent look.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inspect<'a> {
    /// The lock name.
    pub(crate) name: &'a str,
}

impl ScriptCall for Inspect<'_> {
    type Reply = Inspected;

    fn invocation(&self) -> Invocation {
        Invocation::new(&INSPECT)
            .read_only()
            .key(self.name)
            .key(keys::fair_queue(self.name))
            .key(keys::fair_timeouts(self.name))
    }

    fn parse(&self, reply: Value) -> RedisResult<Inspected> {
        let Value::Array(parts) = reply else {
            return Err(unexpected("inspect script returned an unknown shape"));
        };
        match parts.as_slice() {
            [Value::Int(pttl), fields, queue] => {
                let flat: Vec<String> = redis::from_redis_value_ref(fields)?;
                let fields = flat
                    .chunks_exact(2)
                    .map(|kv| (kv[0].clone(), kv[1].clone()))
                    .collect();
                Ok(Inspected {
                    exists: *pttl != -2,
                    ttl: ttl_from_pttl(*pttl),
                    fields,
                    queue: queued_waiters(queue)?,
                })
            }
            _ => Err(unexpected("inspect script returned an unknown shape")),
        }
    }
}

/// Reads the queue part of `lua/inspect.lua`'s answer: owner field, ms left, ...
fn queued_waiters(flat: &Value) -> RedisResult<Vec<QueuedWaiter>> {
    let Value::Array(items) = flat else {
        return Err(unexpected("inspect script returned an unknown queue shape"));
    };
    items
        .chunks_exact(2)
        .map(|pair| {
            let owner_field: String = redis::from_redis_value_ref(&pair[0])?;
            let left: i64 = redis::from_redis_value_ref(&pair[1])?;
            Ok(QueuedWaiter {
                owner_field,
                expires_in: (left != -1).then(|| Duration::from_millis(left.max(0) as u64)),
            })
        })
        .collect()
}

/// One look at the lock `name` ([`Inspect`]), its holders' registry entries
/// attached ([`Holder::client`]) from a second round trip (on a cluster they live
/// in other slots than the lock). `ours` is this manager's `<client id>:`, to
/// mark its own holders. What the manager's `Inspect` answers, and what a lock
/// actor reads when a wait runs out (the holder its timeout names).
pub(crate) async fn inspect_lock<C: ScriptConn + Clone>(
    conn: &mut C,
    name: &str,
    ours: Option<&str>,
) -> RedisResult<LockInfo> {
    let found = super::call(conn, &Inspect { name }).await?;
    let mut info = found.into_info(name, ours);
    let ids: Vec<&str> = info.holders.iter().filter_map(Holder::client_id).collect();
    if !ids.is_empty() {
        let clients = read_clients(conn, &ids).await?;
        attach_clients(&mut info.holders, &clients);
    }
    Ok(info)
}
