//! `lockwarden latch` and `lockwarden semaphore`: set, count down, wait for,
//! add to, drain and read the synchronizers by name, as an operator does by hand
//! (running a command under permits is `sync.rs`'s). Each checks the name before
//! anything reaches Redis, and a name that holds another kind of key is said as
//! such rather than as a Redis type error.

use std::time::Duration;

use futures::FutureExt;
use lockwarden::Locks;
use serde_json::json;

use crate::acquire::Signals;
use crate::cli::{LatchAction, LatchArgs, SemaphoreAction, SemaphoreArgs};
use crate::outcome::{self, note, signal_code, Failure};
use crate::session::Session;

/// Runs `lockwarden latch ...`; answers the exit code.
pub async fn latch(session: &Session, args: LatchArgs) -> Result<i32, Failure> {
    let name = match &args.action {
        LatchAction::Set { name, .. }
        | LatchAction::CountDown { name }
        | LatchAction::Wait { name, .. }
        | LatchAction::Count { name } => name.clone(),
    };
    session.check_new_name(&name)?;
    match latch_action(session, &name, args).await {
        Err(f) => {
            Err(crate::inspect::named_wrong_type(session, &name, "count-down latch", f).await)
        }
        done => done,
    }
}

/// `lockwarden latch ...` once the name is checked. With `--json` one object
/// on stdout (`name` and what the action found); notes stay on stderr.
async fn latch_action(session: &Session, name: &str, args: LatchArgs) -> Result<i32, Failure> {
    let doing = format!("latch \"{name}\"");
    let fail = |e| Failure::from_lock(&doing, e);
    let manager = session.manager().await?;
    let latch = manager.latch(name).await.map_err(fail)?;
    let json = args.json;
    let show = |text: String, value: serde_json::Value| {
        if json {
            say!("{value}");
        } else if !text.is_empty() {
            say!("{text}");
        }
    };
    match args.action {
        LatchAction::Set { count, .. } => {
            if latch.try_set_count(count).await.map_err(fail)? {
                show(
                    format!("{name}: count set to {count}"),
                    json!({"name": name, "set": true, "count": count}),
                );
                Ok(outcome::OK)
            } else {
                // Idempotent as `semaphore set`: a set-up script's second run
                // succeeds. A count only goes down, so one at or below the
                // asked may be this very latch counted down; one above it is
                // plainly another number.
                let now = latch.count().await.map_err(fail)?;
                let same = now <= count;
                note(format!(
                    "latch \"{name}\" already has a count ({now}); left as it is"
                ));
                show(
                    String::new(),
                    json!({"name": name, "set": same, "changed": false, "count": now}),
                );
                Ok(if same { outcome::OK } else { outcome::FAILED })
            }
        }
        LatchAction::CountDown { .. } => {
            // The command waits for the real outcome (its exit would end a
            // count-down going on in the background): a bound past the op
            // id's window (5 s), so that the window speaks first.
            let left = latch
                .count_down_within(Duration::from_secs(60))
                .await
                .map_err(fail)?;
            show(left.to_string(), json!({"name": name, "count": left}));
            Ok(outcome::OK)
        }
        LatchAction::Count { .. } => {
            let now = latch.count().await.map_err(fail)?;
            show(now.to_string(), json!({"name": name, "count": now}));
            Ok(outcome::OK)
        }
        LatchAction::Wait {
            wait, must_exist, ..
        } => {
            if !latch.exists().await.map_err(fail)? {
                let opened =
                    json!({"name": name, "open": !must_exist, "count": 0, "existed": false});
                if must_exist {
                    note(format!(
                        "latch \"{name}\" has no count: it was never set (a mistyped name?) \
                         or it has already opened"
                    ));
                    show(String::new(), opened);
                    return Ok(outcome::FAILED);
                }
                note(format!(
                    "latch \"{name}\" has no count (never set, or already opened): open; \
                     --must-exist makes this an error"
                ));
                show(String::new(), opened);
                return Ok(outcome::OK);
            }
            let mut signals = Signals::install()?;
            let waiting = match wait {
                Some(wait) => latch.wait_zero(wait).boxed_local(),
                None => latch.wait_open().map(|r| r.map(|()| true)).boxed_local(),
            };
            futures::select! {
                opened = waiting.fuse() => {
                    if opened.map_err(fail)? {
                        show(String::new(), json!({"name": name, "open": true, "count": 0, "existed": true}));
                        Ok(outcome::OK)
                    } else {
                        let left = latch.count().await.unwrap_or(0);
                        note(format!("latch \"{name}\" still at {left} when --wait ran out"));
                        show(String::new(), json!({"name": name, "open": false, "count": left, "existed": true}));
                        Ok(outcome::TIMEOUT)
                    }
                }
                sig = signals.recv().fuse() => Ok(signal_code(sig as i32)),
            }
        }
    }
}

/// Runs `lockwarden semaphore ...`; answers the exit code.
pub async fn semaphore(session: &Session, args: SemaphoreArgs) -> Result<i32, Failure> {
    let name = match &args.action {
        SemaphoreAction::Set { name, .. }
        | SemaphoreAction::Add { name, .. }
        | SemaphoreAction::Drain { name }
        | SemaphoreAction::Available { name } => name.clone(),
    };
    session.check_new_name(&name)?;
    match semaphore_action(session, &name, args).await {
        Err(f) => Err(crate::inspect::named_wrong_type(session, &name, "semaphore", f).await),
        done => done,
    }
}

/// `lockwarden semaphore ...` once the name is checked.
async fn semaphore_action(
    session: &Session,
    name: &str,
    args: SemaphoreArgs,
) -> Result<i32, Failure> {
    let doing = format!("semaphore \"{name}\"");
    let fail = |e| Failure::from_lock(&doing, e);
    let manager = session.manager().await?;
    let sem = manager.semaphore(name).await.map_err(fail)?;
    let json = args.json;
    let (text, value, code) = match args.action {
        SemaphoreAction::Set { permits, .. } => {
            if sem.try_set_permits(permits).await.map_err(fail)? {
                let v = json!({"name": name, "set": true, "changed": true, "available": permits});
                (format!("{name}: {permits} permits"), v, outcome::OK)
            } else {
                // Idempotent: a set-up script's second run changes nothing and
                // succeeds. Only more available than asked is plainly another
                // number (Redis keeps no total: fewer may be taken ones).
                let now = sem.available().await.map_err(fail)?;
                let asked = u64::from(permits);
                let v =
                    json!({"name": name, "set": now <= asked, "changed": false, "available": now});
                if now > asked {
                    note(format!(
                        "semaphore \"{name}\" exists with {now} permits available, more than \
                         {permits}: left as it is (`semaphore drain` then `set` lowers it)"
                    ));
                    (String::new(), v, outcome::FAILED)
                } else if now == asked {
                    (
                        format!("{name}: {permits} permits (unchanged)"),
                        v,
                        outcome::OK,
                    )
                } else {
                    let text = format!(
                        "{name}: exists with {now} available, unchanged (the other {} may be \
                         taken: Redis keeps no total; if it was set up with fewer, \
                         `semaphore add` the difference)",
                        asked - now
                    );
                    (text, v, outcome::OK)
                }
            }
        }
        SemaphoreAction::Add { permits, .. } => {
            let now = sem.add_permits(permits).await.map_err(fail)?;
            let v = json!({"name": name, "added": permits, "available": now});
            (now.to_string(), v, outcome::OK)
        }
        SemaphoreAction::Drain { .. } => {
            let drained = sem.drain().await.map_err(fail)?;
            (
                drained.to_string(),
                json!({"name": name, "drained": drained}),
                outcome::OK,
            )
        }
        SemaphoreAction::Available { .. } => {
            let now = sem.available().await.map_err(fail)?;
            (
                now.to_string(),
                json!({"name": name, "available": now}),
                outcome::OK,
            )
        }
    };
    if json {
        say!("{value}");
    } else if !text.is_empty() {
        say!("{text}");
    }
    Ok(code)
}
