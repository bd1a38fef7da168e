//! The chaos suite's tables, the locks' and the semaphores', and their places in
//! docs/faults.md (each between its markers, replaced by each run that writes it).

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
/// settings, each between its markers.
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
        let text = format!(
            "{about}: {} workers on {} locks, \
             each a `lockwarden run` with `--wait 20s`, `--watchdog-lease {}s` and a 50 ms \
             section; {} s of undisturbed running after each fault. Each row is the window \
             from its fault to the next one. Blind time: the longest stretch in the window \
             in which nobody held a lock that workers were waiting for.\n\n{table}",
            settings.workers,
            settings.locks,
            settings.lease.as_secs(),
            settings.quiet.as_secs()
        );
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
