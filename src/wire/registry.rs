//! The client registry on the wire: writing a manager's entry and reading entries
//! back by client id (`crate::client` says what an entry holds).
//!
//! A write is one call of `lua/register.lua` (the fields and the TTL change
//! together, so an entry never lives without its TTL; the script says why it is
//! not a `MULTI` transaction), a read one `HGETALL` per client id, all sent at once
//! on the multiplexed connection (on a cluster each goes to its own slot's master:
//! one key per client, one slot). The entry is
//! rewritten whole on every refresh rather than only re-expired, so an entry lost
//! with a restart or a failover comes back within one renewal period.

use std::collections::HashMap;
use std::sync::LazyLock;

use futures::future::join_all;
use redis::aio::ConnectionLike;
use redis::{RedisError, RedisResult, Value};
use tracing::warn;

use super::lua::{Lua, ScriptConn};
use super::{unexpected, Invocation, ScriptCall};
use crate::client::ClientInfo;
use crate::error::redis_is_transient;
use crate::keys;

static REGISTER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../../lua/acl_prelude.lua"),
        include_str!("../../lua/register.lua")
    ))
});

/// Write (or rewrite) the entry `fields` under `key` with a TTL of `ttl_ms`.
struct Register<'a> {
    key: &'a str,
    fields: &'a [(&'static str, String)],
    ttl_ms: u64,
}

impl ScriptCall for Register<'_> {
    type Reply = ();

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&REGISTER).key(self.key).arg(self.ttl_ms);
        for (field, value) in self.fields {
            call = call.arg(field).arg(value);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<()> {
        match reply {
            Value::Int(1) => Ok(()),
            _ => Err(unexpected("register.lua returned an unknown shape")),
        }
    }
}

/// Writes (or rewrites) the entry `fields` under `key` with a TTL of `ttl_ms`.
pub(crate) async fn register<C: ScriptConn>(
    conn: &mut C,
    key: &str,
    fields: &[(&'static str, String)],
    ttl_ms: u64,
) -> RedisResult<()> {
    super::call(
        conn,
        &Register {
            key,
            fields,
            ttl_ms,
        },
    )
    .await
}

/// The entries of `ids` (client ids) that exist and read as lockwarden wrote
/// them; a missing, malformed or unreadable entry (a key of another type, an ACL
/// that denies it) is left out, so its holders show as unknown. Fails only when
/// Redis could not be asked at all (a dropped connection, a timeout).
pub(crate) async fn read_clients<C: ConnectionLike + Clone>(
    conn: &C,
    ids: &[&str],
) -> Result<HashMap<String, ClientInfo>, RedisError> {
    let mut ids: Vec<&str> = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let answers = join_all(ids.iter().map(|id| {
        let mut conn = conn.clone();
        let key = keys::client_key(id);
        async move {
            redis::cmd("HGETALL")
                .arg(&key)
                .query_async::<Value>(&mut conn)
                .await
        }
    }))
    .await;
    let mut found = HashMap::new();
    for (id, answer) in ids.iter().zip(answers) {
        match answer {
            Ok(value) => {
                if let Some(info) = pairs(value).and_then(|f| ClientInfo::from_fields(&f)) {
                    found.insert(id.to_string(), info);
                }
            }
            Err(e) if redis_is_transient(&e) || e.is_io_error() || e.is_timeout() => return Err(e),
            Err(e) => {
                // WRONGTYPE (something else owns the key) or NOPERM (the ACL
                // leaves the registry out): the holder shows as unknown.
                if e.code() == Some("NOPERM") {
                    warn!(client = %id, error = %e, "cannot read the client registry (ACL): holders show as unknown");
                }
            }
        }
    }
    Ok(found)
}

/// The field-value pairs of an HGETALL reply (a map in RESP3, a flat array in
/// RESP2); `None` for any other shape.
pub(super) fn pairs(value: Value) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let bytes = |v: Value| match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    };
    match value {
        Value::Map(entries) => entries
            .into_iter()
            .map(|(f, v)| Some((bytes(f)?, bytes(v)?)))
            .collect(),
        Value::Array(items) if items.len() % 2 == 0 => {
            let mut out = Vec::with_capacity(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(f), Some(v)) = (it.next(), it.next()) {
                out.push((bytes(f)?, bytes(v)?));
            }
            Some(out)
        }
        _ => None,
    }
}
