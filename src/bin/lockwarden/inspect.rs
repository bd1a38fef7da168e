//! `lockwarden status` and `lockwarden list`: what locks exist, of which kind, who
//! holds them how many times, and when they expire.
//!
//! Both read through [`lockwarden::Admin`], which sees the raw lock hash (so a
//! read-write lock's `mode` is visible) and finds locks with SCAN, never KEYS. They
//! change nothing in Redis. One JSON shape serves both (`status --json` prints one
//! object, `list --json` one per line), so a script can move from one to the other.
//! Holders are also classified by the look of their owner field: `<uuid>:<n>`
//! (`:write` after it for a writer) is what lockwarden and Redisson write; anything
//! else was written by some other client that shares the key. Each holder is shown
//! with who it is (host, pid, label) when its manager is registered, or as an
//! unknown client; `--json` carries the entry as `client` (null when unknown) and
//! the same text as `who`.

use lockwarden::{ClientInfo, LockKind, LockSummary};
use serde_json::{json, Value};

use crate::cli::{ListArgs, StatusArgs};
use crate::duration::{human, millis};
use crate::outcome::{self, field, note, Failure};
use crate::session::Session;

/// Runs `lockwarden status`; answers the exit code.
pub async fn status(session: &Session, args: StatusArgs) -> Result<i32, Failure> {
    let admin = session.admin().await?;
    // A semaphore or a latch is a string holding a number, not a lock hash.
    let counter = admin
        .counter(&args.name)
        .await
        .map_err(|e| Failure::from_lock(&format!("reading \"{}\"", args.name), e))?;
    if let Some(value) = counter {
        if args.json {
            say!(
                "{}",
                json!({"lock": args.name, "kind": "counter", "value": value})
            );
        } else {
            say!(
                "{}: counter {value} (a semaphore's available permits, or a count-down latch's count)",
                field(&args.name)
            );
        }
        return Ok(outcome::OK);
    }
    let summary = admin
        .describe(&args.name)
        .await
        .map_err(|e| Failure::from_lock(&format!("reading lock \"{}\"", args.name), e))?;
    if summary
        .as_ref()
        .is_some_and(|s| s.kind == LockKind::NotALock)
    {
        return Err(not_a_lock("reading lock", &args.name));
    }
    if args.json {
        say!("{}", to_json(&args.name, summary.as_ref()));
        return Ok(outcome::OK);
    }
    let Some(lock) = summary else {
        say!("{}: not locked (no such key)", field(&args.name));
        return Ok(outcome::OK);
    };
    let n = lock.holders.len();
    say!(
        "{}: {} lock{}, {n} holder{}, {}",
        field(&lock.name),
        lock.kind.as_str(),
        match &lock.kind {
            LockKind::ReadWrite { mode } => format!(" in {mode} mode"),
            _ => String::new(),
        },
        if n == 1 { "" } else { "s" },
        ttl_text(&lock),
    );
    for h in &lock.holders {
        let look = match owner_format(&h.owner_field) {
            OwnerFormat::Redisson => "lockwarden/Redisson owner",
            OwnerFormat::Other => "owner field of another format",
        };
        say!(
            "  {}  holds: {}  {}  ({look})",
            field(&h.owner_field),
            h.holds,
            h.who()
        );
    }
    for (place, w) in lock.queue.iter().enumerate() {
        let left = match w.expires_in {
            Some(left) => format!("place lapses in {} unless refreshed", human(left)),
            None => "no deadline".into(),
        };
        say!(
            "  queued #{}: {}  ({left})",
            place + 1,
            field(&w.owner_field)
        );
    }
    Ok(outcome::OK)
}

/// Runs `lockwarden list`; answers the exit code.
pub async fn list(session: &Session, args: ListArgs) -> Result<i32, Failure> {
    let admin = session.admin().await?;
    let locks = admin
        .list(&args.pattern)
        .await
        .map_err(|e| Failure::from_lock("listing locks", e))?;
    if locks.is_empty() {
        note(format!("no locks match '{}'", args.pattern));
    }
    for lock in &locks {
        if args.json {
            say!("{}", to_json(&lock.name, Some(lock)));
        } else {
            say!(
                "{}\t{}\tholders={}\t{}\tby={}",
                outcome::field(&lock.name),
                lock.kind.as_str(),
                lock.holders.len(),
                ttl_text(lock),
                outcome::field(&who_text(lock)),
            );
        }
    }
    Ok(outcome::OK)
}

/// Who holds `lock`, one entry a holder: `host web-3 pid 4211 ...`, or the
/// unknown-client text; `-` when nobody does.
pub fn who_text(lock: &LockSummary) -> String {
    if lock.holders.is_empty() {
        return "-".into();
    }
    lock.holders
        .iter()
        .map(|h| h.who())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A holder's registry entry as JSON (`null` when unknown); strings as
/// registered (JSON escapes control characters itself).
fn client_json(client: Option<&ClientInfo>) -> Value {
    let Some(c) = client else {
        return Value::Null;
    };
    let started_ms = c
        .started
        .duration_since(std::time::UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0);
    json!({
        "host": c.host, "pid": c.pid, "program": c.program, "label": c.label,
        "started_ms": started_ms, "version": c.version,
    })
}

/// The refusal for a key that exists and is not a lock: bad input, exit 2.
pub fn not_a_lock(doing: &str, name: &str) -> Failure {
    Failure::usage(format!(
        "{doing} \"{name}\": the key exists and is not a lock"
    ))
}

/// "expires in 29.7s" or "no expiry".
pub fn ttl_text(lock: &LockSummary) -> String {
    match lock.ttl {
        Some(ttl) => format!("expires in {}", human(ttl)),
        None => "no expiry".into(),
    }
}

/// The JSON form of one lock; kind `none` when there is no such key.
pub fn to_json(name: &str, lock: Option<&LockSummary>) -> Value {
    let Some(lock) = lock else {
        return json!({
            "lock": name, "kind": "none", "mode": null, "held": false,
            "ttl_ms": null, "holders": [], "queue": [],
        });
    };
    let holders: Vec<Value> = lock
        .holders
        .iter()
        .map(|h| {
            json!({
                "owner": h.owner_field,
                "holds": h.holds,
                "owner_format": owner_format(&h.owner_field).as_str(),
                "client": client_json(h.client.as_ref()),
                "who": h.who(),
            })
        })
        .collect();
    let mode = match &lock.kind {
        LockKind::ReadWrite { mode } => Some(mode.as_str()),
        _ => None,
    };
    let queue: Vec<Value> = lock
        .queue
        .iter()
        .map(|w| json!({"owner": w.owner_field, "expires_in_ms": w.expires_in.map(millis)}))
        .collect();
    json!({
        "lock": lock.name,
        "kind": lock.kind.as_str(),
        "mode": mode,
        "held": !lock.holders.is_empty(),
        "ttl_ms": lock.ttl.map(millis),
        "holders": holders,
        "queue": queue,
    })
}

/// What an owner field looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OwnerFormat {
    /// `<uuid>:<n>` or `<uuid>:<n>:write`: lockwarden or Redisson.
    Redisson,
    /// Anything else.
    Other,
}

impl OwnerFormat {
    /// The JSON spelling.
    fn as_str(self) -> &'static str {
        match self {
            OwnerFormat::Redisson => "redisson",
            OwnerFormat::Other => "other",
        }
    }
}

/// Classifies an owner field; see [`OwnerFormat`].
fn owner_format(field: &str) -> OwnerFormat {
    let field = field.strip_suffix(":write").unwrap_or(field);
    let Some((id, number)) = field.rsplit_once(':') else {
        return OwnerFormat::Other;
    };
    let is_uuid = id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    let is_number = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit());
    if is_uuid && is_number {
        OwnerFormat::Redisson
    } else {
        OwnerFormat::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_fields_of_lockwarden_and_redisson_are_recognised() {
        let id = "4f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11";
        assert_eq!(owner_format(&format!("{id}:1")), OwnerFormat::Redisson);
        assert_eq!(
            owner_format(&format!("{id}:77:write")),
            OwnerFormat::Redisson
        );
        assert_eq!(owner_format(&format!("{id}:x")), OwnerFormat::Other);
        assert_eq!(owner_format("host-1:42"), OwnerFormat::Other);
        assert_eq!(owner_format("worker"), OwnerFormat::Other);
    }

    #[test]
    fn a_missing_lock_reads_as_kind_none() {
        let v = to_json("a", None);
        assert_eq!(v["kind"], "none");
        assert_eq!(v["held"], false);
        assert!(v["ttl_ms"].is_null());
    }
}
