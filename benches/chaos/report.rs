//! The chaos suite's tables, the locks' and the semaphores', and their places in
//! docs/faults.md (each between its markers). The locks' table is merged: the
//! rows of the topologies that ran replace theirs, the others' rows stay as an
//! earlier run left them, and the list of runs above the table says which run
//! each topology's rows come from. The semaphores' table is one topology's, so
//! a run that has it replaces it whole.

use std::time::Duration;

use super::semaphores::{self, SemRow};
use super::topologies::Row;
use super::Settings;

const BEGIN: &str = "<!-- chaos:begin -->";
const END: &str = "<!-- chaos:end -->";
const SEM_BEGIN: &str = "<!-- chaos-semaphore:begin -->";
const SEM_END: &str = "<!-- chaos-semaphore:end -->";

/// The table, in Markdown.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| topology | fault | holds | overlaps | unordered overlaps | untold losses | tokens backwards | stuck waiters | blind time (ms) | exits (code:runs) |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let v = &r.verdict;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.topology,
            r.fault,
            v.holds,
            v.overlaps,
            v.unordered,
            v.untold,
            v.backwards,
            v.stuck,
            v.blind_ms,
            v.exits_text()
        ));
    }
    out
}

/// The semaphore stall's table, in Markdown.
pub fn semaphore_table(rows: &[SemRow]) -> String {
    let windows = semaphores::windows().join(" / ");
    let mut out = format!(
        "| semaphore ({} permits) | holds | most holders at once ({windows}) | permits left | taken by nobody | exits (code:runs) |\n\
         |---|---:|---|---:|---:|---|\n",
        semaphores::PERMITS
    );
    for r in rows {
        let most: Vec<String> = r.most.iter().map(|m| m.to_string()).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.kind,
            r.holds,
            most.join(" / "),
            r.available,
            r.taken,
            r.exits_text()
        ));
    }
    out
}

/// Writes the tables that ran into docs/faults.md with the run's date and
/// settings, each between its markers; the locks' table merged with the rows
/// of the topologies that did not run.
pub fn write_docs(
    table: Option<&str>,
    sem_table: Option<&str>,
    settings: &Settings,
    took: Duration,
) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/faults.md");
    let Ok(mut doc) = std::fs::read_to_string(path) else {
        eprintln!("chaos: cannot read {path}; the tables are not written");
        return;
    };
    let about = run_text(took);
    if let Some(table) = table {
        let run = format!(
            "{about}: {} workers on {} locks, `--watchdog-lease {}s`, {} s of undisturbed \
             running after each fault",
            settings.workers,
            settings.locks,
            settings.lease.as_secs(),
            settings.quiet.as_secs()
        );
        let old = between(&doc, BEGIN, END).unwrap_or_default();
        let text = merged(old, table, &run);
        doc = replace_between(&doc, BEGIN, END, &text).unwrap_or(doc);
    }
    if let Some(table) = sem_table {
        let text = format!(
            "{about}: {} workers, each a `lockwarden run --semaphore --permits {}` \
             with `--wait 20s`, `--watchdog-lease {}s` and a 50 ms section, on one server \
             frozen (SIGSTOP) in turn for each window; {} s of undisturbed running after \
             each freeze. Permits left and taken by nobody: read once every process had \
             exited and its give-backs had landed.\n\n{table}",
            settings.workers,
            semaphores::PERMITS,
            settings.lease.as_secs(),
            settings.quiet.as_secs()
        );
        doc = replace_between(&doc, SEM_BEGIN, SEM_END, &text).unwrap_or(doc);
    }
    if let Err(err) = std::fs::write(path, doc) {
        eprintln!("chaos: cannot write {path}: {err}");
    }
}

/// What the locks' table says above its rows, whichever runs they come from.
const LOCKS_ABOUT: &str = "Each worker is a `lockwarden run` with `--wait 20s` and a 50 ms \
    section. Each row is the window from its fault to the next one. Blind time: the longest \
    stretch in the window in which nobody held a lock that workers were waiting for. A run may \
    cover some topologies only (`LOCKWARDEN_CHAOS_TOPOLOGIES`): it replaces their rows and \
    leaves the others' as they were. The rows of each topology come from:";

/// The order of the topologies in the table; others follow as they come.
const ORDER: [&str; 4] = ["standalone", "sentinel", "cluster", "redlock"];

/// The locks' text between the markers: `old` (what was there) with the rows
/// of the topologies in `table` (this run's, in Markdown) replaced, and `run`
/// named as where they come from.
fn merged(old: &str, table: &str, run: &str) -> String {
    let new = rows_of(table);
    let mut ran: Vec<&str> = Vec::new();
    for (topology, _) in &new {
        if !ran.contains(topology) {
            ran.push(topology);
        }
    }
    let mut runs: Vec<(Vec<&str>, &str)> = runs_of(old)
        .into_iter()
        .map(|(topologies, text)| {
            let left: Vec<&str> = topologies
                .into_iter()
                .filter(|t| !ran.contains(t))
                .collect();
            (left, text)
        })
        .filter(|(topologies, _)| !topologies.is_empty())
        .collect();
    runs.push((ran.clone(), run));
    let kept: Vec<(&str, &str)> = rows_of(old)
        .into_iter()
        .filter(|(topology, _)| !ran.contains(topology))
        .collect();
    let mut topologies: Vec<&str> = ORDER.to_vec();
    for (topology, _) in kept.iter().chain(&new) {
        if !topologies.contains(topology) {
            topologies.push(topology);
        }
    }
    let mut out = format!("{LOCKS_ABOUT}\n\n");
    for (topologies, text) in &runs {
        out.push_str(&format!("- {}: {text}.\n", topologies.join(", ")));
    }
    out.push('\n');
    out.extend(table.lines().take(2).map(|l| format!("{l}\n")));
    for topology in topologies {
        for (_, line) in kept.iter().chain(&new).filter(|(t, _)| *t == topology) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The rows of a Markdown table in `text` with their topology (first cell),
/// the header and its rule left out.
fn rows_of(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| topology |"))
        .filter_map(|l| Some((l[1..].split('|').next()?.trim(), l)))
        .collect()
}

/// The list of runs in `text`: `- <topology>, <topology>: <run>.` lines.
fn runs_of(text: &str) -> Vec<(Vec<&str>, &str)> {
    text.lines()
        .filter_map(|l| {
            let (topologies, run) = l.strip_prefix("- ")?.split_once(": Run of ")?;
            let run = &l[l.len() - run.len() - "Run of ".len()..];
            Some((
                topologies.split(", ").collect(),
                run.strip_suffix('.').unwrap_or(run),
            ))
        })
        .collect()
}

/// The text between `begin` and `end` in `doc`, if it has them.
fn between<'a>(doc: &'a str, begin: &str, end: &str) -> Option<&'a str> {
    let b = doc.find(begin)? + begin.len();
    let e = doc.find(end)?;
    doc.get(b..e)
}

/// `doc` with the text between `begin` and `end` replaced by `text`; `None`
/// (said on stderr) when it has no such markers.
fn replace_between(doc: &str, begin: &str, end: &str, text: &str) -> Option<String> {
    let (Some(b), Some(e)) = (doc.find(begin), doc.find(end)) else {
        eprintln!("chaos: docs/faults.md has no {begin} markers; that table is not written");
        return None;
    };
    Some(format!(
        "{}{begin}\n{text}{end}{}",
        &doc[..b],
        &doc[e + end.len()..]
    ))
}

/// "Run of <date> (<server version>; <n> cores), <s> s".
fn run_text(took: Duration) -> String {
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let version = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "Run of {date} ({version}; {} cores), {:.0} s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        took.as_secs_f64()
    )
}
