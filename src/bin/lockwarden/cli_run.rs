//! The shapes of `run` and `hold` on the command line: how to acquire (shared by
//! both), what `run` does when its lock is lost, and each one's own options.
//! What they do is in `run.rs` and `hold.rs`; `cli.rs` has the rest of the
//! command line.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::duration::{parse_duration, parse_lease};

/// How to acquire: shared by `run` and `hold`.
#[derive(Debug, Clone, Args)]
pub struct AcquireOpts {
    /// Give up after waiting this long (0s: one attempt). Waits forever if not given.
    ///
    /// It bounds the wait for a lock someone else holds, counted from the start
    /// (finding the master during a failover is part of it; with --redlock, from
    /// when the servers answered). It does not bound the round trips to connect
    /// and to make the attempt, which a slow link can stretch to seconds: bound
    /// those with --connect-timeout.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// When the wait began: the command's start, since finding the master is part
    /// of it (set by the command, not a flag).
    #[arg(skip)]
    pub began: Option<std::time::Instant>,

    /// The holders this wait is on behalf of, outermost first (`run` reads them
    /// from `LOCKWARDEN_HOLDER`; set by the command, not a flag).
    #[arg(skip)]
    pub behalf: Vec<String>,

    /// Hold for at most this long, without renewal. Without it the lock is renewed
    /// while held (watchdog) and frees within the watchdog lease if this process dies.
    #[arg(long, value_name = "DURATION", value_parser = parse_lease)]
    pub lease: Option<Duration>,

    /// Lease of a watchdog-renewed lock (renewed every third of it); a crashed
    /// holder's lock frees within this time, and a force-unlock is noticed within a
    /// third of it.
    // Only `run` and `hold` hold a lock, so only they take it (status, list and
    // unlock would ignore it). The env value is hidden: clap shows an unset
    // variable as a dangling `[env: NAME=]`.
    #[arg(
        long,
        env = "LOCKWARDEN_WATCHDOG_LEASE",
        default_value = "30s",
        value_name = "DURATION",
        value_parser = parse_duration,
        hide_env_values = true,
        hide_short_help = true
    )]
    pub watchdog_lease: Duration,

    /// Lock-delay: if this process dies, freezes or is cut off and the lock's lease
    /// runs out unreleased, nobody may take the lock for this long after (so a
    /// frozen holder has time to notice); a normal exit or release is not delayed.
    /// Exclusive and spin locks; 0s (the default) for none. Consul uses 15s.
    #[arg(long, default_value = "0s", value_name = "DURATION", value_parser = parse_duration)]
    pub lock_delay: Duration,

    /// Direct handoff: while this process waits for an exclusive lock it takes a
    /// place in a handoff queue beside it, and a release by another lockwarden
    /// process (with this option) hands it the lock in the same call, so it holds
    /// one round trip sooner. A process that dies while waiting costs the lock at
    /// most 0.8 s. Needs more ACL rights (docs/operations.md).
    #[arg(long, conflicts_with_all = ["fair", "read", "write", "spin"])]
    pub direct_handoff: bool,

    /// Use a fair lock: granted in the order waiters queued, across all clients.
    /// With --semaphore: a fair semaphore, its permits granted in the order the
    /// waiters queued across processes (strict: a head that wants more than is
    /// free holds up those behind it); plain takers of the name do not queue and
    /// can overtake. Not with --expirable.
    #[arg(long, conflicts_with_all = ["read", "write", "spin"])]
    pub fair: bool,

    /// Use a spin lock: the exclusive lock, but waiting by asking again after a
    /// growing delay (1 ms doubling to 128 ms) instead of listening for the unlock
    /// message; for a Redis that refuses SUBSCRIBE.
    #[arg(long, conflicts_with_all = ["read", "write"])]
    pub spin: bool,

    /// Take a read hold of a read-write lock: shared with other readers.
    #[arg(long, conflicts_with = "write")]
    pub read: bool,

    /// Take the write side of a read-write lock: excludes readers and writers.
    #[arg(long)]
    pub write: bool,
}

impl AcquireOpts {
    /// The kind of acquisition the flags ask for (exclusive without any).
    pub fn kind(&self) -> lockwarden::AcquireKind {
        use lockwarden::AcquireKind;
        [
            (self.fair, AcquireKind::Fair),
            (self.read, AcquireKind::Read),
            (self.write, AcquireKind::Write),
            (self.spin, AcquireKind::Spin),
        ]
        .into_iter()
        .find_map(|(given, kind)| given.then_some(kind))
        .unwrap_or(AcquireKind::Exclusive)
    }
}

/// What to do with the command when the lock is lost while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// SIGTERM, then SIGKILL after --grace; exit 76.
    Kill,
    /// Say so on stderr and let the command finish; exit with its code.
    Warn,
}

/// `lockwarden run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock name.
    pub name: String,

    /// How to acquire.
    #[command(flatten)]
    pub acquire: AcquireOpts,

    /// Take the lock on a majority of independent servers, one per --redis (at
    /// least 3), as the RedLock algorithm does; a server that is down or slow
    /// holds nobody up past --node-wait.
    #[arg(long, conflicts_with_all = ["fair", "read", "write", "spin"])]
    pub redlock: bool,

    /// With --redlock: how long one server may take to grant in one round.
    #[arg(long, requires = "redlock", default_value = "50ms", value_name = "DURATION", value_parser = parse_lease)]
    pub node_wait: Duration,

    /// NAME is a semaphore: take permits of it instead of a lock, so that at most
    /// its number of permits of commands run at once.
    #[arg(long, conflicts_with_all = ["redlock", "read", "write", "spin", "lease"])]
    pub semaphore: bool,

    /// With --semaphore: the permits the semaphore is given if it does not exist
    /// yet; needed then (a wait on a semaphore with no key never ends). An existing
    /// semaphore keeps its own number: one process's flag does not change the
    /// fleet's (said on stderr when it plainly differs).
    #[arg(long, requires = "semaphore", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub permits: Option<u32>,

    /// With --semaphore: take the permits of a permit-expirable semaphore
    /// (Redisson's RPermitExpirableSemaphore) instead: renewed while the command
    /// runs, back by themselves within one --watchdog-lease if this process dies,
    /// and lost (--on-lost applies) if they expire meanwhile. Not with --fair.
    #[arg(long, requires = "semaphore", conflicts_with = "fair")]
    pub expirable: bool,

    /// With --semaphore: how many permits this command takes.
    #[arg(long, requires = "semaphore", default_value = "1", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub take: u32,

    /// What to do if the lock is lost while the command runs.
    #[arg(long, value_enum, default_value = "kill", value_name = "ACTION")]
    pub on_lost: OnLost,

    /// With --on-lost kill: time between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub grace: Duration,

    /// Print one JSON object on stdout when done, after the command's own output:
    /// {"event":"finished","name","kind","exit_code","error","at_ms"}.
    #[arg(long)]
    pub json: bool,

    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `lockwarden hold`.
#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The lock name.
    pub name: String,

    /// How long to hold it; until Ctrl-C (or SIGTERM) if not given.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub hold_for: Option<Duration>,

    /// How to acquire.
    #[command(flatten)]
    pub acquire: AcquireOpts,

    /// Print one JSON object per event on stdout.
    #[arg(long)]
    pub json: bool,
}
