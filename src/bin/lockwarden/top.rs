//! `lockwarden top`: a live view of the locks, semaphores and count-down latches
//! that exist, refreshed every second.
//!
//! Each refresh is what `list` reads ([`Admin::list`] and
//! [`Admin::synchronizers`]: SCAN, never KEYS, on a cluster every master; one
//! script per hash or string key the pattern matches; one `HGETALL` per distinct
//! holding client, for who it is) and one [`Admin::waiting`] (a single `PUBSUB
//! NUMSUB` for every lock's channel), so watching costs Redis a few commands a
//! second per matching key, whatever the number of waiters. What it shows depends on where the output goes:
//! - a terminal: the screen is redrawn in place (cursor home, clear), one row a
//!   lock or synchronizer, most-waited-for first, cut to `--limit` rows and 160
//!   columns so that a refresh never scrolls; each holder as `host/pid/label` when
//!   its manager is registered, its owner field marked "unknown client" otherwise;
//!   a synchronizer's permits or count where a lock's holders are, then who
//!   waits on the lock or synchronizer (recorded waiters: `host/pid/label`, permits wanted, time so
//!   far), a leader lock's election candidates counted apart (`2 election
//!   candidates: host/pid, ...`: each waits for as long as it runs, so it has no
//!   time so far and is not counted as waiting), and `KEY MISSING` for a
//!   semaphore whose key is gone under its waiters;
//! - a pipe or a file: plain lines, a `# <time> <n> locks[, <m> synchronizers]`
//!   line and then one tab-separated line a row per refresh (a lock with
//!   election candidates has a `candidates=` field after `waiters=`);
//! - `--json`: one object per refresh, `{"at_ms", "locks": [...], "deadlocks":
//!   [...]}`, each row in the shape of `status --json` (a lock's with `waiting`
//!   and `deadlock` added).
//!
//! When a lock shown has recorded waiters, the refresh also reads the deadlocks
//! standing ([`Admin::deadlocks`], two more SCANs and a walk per wait): a lock
//! in a cycle is marked `DEADLOCK` (before its holders on a screen, a last
//! column piped) and each cycle is printed under the rows.
//!
//! A refresh that fails (Redis unreachable for a moment) is shown as such and the
//! next one is tried; Ctrl-C (or SIGTERM/SIGHUP) ends it with exit 0, and so does a
//! reader that went away (`lockwarden top | head`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use lockwarden::{
    Admin, ClientInfo, Deadlock, LockError, LockSummary, RecordedWaiter, SynchronizerSummary,
};
use serde_json::json;

use crate::acquire::Signals;
use crate::cli::TopArgs;
use crate::duration::{clock, human};
use crate::inspect::{number_text, sync_json, to_json, ttl_text, Row};
use crate::outcome::{self, printable, Failure};
use crate::session::Session;
use crate::waits;

/// Widest line drawn on a terminal: a longer one would wrap and scroll the screen.
const MAX_COLUMNS: usize = 160;

/// One refresh: the rows with how many processes wait for each, or why not.
type Frame = Result<Seen, LockError>;

/// What one refresh saw.
struct Seen {
    /// The rows, each with how many processes wait for it.
    rows: Vec<(Row, u64)>,
    /// Why no synchronizer is shown, when the user may not read them.
    unseen: Option<String>,
    /// The deadlocks standing now, every one, read only when a lock
    /// shown has recorded waiters.
    cycles: Vec<Deadlock>,
}

impl Seen {
    /// Whether the lock `name` is in one of the cycles.
    fn in_cycle(&self, name: &str) -> bool {
        self.cycles.iter().any(|c| waits::through(c, name))
    }
}

/// Runs `lockwarden top`; answers the exit code.
pub async fn top(session: &Session, args: TopArgs) -> Result<i32, Failure> {
    let admin = session.admin().await?;
    let mut signals = Signals::install()?;
    let screen = !args.json && std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        let frame = look(&admin, &args.pattern).await;
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let text = if args.json {
            json_frame(at, &frame)
        } else if screen {
            screen_frame(session.shown_url(), at, &frame, args.limit)
        } else {
            plain_frame(at, &frame)
        };
        let mut out = std::io::stdout().lock();
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // The reader went away: nothing more to show anyone.
            return Ok(outcome::OK);
        }
        drop(out);
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(outcome::OK);
        }
        futures::select! {
            _ = actix_rt::time::sleep(args.interval).fuse() => {}
            _ = signals.recv().fuse() => return Ok(outcome::OK),
        }
    }
}

/// Reads every lock and synchronizer matching `pattern` and how many processes
/// wait for each, most-waited-for first, then by name.
async fn look(admin: &Admin, pattern: &str) -> Frame {
    let (rows, unseen) = Row::all(admin, pattern).await?;
    let locks: Vec<LockSummary> = rows
        .iter()
        .filter_map(|r| match r {
            Row::Lock(lock) => Some(lock.clone()),
            Row::Sync(_) => None,
        })
        .collect();
    let mut on_locks = admin.waiting(&locks).await?.into_iter();
    let mut rows: Vec<(Row, u64)> = rows
        .into_iter()
        .map(|row| {
            let waiting = match &row {
                // Listeners, or the waiters recorded if more (a fair lock's
                // waiters listen on channels of their own). Election
                // candidates listen too, but are shown apart, not as waiting.
                Row::Lock(lock) => {
                    let candidates = lock.waiters.iter().filter(|w| w.candidate).count() as u64;
                    let listening = on_locks.next().unwrap_or(0).saturating_sub(candidates);
                    listening.max(lock.waiters.len() as u64 - candidates)
                }
                Row::Sync(sync) => sync.waiting.max(sync.waiters.len() as u64),
            };
            (row, waiting)
        })
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.name().cmp(b.0.name())));
    // A lock in a cycle has a recorded waiter; the walk SCANs the keyspace twice
    // more, so only when a lock shown has one.
    let waited = rows
        .iter()
        .any(|(row, _)| matches!(row, Row::Lock(lock) if !lock.waiters.is_empty()));
    let cycles = match waited {
        true => waits::now(admin).await,
        false => Vec::new(),
    };
    Ok(Seen {
        rows,
        unseen,
        cycles,
    })
}

/// "3 locks" or "3 locks, 2 synchronizers".
fn counted(rows: &[(Row, u64)]) -> String {
    let syncs = rows
        .iter()
        .filter(|(r, _)| matches!(r, Row::Sync(_)))
        .count();
    let locks = rows.len() - syncs;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    match syncs {
        0 => format!("{locks} lock{}", plural(locks)),
        n => format!(
            "{locks} lock{}, {n} synchronizer{}",
            plural(locks),
            plural(n)
        ),
    }
}

/// "a:1 x2 [host web-3 pid 4211 ...], b:7 [unknown client ...]" (owner fields
/// with hold counts beyond one, and who each is); `compact` for a screen row:
/// "web-3/4211/billing x2, b:7 (unknown client)".
fn holders_text(lock: &LockSummary, compact: bool) -> String {
    if lock.holders.is_empty() {
        return "-".into();
    }
    lock.holders
        .iter()
        .map(|h| {
            let who = match compact {
                true => compact_who(h.client.as_ref(), &h.owner_field),
                false => format!("{} [{}]", h.owner_field, h.who()),
            };
            match h.holds {
                1 => who,
                n => format!("{who} x{n}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A holder or waiter on a screen row: "web-3/4211/billing" from its registry
/// entry, or its owner field and "(unknown client)" without one.
fn compact_who(client: Option<&ClientInfo>, owner_field: &str) -> String {
    let Some(c) = client else {
        return format!("{owner_field} (unknown client)");
    };
    let label = c
        .label
        .as_deref()
        .map(|l| format!("/{}", outcome::field(l)));
    format!(
        "{}/{}{}",
        outcome::field(&c.host),
        c.pid,
        label.unwrap_or_default()
    )
}

/// A synchronizer's number on a screen row, or that its key is missing.
fn sync_number(sync: &SynchronizerSummary) -> String {
    if sync.key_missing {
        "KEY MISSING: waits for ever".into()
    } else {
        number_text(sync, false)
    }
}

/// Who waits on a lock or synchronizer (recorded waiters, oldest first,
/// election candidates left out: [`candidates_text`]): on a screen row
/// " waits: web-3/4211/api x2 12s, ..." (empty when none); for a plain line
/// "host web-3 pid 4211 ... x2 12s; ..." (`-` when none).
fn waiters_text(waiters: &[RecordedWaiter], compact: bool) -> String {
    let waiters: Vec<&RecordedWaiter> = waiters.iter().filter(|w| !w.candidate).collect();
    if waiters.is_empty() {
        return if compact { String::new() } else { "-".into() };
    }
    let each: Vec<String> = waiters
        .iter()
        .map(|w| {
            let who = match compact {
                true => compact_who(w.client.as_ref(), &w.owner_field),
                false => w.who(),
            };
            let wants = match w.wants {
                1 => String::new(),
                n => format!(" x{n}"),
            };
            let waited = human(w.since.elapsed().unwrap_or_default());
            format!("{who}{wants} {waited}")
        })
        .collect();
    if compact {
        format!(" waits: {}", each.join(", "))
    } else {
        each.join("; ")
    }
}

/// A lock's election candidates, counted and named without a wait time (a
/// candidate waits for as long as it runs): on a screen row "; 2 election
/// candidates: web-3/4211, web-4/17" (after the holders and the waiters) and
/// on a plain line "\tcandidates=2
/// election candidates: host web-3 ...; ..."; empty when there are none.
fn candidates_text(waiters: &[RecordedWaiter], compact: bool) -> String {
    let candidates: Vec<&RecordedWaiter> = waiters.iter().filter(|w| w.candidate).collect();
    if candidates.is_empty() {
        return String::new();
    }
    let who: Vec<String> = candidates
        .iter()
        .map(|w| match compact {
            true => compact_who(w.client.as_ref(), &w.owner_field),
            false => w.who(),
        })
        .collect();
    let counted = waits::candidates_counted(candidates.len());
    match compact {
        true => format!("; {counted}: {}", who.join(", ")),
        false => format!(
            "\tcandidates={}",
            outcome::field(&format!("{counted}: {}", who.join("; ")))
        ),
    }
}

/// A whole screen: cursor home, clear, a header, one row a lock.
fn screen_frame(url: &str, at: Duration, frame: &Frame, limit: usize) -> String {
    let mut lines = vec![format!(
        "lockwarden top - {url} - {} UTC - Ctrl-C quits",
        clock(at)
    )];
    match frame {
        Err(e) => lines.push(format!("Redis did not answer this refresh: {e}")),
        Ok(seen @ Seen { rows, unseen, .. }) => {
            lines.push(counted(rows));
            lines.extend(unseen.clone());
            lines.push(String::new());
            lines.push(format!(
                "{:<32} {:<16} {:>7} {:>5} {:<18} HOLDERS",
                "NAME", "KIND", "WAITING", "QUEUE", "TTL"
            ));
            for (row, waiting) in rows.iter().take(limit) {
                lines.push(match row {
                    Row::Lock(lock) => format!(
                        "{:<32} {:<16} {:>7} {:>5} {:<18} {}{}{}{}",
                        lock.name,
                        lock.kind.as_str(),
                        waiting,
                        lock.queue.len(),
                        ttl_text(lock.ttl),
                        if seen.in_cycle(&lock.name) {
                            "DEADLOCK "
                        } else {
                            ""
                        },
                        holders_text(lock, true),
                        waiters_text(&lock.waiters, true),
                        candidates_text(&lock.waiters, true)
                    ),
                    Row::Sync(sync) => format!(
                        "{:<32} {:<16} {:>7} {:>5} {:<18} ({}){}",
                        sync.name,
                        sync.kind.as_str(),
                        waiting,
                        "-",
                        ttl_text(sync.ttl),
                        sync_number(sync),
                        waiters_text(&sync.waiters, true)
                    ),
                });
            }
            if rows.len() > limit {
                lines.push(format!("... and {} more (--limit)", rows.len() - limit));
            }
            for cycle in &seen.cycles {
                lines.push(format!("DEADLOCK: {}", waits::text(cycle)));
            }
        }
    }
    let body: Vec<String> = lines
        .iter()
        .map(|l| printable(l).chars().take(MAX_COLUMNS).collect())
        .collect();
    format!("\x1b[H\x1b[2J{}\n", body.join("\n"))
}

/// Plain lines for a pipe: a header, then one tab-separated line a lock.
fn plain_frame(at: Duration, frame: &Frame) -> String {
    let mut lines = Vec::new();
    match frame {
        Err(e) => lines.push(format!("# {} UTC error: {e}", clock(at))),
        Ok(seen @ Seen { rows, unseen, .. }) => {
            lines.push(format!("# {} UTC {}", clock(at), counted(rows)));
            lines.extend(unseen.iter().map(|why| format!("# {why}")));
            for (row, waiting) in rows {
                lines.push(match row {
                    Row::Lock(lock) => format!(
                        "{}\t{}\twaiting={waiting}\tqueue={}\t{}\tholders={}\twaiters={}{}{}",
                        outcome::field(&lock.name),
                        lock.kind.as_str(),
                        lock.queue.len(),
                        ttl_text(lock.ttl),
                        outcome::field(&holders_text(lock, false)),
                        outcome::field(&waiters_text(&lock.waiters, false)),
                        candidates_text(&lock.waiters, false),
                        if seen.in_cycle(&lock.name) {
                            "\tDEADLOCK"
                        } else {
                            ""
                        },
                    ),
                    Row::Sync(sync) => format!(
                        "{}\t{}\twaiting={waiting}\t{}\t{}{}\twaiters={}",
                        outcome::field(&sync.name),
                        sync.kind.as_str(),
                        number_text(sync, true),
                        ttl_text(sync.ttl),
                        if sync.key_missing {
                            "\tKEY-MISSING"
                        } else {
                            ""
                        },
                        outcome::field(&waiters_text(&sync.waiters, false)),
                    ),
                });
            }
            for cycle in &seen.cycles {
                lines.push(format!("# DEADLOCK: {}", waits::text(cycle)));
            }
        }
    }
    let mut text: String = lines
        .iter()
        .map(|l| printable(l).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
    text.push('\n');
    text
}

/// One JSON object for the refresh.
fn json_frame(at: Duration, frame: &Frame) -> String {
    let at_ms = at.as_millis() as u64;
    let value = match frame {
        Err(e) => json!({ "at_ms": at_ms, "error": e.to_string() }),
        Ok(seen @ Seen { rows, unseen, .. }) => {
            let locks: Vec<serde_json::Value> = rows
                .iter()
                .map(|(row, waiting)| match row {
                    Row::Lock(lock) => {
                        let mut v = to_json(&lock.name, Some(lock));
                        v["waiting"] = json!(waiting);
                        v["deadlock"] = json!(seen.in_cycle(&lock.name));
                        v
                    }
                    Row::Sync(sync) => sync_json(sync),
                })
                .collect();
            let cycles: Vec<serde_json::Value> = seen.cycles.iter().map(waits::to_json).collect();
            match unseen {
                Some(why) => {
                    json!({ "at_ms": at_ms, "locks": locks, "deadlocks": cycles, "unseen": why })
                }
                None => json!({ "at_ms": at_ms, "locks": locks, "deadlocks": cycles }),
            }
        }
    };
    format!("{value}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_utc_hours_minutes_seconds() {
        assert_eq!(
            clock(Duration::from_secs(3 * 3600 + 7 * 60 + 9)),
            "03:07:09"
        );
        assert_eq!(clock(Duration::from_secs(86_400 + 59)), "00:00:59");
    }

    #[test]
    fn a_screen_never_outgrows_its_limit() {
        let frame: Frame = Ok(Seen {
            rows: Vec::new(),
            unseen: None,
            cycles: Vec::new(),
        });
        let text = screen_frame("redis://h", Duration::ZERO, &frame, 5);
        assert!(text.starts_with("\x1b[H\x1b[2J"));
        assert!(text.contains("0 locks"));
    }
}
