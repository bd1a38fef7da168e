//! The command line: every subcommand, option and help text, as clap derive types.
//!
//! Only the shape of the input lives here; what each subcommand does is in its own
//! module. Durations are parsed by [`crate::duration`] while clap parses, so a
//! malformed `--wait 10x` is refused before anything connects to Redis. The help
//! texts carry an example per subcommand and the exit-code table, because the
//! operator reading `--help` at 3 a.m. should not need another document.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use crate::cli_help::parse_from;
pub use crate::cli_ops::{ListArgs, StatusArgs, TopArgs, UnlockArgs};
pub use crate::cli_run::{AcquireOpts, HoldArgs, OnLost, RunArgs};
pub use crate::cli_sync::{LatchAction, LatchArgs, SemaphoreAction, SemaphoreArgs};
pub use crate::duration::DeadlockTimeout;
use crate::duration::{parse_deadlock_timeout, parse_sync_timeout, parse_timeout};

/// The exit codes, shown by `lockwarden --help` (same table as docs/operations.md).
const EXIT_CODES: &str = "\
Exit codes:
  0    success (run: the command exited 0)
  1    failure while working (Redis lost mid-operation, release failed, unlock declined)
  2    bad input or Redis unreachable; nothing was changed
  75   --wait ran out before the lock was acquired (the message names the holder,
       or why Redis refused: out of memory, say)
  76   the lock was lost while held (force-unlocked, expired, or Redis unreachable)
  78   run/hold: the wait was in a deadlock and was chosen to end it (the message
       names the cycle); release what the caller holds, then retry
  126  run: the command could not be executed;  127: not found
  128+N  ended by signal N (run: the command was; run/hold: interrupted while waiting)
  any other: run exits with the command's own exit code

Environment:
  REDIS_URL                   Redis to use when --redis is not given
  LOCKWARDEN_WATCHDOG_LEASE   same as --watchdog-lease (run, hold)
  LOCKWARDEN_LABEL            same as --label
  LOCKWARDEN_HOLDER           set by run for its command: the holder chain a nested
                              run waits on behalf of (deadlock detection)
  RUST_LOG                    tracing filter for -v output (e.g. lockwarden=debug)

Examples:
  lockwarden run nightly-report --wait 0s -- /usr/local/bin/report
  lockwarden hold orders:42 --for 30s
  lockwarden status orders:42
  lockwarden list --pattern 'orders:*'
  lockwarden unlock --force orders:42
  lockwarden run partner-api --semaphore --permits 3 -- ./call-partner.sh
  lockwarden latch wait nightly-batch --wait 10m";

/// Distributed locks on Redis (Redisson layout) for operators: run a command under a
/// lock, hold one, look at locks, force-unlock.
#[derive(Debug, Parser)]
#[command(name = "lockwarden", version, after_long_help = EXIT_CODES)]
pub struct Cli {
    /// Options every subcommand takes.
    #[command(flatten)]
    pub common: Common,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options every subcommand takes. In each subcommand's help they come under their
/// own heading, after the subcommand's own options: `latch --help` would otherwise
/// open with eleven connection options.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection and logging (every subcommand)")]
pub struct Common {
    /// Redis server URL (redis://[user:password@]host[:port][/db]). Repeat it for
    /// `run --redlock`, once per independent server.
    #[arg(
        long = "redis",
        global = true,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis_urls: Vec<String>,

    /// A Sentinel to find the master through (redis://host:26379, or rediss://
    /// for TLS; then the master is reached over TLS too, see --master-tls);
    /// repeat it for each Sentinel, all with the same scheme and password. With
    /// it, --master-name names the master and --redis is not used. A private CA
    /// is trusted through SSL_CERT_FILE.
    #[arg(long = "sentinel", global = true, value_name = "URL")]
    pub sentinels: Vec<String>,

    /// A Redis Cluster node to start from (redis://host:port); repeat it or give
    /// several separated by commas. The rest of the cluster is discovered. With
    /// it, --redis is not used.
    #[arg(
        long = "cluster",
        global = true,
        value_name = "URL",
        value_delimiter = ','
    )]
    pub cluster: Vec<String>,

    /// The name the Sentinels know the master by (with --sentinel).
    #[arg(long = "master-name", global = true, value_name = "NAME")]
    pub master_name: Option<String>,

    /// The password of the master and replicas the Sentinels name, if they
    /// need one (with --sentinel; the Sentinels' own goes in their URLs:
    /// redis://:password@host:26379). Best given in the environment, where `ps`
    /// does not show it.
    #[arg(
        long = "master-password",
        global = true,
        env = "LOCKWARDEN_MASTER_PASSWORD",
        value_name = "PASSWORD",
        hide_env_values = true
    )]
    pub master_password: Option<String>,

    /// Whether the master and replicas the Sentinels name speak TLS (with
    /// --sentinel): yes or no. By default as the Sentinels: yes for rediss://
    /// Sentinel URLs, no for redis://.
    #[arg(long = "master-tls", global = true, value_name = "yes|no", value_parser = parse_yes_no)]
    pub master_tls: Option<bool>,

    /// Replicas that must confirm each lock change (WAIT) before it counts, or
    /// every replica that can answer when fewer can; a grant they do not
    /// confirm is undone and retried until --wait runs out, a release is redone.
    /// 0 turns confirmation off (faster; a failover may then lose a grant or a
    /// release). Default 1 (none on a cluster). See docs/operations.md,
    /// "Replica confirmation".
    #[arg(long = "sync-replicas", global = true, value_name = "N")]
    pub sync_replicas: Option<u32>,

    /// How long the master waits for those replicas per lock change; below
    /// 1900ms (Redis may end a WAIT 100 ms late, and a command may take 2s).
    /// Default 1s.
    #[arg(long = "sync-timeout", global = true, value_name = "DURATION", value_parser = parse_sync_timeout)]
    pub sync_timeout: Option<Duration>,

    /// Give up (exit 2, nothing taken) if Redis is not reached and ready within
    /// this long of the start: connecting, logging in, finding the master, each
    /// server's connections. Without it each step has its own 2s timeout, so a
    /// slow link can make the start take several seconds whatever --wait says.
    #[arg(long = "connect-timeout", global = true, value_name = "DURATION", value_parser = parse_timeout)]
    pub connect_timeout: Option<Duration>,

    /// A label for the locks this command holds: `status`, `list` and `top` show
    /// it beside the holder's host and pid (registered under the client id, see
    /// docs/operations.md, "Who holds a lock"). Up to 256 bytes; none by default.
    // The env value is hidden: clap shows an unset variable as `[env: NAME=]`.
    #[arg(
        long = "label",
        global = true,
        env = "LOCKWARDEN_LABEL",
        value_name = "TEXT",
        hide_env_values = true
    )]
    pub label: Option<String>,

    /// How long a lock wait (run, hold) lasts before it looks for a deadlock,
    /// and then again each time as long: a wait in a cycle that started last
    /// gives up with exit 78, naming the cycle. At least 10ms; `off` never
    /// looks (a wait in a cycle then lasts until --wait runs out). Default 1s.
    #[arg(
        long = "deadlock-timeout",
        global = true,
        value_name = "DURATION|off",
        value_parser = parse_deadlock_timeout
    )]
    pub deadlock_timeout: Option<DeadlockTimeout>,

    /// Log what happens on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock (a distributed flock).
    #[command(after_help = "\
Examples:
  lockwarden run nightly-report --wait 0s -- /usr/local/bin/report
  lockwarden run orders:migrate --wait 5m --on-lost warn -- ./migrate.sh --all
  lockwarden --redis redis://a:6379 --redis redis://b:6379 --redis redis://c:6379 \
      run payments --redlock --wait 10s -- ./pay.sh
  lockwarden run partner-api --semaphore --permits 3 -- ./call-partner.sh
  lockwarden run partner-api --semaphore --fair -- ./call-partner.sh   (in arrival order)
With --semaphore, NAME is a semaphore (Redisson's RSemaphore layout): at most
--permits commands run at once across machines; the command sees LOCKWARDEN_SEMAPHORE
and LOCKWARDEN_PERMITS (how many it took) instead of a token.
The command sees LOCKWARDEN_LOCK (the lock name) and LOCKWARDEN_TOKEN (the fencing
token of this acquisition) in its environment; with --redlock, LOCKWARDEN_TOKENS
instead: node=token for each server that granted (node = its place among the --redis
options, from 0; tokens of different servers are not comparable).
It also sees LOCKWARDEN_HOLDER: the owner fields of the holders it runs under,
outermost first, comma-separated (this lock's last). A lockwarden run (or hold)
inside it waits on their behalf, so nested runs that take two locks in opposite
orders, or an inner run that asks for its outer run's lock, are found as a deadlock
(exit 78) instead of waiting for ever. With --semaphore or --redlock the variable
is passed on unchanged. Exit: the command's own code; 75 if --wait ran out (the
holder is named); 76 if the lock was lost while it ran (with --redlock: when fewer
than a majority still hold it); 78 if the wait was chosen to end a deadlock (the
cycle is named).")]
    Run(RunArgs),

    /// Acquire a lock, hold it for a while (or until Ctrl-C), release it.
    #[command(after_help = "\
Examples:
  lockwarden hold orders:42 --for 30s
  lockwarden hold orders:42 --wait 0s --json
With --json, one object per line on stdout for each event:
  {\"event\":\"acquired\",\"name\":..,\"lock\":..,\"owner\":..,\"token\":N,\"waited_ms\":N,\"at_ms\":N}
  {\"event\":\"released\",\"name\":..,\"lock\":..,\"owner\":..,\"token\":N,\"held_ms\":N,\"at_ms\":N}
  {\"event\":\"lost\",\"name\":..,\"lock\":..,\"owner\":..,\"token\":N,\"reason\":..,\"at_ms\":N}
  {\"event\":\"timeout\",\"name\":..,\"lock\":..,\"waited_ms\":N,\"at_ms\":N}
at_ms is Unix time in milliseconds. Exit: 0, 75 on timeout, 76 if lost.")]
    Hold(HoldArgs),

    /// Show a lock's kind, holders with hold counts, and remaining TTL; or a
    /// semaphore's or latch's kind, number and waiters.
    #[command(after_help = "\
Examples:
  lockwarden status orders:42
  lockwarden status orders:42 --json
  lockwarden status partner-api      (a semaphore: its available permits, who waits)
Who waits for a lock is shown once a wait has lasted a second (host, pid, since
when), and a DEADLOCK line names the cycle when the lock is in one.
A semaphore or a count-down latch shows by its kind (from the label lockwarden writes
when it makes one, else from what waits on it), with its permits or count (a latch at
zero has no key); an integer nothing labels is a 'counter'.
Exit: 0 whether or not the lock is held; 2 if the key exists and is neither a lock
nor a counter.")]
    Status(StatusArgs),

    /// Force-release a lock whoever holds it, waking a waiter.
    #[command(after_help = "\
Examples:
  lockwarden unlock --force orders:42
  lockwarden unlock --force orders:42 --yes     (no question; required without a terminal)
The holder is not told at once: its watchdog notices within a third of its lease.")]
    Unlock(UnlockArgs),

    /// List the locks, semaphores and latches that exist now, one line each (SCAN,
    /// never KEYS).
    #[command(after_help = "\
Examples:
  lockwarden list
  lockwarden list --pattern 'orders:*' --json
Shown: hashes that look like locks (owner fields with hold counts), and semaphores and
latches (labelled by lockwarden, or waited on). An application's hash or integer is
left out.")]
    List(ListArgs),

    /// Watch the locks, semaphores and latches live: holders or permits, TTL, fair
    /// queue, waiting processes.
    #[command(after_help = "\
Examples:
  lockwarden top
  lockwarden top --pattern 'orders:*' --interval 500ms
  lockwarden top --json --iterations 1        (one snapshot for a script)
On a terminal the screen is redrawn every --interval, most-waited-for first; piped,
plain lines (a '# <time> <n> locks' line, then one line a row). WAITING counts the
connections subscribed to the lock's or synchronizer's channel (about one per waiting
process); QUEUE is a fair lock's queue. A lock in a deadlock (a cycle of waits, whether or not a
detector breaks it) is marked DEADLOCK and the cycle is printed under the table.
Ctrl-C ends it (exit 0).")]
    Top(TopArgs),

    /// Work a count-down latch (Redisson's RCountDownLatch): set, count down, wait.
    #[command(after_help = "\
Examples:
  lockwarden latch set nightly-batch 8        (only if it has no count; again: exit 0, or 1 if it has more)
  lockwarden latch count-down nightly-batch   (prints the count left)
  lockwarden latch wait nightly-batch --wait 10m
  lockwarden latch count nightly-batch
Exit: 0; wait: 75 if --wait ran out first; set: 1 if a count was already set.")]
    Latch(LatchArgs),

    /// Set up or repair a semaphore (Redisson's RSemaphore): set, add, drain.
    #[command(after_help = "\
Examples:
  lockwarden semaphore set partner-api 3     (makes it; a second run changes nothing, exit 0)
  lockwarden semaphore add partner-api 1     (prints the permits available)
  lockwarden semaphore drain partner-api     (takes every available permit)
Taking permits to run a command is `lockwarden run NAME --semaphore --permits N`.
  lockwarden semaphore available partner-api --json
`set` on an existing semaphore changes nothing: exit 0 when it has N or fewer available
(fewer: the rest may be taken; Redis keeps no total), 1 when it has more than N
available (it was set up with more; `drain` and `set` again to lower it).
Exit: 0; set: 1 as above; 2 if the key is not a semaphore (nothing changed).")]
    Semaphore(SemaphoreArgs),
}

/// `yes` or `no` (and, quietly, the usual spellings of either), for a flag whose
/// help says `yes|no`: clap's boolean parser would list `true, false` and answer
/// "value was not a boolean".
fn parse_yes_no(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "yes" | "y" | "true" | "on" | "1" => Ok(true),
        "no" | "n" | "false" | "off" | "0" => Ok(false),
        _ => Err(format!("'{text}' is neither yes nor no")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_the_command_after_the_double_dash() {
        let cli = Cli::try_parse_from(["lockwarden", "run", "a", "--wait", "2s", "--", "ls", "-l"])
            .expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.acquire.wait, Some(Duration::from_secs(2)));
        assert_eq!(run.command, ["ls", "-l"]);
        assert_eq!(run.on_lost, OnLost::Kill);
    }

    #[test]
    fn each_kind_flag_takes_its_kind_and_none_the_exclusive_lock() {
        use lockwarden::AcquireKind;
        for (flag, kind) in [
            (None, AcquireKind::Exclusive),
            (Some("--fair"), AcquireKind::Fair),
            (Some("--read"), AcquireKind::Read),
            (Some("--write"), AcquireKind::Write),
            (Some("--spin"), AcquireKind::Spin),
        ] {
            let argv = ["lockwarden", "run", "a"].into_iter().chain(flag);
            let cli = Cli::try_parse_from(argv.chain(["--", "true"])).expect("parses");
            let Command::Run(run) = cli.command else {
                panic!("not run")
            };
            assert_eq!(run.acquire.kind(), kind, "{flag:?}");
        }
    }

    #[test]
    fn redlock_takes_several_servers_and_no_other_kind() {
        let cli = Cli::try_parse_from([
            "lockwarden",
            "--redis",
            "redis://a",
            "--redis",
            "redis://b",
            "run",
            "x",
            "--redlock",
            "--",
            "ls",
        ])
        .expect("parses");
        assert_eq!(cli.common.redis_urls, ["redis://a", "redis://b"]);
        assert!(
            Cli::try_parse_from(["lockwarden", "run", "x", "--redlock", "--fair", "--", "ls"])
                .is_err()
        );
        assert!(
            Cli::try_parse_from(["lockwarden", "run", "x", "--node-wait", "1s", "--", "ls"])
                .is_err(),
            "--node-wait needs --redlock"
        );
    }

    #[test]
    fn master_tls_takes_yes_or_no() {
        let tls = |v: &str| {
            Cli::try_parse_from(["lockwarden", "--master-tls", v, "status", "a"])
                .map(|cli| cli.common.master_tls)
        };
        assert_eq!(tls("yes").expect("parses"), Some(true));
        assert_eq!(tls("no").expect("parses"), Some(false));
        let err = tls("maybe").expect_err("refused").to_string();
        assert!(err.contains("'maybe' is neither yes nor no"), "{err}");
        assert!(!err.contains("true, false"), "{err}");
    }

    #[test]
    fn deadlock_timeout_takes_a_duration_or_off() {
        let parse = |v: &str| {
            Cli::try_parse_from(["lockwarden", "--deadlock-timeout", v, "status", "a"])
                .map(|cli| cli.common.deadlock_timeout)
        };
        assert_eq!(
            parse("200ms").expect("parses"),
            Some(DeadlockTimeout::After(Duration::from_millis(200)))
        );
        assert_eq!(parse("off").expect("parses"), Some(DeadlockTimeout::Off));
        for bad in ["0s", "5ms", "never", "1"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unlock_requires_force_and_durations_are_checked() {
        assert!(Cli::try_parse_from(["lockwarden", "unlock", "a"]).is_err());
        assert!(Cli::try_parse_from(["lockwarden", "hold", "a", "--wait", "10x"]).is_err());
        assert!(
            Cli::try_parse_from(["lockwarden", "run", "a", "--read", "--write", "--", "x"])
                .is_err()
        );
    }
}
