//! Scenario P, a fleet: scenario B's loop with every client a separate OS process,
//! as the workers of a real deployment are. Waiters of one process share its
//! client (one lockwarden manager, or one raw-EVALSHA connection pair); the
//! processes share nothing but Redis.
//!
//! In-process managers (scenario B's m = 4) share one thread, so they never race
//! each other the way processes do: a manager's unlock message and another's
//! attempt are handled one after the other by the same runtime. Cross-process
//! fairness and Redis cost are only honest here.
//!
//! The parent re-runs this binary once per member process
//! (`LOCKWARDEN_BENCH_CHILD=fleet`), waits until each has connected and taken and
//! released the lock once (warm-up: scripts loaded, actors started), then tells
//! them all to start at one moment of the wall clock and to stop at another. Each
//! child writes every hold it made (asked, got, release called, release returned)
//! in nanoseconds of the wall clock, which all processes of one machine share;
//! the parent replays them in order through scenario B's tracker
//! ([`contended::replay`]), so handoffs between processes are timed as in B.
//!
//! A member may be another implementation than the rest: "lockwarden+raw" puts
//! raw-EVALSHA processes (lockwarden's scripts with no actors, as a Redisson
//! client on the same lock would run them) beside lockwarden's, to see that the
//! foreign side gets its share.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::clients::{Client, Impl};
use crate::contended::{self, Cell, Hold};
use crate::probe::Probe;

/// One process of a fleet.
#[derive(Debug, Clone, Copy)]
pub struct Member {
    /// Its implementation.
    pub which: Impl,
    /// How many waiters it runs.
    pub waiters: usize,
}

/// The shape of one fleet cell: `procs` processes sharing `waiters` waiters, the
/// last `foreign` of them raw-EVALSHA processes when `base` is lockwarden.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fleet {
    /// Waiters in all.
    pub waiters: usize,
    /// Processes in all.
    pub procs: usize,
    /// Implementation of the first `procs - foreign` processes.
    pub base: Impl,
    /// Trailing processes that run raw EVALSHA.
    pub foreign: usize,
}

impl Fleet {
    /// The name of its implementation column.
    pub fn label(&self) -> String {
        if self.foreign == 0 {
            self.base.name().to_string()
        } else {
            format!("{}+{}", self.base.name(), Impl::Raw.name())
        }
    }

    /// Its processes, waiters dealt out as evenly as they go.
    pub fn members(&self) -> Vec<Member> {
        (0..self.procs)
            .map(|p| Member {
                which: if p >= self.procs - self.foreign {
                    Impl::Raw
                } else {
                    self.base
                },
                waiters: self.waiters / self.procs + usize::from(p < self.waiters % self.procs),
            })
            .collect()
    }

    /// How many waiters the foreign processes run (the last ones in a cell's
    /// per-waiter counts).
    pub fn foreign_waiters(&self) -> usize {
        self.members()
            .iter()
            .skip(self.procs - self.foreign)
            .map(|m| m.waiters)
            .sum()
    }
}

/// Nanoseconds since the epoch of the wall clock, shared by every process here.
fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A started child and the reader of what it prints.
struct Running {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Running {
    /// The next line that starts with `prefix`, without it.
    fn expect(&mut self, prefix: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.out.read_line(&mut line).expect("read a fleet child");
            assert!(n > 0, "a fleet child ended before saying {prefix}");
            if let Some(rest) = line.trim_end().strip_prefix(prefix) {
                return rest.to_string();
            }
        }
    }
}

/// The parent's side: runs one cell of `fleet` on `url` for `length`.
pub fn run(fleet: Fleet, url: &str, shape: contended::Shape, length: Duration, tag: &str) -> Cell {
    let exe = std::env::current_exe().expect("path of the bench binary");
    let key = format!("bench:p:{tag}");
    let mut children: Vec<Running> = fleet
        .members()
        .iter()
        .map(|m| {
            let mut child = Command::new(&exe)
                .env("LOCKWARDEN_BENCH_CHILD", "fleet")
                .env("LOCKWARDEN_BENCH_CHILD_URL", url)
                .env("LOCKWARDEN_BENCH_CHILD_KEY", &key)
                .env("LOCKWARDEN_BENCH_CHILD_IMPL", m.which.name())
                .env("LOCKWARDEN_BENCH_CHILD_WAITERS", m.waiters.to_string())
                .env("LOCKWARDEN_BENCH_CHILD_HOLD_US", micros(shape.hold))
                .env("LOCKWARDEN_BENCH_CHILD_PAUSE_US", micros(shape.pause))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start a fleet child");
            let out = BufReader::new(child.stdout.take().expect("child stdout"));
            Running { child, out }
        })
        .collect();
    for c in &mut children {
        c.expect("READY");
    }
    let system = actix_rt::System::new();
    let mut probe = system.block_on(Probe::connect(url));
    // Far enough ahead that every child has read its line before the start.
    let start = wall_ns() + 50_000_000;
    let end = start + u64::try_from(length.as_nanos()).unwrap_or(u64::MAX);
    for c in &mut children {
        let stdin = c.child.stdin.as_mut().expect("child stdin");
        writeln!(stdin, "GO {start} {end}").expect("start a fleet child");
    }
    std::thread::sleep(Duration::from_nanos(start.saturating_sub(wall_ns())));
    let before = system.block_on(probe.snapshot());
    std::thread::sleep(Duration::from_nanos(end.saturating_sub(wall_ns())));
    let after = system.block_on(probe.snapshot());

    // Wall-clock nanoseconds to the parent's Instants, so that scenario B's
    // tracker can replay the holds.
    let (base_ns, base) = (wall_ns(), Instant::now());
    let at = |ns: u64| {
        if ns >= base_ns {
            base + Duration::from_nanos(ns - base_ns)
        } else {
            base - Duration::from_nanos(base_ns - ns)
        }
    };
    let mut holds = Vec::new();
    let mut first = 0;
    for (c, m) in children.iter_mut().zip(fleet.members()) {
        let report: Value = serde_json::from_str(&c.expect("CHILD ")).expect("child JSON");
        for h in report["holds"].as_array().into_iter().flatten() {
            let n = |i: usize| h[i].as_u64().unwrap_or(0);
            holds.push(Hold {
                waiter: first + n(0) as usize,
                asked: at(n(1)),
                got: at(n(2)),
                called: (n(3) > 0).then(|| at(n(3))),
                returned: (n(4) > 0).then(|| at(n(4))),
            });
        }
        first += m.waiters;
        let _ = c.child.wait();
    }
    let redis = before.delta(&after, Impl::Raw.top_level());
    contended::replay(fleet.waiters, holds, length, redis)
}

/// A duration as whole microseconds, for a child's environment.
fn micros(d: Duration) -> String {
    d.as_micros().to_string()
}

/// Reads a child's setting.
fn setting(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set for the fleet child"))
}

/// The child's side: connects, warms up, says `READY`, runs its waiters between
/// the times the parent sends, then prints `CHILD {"holds": [...]}`.
pub fn child_main() {
    let url = setting("LOCKWARDEN_BENCH_CHILD_URL");
    let key = setting("LOCKWARDEN_BENCH_CHILD_KEY");
    let name = setting("LOCKWARDEN_BENCH_CHILD_IMPL");
    let which = Impl::ALL
        .into_iter()
        .chain(Impl::OPTIONAL)
        .find(|i| i.name() == name)
        .unwrap_or_else(|| panic!("unknown implementation {name}"));
    let number = |n: &str| setting(n).parse::<u64>().expect("a number");
    let waiters = number("LOCKWARDEN_BENCH_CHILD_WAITERS") as usize;
    let hold = Duration::from_micros(number("LOCKWARDEN_BENCH_CHILD_HOLD_US"));
    let pause = Duration::from_micros(number("LOCKWARDEN_BENCH_CHILD_PAUSE_US"));

    let holds = actix_rt::System::new().block_on(async move {
        let client = Rc::new(Client::connect(which, &url, Some(&key)).await);
        let held = client.acquire(&key).await;
        client.release(held).await;
        println!("READY");
        let mut line = String::new();
        // A blocking read: nothing else runs in this process until the start.
        std::io::stdin()
            .read_line(&mut line)
            .expect("the parent's start line");
        let times: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        let [start, end] = times[..] else {
            panic!("bad start line {line:?}");
        };
        let records = Rc::new(std::cell::RefCell::new(Vec::new()));
        actix_rt::time::sleep(Duration::from_nanos(start.saturating_sub(wall_ns()))).await;
        for w in 0..waiters {
            let (client, key, records) = (client.clone(), key.clone(), records.clone());
            actix_rt::spawn(async move {
                loop {
                    let asked = wall_ns();
                    let held = client.acquire(&key).await;
                    let got = wall_ns();
                    if got >= end {
                        break;
                    }
                    contended::precise_sleep(hold).await;
                    let called = wall_ns();
                    client.release(held).await;
                    let returned = wall_ns();
                    records
                        .borrow_mut()
                        .push([w as u64, asked, got, called, returned]);
                    contended::precise_sleep(pause).await;
                }
            });
        }
        actix_rt::time::sleep(Duration::from_nanos(end.saturating_sub(wall_ns()))).await;
        let records = records.borrow().clone();
        records
    });
    // A hold still under way at the end counts as acquired, its release unknown:
    // those are not recorded above, so every recorded hold is whole.
    println!("CHILD {}", json!({ "holds": holds }));
    // Locks still held die with the process; the parent flushes Redis before the
    // next cell.
    std::process::exit(0);
}
