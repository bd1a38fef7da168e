//! What a chaos run checks: the history of every critical section the workers ran,
//! judged per fault.
//!
//! A worker's section is what its `lockwarden run` child did between taking the
//! lock and giving it back: the child writes `start <token> <ns>` and `end <token>
//! <ns>` (wall clock, one machine, so every worker's times compare). The command's
//! exit code says what the worker was told: 0 (it held the lock throughout), 76 (the
//! lock was lost while held: told), 75 (the wait ran out), a signal (killed by the
//! suite). From these the judge counts what must never happen:
//!
//! - an **overlap**: two sections of one lock at once. Allowed only when the later
//!   holder's token is higher *and* the earlier one was told it lost the lock (or
//!   is dead), since that is exactly what fencing tokens are for;
//! - an **unordered overlap**: the later holder's token is not higher;
//! - an **untold loss**: an overlap whose earlier holder exited 0, believing it held
//!   the lock throughout;
//! - a **token going backwards**: a section that starts after another on the same
//!   lock with a lower token;
//! - a **stuck waiter**: a run that lasted longer than its wait plus a slack;
//!
//! and what it costs: the **blind time** after a fault, per lock, the longest
//! stretch in which nobody held the lock although workers were waiting for it (they
//! always are: each worker asks again the moment its run ends).

use std::collections::BTreeMap;
use std::time::Duration;

/// One run of `lockwarden run` by one worker.
#[derive(Debug, Clone)]
pub struct Run {
    /// Which lock (index) it asked for.
    pub lock: usize,
    /// When it was started and when it exited, ns since the epoch.
    pub asked: u64,
    pub done: u64,
    /// Its exit code (128 + n for a signal), `None` if it never exited.
    pub exit: Option<i32>,
    /// The section its child ran, if it got the lock.
    pub section: Option<Section>,
}

/// A critical section: from the child's `start` line to its `end` line (none if
/// the child was killed inside it).
#[derive(Debug, Clone, Copy)]
pub struct Section {
    pub token: u64,
    pub start: u64,
    pub end: Option<u64>,
}

impl Section {
    /// Reads a child's two lines; `None` if it never started.
    pub fn parse(text: &str) -> Option<Section> {
        let mut section: Option<Section> = None;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (what, token, at) = (words.next(), words.next(), words.next());
            let (Some(token), Some(at)) = (
                token.and_then(|t| t.parse().ok()),
                at.and_then(|a| a.parse().ok()),
            ) else {
                continue;
            };
            match what {
                Some("start") => {
                    section = Some(Section {
                        token,
                        start: at,
                        end: None,
                    })
                }
                Some("end") => {
                    if let Some(s) = section.as_mut() {
                        s.end = Some(at);
                    }
                }
                _ => {}
            }
        }
        section
    }
}

/// What was found in one window of the history.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    pub holds: usize,
    pub overlaps: usize,
    pub unordered: usize,
    pub untold: usize,
    pub backwards: usize,
    pub stuck: usize,
    /// Longest time after the window's start with nobody holding a lock, ms.
    pub blind_ms: u64,
    /// Runs by exit code.
    pub exits: BTreeMap<i32, usize>,
}

impl Verdict {
    /// Whether nothing unsafe was seen.
    pub fn safe(&self) -> bool {
        self.unordered == 0 && self.untold == 0 && self.backwards == 0 && self.stuck == 0
    }

    /// "0:12 75:1 137:1".
    pub fn exits_text(&self) -> String {
        let parts: Vec<String> = self.exits.iter().map(|(c, n)| format!("{c}:{n}")).collect();
        parts.join(" ")
    }
}

/// Judges the runs that started in `[from, to)` (ns), and the blind time of each
/// of `locks` locks from `from` on. `wait` is the workers' `--wait`; a run longer
/// than it plus `slack` is stuck.
pub fn judge(
    runs: &[Run],
    locks: usize,
    from: u64,
    to: u64,
    wait: Duration,
    slack: Duration,
) -> Verdict {
    let mut v = Verdict::default();
    let limit = (wait + slack).as_nanos() as u64;
    for r in runs.iter().filter(|r| r.asked >= from && r.asked < to) {
        *v.exits.entry(r.exit.unwrap_or(-1)).or_default() += 1;
        if r.exit.is_none() || r.done.saturating_sub(r.asked) > limit {
            v.stuck += 1;
        }
    }
    for lock in 0..locks {
        // Every section of this lock, by start time: overlaps with earlier ones
        // are judged against all of them, not only within the window.
        let mut held: Vec<(&Run, Section)> = runs
            .iter()
            .filter(|r| r.lock == lock)
            .filter_map(|r| r.section.map(|s| (r, s)))
            .collect();
        held.sort_by_key(|(_, s)| s.start);
        for (i, (run, s)) in held.iter().enumerate() {
            if s.start < from || s.start >= to {
                continue;
            }
            v.holds += 1;
            for (earlier_run, e) in &held[..i] {
                if s.token < e.token {
                    v.backwards += 1;
                }
                // An earlier section that never ended is cut off at its run's exit.
                let e_end = e.end.unwrap_or(earlier_run.done);
                if e_end > s.start {
                    v.overlaps += 1;
                    if s.token <= e.token {
                        v.unordered += 1;
                    }
                    if earlier_run.exit == Some(0) {
                        v.untold += 1;
                    }
                }
            }
            let _ = run;
        }
        v.blind_ms = v.blind_ms.max(blind(&held, from, to) / 1_000_000);
    }
    v
}

/// The longest stretch in `[from, to)` during which no section of one lock was
/// running: the gaps between sections, and the one from the last section to `to`
/// when nobody took the lock again before the window ended (a lock nobody took
/// within the whole window is blind for all of it).
fn blind(held: &[(&Run, Section)], from: u64, to: u64) -> u64 {
    let mut longest = 0;
    let mut busy_until = from;
    for (run, s) in held {
        let end = s.end.unwrap_or(run.done);
        if s.start < from {
            busy_until = busy_until.max(end);
            continue;
        }
        // Up to the window's end: the rest belongs to the next window's fault.
        let start = s.start.min(to);
        if start > busy_until {
            longest = longest.max(start - busy_until);
        }
        if s.start >= to {
            return longest;
        }
        busy_until = busy_until.max(end);
    }
    // No section started after the window (its topology's last one, after
    // which the fleet stops): the stretch from the last section to the end.
    longest.max(to.saturating_sub(busy_until))
}
