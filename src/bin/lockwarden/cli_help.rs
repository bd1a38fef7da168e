//! The command line as clap builds it from `cli.rs`, with one change: the
//! Sentinel, Cluster and start-up options are shown once, in `lockwarden
//! --help`, not in every subcommand's help (each would repeat nine long
//! paragraphs of them), yet still taken before or after the subcommand.

use std::ffi::OsString;

use clap::CommandFactory;

use crate::cli::Cli;

/// The global options a subcommand's help leaves to `lockwarden --help`: the
/// Sentinel, Cluster, replica and start-up options, nine long paragraphs that
/// made `run --help` three screens long. They still work in every position.
const DEPLOYMENT_OPTIONS: [&str; 8] = [
    "sentinels",
    "cluster",
    "master_name",
    "master_password",
    "master_tls",
    "sync_replicas",
    "sync_timeout",
    "connect_timeout",
];

/// The line each subcommand's help ends with instead of those options.
const DEPLOYMENT_NOTE: &str =
    "Sentinel, Cluster and start-up options (--sentinel, --master-name, --master-password,
--master-tls, --cluster, --sync-replicas, --sync-timeout, --connect-timeout): see
`lockwarden --help`; they may be given before or after the subcommand.";

/// The command line as clap sees it, with [`DEPLOYMENT_OPTIONS`] hidden from each
/// subcommand's help (shown once, in the top-level help). A global option is
/// copied into each subcommand when clap builds the command, unless the
/// subcommand has it already; giving each a hidden copy (still global, so its
/// value reaches [`Common`] wherever it is typed) keeps them working after the
/// subcommand and out of its help.
pub fn command() -> clap::Command {
    let top = Cli::command();
    let hidden: Vec<clap::Arg> = top
        .get_arguments()
        .filter(|a| DEPLOYMENT_OPTIONS.contains(&a.get_id().as_str()))
        .map(|a| a.clone().hide(true))
        .collect();
    let mut cmd = top;
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |sc| {
            let after = match sc.get_after_help() {
                Some(text) => format!("{text}\n{DEPLOYMENT_NOTE}"),
                None => DEPLOYMENT_NOTE.to_string(),
            };
            hidden
                .iter()
                .fold(sc, |sc, a| sc.arg(a.clone()))
                .after_help(after)
        });
    }
    cmd
}

/// Parses `args` (the program's name first) with [`command`].
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::FromArgMatches;
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// `run --help` leaves the Sentinel and Cluster options to the top-level
    /// help, which shows them; they still work after the subcommand.
    #[test]
    fn deployment_options_are_shown_once_and_work_anywhere() {
        let help = |args: &[&str]| {
            let mut argv = vec!["lockwarden"];
            argv.extend_from_slice(args);
            parse_from(argv).expect_err("help").to_string()
        };
        let run = help(&["run", "--help"]);
        assert!(!run.contains("--master-password <PASSWORD>"), "{run}");
        assert!(run.contains("lockwarden --help"), "{run}");
        assert!(run.contains("--redis <URL>"), "{run}");
        let top = help(&["--help"]);
        assert!(top.contains("--master-password <PASSWORD>"), "{top}");
        for flag in [
            "--sentinel <URL>",
            "--cluster <URL>",
            "--master-name <NAME>",
            "--master-tls <yes|no>",
            "--sync-replicas <N>",
            "--sync-timeout <DURATION>",
            "--connect-timeout <DURATION>",
        ] {
            assert!(!run.contains(flag), "{flag} in run --help");
            assert!(top.contains(flag), "{flag} not in --help");
        }
        for argv in [
            &[
                "lockwarden",
                "--sentinel",
                "redis://s:26379",
                "--master-name",
                "m",
                "status",
                "a",
            ][..],
            &[
                "lockwarden",
                "status",
                "a",
                "--sentinel",
                "redis://s:26379",
                "--master-name",
                "m",
            ][..],
        ] {
            let cli = parse_from(argv).expect("parses");
            assert_eq!(cli.common.sentinels, ["redis://s:26379"], "{argv:?}");
            assert_eq!(cli.common.master_name.as_deref(), Some("m"), "{argv:?}");
        }
        let cli = parse_from([
            "lockwarden",
            "list",
            "--cluster",
            "redis://a:1,redis://b:2",
            "--connect-timeout",
            "3s",
        ])
        .expect("parses");
        assert_eq!(cli.common.cluster.len(), 2);
        assert_eq!(cli.common.connect_timeout, Some(Duration::from_secs(3)));
    }
}
