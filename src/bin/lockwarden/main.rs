//! The `lockwarden` operator command: run a command under a distributed lock, hold
//! a lock, look at locks, force-unlock. See `lockwarden --help` and
//! docs/operations.md.
//!
//! This file is the entry point only: parse the command line (refusing bad input
//! with one line and exit code 2), set up tracing, run the chosen subcommand inside
//! an actix system (the library's actors need one), and exit with the code it
//! chose. Everything about locks is the library's; the modules here decide what the
//! operator sees and which exit code means what.
//!
//! - `cli`: the command line (clap), help texts and the exit-code table.
//! - `duration`: `30s`-style durations.
//! - `outcome`: exit codes and the error type.
//! - `session`: URL, name and kind checks, connecting.
//! - `acquire`: waiting with progress, signals, timeout messages.
//! - `run`, `hold`, `inspect` (status, list), `unlock`: the subcommands.

/// `println!` that ignores a closed stdout (`lockwarden list | head -1`) instead
/// of panicking: the reader left, and the exit code still tells the outcome.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        // One line per message: control characters in names are escaped.
        let line = format!($($arg)*);
        let _ = writeln!(std::io::stdout().lock(), "{}", crate::outcome::printable(&line));
    }};
}

mod acquire;
mod cli;
mod duration;
mod hold;
mod inspect;
mod outcome;
mod run;
mod session;
mod unlock;

use std::io::Write;

use clap::error::ErrorKind;
use clap::Parser;

use crate::cli::{Cli, Command};
use crate::outcome::{note, Failure};
use crate::session::Session;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => refuse(e),
    };
    init_tracing(cli.common.verbose);
    let code = match actix_rt::System::new().block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(failure) => {
            note(&failure);
            failure.code
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// Runs the subcommand. Every check that needs no network comes first.
async fn dispatch(cli: Cli) -> Result<i32, Failure> {
    let session = Session::new(&cli.common)?;
    match cli.command {
        Command::Run(args) => {
            session.check_name(&args.name)?;
            run::run(&session, args).await
        }
        Command::Hold(args) => {
            session.check_name(&args.name)?;
            hold::hold(&session, args).await
        }
        Command::Status(args) => {
            session.check_name(&args.name)?;
            inspect::status(&session, args).await
        }
        Command::Unlock(args) => {
            session.check_name(&args.name)?;
            unlock::check_confirmable(&args)?;
            unlock::unlock(&session, args).await
        }
        Command::List(args) => inspect::list(&session, args).await,
    }
}

/// Ends the process for a command line clap refused: help and version as clap
/// prints them, anything else as one line and exit code 2.
fn refuse(e: clap::Error) -> ! {
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    note(format!(
        "{} (see --help)",
        first_paragraph(&e.render().to_string())
    ));
    std::process::exit(outcome::USAGE);
}

/// Clap's message up to its first blank line or usage line, joined into one line,
/// without the leading `error: `.
fn first_paragraph(rendered: &str) -> String {
    let words: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty() && !l.starts_with("Usage:"))
        .collect();
    let line = words.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

/// With `-v`, tracing output on stderr: `-v` info, `-vv` debug, `-vvv` everything
/// at trace; `RUST_LOG`, when set, replaces those filters. Nothing without `-v`.
fn init_tracing(verbose: u8) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    if verbose == 0 {
        return;
    }
    let default = match verbose {
        1 => "lockwarden=info",
        2 => "lockwarden=debug,redis=info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_fold_into_one_line() {
        let rendered = "error: the following required arguments were not provided:\n  \
                        --force\n\nUsage: lockwarden unlock --force <NAME>\n";
        assert_eq!(
            first_paragraph(rendered),
            "the following required arguments were not provided: --force"
        );
    }
}
