//! Who waits and the cycles among the waits, as `status` and `top` show them:
//! a recorded waiter in words and as JSON, the deadlocks ([`Admin::deadlocks`],
//! read best effort), and a cycle in words and as JSON.
//!
//! An election candidate (`Leader::campaign`) is recorded as a lock's waiter
//! that waits for as long as it runs: it is shown apart, counted as a
//! candidate with when it began campaigning, never as a wait whose time grows.
//!
//! A cycle shown here is one that stands now, whether or not a detector will
//! break it (its processes may run with detection off): the words say who waits
//! for what and who holds it, in the cycle's order, and which wait a detector
//! fails (the first, the one that started last) without saying it was failed.

use lockwarden::{Admin, ClientInfo, Deadlock, DeadlockLink, RecordedWaiter};
use serde_json::{json, Value};

use crate::duration::{clock, human, millis};
use crate::outcome::{field, note};

/// One recorded waiter for people, who first (a narrow terminal cuts the
/// end): `host web-3 pid 4211 label "api" (...) waits for 2 permits, 12.0s so
/// far (since 09:13:30 UTC)  [<owner field>]`.
pub fn waiter_text(w: &RecordedWaiter) -> String {
    let waited = w.since.elapsed().unwrap_or_default();
    let wants = if w.wants == 1 {
        String::new()
    } else {
        format!(" for {} permits", w.wants)
    };
    let since = w
        .since
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{} waits{wants}, {} so far (since {} UTC)  [{}]",
        w.who(),
        human(waited),
        clock(since),
        field(&w.owner_field)
    )
}

/// A lock's recorded waiters for `status`, one line each: the waiters first,
/// then the candidates under a line that counts them ("2 election candidates
/// ..."), each with when it began campaigning rather than a growing wait.
pub fn waiter_lines(waiters: &[RecordedWaiter]) -> Vec<String> {
    let (candidates, waits): (Vec<_>, Vec<_>) = waiters.iter().partition(|w| w.candidate);
    let mut lines: Vec<String> = waits.into_iter().map(waiter_text).collect();
    if !candidates.is_empty() {
        lines.push(format!(
            "{} (Leader::campaign: each waits its turn for as long as it runs):",
            candidates_counted(candidates.len())
        ));
    }
    lines.extend(candidates.into_iter().map(|w| {
        let since = w.since.duration_since(std::time::UNIX_EPOCH);
        format!(
            "  {} campaigns since {} UTC  [{}]",
            w.who(),
            clock(since.unwrap_or_default()),
            field(&w.owner_field)
        )
    }));
    lines
}

/// "1 election candidate", "2 election candidates".
pub fn candidates_counted(n: usize) -> String {
    format!("{n} election candidate{}", if n == 1 { "" } else { "s" })
}

/// A recorded waiter as JSON (`candidate`: an election candidate).
pub fn waiter_json(w: &RecordedWaiter) -> Value {
    let since_ms = w
        .since
        .duration_since(std::time::UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0);
    json!({
        "owner": w.owner_field,
        "wants": w.wants,
        "since_ms": since_ms,
        "waited_ms": w.since.elapsed().map(millis).unwrap_or(0),
        "client": client_json(w.client.as_ref()),
        "who": w.who(),
        "candidate": w.candidate,
    })
}

/// A holder's registry entry as JSON (`null` when unknown); strings as
/// registered (JSON escapes control characters itself).
pub fn client_json(client: Option<&ClientInfo>) -> Value {
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

/// The deadlocks now; none, with a note on stderr, when they cannot be read
/// (what `status` and `top` show otherwise stays right).
pub async fn now(admin: &Admin) -> Vec<Deadlock> {
    match admin.deadlocks().await {
        Ok(found) => found,
        Err(e) => {
            note(format!("deadlocks not shown: {e}"));
            Vec::new()
        }
    }
}

/// Whether `cycle` goes through the lock `name`.
pub fn through(cycle: &Deadlock, name: &str) -> bool {
    cycle.locks().any(|l| l == name)
}

/// One link's owner for people: `host web-3 pid 4211 (...) [<owner field>]`,
/// or the field alone when its client is unknown.
fn who(link: &DeadlockLink) -> String {
    match &link.client {
        Some(c) => format!("{} [{}]", c.describe(), link.owner),
        None => format!("{} (unknown client)", link.owner),
    }
}

/// The cycle in one line: `<who> waits for exclusive lock "b", held by
/// <who>, which waits for exclusive lock "a", held by the first owner; a detector
/// fails the first wait (it started last)`.
pub fn text(cycle: &Deadlock) -> String {
    let mut out = String::new();
    let n = cycle.links.len();
    for (i, link) in cycle.links.iter().enumerate() {
        if i == 0 {
            out.push_str(&who(link));
        }
        out.push_str(&format!(
            " waits for {} lock \"{}\", held by ",
            link.wants, link.lock
        ));
        if i + 1 == n {
            out.push_str("the first owner");
        } else {
            out.push_str(&format!("{}, which", who(&cycle.links[i + 1])));
        }
    }
    out.push_str("; a detector fails the first wait (it started last)");
    out
}

/// The cycle as JSON: `{"locks": [..], "links": [{"owner", "lock", "wants",
/// "since_ms", "client", "who"}]}`, the first link the wait a detector fails.
pub fn to_json(cycle: &Deadlock) -> Value {
    let links: Vec<Value> = cycle
        .links
        .iter()
        .map(|l| {
            json!({
                "owner": l.owner,
                "lock": l.lock,
                "wants": l.wants.as_str(),
                "since_ms": l.since_ms,
                "client": client_json(l.client.as_ref()),
                "who": who(l),
            })
        })
        .collect();
    json!({ "locks": cycle.locks().collect::<Vec<_>>(), "links": links })
}
