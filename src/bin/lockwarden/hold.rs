//! `lockwarden hold`: acquire, hold for a while or until a signal, release; and its
//! event stream, one JSON object per line with `--json`.
//!
//! This is the command for trying locks by hand and for scripts and tests that need
//! to know exactly when a lock was taken and given back, so the JSON lines are a
//! contract (documented in `--help` and docs/operations.md): `at_ms` is Unix time
//! taken right after the acquire returned or right before the release was sent,
//! and each line is flushed as it is printed. Without `--json` the same events are
//! one human line each.

use std::future::pending;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use lockwarden::{LockError, LockGuard};
use serde_json::{json, Value};

use crate::acquire::{acquire, report_timeout, Signals, Waited};
use crate::cli::{AcquireOpts, HoldArgs};
use crate::duration::{human, millis};
use crate::outcome::release_budget;
use crate::outcome::{self, note, signal_code, Failure};
use crate::session::Session;

/// Milliseconds since the Unix epoch, by this machine's clock (0 before 1970).
fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

/// A JSON object with its fields in the order given (serde_json's own maps sort
/// their keys), on one line: the documented field order is part of the contract.
fn ordered(fields: &[(&str, Value)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// Prints the events of one lock, as JSON lines or for people.
#[derive(Debug)]
struct Events<'a> {
    /// The lock name.
    lock: &'a str,
    /// One JSON object per line instead of prose.
    json: bool,
}

impl Events<'_> {
    fn acquired(
        &self,
        guard: &LockGuard,
        waited: Duration,
        at_ms: u64,
        hold_for: Option<Duration>,
    ) {
        if self.json {
            say!(
                "{}",
                ordered(&[
                    ("event", json!("acquired")),
                    ("name", json!(self.lock)),
                    ("lock", json!(self.lock)),
                    ("owner", json!(guard.owner_field())),
                    ("token", json!(guard.fencing_token())),
                    ("waited_ms", json!(millis(waited))),
                    ("at_ms", json!(at_ms)),
                ])
            );
        } else {
            let until = match hold_for {
                Some(d) => format!("for {}", human(d)),
                None => "until Ctrl-C".into(),
            };
            say!(
                "acquired lock \"{}\" after {} (token {}); holding it {until}",
                self.lock,
                human(waited),
                guard.fencing_token()
            );
        }
    }

    fn released(&self, guard: &Holding, held: Duration, at_ms: u64) {
        if self.json {
            say!(
                "{}",
                ordered(&[
                    ("event", json!("released")),
                    ("name", json!(self.lock)),
                    ("lock", json!(self.lock)),
                    ("owner", json!(guard.owner_field())),
                    ("token", json!(guard.fencing_token())),
                    ("held_ms", json!(millis(held))),
                    ("at_ms", json!(at_ms)),
                ])
            );
        } else {
            say!(
                "released lock \"{}\" after holding it {}",
                self.lock,
                human(held)
            );
        }
    }

    fn lost(&self, guard: &Holding, reason: &str) {
        if self.json {
            say!(
                "{}",
                ordered(&[
                    ("event", json!("lost")),
                    ("name", json!(self.lock)),
                    ("lock", json!(self.lock)),
                    ("owner", json!(guard.owner_field())),
                    ("token", json!(guard.fencing_token())),
                    ("reason", json!(reason)),
                    ("at_ms", json!(unix_ms())),
                ])
            );
        } else {
            note(format!("lost lock \"{}\": {reason}", self.lock));
        }
    }

    fn timeout(&self, waited: Duration) {
        if self.json {
            say!(
                "{}",
                ordered(&[
                    ("event", json!("timeout")),
                    ("name", json!(self.lock)),
                    ("lock", json!(self.lock)),
                    ("waited_ms", json!(millis(waited))),
                    ("at_ms", json!(unix_ms())),
                ])
            );
        }
    }
}

/// Runs `lockwarden hold`; answers the exit code.
pub async fn hold(session: &Session, args: HoldArgs) -> Result<i32, Failure> {
    let manager = session.manager().await?;
    // Finding the master took part of --wait.
    // Inside a `run`, a hold waits on behalf of the run's holders too, as a
    // nested `run` does.
    let opts = AcquireOpts {
        wait: session.wait_left(args.acquire.wait),
        began: Some(session.began()),
        behalf: crate::acquire::inherited_holders(),
        ..args.acquire.clone()
    };
    let mut signals = Signals::install()?;
    let events = Events {
        lock: &args.name,
        json: args.json,
    };
    let (guard, waited) = match acquire(&manager, &args.name, &opts, &mut signals).await? {
        Waited::Acquired { guard, waited } => (guard, waited),
        Waited::TimedOut { waited, refused } => {
            events.timeout(waited);
            report_timeout(&manager, &args.name, waited, refused.as_deref()).await;
            return Ok(outcome::TIMEOUT);
        }
        Waited::Interrupted(sig) => return Ok(signal_code(sig as i32)),
    };
    let since = Instant::now();
    events.acquired(&guard, waited, unix_ms(), args.hold_for);

    let hold_for = async {
        match args.hold_for {
            Some(d) => actix_rt::time::sleep(d).await,
            None => pending().await,
        }
    };
    futures::select! {
        _ = hold_for.fuse() => {}
        _ = signals.recv().fuse() => {}
        reason = guard.lost().fuse() => {
            events.lost(&Holding::of(&guard), &reason.to_string());
            return Ok(outcome::LOST);
        }
    }

    let (held, at_ms) = (since.elapsed(), unix_ms());
    // What the events report after the release, which takes the guard.
    let holding = Holding::of(&guard);
    // Bounded as in `run`: the library retries until the lease would have ended.
    let lease = args.acquire.lease.unwrap_or(args.acquire.watchdog_lease);
    let Ok(released) = tokio::time::timeout(
        release_budget(lease),
        // The command stays until the release is done (the library's own bound
        // is for request paths): its exit would end a background release. A
        // second more than the bound here, so that this bound speaks first.
        guard.release_within(release_budget(lease) + Duration::from_secs(1)),
    )
    .await
    else {
        return Err(Failure::failed(format!(
            "releasing \"{}\": Redis did not answer for {}; its lease ({}) has ended, \
             so it is free now",
            args.name,
            human(release_budget(lease)),
            human(lease)
        )));
    };
    match released {
        Ok(_) => {
            events.released(&holding, held, at_ms);
            Ok(outcome::OK)
        }
        Err(LockError::Lost(reason)) => {
            events.lost(&holding, &reason.to_string());
            Ok(outcome::LOST)
        }
        Err(LockError::NotHeld) => {
            events.lost(
                &holding,
                "the lock was no longer held by this owner at release",
            );
            Ok(outcome::LOST)
        }
        Err(e) if e.is_retryable() => Err(Failure::failed(format!(
            "releasing \"{}\": Redis failed until its lease ({}) ended ({e}), so it is free now",
            args.name,
            human(lease)
        ))),
        Err(e) => Err(Failure::from_lock(
            &format!("releasing \"{}\"", args.name),
            e,
        )),
    }
}

/// What the events report of a holding, kept apart from its guard (a release
/// takes the guard).
#[derive(Debug)]
struct Holding {
    /// The holder's field in the lock hash.
    owner_field: String,
    /// The acquisition's fencing token.
    token: u64,
}

impl Holding {
    fn of(guard: &LockGuard) -> Holding {
        Holding {
            owner_field: guard.owner_field().to_string(),
            token: guard.fencing_token(),
        }
    }

    fn owner_field(&self) -> &str {
        &self.owner_field
    }

    fn fencing_token(&self) -> u64 {
        self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_fields_keep_the_documented_order() {
        let line = ordered(&[
            ("event", json!("timeout")),
            ("lock", json!("a\"b")),
            ("waited_ms", json!(5)),
        ]);
        assert_eq!(line, r#"{"event":"timeout","lock":"a\"b","waited_ms":5}"#);
        let parsed: Value = serde_json::from_str(&line).expect("valid JSON");
        assert_eq!(parsed["lock"], "a\"b");
    }
}
