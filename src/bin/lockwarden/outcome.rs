//! Exit codes and the one error type of the command, [`Failure`]: a one-line
//! message and the code to exit with.
//!
//! Scripts and cron jobs branch on the exit code, so every way the command can end
//! maps to one documented code here, in one place (the `--help` text and
//! `docs/operations.md` list the same table). The codes for "wait timed out" and
//! "lock lost" are 75 and 76: outside the range shells use (126-165) and away from
//! the 0-2 that most commands return, so they can be told apart from a wrapped
//! command's own failure in practice (a command may of course exit 75 itself).

use std::fmt;
use std::process::ExitStatus;

use lockwarden::LockError;

/// Success: the lock was taken and given back, or the query answered.
pub const OK: i32 = 0;
/// A failure while working (Redis went away mid-operation, a release failed,
/// confirmation declined).
pub const FAILED: i32 = 1;
/// Bad input or unreachable Redis: nothing was changed.
pub const USAGE: i32 = 2;
/// The lock was not acquired within `--wait`.
pub const TIMEOUT: i32 = 75;
/// The lock was lost while held (force-unlocked, expired, or Redis unreachable for
/// a whole lease).
pub const LOST: i32 = 76;
/// The wait was in a deadlock and was chosen to end it (`run`, `hold`): the
/// message names the cycle. Nothing was acquired; retrying after the caller
/// released what it holds is safe.
pub const DEADLOCK: i32 = 78;
/// The command was found but could not be executed (as in shells).
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found (as in shells).
pub const NOT_FOUND: i32 = 127;

/// Longest the command waits, on its way out without the lock, for what it sent to
/// Redis to settle (`Settle`): an attempt still on the wire when the wait ran out
/// (a slow link, a grant waiting for replicas) may yet be granted, and the grant
/// must be given back before the process is gone. That is the attempt's round
/// trip, then the release's: up to three round trips for a server that has not
/// seen the release script yet (NOSCRIPT, SCRIPT LOAD, EVALSHA); with a link that
/// delays 700 ms each way that took 5.6 s.
pub const SETTLE_BUDGET: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest a semaphore's `run` may take to give its permits back (the library's
/// default response timeout): plain permits have no lease to wait out.
pub const RELEASE_BUDGET: std::time::Duration = std::time::Duration::from_secs(2);

/// Longest the release of a lock after the command (`run`, `hold`) may take: the
/// lock's lease, plus one response timeout for the try in flight and a margin. The
/// library retries a release that a failover or a restart caught until the lease
/// would have ended (a failover takes seconds; given up after 2 s, the lock stayed
/// blind to every waiter for the rest of a 30 s lease), and past the lease the lock
/// is free anyway, so the command never exits leaving a lock behind.
pub fn release_budget(lease: std::time::Duration) -> std::time::Duration {
    lease + std::time::Duration::from_secs(3)
}

/// The code for "ended by signal `n`", as shells report it.
pub fn signal_code(n: i32) -> i32 {
    128 + n
}

/// The code that reports a finished child: its own exit code, or 128 + the signal
/// that ended it.
pub fn child_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => signal_code(sig),
        (None, None) => FAILED,
    }
}

/// Why the command stops early: a message for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The exit code.
    pub code: i32,
    /// One line, without the `lockwarden: ` prefix.
    pub message: String,
    /// Redis answered WRONGTYPE: the key holds another type than the
    /// operation's (a semaphore's command on a lock, say); the caller may name
    /// what the key is.
    pub wrong_type: bool,
}

impl Failure {
    /// Bad input or an unreachable server: exit 2.
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: USAGE,
            message: message.into(),
            wrong_type: false,
        }
    }

    /// A failure while working: exit 1.
    pub fn failed(message: impl Into<String>) -> Failure {
        Failure {
            code: FAILED,
            message: message.into(),
            wrong_type: false,
        }
    }

    /// A library error met while working, with what was being done. Errors that
    /// mean "your input is wrong" (a name, a lease, a key that is not a lock) exit 2
    /// like any bad input; a lost lock exits 76; a wait chosen to end a deadlock
    /// exits 78; the rest exit 1.
    pub fn from_lock(doing: &str, e: LockError) -> Failure {
        let code = match &e {
            LockError::InvalidName(_) | LockError::InvalidLease { .. } => USAGE,
            LockError::InvalidConfig(_) | LockError::InvalidAmount { .. } => USAGE,
            LockError::NotANumber { .. } => USAGE,
            LockError::Redis(r) if r.code() == Some("WRONGTYPE") => USAGE,
            // The wait ran out with the grant never confirmed by enough replicas
            // (--sync-replicas): a timeout, not a failure of the command.
            LockError::Timeout { .. } | LockError::NotReplicated { .. } => TIMEOUT,
            LockError::Lost(_) => LOST,
            LockError::Deadlock(_) => DEADLOCK,
            _ => FAILED,
        };
        let message = match &e {
            // "doing" adds nothing to a refusal of the input itself.
            LockError::InvalidName(_) | LockError::InvalidLease { .. } => e.to_string(),
            LockError::Redis(r) if r.code() == Some("WRONGTYPE") => {
                format!("{doing}: the key exists and is not a lock")
            }
            _ => format!("{doing}: {e}"),
        };
        let wrong_type = matches!(&e, LockError::Redis(r) if r.code() == Some("WRONGTYPE"));
        Failure {
            code,
            message,
            wrong_type,
        }
    }
}

/// Why Redis refused a wait's last attempt, when it is a refusal that passes
/// by itself (out of memory under `noeviction`, a script running, data
/// loading): the library retries those until the wait's deadline and then
/// answers with the refusal. For the command that is a wait that ran out
/// (exit 75), with this as its cause, not a failure of the command.
pub fn refused_for_now(e: &LockError) -> Option<String> {
    let LockError::Redis(r) = e else {
        return None;
    };
    let why = match r.code()? {
        "OOM" => "out of memory: it takes no new writes (maxmemory under noeviction)",
        "BUSY" => "busy running a script",
        "LOADING" => "still loading its data",
        _ => return None,
    };
    Some(format!("Redis refused the last attempt, {why} ({r})"))
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Prints a warning or progress note on stderr, prefixed like every message of the
/// command, as one line: control characters (a newline in a lock name or in a
/// server's error text) are escaped.
pub fn note(message: impl fmt::Display) {
    eprintln!("lockwarden: {}", printable(&message.to_string()));
}

/// `text` with every control character but the tab escaped (`\n`, `\r`,
/// `\u{1b}`), so that what the command prints is one line per message and a lock
/// name cannot move the cursor or forge a line of output. Tabs stay: `list`
/// separates its columns with them (and escapes tabs in names itself, [`field`]).
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| c.is_control() && c != '\t';
    if !text.chars().any(escaped) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// A value for one tab-separated column: every control character escaped, the
/// tab too.
pub fn field(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("plain"), "plain");
        assert_eq!(printable("a\nb\r\x1b[2J"), "a\\nb\\r\\u{1b}[2J");
        assert_eq!(printable("col\tcol"), "col\tcol");
        assert_eq!(field("a\tb\n"), "a\\tb\\n");
    }

    #[test]
    fn refusals_of_input_exit_2_and_losses_exit_76() {
        let name = Failure::from_lock(
            "acquiring",
            LockError::InvalidName(lockwarden::NameError::Empty),
        );
        assert_eq!(name.code, USAGE);
        assert_eq!(
            Failure::from_lock("x", LockError::Lost(lockwarden::LostReason::OwnerGone)).code,
            LOST
        );
        assert_eq!(Failure::from_lock("x", LockError::Stopped).code, FAILED);
    }

    #[test]
    fn passing_refusals_are_named_and_others_are_not() {
        let refusal = |code: &str| {
            let detail = "command not allowed".to_string();
            LockError::Redis(redis::make_extension_error(code.into(), Some(detail)))
        };
        let oom = refused_for_now(&refusal("OOM")).expect("OOM passes");
        assert!(oom.contains("out of memory"), "{oom}");
        assert!(refused_for_now(&refusal("BUSY")).is_some());
        assert!(refused_for_now(&refusal("WRONGTYPE")).is_none());
        assert!(refused_for_now(&LockError::Stopped).is_none());
    }
}
