//! `lockwarden unlock --force`: delete a lock whoever holds it, waking a waiter.
//!
//! This breaks the promise a lock makes to its holder, so it asks first: on a
//! terminal it shows who holds the lock and waits for `y`; without a terminal it
//! refuses unless `--yes` was given (a cron job or a pipe cannot answer, and a
//! silent default either way would be wrong). It also refuses a key that is not a
//! lock: the library's script already leaves non-hash keys alone, and the look at
//! the hash here ([`Admin::describe`]) keeps an operator's typo from deleting an
//! application's hash too. The deletion itself is the library's [`ForceUnlock`]:
//! one script that deletes the lock and publishes the unlock message. The holder is
//! not told directly; its watchdog finds its owner field gone at the next renewal.

use std::io::{BufRead, IsTerminal, Write};

use lockwarden::{Admin, ForceUnlock, LockKind};

use crate::acquire::describe_holders;
use crate::cli::UnlockArgs;
use crate::inspect::not_a_lock;
use crate::outcome::{self, note, Failure};
use crate::session::Session;

/// Refuses to go on without `--yes` when nobody can be asked; no I/O.
pub fn check_confirmable(args: &UnlockArgs) -> Result<(), Failure> {
    if args.yes || std::io::stdin().is_terminal() {
        Ok(())
    } else {
        Err(Failure::usage(
            "refusing to force-unlock without --yes: stdin is not a terminal to confirm on",
        ))
    }
}

/// Runs `lockwarden unlock --force`, after [`check_confirmable`]; answers the
/// exit code.
pub async fn unlock(session: &Session, args: UnlockArgs) -> Result<i32, Failure> {
    let admin: Admin = session.admin().await?;
    let doing = format!("force-unlocking \"{}\"", args.name);
    let found = admin
        .describe(&args.name)
        .await
        .map_err(|e| Failure::from_lock(&doing, e))?;
    let said = |unlocked: bool, holders: usize, text: String| {
        if args.json {
            let v =
                serde_json::json!({"name": args.name, "unlocked": unlocked, "holders": holders});
            say!("{v}");
        } else {
            say!("{text}");
        }
    };
    let Some(lock) = found else {
        said(
            false,
            0,
            format!("\"{}\" is not locked; nothing changed", args.name),
        );
        return Ok(outcome::OK);
    };
    if lock.kind == LockKind::NotALock {
        return Err(not_a_lock("force-unlocking", &args.name));
    }
    if !args.yes {
        let question = format!(
            "force-unlock \"{}\"? It is {}; its holder is not asked. [y/N] ",
            args.name,
            describe_holders(&lock.holders, lock.ttl)
        );
        if !confirm(question).await {
            note("not unlocked");
            return Ok(outcome::FAILED);
        }
    }
    let manager = session.start_manager().await?;
    let deleted = manager
        .send(ForceUnlock::new(&args.name))
        .await
        .map_err(|_| Failure::failed("the lock manager stopped"))?
        .map_err(|e| Failure::from_lock(&doing, e))?;
    let holders = lock.holders.len();
    if deleted {
        said(true, holders, format!("unlocked \"{}\"", args.name));
    } else {
        said(
            false,
            0,
            format!("\"{}\" was not locked; nothing changed", args.name),
        );
    }
    Ok(outcome::OK)
}

/// Asks on stderr, reads one line from the terminal; only `y` or `yes` is a yes.
async fn confirm(question: String) -> bool {
    // Reading a terminal blocks: keep it off the thread that runs the actors.
    let answer = actix_rt::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "lockwarden: {question}");
        let _ = err.flush();
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await;
    matches!(answer, Ok(Ok(line)) if is_yes(&line))
}

/// Whether an answer to a `[y/N]` question is a yes: `y` or `yes`, in any case,
/// with spaces around. Everything else, the empty line included, is a no.
fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_explicit_yes_confirms() {
        for yes in ["y\n", "Y\n", " yes \n", "YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["\n", "", "n\n", "no", "yep", "y es", "sure"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
