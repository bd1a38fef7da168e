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
//! - `cli`: the command line (clap), help texts and the exit-code table; `cli_sync`:
//!   the `latch` and `semaphore` subcommands' shapes; `cli_ops`: `status`,
//!   `unlock`, `list` and `top`'s; `cli_run`: `run` and `hold`'s; `cli_help`: the command as parsed, with the
//!   Sentinel and Cluster options shown once in `lockwarden --help`.
//! - `duration`: `30s`-style durations.
//! - `outcome`: exit codes and the error type.
//! - `session`: URL, name and kind checks, connecting.
//! - `acquire`: waiting with progress, signals, timeout messages.
//! - `child`: the command `run` starts, which dies with this process.
//! - `waits`: recorded waiters and deadlocks as `status` and `top` show them.
//! - `run`, `hold`, `inspect` (status, list), `unlock`, `top`: the subcommands; `redlock`:
//!   what `run --redlock` does before and after the command; `sync`: `run
//!   --semaphore`, `latch` and `semaphore`.

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
mod child;
mod cli;
mod cli_help;
mod cli_ops;
mod cli_run;
mod cli_sync;
mod counters;
mod duration;
mod hold;
mod inspect;
mod kept;
mod outcome;
mod redlock;
mod run;
mod session;
mod sync;
mod top;
mod unlock;
mod waits;
mod watch;

use std::io::Write;

use clap::error::ErrorKind;

use crate::cli::{Cli, Command, HoldArgs, RunArgs};
use crate::outcome::{note, Failure};
use crate::session::Session;

fn main() {
    let cli = match cli::parse_from(std::env::args_os()) {
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
    let watchdog_lease = match &cli.command {
        Command::Run(args) => Some(args.acquire.watchdog_lease),
        Command::Hold(args) => Some(args.acquire.watchdog_lease),
        Command::Status(_) | Command::Unlock(_) | Command::List(_) | Command::Top(_) => None,
        Command::Latch(_) | Command::Semaphore(_) => None,
    };
    let redlock = matches!(&cli.command, Command::Run(args) if args.redlock);
    let session = Session::new(&cli.common, watchdog_lease, redlock)?;
    let session = match &cli.command {
        Command::Run(args) => session
            .with_lock_delay(args.acquire.lock_delay)?
            .with_direct_handoff(args.acquire.direct_handoff),
        Command::Hold(args) => session
            .with_lock_delay(args.acquire.lock_delay)?
            .with_direct_handoff(args.acquire.direct_handoff),
        _ => session,
    };
    let session = match &cli.command {
        Command::Run(args) if !redlock => session.waiting_for(args.acquire.wait),
        Command::Hold(args) => session.waiting_for(args.acquire.wait),
        _ => session,
    };
    // Before anything connects (exit 2 promises nothing was written, the client
    // registry entry included).
    if let Command::Run(RunArgs { acquire, .. }) | Command::Hold(HoldArgs { acquire, .. }) =
        &cli.command
    {
        session.check_lease(acquire.lease)?;
    }
    match cli.command {
        Command::Run(args) => {
            session.check_new_name(&args.name)?;
            let (name, json, semaphore) = (args.name.clone(), args.json, args.semaphore);
            let ran = if semaphore {
                match sync::run_semaphore(&session, args).await {
                    Err(f) => Err(inspect::named_wrong_type(&session, &name, "semaphore", f).await),
                    done => done,
                }
            } else {
                run::run(&session, args).await
            };
            if json {
                run::say_finished(&name, semaphore, &ran);
            }
            ran
        }
        Command::Hold(args) => {
            session.check_new_name(&args.name)?;
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
        Command::Top(args) => top::top(&session, args).await,
        Command::Latch(args) => counters::latch(&session, args).await,
        Command::Semaphore(args) => counters::semaphore(&session, args).await,
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
    let rendered = e.render().to_string();
    let mut line = first_paragraph(&rendered);
    for tip in similar_tips(&rendered) {
        line = format!("{line}; {tip}");
    }
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(hint) = double_dash_hint(&e, &args) {
        line = format!("{line}; {hint}");
    }
    if e.kind() == ErrorKind::InvalidSubcommand {
        line = format!("{line}; the subcommands are {}", subcommands());
    }
    note(format!("{line} (see --help)"));
    std::process::exit(outcome::USAGE);
}

/// The subcommands' names, comma-separated, as `--help` lists them.
fn subcommands() -> String {
    use clap::CommandFactory;
    let names: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| c.get_name().to_string())
        .collect();
    names.join(", ")
}

/// For a `run` whose command was typed without `--` before it (`lockwarden run job
/// ./x.sh -v`): the same line with `--` put in, since clap's own words ("unexpected
/// argument './x.sh'") do not say what to do. For `--watchdog-lease` where it is
/// not taken: where it goes. `None` for any other mistake.
fn double_dash_hint(e: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) {
            if bad == "--watchdog-lease" {
                // Taken anywhere, it would do nothing outside run/hold.
                return Some(
                    "--watchdog-lease is an option of run and hold only, after the \
                     subcommand (lockwarden run NAME --watchdog-lease 10s -- COMMAND)"
                        .into(),
                );
            }
        }
    }
    let run_at = args.iter().position(|a| a == "run")?;
    if args.iter().any(|a| a == "--") {
        return None;
    }
    // From `run` on (options before it are not the point), passwords hidden.
    let shown = |words: &[String]| {
        let quoted: Vec<String> = words[run_at..]
            .iter()
            .map(|w| shell_quote(&session::redact(w)))
            .collect();
        format!("lockwarden {}", quoted.join(" "))
    };
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else {
                return None;
            };
            // A mistyped option (`--wiat`) is not a command; clap's error is enough.
            if bad.starts_with('-') {
                return None;
            }
            let at = run_at + 1 + args[run_at + 1..].iter().position(|a| a == bad)?;
            let mut fixed = args.to_vec();
            fixed.insert(at, "--".into());
            Some(format!(
                "the command to run goes after `--`: {}",
                shown(&fixed)
            ))
        }
        ErrorKind::MissingRequiredArgument => {
            let missing = e.get(ContextKind::InvalidArg)?.to_string();
            missing.contains("COMMAND").then(|| {
                format!(
                    "give the command to run after `--`: {} -- COMMAND [ARGS...]",
                    shown(args)
                )
            })
        }
        _ => None,
    }
}

/// `word` as a shell would need it typed: as is when it is plain, else in single
/// quotes.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Clap's "a similar argument exists: '--wait'" tips, which [`first_paragraph`]
/// leaves out; its "to pass '--wiat' as a value, use '-- --wiat'" is left out
/// too, since an option is hardly ever meant as the command's first word.
fn similar_tips(rendered: &str) -> Vec<&str> {
    rendered
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tip: "))
        .filter(|tip| tip.contains("similar"))
        .collect()
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
/// Field values are escaped as the command's own messages are (a lock name read
/// from Redis with a newline or an escape sequence in it stays on its line).
fn init_tracing(verbose: u8) {
    use std::io::IsTerminal;
    use tracing_subscriber::field::MakeExt;
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
    let fields = tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        let text = outcome::printable(&text);
        match field.name() {
            "message" => write!(w, "{text}"),
            name => write!(w, "{name}={text}"),
        }
    })
    .delimited(" ");
    tracing_subscriber::fmt()
        .fmt_fields(fields)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn hint(args: &[&str]) -> Option<String> {
        let mut argv = vec!["lockwarden"];
        argv.extend_from_slice(args);
        let e = Cli::try_parse_from(&argv).expect_err("refused");
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        double_dash_hint(&e, &args)
    }

    #[test]
    fn a_command_without_double_dash_gets_a_hint() {
        assert_eq!(
            hint(&["run", "job", "./x.sh", "-v"]).as_deref(),
            Some("the command to run goes after `--`: lockwarden run job -- ./x.sh -v")
        );
        assert_eq!(
            hint(&["run", "job", "--wait", "5s", "echo", "a b"]).as_deref(),
            Some("the command to run goes after `--`: lockwarden run job --wait 5s -- echo 'a b'")
        );
        let missing = hint(&["run", "job"]).expect("a hint");
        assert!(
            missing.contains("lockwarden run job -- COMMAND"),
            "{missing}"
        );
        assert_eq!(hint(&["run", "job", "--wiat", "5s", "--", "x"]), None);
        assert_eq!(
            hint(&[
                "--redis",
                "redis://u:pw@h",
                "run",
                "j",
                "x",
                "--redis",
                "redis://u:pw@h"
            ])
            .as_deref(),
            Some(
                "the command to run goes after `--`: lockwarden run j -- x --redis 'redis://u:***@h'"
            )
        );
        assert_eq!(hint(&["status", "a", "b"]), None);
        let misplaced = hint(&["--watchdog-lease", "5s", "status", "a"]).expect("a hint");
        assert!(
            misplaced.contains("option of run and hold only"),
            "{misplaced}"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_similar_option_is_suggested() {
        let e = Cli::try_parse_from(["lockwarden", "run", "j", "--wiat", "1s", "--", "x"])
            .expect_err("refused");
        let rendered = e.render().to_string();
        assert_eq!(
            similar_tips(&rendered),
            ["a similar argument exists: '--wait'"]
        );
    }

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
