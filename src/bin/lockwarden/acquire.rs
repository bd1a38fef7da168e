//! Waiting for a lock the way an operator expects, shared by `run` and `hold`: a
//! progress line on a terminal, Ctrl-C that leaves the queue, a timeout message
//! that names who holds the lock, and, inside another `run`, waiting on behalf of
//! its holders (`LOCKWARDEN_HOLDER`) so that deadlock detection sees through
//! nested commands.
//!
//! The waiting itself is the library's ([`Acquire`] with its wait budget and the
//! unlock-message wake-ups); this module only races it against the signals the
//! process gets and, on a terminal, against a redraw of the progress line. Dropping
//! the pending `send` is how the waiter leaves the queue: the manager notices that
//! its caller went away and cancels the waiter (and gives back a grant that raced).

use std::fmt::Write as _;
use std::future::{pending, poll_fn};
use std::io::{IsTerminal, Write as _};
use std::task::Poll;
use std::time::{Duration, Instant};

use actix::Addr;
use futures::FutureExt;
use lockwarden::{Acquire, Holder, Inspect, LockError, LockGuard, LockManager, Settle};
use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::AcquireOpts;
use crate::duration::human;
use crate::outcome::{note, printable, refused_for_now, Failure, SETTLE_BUDGET};

/// Longest the command asks Redis anything once `--wait` has run out.
const AFTER_DEADLINE: Duration = Duration::from_millis(250);
/// How often the progress line asks Redis who holds the lock.
const PROGRESS_INSPECT_EVERY: Duration = Duration::from_secs(1);
/// How often the progress line is redrawn.
const PROGRESS_REDRAW_EVERY: Duration = Duration::from_millis(200);
/// Waits shorter than this show no progress line at all (no flicker).
const PROGRESS_QUIET_FOR: Duration = Duration::from_millis(300);
/// Longest progress line, in characters, when the terminal's width is unknown:
/// fits an 80-column terminal.
const PROGRESS_WIDTH: usize = 79;
/// After leaving the queue, time given to the in-process actors to cancel the
/// waiter before the process asks them to settle.
const SETTLE: Duration = Duration::from_millis(100);

/// The signals that end waiting or holding: SIGINT, SIGTERM, SIGHUP. Once these
/// are installed their default action (exit at once) is replaced by ours, which
/// releases first.
#[derive(Debug)]
pub struct Signals {
    /// SIGINT (Ctrl-C).
    int: tokio::signal::unix::Signal,
    /// SIGTERM (kill, systemd, timeout(1)).
    term: tokio::signal::unix::Signal,
    /// SIGHUP (the terminal went away).
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs the handlers.
    pub fn install() -> Result<Signals, Failure> {
        let install =
            |kind| signal(kind).map_err(|e| Failure::failed(format!("cannot handle signals: {e}")));
        Ok(Signals {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        poll_fn(|cx| {
            if self.int.poll_recv(cx).is_ready() {
                Poll::Ready(Signal::SIGINT)
            } else if self.term.poll_recv(cx).is_ready() {
                Poll::Ready(Signal::SIGTERM)
            } else if self.hup.poll_recv(cx).is_ready() {
                Poll::Ready(Signal::SIGHUP)
            } else {
                Poll::Pending
            }
        })
        .await
    }
}

/// The variable that tells a command which lock holders it runs under (owner
/// fields, outermost first, comma-separated): a nested `run` waits on their
/// behalf ([`Acquire::on_behalf_of`]), so a cycle through a
/// pipeline of nested commands is found as a deadlock.
pub const HOLDER_VAR: &str = "LOCKWARDEN_HOLDER";

/// The holder chain this process runs under, from [`HOLDER_VAR`]; empty
/// outside a `run`. Fields that are empty after splitting are left out.
pub fn inherited_holders() -> Vec<String> {
    std::env::var(HOLDER_VAR)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

/// The chain a command under the lock held as `own_field` sees: `inherited`,
/// then `own_field` without a writer's `:write` (the owner, not the hold).
pub fn holder_chain(inherited: &[String], own_field: &str) -> String {
    let own = own_field.strip_suffix(":write").unwrap_or(own_field);
    let chain: Vec<&str> = inherited.iter().map(String::as_str).chain([own]).collect();
    chain.join(",")
}

/// How waiting ended.
#[derive(Debug)]
pub enum Waited {
    /// The lock is held.
    Acquired {
        /// The hold.
        guard: LockGuard,
        /// Time from asking to holding.
        waited: Duration,
    },
    /// The wait budget ran out.
    TimedOut {
        /// Time waited.
        waited: Duration,
        /// Why Redis refused the last attempt, when it did (out of memory,
        /// say): the lock may be free, and the message must not say it is held.
        refused: Option<String>,
    },
    /// A signal came first; the waiter left the queue.
    Interrupted(Signal),
}

/// Acquires `name` with the options given, until acquired, timed out or
/// interrupted by a signal.
pub async fn acquire(
    manager: &Addr<LockManager>,
    name: &str,
    opts: &AcquireOpts,
    signals: &mut Signals,
) -> Result<Waited, Failure> {
    let mut msg = Acquire::new(name).kind(opts.kind());
    if let Some(wait) = opts.wait {
        msg = msg.wait(wait);
    }
    if let Some(lease) = opts.lease {
        msg = msg.lease(lease);
    }
    for holder in &opts.behalf {
        msg = msg.on_behalf_of(holder.as_str());
    }
    if let Some(refused) = held_by_own_chain(manager, name, opts).await {
        return Err(refused);
    }
    let started = Instant::now();
    let show_progress = std::io::stderr().is_terminal();
    let mut request = Box::pin(manager.send(msg).fuse());
    let mut progress = Box::pin(progress(manager, name, started, show_progress).fuse());
    let outcome = futures::select! {
        reply = request => Some(reply),
        _ = progress => None,
        sig = signals.recv().fuse() => {
            drop(request);
            clear_progress(show_progress);
            note(format!("interrupted while waiting for lock \"{name}\"; left the queue"));
            actix_rt::time::sleep(SETTLE).await;
            settle(manager, name).await;
            return Ok(Waited::Interrupted(sig));
        }
    };
    clear_progress(show_progress);
    match outcome {
        Some(Ok(Ok(guard))) => Ok(Waited::Acquired {
            guard,
            waited: started.elapsed(),
        }),
        Some(Ok(Err(LockError::Timeout { waited, .. }))) => {
            // Counted from the command's start: finding the master was waiting too.
            let waited = opts.began.map_or(waited, |b| b.elapsed());
            settle(manager, name).await;
            Ok(Waited::TimedOut {
                waited,
                refused: None,
            })
        }
        Some(Ok(Err(e))) if refused_for_now(&e).is_some() => {
            let waited = opts.began.map_or(started.elapsed(), |b| b.elapsed());
            settle(manager, name).await;
            Ok(Waited::TimedOut {
                waited,
                refused: refused_for_now(&e),
            })
        }
        Some(Ok(Err(e))) => {
            settle(manager, name).await;
            Err(Failure::from_lock(&format!("acquiring \"{name}\""), e))
        }
        Some(Err(_)) | None => Err(Failure::failed("the lock manager stopped")),
    }
}

/// Inside a `run` (a holder chain inherited), whether a run this command runs
/// under holds `name` in a way this acquisition cannot share: then waiting
/// would wait for itself, and the deadlock check would only say so after its
/// timeout, so it is refused at once (exit 78) with the holder named. One read
/// of the lock, and only for a nested command.
async fn held_by_own_chain(
    manager: &Addr<LockManager>,
    name: &str,
    opts: &AcquireOpts,
) -> Option<Failure> {
    if opts.behalf.is_empty() {
        return None;
    }
    // Nothing known (Redis slow or down): the wait itself finds out.
    let asked = tokio::time::timeout(AFTER_DEADLINE, manager.send(Inspect::new(name)));
    let info = asked.await.ok()?.ok()?.ok()?;
    let reads = opts.kind() == lockwarden::AcquireKind::Read;
    let outer = info.holders.iter().find(|h| {
        let field = h
            .owner_field
            .strip_suffix(":write")
            .unwrap_or(&h.owner_field);
        // A reader shares with the outer run's read hold: no wait for itself.
        let excludes = h.is_writer() || !reads;
        excludes && opts.behalf.iter().any(|b| b == field)
    })?;
    Some(Failure {
        code: crate::outcome::DEADLOCK,
        message: format!(
            "deadlock: this command runs under the lockwarden run that holds lock {name}              ({}); waiting for it would wait for itself and never end: take the lock in              one of the two runs only",
            outer.describe()
        ),
        wrong_type: false,
    })
}

/// Waits, within [`SETTLE_BUDGET`], until nothing the manager sent to Redis is
/// unsettled; says so if that takes too long.
async fn settle(manager: &Addr<LockManager>, name: &str) {
    if !matches!(manager.send(Settle::within(SETTLE_BUDGET)).await, Ok(true)) {
        note(format!(
            "an attempt on lock \"{name}\" had no answer from Redis within {}; if Redis \
             granted it after all, it frees by itself within its lease",
            human(SETTLE_BUDGET)
        ));
    }
}

/// Says on stderr that `--wait` ran out, naming why Redis refused the last
/// attempt if it did (`refused`), and who holds the lock now. The question is
/// bounded by [`AFTER_DEADLINE`]: the caller's time is already up, and a frozen
/// Redis must not make the answer late.
pub async fn report_timeout(
    manager: &Addr<LockManager>,
    name: &str,
    waited: Duration,
    refused: Option<&str>,
) {
    let asked = tokio::time::timeout(AFTER_DEADLINE, holder_text(manager, name)).await;
    let holder = asked.unwrap_or_else(|_| {
        format!(
            "holder unknown (Redis did not answer within {})",
            human(AFTER_DEADLINE)
        )
    });
    let refused = refused.map(|r| format!("{r}; ")).unwrap_or_default();
    note(format!(
        "lock \"{name}\" not acquired after waiting {}: {refused}{holder}",
        human(waited)
    ));
}

/// Who holds `name` now, in one phrase: "held by <owner> on host .. pid .., 2 holds, expires in 29.7s".
pub async fn holder_text(manager: &Addr<LockManager>, name: &str) -> String {
    match manager.send(Inspect::new(name)).await {
        Ok(Ok(info)) => describe_holders(&info.holders, info.ttl),
        Ok(Err(e)) => format!("holder unknown ({e})"),
        Err(_) => "holder unknown (the lock manager stopped)".into(),
    }
}

/// "held by <owner> on host web-3 pid 4211 (billing-svc, lockwarden 0.1.0), 2
/// holds, expires in 29.7s" (the host part when the holder's manager is in the
/// client registry, as `status` shows it), or "it is free now".
pub fn describe_holders(holders: &[Holder], ttl: Option<Duration>) -> String {
    if holders.is_empty() {
        return "it is free now".into();
    }
    // Each holder as the library's timeout error names it (one phrase, one
    // implementation: `Holder::describe`).
    let mut text = String::from("held by ");
    for (i, h) in holders.iter().enumerate() {
        let sep = if i == 0 { "" } else { "; " };
        let _ = write!(text, "{sep}{}", h.describe());
    }
    match ttl {
        Some(ttl) => {
            let _ = write!(text, ", expires in {}", human(ttl));
        }
        None => text.push_str(", no expiry"),
    }
    text
}

/// Redraws "waiting for <lock> <elapsed> - <holder>" on stderr until dropped;
/// does nothing when stderr is not a terminal.
async fn progress(manager: &Addr<LockManager>, name: &str, started: Instant, show: bool) {
    if !show {
        return pending().await;
    }
    actix_rt::time::sleep(PROGRESS_QUIET_FOR).await;
    let mut holder = String::new();
    let mut asked: Option<Instant> = None;
    loop {
        if asked.is_none_or(|at| at.elapsed() >= PROGRESS_INSPECT_EVERY) {
            holder = match manager.send(Inspect::new(name)).await {
                Ok(Ok(info)) => progress_holders(&info.holders, info.ttl),
                Ok(Err(e)) => format!("holder unknown ({e})"),
                Err(_) => "holder unknown (the lock manager stopped)".into(),
            };
            asked = Some(Instant::now());
        }
        // Who holds it comes right after the name: a narrow terminal cuts the
        // end, where the owner field (36 characters of client id) now is.
        let line = format!(
            "lockwarden: waiting {} for lock \"{name}\": {holder}",
            human(started.elapsed())
        );
        let mut err = std::io::stderr().lock();
        // \r and "erase to end of line" redraw it in place; a line longer than the
        // terminal would wrap and break that, so it is cut to the terminal's width.
        let width = terminal_width().unwrap_or(PROGRESS_WIDTH);
        let _ = write!(err, "\r\x1b[K{}", fit(&printable(&line), width));
        let _ = err.flush();
        drop(err);
        actix_rt::time::sleep(PROGRESS_REDRAW_EVERY).await;
    }
}

/// One holder as the progress line names it: owner field, hold count, and
/// host, pid and label when its manager is registered.
type Named<'a> = (&'a str, u32, Option<(&'a str, u32, Option<&'a str>)>);

/// The holders for the progress line, most telling first.
fn progress_holders(holders: &[Holder], ttl: Option<Duration>) -> String {
    let named: Vec<Named<'_>> = holders
        .iter()
        .map(|h| {
            let who = h
                .client
                .as_ref()
                .map(|c| (c.host.as_str(), c.pid, c.label.as_deref()));
            (h.owner_field.as_str(), h.holds, who)
        })
        .collect();
    holders_first(&named, ttl)
}

/// "held by host web-3 pid 4211 label "billing", 2 holds, expires in 29.7s
/// (owner <field>)": who first, the owner field (36 characters of client id)
/// last, where a narrow terminal cuts.
fn holders_first(holders: &[Named<'_>], ttl: Option<Duration>) -> String {
    if holders.is_empty() {
        return "it is free now".into();
    }
    let mut text = String::from("held by ");
    for (i, (owner, holds, who)) in holders.iter().enumerate() {
        let sep = if i == 0 { "" } else { "; " };
        match who {
            Some((host, pid, label)) => {
                let _ = write!(text, "{sep}host {host} pid {pid}");
                if let Some(label) = label {
                    let _ = write!(text, " label \"{label}\"");
                }
            }
            None => {
                let _ = write!(text, "{sep}{owner} (unknown client)");
            }
        }
        if *holds != 1 {
            let _ = write!(text, ", {holds} holds");
        }
    }
    match ttl {
        Some(ttl) => {
            let _ = write!(text, ", expires in {}", human(ttl));
        }
        None => text.push_str(", no expiry"),
    }
    let known: Vec<&str> = holders
        .iter()
        .filter(|(_, _, who)| who.is_some())
        .map(|(owner, _, _)| *owner)
        .collect();
    if !known.is_empty() {
        let _ = write!(text, " (owner {})", known.join(", "));
    }
    text
}

/// The width of the terminal on stderr, less one column (a line that fills the
/// last column wraps on some terminals); `None` when stderr is no terminal.
fn terminal_width() -> Option<usize> {
    nix::ioctl_read_bad!(window_size, nix::libc::TIOCGWINSZ, nix::libc::winsize);
    let mut size = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ only writes a `winsize` into the one we pass, and fd 2
    // stays open for the life of the process.
    #[allow(unsafe_code)]
    let asked = unsafe { window_size(2, &mut size) };
    match asked {
        Ok(_) if size.ws_col >= 20 => Some(usize::from(size.ws_col) - 1),
        _ => None,
    }
}

/// `line` cut to `width` characters, with `…` where it was cut.
fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Erases the progress line, if one may have been drawn.
fn clear_progress(shown: bool) {
    if shown {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K");
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 38: on a 150-column terminal the holder's host, pid and label are
    /// shown (they came after a 36-character owner field, and were cut).
    #[test]
    fn the_progress_line_names_the_holder_first() {
        let id = "4f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11";
        let owner = format!("{id}:1");
        let holder = (
            owner.as_str(),
            1,
            Some(("build-host-17", 4211, Some("nightly-export"))),
        );
        let text = holders_first(&[holder], Some(Duration::from_millis(29_700)));
        let line = format!("lockwarden: waiting 12.0s for lock \"orders:reports:2026-11\": {text}");
        let shown = fit(&line, 149);
        assert!(
            shown.contains("host build-host-17 pid 4211 label \"nightly-export\""),
            "{shown}"
        );
        assert!(shown.contains("expires in"), "{shown}");
    }

    #[test]
    fn progress_lines_fit_the_terminal() {
        assert_eq!(fit("short", 79), "short");
        let long = "x".repeat(200);
        assert_eq!(fit(&long, 79).chars().count(), 79);
        assert!(fit(&long, 79).ends_with('…'));
    }
}
