//! `lockwarden status` and `lockwarden list`: what locks exist, of which kind, who
//! holds them how many times, and when they expire; and the semaphores and
//! count-down latches beside them, with their numbers and waiters.
//!
//! Both read through [`lockwarden::Admin`], which sees the raw lock hash (so a
//! read-write lock's `mode` is visible) and finds locks and synchronizers with
//! SCAN, never KEYS. They change nothing in Redis. One JSON shape serves both
//! (`status --json` prints one object, `list --json` one per line), so a script
//! can move from one to the other; a synchronizer's object has `value` and
//! `waiting` where a lock's has holders.
//! Holders are also classified by the look of their owner field: `<uuid>:<n>`
//! (`:write` after it for a writer) is what lockwarden and Redisson write; anything
//! else was written by some other client that shares the key. Each holder is shown
//! with who it is (host, pid, label) when its manager is registered, or as an
//! unknown client; `--json` carries the entry as `client` (null when unknown) and
//! the same text as `who`. `status` ends with whether lock changes on the server
//! are confirmed by a replica now (`replica confirmation on|reduced|off ...`;
//! `replica_confirmation` in JSON).

use lockwarden::{
    Admin, LockError, LockKind, LockSummary, QueuedWaiter, ReplicaConfirmation, SynchronizerKind,
    SynchronizerSummary,
};
use serde_json::{json, Value};

use crate::cli::{ListArgs, StatusArgs};
use crate::duration::{human, millis};
use crate::outcome::{self, field, note, Failure};
use crate::session::Session;
use crate::waits::{self, client_json, waiter_json, waiter_text};

/// Runs `lockwarden status`; answers the exit code.
pub async fn status(session: &Session, args: StatusArgs) -> Result<i32, Failure> {
    let admin = session.admin().await?;
    // Whether lock changes on this server are confirmed by a replica now.
    let replicas = admin.replica_confirmation().await;
    // A semaphore or a latch is a string holding a number, not a lock hash.
    let counter = admin
        .synchronizer(&args.name)
        .await
        .map_err(|e| Failure::from_lock(&format!("reading \"{}\"", args.name), e))?;
    if let Some(sync) = counter {
        if args.json {
            let mut v = sync_json(&sync);
            v["replica_confirmation"] = confirmation_json(&replicas);
            say!("{v}");
        } else {
            say!("{}: {}", field(&sync.name), sync_text(&sync));
            say_queue(&sync.queue);
            for w in &sync.waiters {
                say!("  {}", waiter_text(w));
            }
            say!("{replicas}");
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
    // The cycles through this lock, whoever would break them. A lock
    // in one has a recorded waiter, and the walk SCANs the keyspace: only then.
    let cycles: Vec<_> = match &summary {
        Some(lock) if !lock.waiters.is_empty() => waits::now(&admin).await,
        _ => Vec::new(),
    };
    let cycles: Vec<_> = cycles
        .iter()
        .filter(|c| waits::through(c, &args.name))
        .collect();
    if args.json {
        let mut v = to_json(&args.name, summary.as_ref());
        v["deadlocks"] = cycles.iter().map(|c| waits::to_json(c)).collect();
        v["replica_confirmation"] = confirmation_json(&replicas);
        say!("{v}");
        return Ok(outcome::OK);
    }
    let Some(lock) = summary else {
        say!("{}: not locked (no such key)", field(&args.name));
        say!("{replicas}");
        return Ok(outcome::OK);
    };
    let n = lock.holders.len();
    say!(
        "{}: {} lock{}, {n} holder{}, {}",
        field(&lock.name),
        lock.kind.as_str(),
        lock.kind
            .mode()
            .map(|mode| format!(" in {mode} mode"))
            .unwrap_or_default(),
        if n == 1 { "" } else { "s" },
        ttl_text(lock.ttl),
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
    say_queue(&lock.queue);
    for line in waits::waiter_lines(&lock.waiters) {
        say!("  {line}");
    }
    for c in cycles {
        say!("  DEADLOCK: {}", waits::text(c));
    }
    say!("{replicas}");
    Ok(outcome::OK)
}

/// How replica confirmation stands on the server, as `status --json` shows it:
/// `state` is `on`, `reduced` or `off`; `counted` is null when the replicas
/// are not counted (off, or a cluster); `reason` is null when it is on.
fn confirmation_json(c: &ReplicaConfirmation) -> Value {
    json!({
        "state": c.state(),
        "wanted": c.wanted,
        "counted": c.counted,
        "reason": c.reason,
    })
}

/// A fair lock's or fair semaphore's queue, head first, one line a waiter.
fn say_queue(queue: &[QueuedWaiter]) {
    for (place, w) in queue.iter().enumerate() {
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
}

/// A queue as JSON: `owner`, `expires_in_ms` for each waiter, head first.
fn queue_json(queue: &[QueuedWaiter]) -> Vec<Value> {
    let one = |w: &QueuedWaiter| json!({"owner": w.owner_field, "expires_in_ms": w.expires_in.map(millis)});
    queue.iter().map(one).collect()
}

/// Runs `lockwarden list`; answers the exit code.
pub async fn list(session: &Session, args: ListArgs) -> Result<i32, Failure> {
    let admin = session.admin().await?;
    let (rows, unseen) = Row::all(&admin, &args.pattern)
        .await
        .map_err(|e| Failure::from_lock("listing locks and synchronizers", e))?;
    if let Some(why) = unseen {
        note(why);
    }
    if rows.is_empty() {
        note(format!(
            "no locks, semaphores or latches match '{}'",
            args.pattern
        ));
    }
    for row in &rows {
        match (row, args.json) {
            (Row::Lock(lock), true) => say!("{}", to_json(&lock.name, Some(lock))),
            (Row::Lock(lock), false) => say!(
                "{}\t{}\tholders={}\t{}\tby={}",
                outcome::field(&lock.name),
                lock.kind.as_str(),
                lock.holders.len(),
                ttl_text(lock.ttl),
                outcome::field(&who_text(lock)),
            ),
            (Row::Sync(sync), true) => say!("{}", sync_json(sync)),
            (Row::Sync(sync), false) => say!(
                "{}\t{}\t{}\t{}\twaiting={}{}",
                outcome::field(&sync.name),
                sync.kind.as_str(),
                number_text(sync, true),
                ttl_text(sync.ttl),
                sync.waiting.max(sync.waiters.len() as u64),
                if sync.key_missing {
                    "\tKEY-MISSING"
                } else {
                    ""
                },
            ),
        }
    }
    Ok(outcome::OK)
}

/// One line of `list` or `top`: a lock or a synchronizer.
pub enum Row {
    /// A lock hash.
    Lock(LockSummary),
    /// A semaphore's or a latch's integer string.
    Sync(SynchronizerSummary),
}

impl Row {
    /// Every lock and synchronizer whose name matches `pattern`, by name. A user
    /// whose ACL does not let it read the synchronizers (an operator's ACL written
    /// before the kind labels) still gets the locks: the second answer then says
    /// why no synchronizer is shown.
    pub async fn all(
        admin: &Admin,
        pattern: &str,
    ) -> Result<(Vec<Row>, Option<String>), LockError> {
        let locks = admin.list(pattern).await?;
        let mut rows: Vec<Row> = locks.into_iter().map(Row::Lock).collect();
        let mut unseen = None;
        match admin.synchronizers(pattern).await {
            Ok(syncs) => rows.extend(syncs.into_iter().map(Row::Sync)),
            Err(LockError::NoPermission { detail, .. }) => {
                unseen = Some(format!(
                    "semaphores and latches not shown: the Redis user may not read their \
                     keys ({detail}); give it ~lockwarden_kind:* and ~{{<prefix>* \
                     (docs/operations.md)"
                ));
            }
            Err(e) => return Err(e),
        }
        rows.sort_by(|a, b| a.name().cmp(b.name()));
        Ok((rows, unseen))
    }

    /// Its name.
    pub fn name(&self) -> &str {
        match self {
            Row::Lock(lock) => &lock.name,
            Row::Sync(sync) => &sync.name,
        }
    }
}

/// A synchronizer for people: "semaphore, 2 permits available, 1 waiting, no
/// expiry", with what the kind was told from when no label said it.
pub fn sync_text(sync: &SynchronizerSummary) -> String {
    // Only a fair semaphore has a queue in Redis; its waiters listen on
    // channels of their own, so the listener count alone would say 0.
    let fair = !sync.queue.is_empty();
    let waiting = sync
        .waiting
        .max(sync.waiters.len() as u64)
        .max(sync.queue.len() as u64);
    let kind = match sync.kind {
        SynchronizerKind::Semaphore if fair => "fair semaphore (permits served in queue order)",
        SynchronizerKind::Semaphore => "semaphore",
        SynchronizerKind::PermitSemaphore => "permit-expirable semaphore",
        SynchronizerKind::Latch => "count-down latch",
        _ => "counter",
    };
    if sync.key_missing {
        return format!(
            "{kind} whose KEY DOES NOT EXIST, {} waiting on it (deleted, or lost with Redis's \
             data): they wait until someone adds permits (`lockwarden semaphore set`)",
            waiting
        );
    }
    let text = format!(
        "{kind}, {}, {waiting} waiting, {}",
        number_text(sync, false),
        ttl_text(sync.ttl)
    );
    match (sync.kind, sync.labelled) {
        (SynchronizerKind::Counter, _) => format!(
            "{text} (a semaphore's available permits or a count-down latch's count: no \
             lockwarden label says which and nobody waits on it, as with one Redisson made, \
             or an application's counter)"
        ),
        (_, false) => format!("{text} (no lockwarden label: told by its waiters or permits out)"),
        _ => text,
    }
}

/// Its number, by kind: "2 permits available" (", 1 taken" for a
/// permit-expirable semaphore with permits out), "count 3", or "value 3" for a
/// counter; `fields` spells it for a tab-separated line instead:
/// `available=2 taken=1`, `count=3`, `value=3`.
pub fn number_text(sync: &SynchronizerSummary, fields: bool) -> String {
    let v = sync.value;
    let taken = sync.taken;
    match (sync.kind, fields) {
        (SynchronizerKind::Semaphore | SynchronizerKind::PermitSemaphore, true) => match taken {
            Some(t) => format!("available={v} taken={t}"),
            None => format!("available={v}"),
        },
        (SynchronizerKind::Semaphore | SynchronizerKind::PermitSemaphore, false) => {
            let permits = if v == 1 { "permit" } else { "permits" };
            match taken {
                Some(t) => format!("{v} {permits} available, {t} taken"),
                None => format!("{v} {permits} available"),
            }
        }
        (SynchronizerKind::Latch, true) => format!("count={v}"),
        (SynchronizerKind::Latch, false) => format!("count {v}"),
        (_, true) => format!("value={v}"),
        (_, false) => format!("value {v}"),
    }
}

/// The JSON form of a synchronizer: `name`, `kind`, `labelled`, `value`,
/// `taken`, `ttl_ms`, `waiting` (listeners), `waiters` (recorded, who each is),
/// `key_missing`, `queue` (a fair semaphore's, by `status` only); and `lock`, the same as `name`, kept for scripts written
/// when every row called its name so (deprecated).
pub fn sync_json(sync: &SynchronizerSummary) -> Value {
    let waiters: Vec<Value> = sync.waiters.iter().map(waiter_json).collect();
    json!({
        "name": sync.name,
        "lock": sync.name,
        "kind": sync.kind.as_str(),
        "labelled": sync.labelled,
        "value": sync.value,
        "taken": sync.taken,
        "ttl_ms": sync.ttl.map(millis),
        "waiting": sync.waiting,
        "waiters": waiters,
        "key_missing": sync.key_missing,
        "queue": queue_json(&sync.queue),
    })
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

/// The refusal for a key that exists and is not a lock: bad input, exit 2.
pub fn not_a_lock(doing: &str, name: &str) -> Failure {
    Failure::usage(format!(
        "{doing} \"{name}\": the key exists and is not a lock"
    ))
}

/// `failure` as it reads when Redis answered WRONGTYPE: says what `name` is
/// instead (a lock of some kind, or another type of key) and that it is not a
/// `kind`. Exit 2: the name was wrong, and nothing was changed.
pub async fn named_wrong_type(
    session: &Session,
    name: &str,
    kind: &str,
    failure: Failure,
) -> Failure {
    if !failure.wrong_type {
        return failure;
    }
    let what = match session.admin().await {
        Ok(admin) => match admin.describe(name).await {
            Ok(Some(lock)) if lock.kind != LockKind::NotALock => {
                with_article(&format!("{} lock", lock.kind.as_str()))
            }
            _ => "a key of another type".to_string(),
        },
        Err(_) => "a key of another type".to_string(),
    };
    Failure::usage(format!(
        "\"{name}\" is not a {kind}: the key exists and is {what}; nothing was changed"
    ))
}

/// `phrase` after "a", or "an" when it starts with a vowel: "an exclusive lock",
/// "a read-write lock", from the kind's name whatever the kind.
fn with_article(phrase: &str) -> String {
    let vowel = phrase.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {phrase}", if vowel { "an" } else { "a" })
}

/// "expires in 29.7s" or "no expiry".
pub fn ttl_text(ttl: Option<std::time::Duration>) -> String {
    match ttl {
        Some(ttl) => format!("expires in {}", human(ttl)),
        None => "no expiry".into(),
    }
}

/// The JSON form of one lock; kind `none` when there is no such key.
pub fn to_json(name: &str, lock: Option<&LockSummary>) -> Value {
    let Some(lock) = lock else {
        return json!({
            "name": name, "lock": name, "kind": "none", "mode": null, "held": false,
            "ttl_ms": null, "holders": [], "queue": [], "waiters": [],
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
    let mode = lock.kind.mode();
    let queue = queue_json(&lock.queue);
    let waiters: Vec<Value> = lock.waiters.iter().map(waiter_json).collect();
    json!({
        "name": lock.name,
        "lock": lock.name,
        "kind": lock.kind.as_str(),
        "mode": mode,
        "held": !lock.holders.is_empty(),
        "ttl_ms": lock.ttl.map(millis),
        "holders": holders,
        "queue": queue,
        "waiters": waiters,
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
    fn a_kind_takes_its_article() {
        assert_eq!(with_article("exclusive lock"), "an exclusive lock");
        assert_eq!(with_article("read-write lock"), "a read-write lock");
    }

    #[test]
    fn a_missing_lock_reads_as_kind_none() {
        let v = to_json("a", None);
        assert_eq!(v["kind"], "none");
        assert_eq!(v["held"], false);
        assert!(v["ttl_ms"].is_null());
    }
}
