//! The operators' subcommands' arguments (`status`, `unlock`, `list`, `top`),
//! split from `cli.rs` to keep each file short; `cli.rs` names them in its
//! `Command` enum.

use std::time::Duration;

use clap::Args;

use crate::duration::parse_lease;

/// `lockwarden status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The lock name.
    pub name: String,

    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `lockwarden unlock`.
#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Required: this releases the lock whoever holds it.
    #[arg(long, required = true)]
    pub force: bool,

    /// The lock name.
    pub name: String,

    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(long, short)]
    pub yes: bool,

    /// Print one JSON object on stdout: {"name","unlocked","holders"}.
    #[arg(long)]
    pub json: bool,
}

/// `lockwarden top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Only locks whose names match this glob (Redis MATCH syntax).
    #[arg(long, default_value = "*")]
    pub pattern: String,

    /// Time between refreshes.
    #[arg(long, default_value = "1s", value_name = "DURATION", value_parser = parse_lease)]
    pub interval: Duration,

    /// Stop after this many refreshes (runs until Ctrl-C without it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub iterations: Option<u64>,

    /// On a terminal, show at most this many locks.
    #[arg(long, default_value = "40", value_name = "N")]
    pub limit: usize,

    /// One JSON object per refresh on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `lockwarden list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only locks whose names match this glob (Redis MATCH syntax).
    #[arg(long, default_value = "*")]
    pub pattern: String,

    /// Print one JSON object per lock on stdout.
    #[arg(long)]
    pub json: bool,
}
