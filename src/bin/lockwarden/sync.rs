//! A command under semaphore permits: `lockwarden run NAME --semaphore` (the
//! latch and semaphore commands themselves are `counters.rs`'s).
//!
//! `run --semaphore` waits like `run` does (Ctrl-C leaves the queue, `--wait`
//! ends in exit 75), runs the command with LOCKWARDEN_SEMAPHORE and
//! LOCKWARDEN_PERMITS in its environment, passes signals on to it, and gives the
//! permits back once it exited. Plain permits have no lease in Redisson's
//! layout, so there is nothing to lose while the command runs and no
//! `--on-lost`; a `lockwarden` killed with SIGKILL keeps its permits taken
//! (`semaphore add` gives them back). With `--expirable` the permits are a
//! permit-expirable semaphore's: renewed by the watchdog while the command
//! runs, back by themselves within one watchdog lease when the process dies,
//! and the command runs as under a lock (`run.rs`: lost while held,
//! `--on-lost`, Redis probed), with LOCKWARDEN_PERMIT_IDS besides. With
//! `--fair` the waiters queue in arrival order across processes
//! (`Semaphore::fair`); a `lockwarden` killed while it waits is skipped once its
//! place lapses.

use std::future::Future;
use std::io::{ErrorKind, IsTerminal};
use std::time::Duration;

use futures::FutureExt;
use lockwarden::{LockError, PermitSemaphore, Semaphore, SemaphoreGuard, Settle};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tracing::info;

use crate::acquire::Signals;
use crate::child;
use crate::cli::RunArgs;
use crate::duration::human;
use crate::outcome::{self, child_code, note, signal_code, Failure};
use crate::outcome::{RELEASE_BUDGET, SETTLE_BUDGET};
use crate::session::Session;

/// Runs `lockwarden run NAME --semaphore`; answers the exit code.
pub async fn run_semaphore(session: &Session, args: RunArgs) -> Result<i32, Failure> {
    if args.expirable {
        return run_expirable(session, args).await;
    }
    let manager = session.manager().await?;
    let failed = |e| Failure::from_lock(&doing(&args), e);
    let sem = manager
        .send(Semaphore::new(&args.name).fair(args.acquire.fair))
        .await
        .map_err(|e| failed(e.into()))?
        .map_err(failed)?;
    set_up(
        &args,
        args.permits.map(|p| sem.try_set_permits(p)),
        sem.exists(),
        sem.available(),
    )
    .await?;
    let mut signals = Signals::install()?;
    let took = take(
        &args,
        match args.acquire.wait {
            Some(wait) => sem.acquire_within(args.take, wait).boxed_local(),
            None => sem.acquire(args.take).boxed_local(),
        },
        sem.available(),
        &mut signals,
    )
    .await;
    let code = match took {
        Ok(Took::Guard(guard)) => Ok(supervise(guard, &args, &mut signals).await),
        Ok(Took::Exit(code)) => Ok(code),
        Err(failure) => Err(failure),
    };
    settle(&manager, &args.name).await;
    code
}

/// Waits, within [`SETTLE_BUDGET`], until the permits this process gave back
/// and the takes it undid (a wait that ran out or was interrupted while its
/// attempt was on the wire) have left for Redis: a take that a frozen server
/// runs after this process is gone is given back only if its undo went out.
async fn settle(manager: &actix::Addr<lockwarden::LockManager>, name: &str) {
    if !matches!(manager.send(Settle::within(SETTLE_BUDGET)).await, Ok(true)) {
        note(format!(
            "a change to semaphore \"{name}\" had no answer from Redis within {}; it was sent \
             under an op id and applies once if Redis still has it",
            human(SETTLE_BUDGET)
        ));
    }
}

/// Runs `lockwarden run NAME --semaphore --expirable`: waits as the plain kind
/// does, then runs the command as `run` does under a lock (the permits are
/// renewed, can be lost, and come back when the process dies).
async fn run_expirable(session: &Session, args: RunArgs) -> Result<i32, Failure> {
    let failed = |e| Failure::from_lock(&doing(&args), e);
    let manager = session.manager().await?;
    let sem = manager
        .send(PermitSemaphore::new(&args.name))
        .await
        .map_err(|e| failed(e.into()))?
        .map_err(failed)?;
    set_up(
        &args,
        args.permits.map(|p| sem.try_set_permits(p)),
        sem.exists(),
        sem.available(),
    )
    .await?;
    let mut signals = Signals::install()?;
    let took = take(
        &args,
        match args.acquire.wait {
            Some(wait) => sem.acquire_within(args.take, wait, None).boxed_local(),
            None => sem.acquire(args.take, None).boxed_local(),
        },
        sem.available(),
        &mut signals,
    )
    .await;
    let code = match took {
        Ok(Took::Guard(guard)) => {
            Ok(crate::run::run_permits(session, manager.clone(), guard, &args, &mut signals).await)
        }
        Ok(Took::Exit(code)) => Ok(code),
        Err(failure) => Err(failure),
    };
    settle(&manager, &args.name).await;
    code
}

/// What waiting for permits ended in.
enum Took<G> {
    /// The permits.
    Guard(G),
    /// `--wait` ran out or a signal came (already said): exit with this code.
    Exit(i32),
}

/// What failures while taking permits are said to be doing.
fn doing(args: &RunArgs) -> String {
    format!("taking permits of semaphore \"{}\"", args.name)
}

/// Either kind's set-up before the wait: gives the semaphore `--permits` if it
/// does not exist; without `--permits` refuses a semaphore that does not exist
/// (exit 2, nothing changed: the wait would never end). On an existing one
/// `--permits` changes nothing, by design: every process of a fleet passes the
/// flag, the number in Redis is the fleet's, and Redis keeps no total to
/// compare the flag with, only the permits available now. So only a plain
/// difference is said on stderr (more available than `--permits`: it was set up
/// with more); otherwise `-v` says the flag was moot.
async fn set_up(
    args: &RunArgs,
    create: Option<impl Future<Output = Result<bool, LockError>>>,
    exists: impl Future<Output = Result<bool, LockError>>,
    available: impl Future<Output = Result<u64, LockError>>,
) -> Result<(), Failure> {
    let failed = |e| Failure::from_lock(&doing(args), e);
    let Some(create) = create else {
        if !exists.await.map_err(failed)? {
            return Err(Failure::usage(format!(
                "semaphore \"{}\" does not exist: give --permits N to create it (a wait \
                 on a semaphore with no key would never end); nothing was changed",
                args.name
            )));
        }
        return Ok(());
    };
    if create.await.map_err(failed)? {
        info!(semaphore = %args.name, permits = args.permits, "semaphore created");
        return Ok(());
    }
    let now = available.await.map_err(failed)?;
    let asked = u64::from(args.permits.unwrap_or(0));
    if now > asked {
        note(format!(
            "semaphore \"{}\" exists with {now} permits available, more than --permits \
             {asked}: it was set up with more; using it as it is (`semaphore drain` and \
             `semaphore set` change it)",
            args.name
        ));
    } else {
        info!(
            semaphore = %args.name,
            permits = args.permits,
            available = now,
            "the semaphore exists: --permits left its permits as they are \
             (`semaphore add` or `drain` change them)"
        );
    }
    Ok(())
}

/// Either kind's wait for permits, as `run` waits for a lock (Ctrl-C leaves
/// the queue; at the end of `--wait` it says how many are available).
async fn take<G>(
    args: &RunArgs,
    taking: impl Future<Output = Result<G, LockError>>,
    available: impl Future<Output = Result<u64, LockError>>,
    signals: &mut Signals,
) -> Result<Took<G>, Failure> {
    futures::select! {
        got = taking.fuse() => match got {
            Ok(guard) => Ok(Took::Guard(guard)),
            Err(LockError::Timeout { waited, .. }) => {
                let available = available.await.unwrap_or(0);
                Ok(Took::Exit(timed_out(args, waited, available)))
            }
            Err(e) => match outcome::refused_for_now(&e) {
                // Retried until --wait ran out: a timeout, with its cause.
                Some(why) => {
                    note(format!(
                        "no {} permit(s) of semaphore \"{}\" within --wait: {why}",
                        args.take, args.name
                    ));
                    Ok(Took::Exit(outcome::TIMEOUT))
                }
                None => Err(Failure::from_lock(&doing(args), e)),
            },
        },
        sig = signals.recv().fuse() => Ok(Took::Exit(interrupted(args, sig).await)),
    }
}

/// Says that `--wait` ran out; answers the exit code.
fn timed_out(args: &RunArgs, waited: Duration, available: u64) -> i32 {
    note(format!(
        "no {} permit(s) of semaphore \"{}\" within {} ({available} available now)",
        args.take,
        args.name,
        human(waited)
    ));
    outcome::TIMEOUT
}

/// Says that a signal ended the wait; answers the exit code.
async fn interrupted(args: &RunArgs, sig: Signal) -> i32 {
    note(format!(
        "interrupted while waiting for semaphore \"{}\"; left the queue",
        args.name
    ));
    // Time for the actor to notice the caller left (and give back a grant
    // that crossed it) before the process ends.
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    signal_code(sig as i32)
}

/// Runs the command while `guard` holds the permits, then gives them back.
async fn supervise(guard: SemaphoreGuard, args: &RunArgs, signals: &mut Signals) -> i32 {
    let on_terminal = std::io::stdin().is_terminal();
    let Some((program, rest)) = args.command.split_first() else {
        return outcome::USAGE;
    };
    // As `run` does: its own process group (signals reach a script's children
    // too), and a command that dies with this process.
    let mut cmd = child::command(program, rest, !on_terminal);
    cmd.env("LOCKWARDEN_SEMAPHORE", &args.name)
        .env("LOCKWARDEN_PERMITS", guard.permits().to_string());
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release_within(RELEASE_BUDGET).await;
            note(format!("cannot run {}: {e}", program.to_string_lossy()));
            return match e.kind() {
                ErrorKind::NotFound => outcome::NOT_FOUND,
                _ => outcome::CANNOT_EXECUTE,
            };
        }
    };
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);
    let status = loop {
        futures::select! {
            status = child.wait().fuse() => break status,
            sig = signals.recv().fuse() => {
                // On a terminal, Ctrl-C already reached the command.
                if let (Some(pid), false) = (pid, on_terminal && sig == Signal::SIGINT) {
                    let sent = if on_terminal { kill(pid, sig) } else { killpg(pid, sig) };
                    if let Err(e) = sent {
                        tracing::debug!(%pid, %sig, error = %e, "signal not delivered");
                    }
                }
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
    // The command waits for the real outcome (its exit would end a give-back
    // going on in the background): the library's own bound, meant for request
    // paths, is set past this one so that this one speaks first.
    let give_back = guard.release_within(RELEASE_BUDGET + Duration::from_secs(1));
    match tokio::time::timeout(RELEASE_BUDGET, give_back).await {
        Ok(Ok(_)) => code,
        Ok(Err(e)) => {
            note(format!(
                "the command finished but giving back permits of semaphore \"{}\" failed: {e}",
                args.name
            ));
            if code == 0 {
                outcome::FAILED
            } else {
                code
            }
        }
        Err(_) => {
            note(format!(
                "the command finished but Redis did not answer the give-back of the permits of \
                 semaphore \"{}\" within {}: it was sent under an op id and applies once if \
                 Redis still has it, so do not add permits for it; `lockwarden status {}` shows \
                 the count once Redis answers",
                args.name,
                human(RELEASE_BUDGET),
                args.name
            ));
            if code == 0 {
                outcome::FAILED
            } else {
                code
            }
        }
    }
}
