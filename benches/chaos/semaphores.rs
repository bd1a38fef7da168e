//! The chaos suite's semaphore stall (issue 45): a fleet of `lockwarden run
//! --semaphore --permits 2` processes (plain, `--fair`, `--expirable`) on one
//! server frozen with SIGSTOP for 1.5 s, 4 s and 14 s in turn. A change sent to
//! the frozen server waits there and runs when it resumes, after the sender's
//! response timeout; a retry must not make it count twice. Judged from the
//! children's own sections (the most that ran at once, per window: never more
//! than the permits) and from the semaphore once the fleet has stopped and every
//! give-back has landed (exactly its permits available, none left taken).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::history::Run;
use super::support::RedisServer;
use super::workers::{lock_name, now_ns, Fleet};
use super::Settings;

/// The semaphore's permits (`--permits`).
pub const PERMITS: i64 = 2;

/// The freezes, in order, each followed by `Settings::quiet` of running.
const FREEZES: [(&str, Duration); 3] = [
    ("1.5 s", Duration::from_millis(1500)),
    ("4 s", Duration::from_secs(4)),
    ("14 s", Duration::from_secs(14)),
];

/// The windows' names, warm-up first: the table's header says them.
pub fn windows() -> Vec<&'static str> {
    std::iter::once("warm-up")
        .chain(FREEZES.iter().map(|(name, _)| *name))
        .collect()
}

/// One line of the semaphore table: one kind through every freeze.
#[derive(Debug)]
pub struct SemRow {
    pub kind: &'static str,
    pub holds: usize,
    /// The most sections at once in each window (warm-up, then each freeze's).
    pub most: Vec<usize>,
    /// Permits available, and taken (`{name}:timeout`, the permit-expirable
    /// kind's), once the fleet stopped and every give-back landed.
    pub available: i64,
    pub taken: i64,
    /// Runs by exit code.
    pub exits: BTreeMap<i32, usize>,
}

impl SemRow {
    /// Never more holders than permits, and exactly the permits back.
    pub fn safe(&self) -> bool {
        self.most.iter().all(|&m| m as i64 <= PERMITS)
            && self.available == PERMITS
            && self.taken == 0
    }

    /// `code:runs ...`.
    pub fn exits_text(&self) -> String {
        let parts: Vec<String> = self.exits.iter().map(|(c, n)| format!("{c}:{n}")).collect();
        parts.join(" ")
    }
}

/// Each kind of semaphore through the freezes, on a server of its own.
pub fn semaphores(settings: &Settings) -> Vec<SemRow> {
    [
        ("plain", None),
        ("fair", Some("--fair")),
        ("expirable", Some("--expirable")),
    ]
    .into_iter()
    .map(|(kind, flag)| one_kind(settings, kind, flag))
    .collect()
}

fn one_kind(settings: &Settings, kind: &'static str, flag: Option<&str>) -> SemRow {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut plan = settings.plan(vec!["--redis".into(), server.url()], dir.path());
    plan.locks = 1;
    plan.run_flags = ["--semaphore", "--permits", &PERMITS.to_string()]
        .into_iter()
        .map(String::from)
        .chain(flag.map(String::from))
        .collect();
    let fleet = Fleet::start(&plan);
    let mut marks = vec![now_ns()];
    std::thread::sleep(settings.quiet);
    for (name, freeze) in FREEZES {
        eprintln!("chaos: semaphore ({kind}): server frozen {name} (SIGSTOP)");
        marks.push(now_ns());
        server.pause();
        std::thread::sleep(freeze);
        server.resume();
        std::thread::sleep(settings.quiet);
    }
    let runs = fleet.stop(plan.wait + plan.lease + Duration::from_secs(10));
    let name = lock_name(0);
    let read = || -> (i64, i64) {
        let mut conn = server.conn();
        let available: Option<i64> = redis::cmd("GET")
            .arg(&name)
            .query(&mut conn)
            .unwrap_or_default();
        let taken: i64 = redis::cmd("ZCARD")
            .arg(format!("{{{name}}}:timeout"))
            .query(&mut conn)
            .unwrap_or_default();
        (available.unwrap_or(0), taken)
    };
    // Every process has exited: what it gave back is in Redis, or on its way
    // (a copy that waited at the frozen server). Wait for the permits (more,
    // when a give-back counted twice), then look again a second later.
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && !matches!(read(), (a, 0) if a >= PERMITS) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let (available, taken) = read();
    let mut exits = BTreeMap::new();
    for r in &runs {
        if let Some(code) = r.exit {
            *exits.entry(code).or_insert(0) += 1;
        }
    }
    SemRow {
        kind,
        holds: runs.iter().filter(|r| r.section.is_some()).count(),
        most: most_at_once(&runs, &marks),
        available,
        taken,
        exits,
    }
}

/// The most sections running at once in each window (from each mark to the
/// next, the last to the end): counted at each section's start, in the window
/// it starts in. A section without an end (its command killed) lasts until its
/// run ended.
fn most_at_once(runs: &[Run], marks: &[u64]) -> Vec<usize> {
    let mut events: Vec<(u64, i64)> = runs
        .iter()
        .filter_map(|r| {
            let s = r.section?;
            Some([(s.start, 1), (s.end.unwrap_or(r.done), -1)])
        })
        .flatten()
        .collect();
    // At one instant an end comes before a start: they do not overlap.
    events.sort();
    let mut most = vec![0usize; marks.len()];
    let mut now = 0i64;
    for (at, step) in events {
        now += step;
        if step > 0 {
            let window = marks.iter().rposition(|&m| m <= at).unwrap_or(0);
            most[window] = most[window].max(now as usize);
        }
    }
    most
}
