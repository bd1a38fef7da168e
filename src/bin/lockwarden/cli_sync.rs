//! The command line of the synchronizers (`lockwarden latch`, `lockwarden
//! semaphore`), split from `cli.rs` to keep each file short; `cli.rs` names them in
//! its `Command` enum and holds `run --semaphore`'s flags with the rest of `run`.

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::duration::parse_duration;

/// `lockwarden latch`.
#[derive(Debug, Args)]
pub struct LatchArgs {
    /// Print one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub action: LatchAction,
}

/// What `lockwarden latch` does.
#[derive(Debug, Subcommand)]
pub enum LatchAction {
    /// Give the latch a count, if it has none (is open).
    Set {
        /// The latch name.
        name: String,
        /// The count, at least 1.
        count: u64,
    },
    /// Take one from the count; at zero every waiter wakes.
    CountDown {
        /// The latch name.
        name: String,
    },
    /// Wait until the count is zero. A latch with no count (never set, or already
    /// open: Redisson deletes it at zero) is open at once, said on stderr.
    Wait {
        /// The latch name.
        name: String,
        /// Give up after waiting this long (exit 75). Waits forever if not given.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        wait: Option<Duration>,
        /// Exit 1 instead if the latch has no count when the wait starts: a
        /// mistyped name (or a latch not set yet) then fails rather than reading
        /// as "all done". A latch that already opened also has no count.
        #[arg(long)]
        must_exist: bool,
    },
    /// Print the count (0: open).
    Count {
        /// The latch name.
        name: String,
    },
}

/// `lockwarden semaphore`.
#[derive(Debug, Args)]
pub struct SemaphoreArgs {
    /// Print one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub action: SemaphoreAction,
}

/// What `lockwarden semaphore` does.
#[derive(Debug, Subcommand)]
pub enum SemaphoreAction {
    /// Give the semaphore its permits, if it has none yet.
    Set {
        /// The semaphore name.
        name: String,
        /// The permits.
        permits: u32,
    },
    /// Add permits (or give back permits a crashed holder never returned).
    Add {
        /// The semaphore name.
        name: String,
        /// How many, at least 1.
        permits: u32,
    },
    /// Take every available permit at once and print how many.
    Drain {
        /// The semaphore name.
        name: String,
    },
    /// Print the permits available now (0 also for a semaphore never set).
    Available {
        /// The semaphore name.
        name: String,
    },
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    #[test]
    fn semaphore_and_latch_shapes() {
        let cli = Cli::try_parse_from([
            "lockwarden",
            "run",
            "api",
            "--semaphore",
            "--permits",
            "3",
            "--",
            "ls",
        ])
        .expect("parses");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert!(run.semaphore);
        assert_eq!((run.permits, run.take), (Some(3), 1));
        for bad in [
            &["lockwarden", "run", "api", "--permits", "3", "--", "ls"][..],
            &[
                "lockwarden",
                "run",
                "api",
                "--semaphore",
                "--permits",
                "0",
                "--",
                "ls",
            ],
            &[
                "lockwarden",
                "run",
                "api",
                "--semaphore",
                "--permits",
                "-1",
                "--",
                "ls",
            ],
            &[
                "lockwarden",
                "run",
                "api",
                "--semaphore",
                "--permits",
                "2",
                "--fair",
                "--expirable",
                "--",
                "ls",
            ],
            &["lockwarden", "latch", "set", "b", "-3"],
            &["lockwarden", "latch", "wait", "b", "--wait", "10x"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Cli::try_parse_from(["lockwarden", "latch", "count-down", "b"]).is_ok());
        let cli = Cli::try_parse_from([
            "lockwarden",
            "run",
            "api",
            "--semaphore",
            "--fair",
            "--",
            "ls",
        ])
        .expect("a fair semaphore parses");
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert!(run.semaphore && run.acquire.fair);
        // An existing semaphore needs no --permits; --json anywhere.
        assert!(
            Cli::try_parse_from(["lockwarden", "run", "api", "--semaphore", "--", "ls"]).is_ok()
        );
        for argv in [
            &["lockwarden", "semaphore", "--json", "add", "api", "1"][..],
            &["lockwarden", "semaphore", "add", "api", "1", "--json"],
        ] {
            let cli = Cli::try_parse_from(argv).expect("parses");
            let Command::Semaphore(sem) = cli.command else {
                panic!("not semaphore")
            };
            assert!(sem.json, "{argv:?}");
        }
    }
}
