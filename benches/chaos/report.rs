//! The chaos suite's table, and its place in docs/faults.md (between the chaos
//! markers, replaced by each run that writes).

use std::time::Duration;

use super::topologies::Row;
use super::Settings;

const BEGIN: &str = "<!-- chaos:begin -->";
const END: &str = "<!-- chaos:end -->";

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

/// Writes `table` into docs/faults.md with the run's date and settings.
pub fn write_docs(table: &str, settings: &Settings, took: Duration) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/faults.md");
    let Ok(doc) = std::fs::read_to_string(path) else {
        eprintln!("chaos: cannot read {path}; the table is not written");
        return;
    };
    let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
        eprintln!("chaos: {path} has no chaos markers; the table is not written");
        return;
    };
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
    let section = format!(
        "{BEGIN}\nRun of {date} ({version}; {} cores), {:.0} s: {} workers on {} locks, \
         each a `lockwarden run` with `--wait 20s`, `--watchdog-lease {}s` and a 50 ms \
         section; {} s of undisturbed running after each fault. Each row is the window \
         from its fault to the next one. Blind time: the longest stretch in the window \
         in which nobody held a lock that workers were waiting for.\n\n{table}{END}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        took.as_secs_f64(),
        settings.workers,
        settings.locks,
        settings.lease.as_secs(),
        settings.quiet.as_secs()
    );
    let updated = format!("{}{}{}", &doc[..b], section, &doc[e + END.len()..]);
    if let Err(err) = std::fs::write(path, updated) {
        eprintln!("chaos: cannot write {path}: {err}");
    }
}
