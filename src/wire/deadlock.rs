//! Deadlock detection on the wire: each long wait's record of what its owner
//! waits for, and the graph walk's reads (`crate::deadlock` has the walk).
//!
//! A record lives in the client registry entry of the waiting owner's client
//! (`lockwarden:client:{<client id>}`, `keys::client_key`), as one field per
//! owner and lock: `wait:<n>|<lock>` -> `<since ms>|<expiry ms>|<kind
//! letter>|<hold field>` (the owner is `<client id>:<n>`; the letter,
//! `AcquireKind::letter`, is `x` exclusive, `f` fair, `s` spin, `r` read, `w`
//! write). Beside the entry because the walk needs both at each owner, so one
//! `HGETALL` answers who an owner is and what it waits for; and because a walk
//! must end at an owner with no entry (a Redisson client, an older lockwarden,
//! a process that is gone), which then has no records either. A nested command
//! writes into the entry of the outer command's client, on whose behalf it waits,
//! and that entry lives on when the nested process dies: so what ends a record
//! is the expiry in its value, [`record_life`] after the check that wrote it.
//! Each check rewrites it, so a live wait's record never lapses, and a waiter
//! that dies without removing it (SIGKILL) stops counting that long after its
//! last check, whoever's entry it is in. (The entry's own TTL, one watchdog
//! lease kept by the renewer, ends the rest once a whole process is gone.)
//!
//! Plain commands, not a script: `HSET`, then `PEXPIRE ... NX` (an entry the
//! registry could not write gets a TTL instead of living for ever), `HDEL`, and
//! `HGETALL` to read. A user whose ACL lacks them gets NOPERM here and nowhere
//! else; the caller logs it once and goes on waiting.

use std::time::Duration;

use futures::future::join_all;
use redis::{RedisError, RedisResult, Value};

use super::lua::ScriptConn;
use super::registry::pairs;
use super::waiting::now_ms;
use super::{call, Inspect};
use crate::client::{client_id_of, ClientInfo};
use crate::deadlock::{Graph, LockState, OwnerState, Wait};
use crate::keys;
use crate::kind::AcquireKind;

/// The prefix of a wait record's field in a client entry.
const FIELD_PREFIX: &str = "wait:";

/// The least margin a record has past its next rewrite: the round trips of
/// that check, and the difference between the writer's clock and a reader's.
const RECORD_MARGIN: Duration = Duration::from_millis(250);

/// How long a record written at a check counts for others' walks: until the
/// next check (one `timeout` later) rewrites it, plus half a timeout (at least
/// [`RECORD_MARGIN`]) for that check's round trips and for clocks that differ.
/// Also how long the record of a waiter that died without removing it goes on
/// counting after its last check: short, because a record that outlives its
/// waiter makes the owner it names look waiting, and a later wait through that
/// owner would find a cycle that does not exist (1.5 s for the default 1 s).
pub(crate) fn record_life(timeout: Duration) -> Duration {
    timeout + (timeout / 2).max(RECORD_MARGIN)
}

/// Where `owner`'s records live: its client's entry, and the part of a field
/// that names the owner there (`wait:<n>|`). `None` for an owner field that is
/// not `<client id>:<n>`.
fn place(owner: &str) -> Option<(String, String)> {
    let id = client_id_of(owner)?;
    let n = &owner[id.len() + 1..];
    Some((keys::client_key(id), format!("{FIELD_PREFIX}{n}|")))
}

/// The owners that have a record in the client entry at `key`, from its
/// field names (`fields`, as `HKEYS` answers); none for a key that is not a
/// client entry.
pub(crate) fn recorded_owners(key: &str, fields: &[String]) -> Vec<String> {
    let id = key
        .strip_prefix("lockwarden:client:{")
        .and_then(|k| k.strip_suffix('}'));
    let Some(id) = id.filter(|id| keys::client_key(id) == key) else {
        return Vec::new();
    };
    let mut owners: Vec<String> = fields
        .iter()
        .filter_map(|f| f.strip_prefix(FIELD_PREFIX)?.split_once('|'))
        .map(|(n, _lock)| format!("{id}:{n}"))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    owners
}

/// The value of a record of `wait` that lives `life` from now.
fn value(wait: &Wait, life: Duration) -> String {
    let expiry = now_ms() + life.as_millis() as u64;
    format!(
        "{}|{expiry}|{}|{}",
        wait.since_ms,
        wait.wants.letter(),
        wait.field
    )
}

/// The wait a record of `owner` for `lock` says, if it has not expired by `now`.
fn parse(owner: &str, lock: &str, value: &str, now: u64) -> Option<Wait> {
    let mut parts = value.splitn(4, '|');
    let since_ms = parts.next()?.parse().ok()?;
    let expiry: u64 = parts.next()?.parse().ok()?;
    let wants = AcquireKind::from_letter(parts.next()?)?;
    let field = parts.next()?.to_string();
    (expiry > now).then(|| Wait {
        owners: vec![owner.to_string()],
        lock: lock.to_string(),
        wants,
        field,
        since_ms,
    })
}

/// Writes (or refreshes) the records of `wait`, one per owner it counts for,
/// each living `life`; an entry that had no TTL gets one of `entry_ttl`.
pub(crate) async fn record<C: ScriptConn + Clone>(
    conn: &C,
    wait: &Wait,
    life: Duration,
    entry_ttl: Duration,
) -> RedisResult<()> {
    let value = value(wait, life);
    let writes = wait.owners.iter().filter_map(|owner| {
        let (key, field) = place(owner)?;
        let mut pipe = redis::pipe();
        pipe.cmd("HSET")
            .arg(&key)
            .arg(format!("{field}{}", wait.lock))
            .arg(&value)
            .ignore();
        pipe.cmd("PEXPIRE")
            .arg(&key)
            .arg(entry_ttl.as_millis() as u64)
            .arg("NX")
            .ignore();
        let mut conn = conn.clone();
        Some(async move { pipe.exec_async(&mut conn).await })
    });
    join_all(writes).await.into_iter().collect()
}

/// Removes the records of `wait` (its wait ended).
pub(crate) async fn forget<C: ScriptConn + Clone>(conn: &C, wait: &Wait) -> RedisResult<()> {
    let removals = wait.owners.iter().filter_map(|owner| {
        let (key, field) = place(owner)?;
        let mut conn = conn.clone();
        let field = format!("{field}{}", wait.lock);
        Some(async move {
            redis::cmd("HDEL")
                .arg(&key)
                .arg(field)
                .exec_async(&mut conn)
                .await
        })
    });
    join_all(removals).await.into_iter().collect()
}

/// Who `owner` is and what it waits for, in one read of its client's entry;
/// `None` when the entry is missing or is not a registry entry.
pub(crate) async fn read_owner<C: ScriptConn>(
    conn: &mut C,
    owner: &str,
) -> RedisResult<Option<OwnerState>> {
    let Some((key, prefix)) = place(owner) else {
        return Ok(None);
    };
    let found: Value = redis::cmd("HGETALL").arg(&key).query_async(conn).await?;
    let Some(fields) = pairs(found) else {
        return Ok(None);
    };
    let Some(client) = ClientInfo::from_fields(&fields) else {
        return Ok(None);
    };
    let now = now_ms();
    let waits = fields
        .iter()
        .filter_map(|(f, v)| {
            let lock = std::str::from_utf8(f).ok()?.strip_prefix(&prefix)?;
            parse(owner, lock, std::str::from_utf8(v).ok()?, now)
        })
        .collect();
    Ok(Some(OwnerState {
        client: Some(client),
        waits,
    }))
}

/// The wait-for graph as Redis holds it: a lock is one look at its keys
/// (`lua/inspect.lua`, in its slot), an owner one read of its client's entry,
/// so on a cluster the walk goes from slot to slot, one key per call.
pub(crate) struct RedisGraph<C> {
    /// The connection the walk reads on.
    pub(crate) conn: C,
}

impl<C: ScriptConn + Clone> Graph for RedisGraph<C> {
    type Error = RedisError;

    async fn lock(&mut self, name: &str) -> RedisResult<LockState> {
        let info = call(&mut self.conn, &Inspect { name })
            .await?
            .into_info(name, None);
        Ok(LockState {
            holders: info.holders.into_iter().map(|h| h.owner_field).collect(),
            queue: info.queue.into_iter().map(|q| q.owner_field).collect(),
        })
    }

    async fn owner(&mut self, owner: &str) -> RedisResult<Option<OwnerState>> {
        read_owner(&mut self.conn, owner).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "6f1c1a2e-0000-4000-8000-000000000000";

    #[test]
    fn a_record_reads_back_until_it_expires() {
        let owner = format!("{ID}:7");
        let wait = Wait {
            owners: vec![owner.clone()],
            lock: "orders|1".into(),
            wants: AcquireKind::Write,
            field: format!("{owner}:write"),
            since_ms: 123,
        };
        let v = value(&wait, Duration::from_secs(10));
        let (key, field) = place(&owner).expect("a lockwarden owner");
        assert_eq!(key, format!("lockwarden:client:{{{ID}}}"));
        assert_eq!(field, "wait:7|");
        assert_eq!(parse(&owner, "orders|1", &v, now_ms()), Some(wait));
        assert_eq!(parse(&owner, "orders|1", &v, now_ms() + 20_000), None);
    }

    #[test]
    fn a_record_outlives_the_next_check_by_half_a_timeout() {
        let ms = |n| Duration::from_millis(n);
        assert_eq!(record_life(ms(1_000)), ms(1_500));
        assert_eq!(record_life(ms(10)), ms(260));
        assert_eq!(record_life(ms(200)), ms(450));
        assert_eq!(record_life(ms(10_000)), ms(15_000));
    }

    #[test]
    fn foreign_owners_and_values_are_skipped() {
        assert_eq!(place("redisson-thread:1"), None);
        for v in ["", "1|2", "1|x|x|f", "1|99999999999999|q|f"] {
            assert_eq!(parse("o", "l", v, 0), None, "{v}");
        }
    }
}
