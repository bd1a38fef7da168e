//! The command `run` starts, built the same way in every mode (plain, fair, read,
//! write, spin, RedLock, semaphore): its own process group when not on a
//! terminal, and on Linux a command that dies with the `lockwarden` process.
//!
//! Why it must die with us: the lock lives in Redis, not in a descriptor the
//! command inherits (as flock(1)'s does). If `lockwarden` is SIGKILLed (the OOM
//! killer, `kill -9`, a container runtime), nobody renews the lock, it expires
//! after its lease, and the next process would run its command beside the orphan.
//! The kernel's parent-death signal (PR_SET_PDEATHSIG, Linux only) sends the
//! command SIGKILL the moment we die, however we die.
//!
//! Only the command itself gets it: a script's own children are not signalled by
//! the kernel (docs/operations.md says how to cover them: `exec`, or a supervisor
//! that kills the whole group).

use std::ffi::OsString;

use tokio::process::Command;

/// The command `program rest...`; in a process group of its own when
/// `own_group`, so that the signals `run` passes on reach a script's children
/// too. On Linux it is killed (SIGKILL) when this process dies.
///
/// It must be spawned on the thread that runs the actix system: the kernel sends
/// the parent-death signal when the *thread* that forked the child exits, not the
/// process. That thread is the main thread (`main` runs the whole command inside
/// `System::block_on`, and `tokio::process::Command::spawn` forks synchronously on
/// the caller's thread), which ends only with the process. A thread of tokio's
/// blocking pool would not do: it exits after idling, and the command would be
/// killed then.
pub fn command(program: &OsString, rest: &[OsString], own_group: bool) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(rest);
    if own_group {
        cmd.process_group(0);
    }
    die_with_parent(&mut cmd);
    cmd
}

/// Makes the command receive SIGKILL when the thread that spawns it (and so this
/// process) ends, checking in the child that we did not end before it was set.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    use nix::errno::Errno;
    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::Signal;
    use nix::unistd::{getppid, Pid};

    // Taken before the fork: the child compares it with its parent after setting
    // the signal, since a parent that died in between never sends it.
    let parent = Pid::this();
    let set = move || {
        set_pdeathsig(Signal::SIGKILL)?;
        if getppid() != parent {
            // We died between the fork and the prctl: the child was adopted by
            // init (or a subreaper) and would run unwatched. An error here makes
            // the child exit before exec (std reports its errno to a parent that
            // is no longer there).
            return Err(Errno::ESRCH.into());
        }
        Ok(())
    };
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: prctl(2) and getppid(2) are plain
    // system calls that neither allocate nor take locks, and both errors are a
    // bare errno (`io::Error::from_raw_os_error`), which allocates nothing.
    unsafe {
        cmd.pre_exec(set);
    }
}

/// No parent-death signal outside Linux: the command may outlive a `lockwarden`
/// that is killed (docs/operations.md, "The command and its lock").
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}
