//! `lockwarden run`: a distributed flock(1). Acquire, run the command, give its exit
//! code back, release; and stop the command if the lock is lost while it runs.
//!
//! The command inherits stdin, stdout and stderr, so its output is forwarded
//! without copying and it can be interactive. Where signals go depends on whether
//! lockwarden runs on a terminal:
//! - not on a terminal (cron, systemd, scripts): the command gets a process group of
//!   its own, and every signal we send goes to that whole group, so a shell script's
//!   children stop with it when the lock is lost;
//! - on a terminal: the command stays in the foreground group (it can read the
//!   terminal, and Ctrl-C reaches it directly, so we do not send it a second
//!   SIGINT); signals go to the command's process only.
//!
//! The command is built by `child.rs` (as `run --semaphore`'s is): on Linux the
//! kernel kills it if this process dies without a word (SIGKILL, the OOM killer),
//! so it never runs on after its lock expires.
//!
//! On a lost lock, `--on-lost kill` sends SIGTERM, then SIGKILL after `--grace`,
//! and exits 76 once the command is gone; `--on-lost warn` says so and lets it
//! finish. The lock is released only after the command has exited, within a short
//! budget: a Redis that is gone does not keep the finished command waiting.
//!
//! With `--redlock` the lock is one name on a majority of independent servers
//! (`redlock.rs` takes it); it is lost when fewer than a majority still hold it,
//! and the command sees every granting server's token instead of one.
//!
//! While the command runs, Redis is asked about the lock once a second (`watch.rs`) through the
//! manager's connection (each server's, with `--redlock`). A lock is lost only when its lease runs out without a
//! renewal, possibly after the command has ended, so an outage is said on stderr
//! when it is first seen (and again when Redis answers), not only at the end.

use std::future::pending;
use std::io::{ErrorKind, IsTerminal};
use std::time::Duration;

use actix::Addr;
use futures::FutureExt;
use lockwarden::{LockError, LockGuard, LockManager, LostReason, PermitGuard, RedGuard};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;
use tracing::info;

use crate::acquire::{
    acquire, holder_chain, inherited_holders, report_timeout, Signals, Waited, HOLDER_VAR,
};
use crate::child;
use crate::cli::{AcquireOpts, OnLost, RunArgs};
use crate::duration::human;
use crate::outcome::release_budget;
use crate::outcome::{self, child_code, note, signal_code, Failure};
use crate::redlock::{self, RedWaited};
use crate::session::Session;
use crate::watch::Watch;

/// Where signals for the command go.
#[derive(Clone, Copy, Debug)]
struct Target {
    /// The command's pid; `None` if it was already gone when spawned.
    pid: Option<Pid>,
    /// Signal the whole process group the command leads, not only the command.
    group: bool,
}

impl Target {
    /// Sends `sig`; a command that has just exited is not an error.
    fn send(self, sig: Signal) {
        let Some(pid) = self.pid else { return };
        let sent = if self.group {
            killpg(pid, sig)
        } else {
            kill(pid, sig)
        };
        if let Err(e) = sent {
            tracing::debug!(%pid, %sig, error = %e, "signal not delivered");
        }
    }
}

/// The lock the command runs under.
#[derive(Debug)]
enum Held {
    /// One lock on one deployment.
    One(LockGuard),
    /// A RedLock, the place among the `--redis` options of each server its
    /// guard's nodes stand for, and those servers' managers.
    Red(RedGuard, Vec<usize>, Vec<Addr<LockManager>>),
    /// Permits of a permit-expirable semaphore (`run --semaphore --expirable`):
    /// renewed like a lock, and lost like one.
    Permits(PermitGuard),
}

impl Held {
    /// Resolves when the lock is lost (a RedLock: when fewer than a majority hold it).
    async fn lost(&self) -> LostReason {
        match self {
            Held::One(guard) => guard.lost().await,
            Held::Red(guard, ..) => guard.lost().await,
            Held::Permits(guard) => guard.lost().await,
        }
    }

    /// What is held, for messages: `lock "name"`, or the semaphore's hold.
    fn what(&self, name: &str) -> String {
        match self {
            Held::Permits(_) => format!("the hold on semaphore \"{name}\""),
            _ => format!("lock \"{name}\""),
        }
    }

    /// What the command finds in its environment about what it runs under;
    /// `inherited` is the holder chain this command itself runs under.
    fn env(&self, name: &str, inherited: &[String]) -> Vec<(&'static str, String)> {
        let (token_var, tokens) = match self {
            Held::Permits(guard) => {
                return vec![
                    ("LOCKWARDEN_SEMAPHORE", name.to_string()),
                    ("LOCKWARDEN_PERMITS", guard.ids().len().to_string()),
                    ("LOCKWARDEN_PERMIT_IDS", guard.ids().join(",")),
                ];
            }
            Held::One(guard) => {
                return vec![
                    ("LOCKWARDEN_LOCK", name.to_string()),
                    ("LOCKWARDEN_TOKEN", guard.fencing_token().to_string()),
                    (HOLDER_VAR, holder_chain(inherited, guard.owner_field())),
                ];
            }
            Held::Red(guard, places, _) => {
                let pairs: Vec<String> = guard
                    .node_tokens()
                    .into_iter()
                    .map(|(node, token)| format!("{}={token}", places[node]))
                    .collect();
                ("LOCKWARDEN_TOKENS", pairs.join(","))
            }
        };
        vec![("LOCKWARDEN_LOCK", name.to_string()), (token_var, tokens)]
    }

    /// Releases it, waiting up to `bound` for a lock's or permits' release: the command
    /// stays until the release is done (the library's own bound is for request
    /// paths), since its exit would end a release going on in the background.
    async fn release(self, bound: Duration) -> Result<(), LockError> {
        match self {
            Held::One(guard) => guard.release_within(bound).await.map(|_| ()),
            Held::Red(guard, _, managers) => {
                let released = guard.release().await;
                if released.is_ok() {
                    redlock::settle(&managers).await;
                }
                released
            }
            Held::Permits(guard) => guard.release_within(bound).await.map(|_| ()),
        }
    }
}

/// Runs `lockwarden run`; answers the exit code.
pub async fn run(session: &Session, args: RunArgs) -> Result<i32, Failure> {
    if args.redlock {
        return run_redlock(session, args).await;
    }
    let manager = session.manager().await?;
    // Finding the master took part of --wait.
    let opts = AcquireOpts {
        wait: session.wait_left(args.acquire.wait),
        began: Some(session.began()),
        behalf: inherited_holders(),
        ..args.acquire.clone()
    };
    let mut signals = Signals::install()?;
    let guard = match acquire(&manager, &args.name, &opts, &mut signals).await? {
        Waited::Acquired { guard, waited } => {
            info!(lock = %args.name, waited_ms = waited.as_millis(), "acquired");
            guard
        }
        Waited::TimedOut { waited, refused } => {
            report_timeout(&manager, &args.name, waited, refused.as_deref()).await;
            return Ok(outcome::TIMEOUT);
        }
        Waited::Interrupted(sig) => return Ok(signal_code(sig as i32)),
    };
    let watch = Watch {
        managers: vec![manager.clone()],
        quorum: 1,
        shown_url: session.shown_url(),
        lease: args.acquire.lease.unwrap_or(args.acquire.watchdog_lease),
    };
    let code = supervise(Held::One(guard), &args, &mut signals, &watch).await;
    // A release no replica confirmed is redone after a failover only while
    // this process runs.
    crate::kept::stay(&manager, &args.name).await;
    Ok(code)
}

/// `run --redlock`: the lock on a majority of the `--redis` servers.
async fn run_redlock(session: &Session, args: RunArgs) -> Result<i32, Failure> {
    let mut signals = Signals::install()?;
    let (guard, managers, places) = match redlock::acquire(session, &args, &mut signals).await? {
        RedWaited::Acquired {
            guard,
            managers,
            places,
        } => (guard, managers, places),
        RedWaited::TimedOut => return Ok(outcome::TIMEOUT),
        RedWaited::Interrupted(sig) => return Ok(signal_code(sig as i32)),
    };
    info!(lock = %args.name, nodes = guard.holding(), "acquired on a majority");
    let watch = Watch {
        managers: managers.clone(),
        quorum: session.nodes().len() / 2 + 1,
        shown_url: session.shown_url(),
        lease: args.acquire.lease.unwrap_or(args.acquire.watchdog_lease),
    };
    let held = Held::Red(guard, places, managers);
    Ok(supervise(held, &args, &mut signals, &watch).await)
}

/// `run --json`: the last line on stdout, after whatever the command printed:
/// `{"event":"finished","name":..,"kind":"lock"|"semaphore","exit_code":N,
/// "error":null|"..","at_ms":N}` (`error`: why lockwarden itself stopped, also
/// on stderr).
pub fn say_finished(name: &str, semaphore: bool, ran: &Result<i32, Failure>) {
    let (code, error) = match ran {
        Ok(code) => (*code, None),
        Err(f) => (f.code, Some(f.message.as_str())),
    };
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let value = serde_json::json!({
        "event": "finished",
        "name": name,
        "kind": if semaphore { "semaphore" } else { "lock" },
        "exit_code": code,
        "error": error,
        "at_ms": at_ms,
    });
    say!("{value}");
}

/// `run --semaphore --expirable`: runs the command under permits taken on
/// `manager`, watched and released as a lock is (watchdog lease, lost while
/// held, --on-lost).
pub async fn run_permits(
    session: &Session,
    manager: Addr<LockManager>,
    guard: PermitGuard,
    args: &RunArgs,
    signals: &mut Signals,
) -> i32 {
    let watch = Watch {
        managers: vec![manager],
        quorum: 1,
        shown_url: session.shown_url(),
        lease: args.acquire.watchdog_lease,
    };
    supervise(Held::Permits(guard), args, signals, &watch).await
}

/// Runs the command while `guard` is held and answers the exit code.
async fn supervise(guard: Held, args: &RunArgs, signals: &mut Signals, watch: &Watch<'_>) -> i32 {
    let on_terminal = std::io::stdin().is_terminal();
    let Some((program, rest)) = args.command.split_first() else {
        // clap requires at least one word after `--`.
        return outcome::USAGE;
    };
    let mut cmd = child::command(program, rest, !on_terminal);
    // A RedLock or a semaphore (not in the wait-for graph) passes the chain on as is.
    cmd.envs(guard.env(&args.name, &inherited_holders()));
    let what = guard.what(&args.name);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let lease = args.acquire.lease.unwrap_or(args.acquire.watchdog_lease);
            let _ = guard.release(release_budget(lease)).await;
            note(format!("cannot run {}: {e}", program.to_string_lossy()));
            return match e.kind() {
                ErrorKind::NotFound => outcome::NOT_FOUND,
                _ => outcome::CANNOT_EXECUTE,
            };
        }
    };
    let target = Target {
        pid: child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
        group: !on_terminal,
    };
    let mut lost: Option<LostReason> = None;
    let mut kill_at: Option<Instant> = None;
    // Whether the last probe found Redis not answering (said once per outage).
    let mut unreachable = false;
    let status = loop {
        let probe = async {
            match lost {
                Some(_) => pending().await,
                None => watch.probe(&args.name).await,
            }
        };
        let lost_now = async {
            match lost {
                Some(_) => pending().await,
                None => guard.lost().await,
            }
        };
        let kill_timer = async {
            match kill_at {
                Some(at) => actix_rt::time::sleep_until(at).await,
                None => pending().await,
            }
        };
        futures::select! {
            status = child.wait().fuse() => break status,
            reason = lost_now.fuse() => {
                lost = Some(reason);
                match args.on_lost {
                    OnLost::Kill => {
                        note(format!(
                            "{what} was lost while the command ran ({reason}); \
                             sending SIGTERM, SIGKILL in {}",
                            human(args.grace)
                        ));
                        target.send(Signal::SIGTERM);
                        // A grace too long to represent never ends.
                        kill_at = Instant::now().checked_add(args.grace);
                    }
                    OnLost::Warn => note(format!(
                        "{what} was lost while the command ran ({reason}); \
                         letting it finish (--on-lost warn)"
                    )),
                }
            }
            answered = probe.fuse() => match answered {
                // The lock is lost only when its lease runs out without a renewal,
                // which may be long after the command ends; the operator hears of
                // the outage now, not from a release that fails at the end.
                Err(why) if !unreachable => {
                    unreachable = true;
                    note(format!(
                        "Redis at {} is not answering while the command runs ({why}); \
                         {what} will be lost if Redis stays unreachable for its \
                         lease ({})",
                        watch.shown_url,
                        human(watch.lease)
                    ));
                }
                Ok(()) if unreachable => {
                    unreachable = false;
                    note(format!(
                        "Redis at {} answers again; {what} is still held",
                        watch.shown_url
                    ));
                }
                _ => {}
            },
            _ = kill_timer.fuse() => {
                note("the command outlived --grace after SIGTERM; sending SIGKILL");
                target.send(Signal::SIGKILL);
                kill_at = None;
            }
            sig = signals.recv().fuse() => {
                // On a terminal, Ctrl-C already reached the command (same group).
                if !(on_terminal && sig == Signal::SIGINT) {
                    target.send(sig);
                }
                info!(%sig, "signal passed on; waiting for the command to exit");
            }
        }
    };
    let code = match status {
        Ok(status) => child_code(status),
        Err(e) => {
            note(format!("lost track of the command: {e}"));
            outcome::FAILED
        }
    };
    finish(guard, args, lost, code).await
}

/// Releases after the command exited and picks the exit code.
async fn finish(guard: Held, args: &RunArgs, lost: Option<LostReason>, code: i32) -> i32 {
    let lost_code = match args.on_lost {
        OnLost::Kill => outcome::LOST,
        OnLost::Warn => code,
    };
    if lost.is_some() {
        if let Held::Red(guard, _, managers) = guard {
            // The holds left were given back when the loss was seen; dropping
            // the guard sends nothing more for them.
            drop(guard);
            redlock::settle_lost(&managers).await;
        }
        return lost_code;
    }
    // The library retries a release caught by a failover until the lease would
    // have ended; this bound only covers a library that stopped answering.
    let lease = args.acquire.lease.unwrap_or(args.acquire.watchdog_lease);
    let what = guard.what(&args.name);
    let red = matches!(guard, Held::Red(..));
    let gone = if red {
        redlock::gone_at_release(args.acquire.lease.is_some())
    } else {
        "expired or force-unlocked while it ran"
    };
    let released = match tokio::time::timeout(
        release_budget(lease),
        // A second more inside, so that this bound speaks first.
        guard.release(release_budget(lease) + Duration::from_secs(1)),
    )
    .await
    {
        Ok(released) => released,
        Err(_) => {
            note(format!(
                "the command finished but {what} could not be released: Redis did \
                 not answer for {}; its lease ({}) has ended, so it is free now",
                human(release_budget(lease)),
                human(lease)
            ));
            return if code == 0 { outcome::FAILED } else { code };
        }
    };
    match released {
        Ok(_) => code,
        // A RedLock's servers that say its owner is gone lost it (see `gone`).
        Err(LockError::Lost(LostReason::OwnerGone)) if red => {
            note(format!(
                "{what} was lost before the command finished ({gone})"
            ));
            lost_code
        }
        Err(LockError::Lost(reason)) => {
            note(format!(
                "{what} was lost before the command finished ({reason})"
            ));
            lost_code
        }
        Err(LockError::NotHeld) => {
            note(format!(
                "{what} was no longer held when the command finished ({gone})"
            ));
            lost_code
        }
        Err(e) if e.is_retryable() => {
            note(format!(
                "the command finished but {what} could not be released: Redis \
                 failed until its lease ({}) ended ({e}), so it is free now",
                human(lease)
            ));
            if code == 0 {
                outcome::FAILED
            } else {
                code
            }
        }
        Err(e) => {
            note(format!(
                "the command finished but releasing {what} failed: {e}; \
                 it frees by itself within its lease"
            ));
            if code == 0 {
                outcome::FAILED
            } else {
                code
            }
        }
    }
}
