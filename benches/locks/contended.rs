//! Scenario B, contended: W waiters compete for ONE lock. Each holds it ~1 ms,
//! releases, waits ~1 ms, and competes again. The waiters share one client (one
//! lockwarden manager, one connection) or are spread over four.
//!
//! Handoff latency is the time from a release returning to its caller to the next
//! acquisition, by a different waiter, returning to its caller. All waiters run in
//! one process, so one monotonic clock (`Instant`) times both ends. A sample is
//! taken only when the next holder was already waiting when the release was
//! called; an acquisition that found the lock free is not a handoff. Acquisitions are
//! numbered in the order they return (the lock makes holds strictly sequential),
//! so each is paired with the release of the hold just before it, even when that
//! release's reply is processed after the next grant (then the handoff counts as 0).
//!
//! Throughput is compared with the ceiling 1 / (mean hold actually measured): a
//! 1 ms sleep lasts a little longer (thread wake-up, scheduling), so the nominal
//! 1,000/s is out of reach for everyone; acquisitions/s x mean hold is the
//! fraction of time the lock was in a holder's hands.
//!
//! Holds and pauses are slept on a blocking-pool thread, not with a tokio timer:
//! tokio's timers fire on a 1 ms wheel, so every 1 ms hold would end on the same
//! tick as the waiters' own timers (rslock's and the naive client's retry sleeps,
//! the other waiters' pauses), and a poller would find the lock freed exactly when
//! it looks, a coincidence no real critical section produces.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::clients::{Client, Impl};
use crate::probe::{Delta, Probe};
use crate::stats::Samples;

/// Timing of the contended lock, shared by all waiters of a cell.
#[derive(Debug, Default)]
struct Tracker {
    /// Acquisitions so far; the number of the latest one.
    acquisitions: u64,
    /// The latest release: (acquisition number, waiter, when it was called, when
    /// it returned).
    last_release: Option<(u64, usize, Instant, Instant)>,
    /// An acquisition whose predecessor's release has not returned yet:
    /// (number, waiter, when it asked, when it got the lock).
    pending: Option<(u64, usize, Instant, Instant)>,
    /// Handoff samples.
    handoff: Samples,
    /// Acquisitions that found the lock free (no waiter was waiting for it).
    free: u64,
    /// Acquisitions per waiter.
    per_waiter: Vec<u64>,
    /// Sum of hold times (acquire returned -> release called).
    held: Duration,
    /// Holds that ended (the sum above covers these).
    holds: u64,
}

impl Tracker {
    /// Waiter `w`, which asked at `asked`, got the lock at `got`; returns the
    /// acquisition's number.
    fn acquired(&mut self, w: usize, asked: Instant, got: Instant) -> u64 {
        self.acquisitions += 1;
        let n = self.acquisitions;
        self.per_waiter[w] += 1;
        match self.last_release {
            Some((prev, from, called, at)) if prev + 1 == n => {
                self.pair(from, called, at, w, asked, got)
            }
            _ => self.pending = Some((n, w, asked, got)),
        }
        n
    }

    /// Waiter `w`'s release of acquisition `n`, called at `called`, returned at `at`.
    fn released(&mut self, w: usize, n: u64, called: Instant, at: Instant) {
        self.last_release = Some((n, w, called, at));
        if let Some((next, to, asked, got)) = self.pending {
            if next == n + 1 {
                self.pending = None;
                self.pair(w, called, at, to, asked, got);
            }
        }
    }

    /// Records the step from one holder to the next.
    fn pair(
        &mut self,
        from: usize,
        called: Instant,
        released: Instant,
        to: usize,
        asked: Instant,
        got: Instant,
    ) {
        if from == to {
            return; // the same waiter again: not a handoff
        }
        if asked > called {
            self.free += 1; // it came along while the release was under way
            return;
        }
        self.handoff.push(got.saturating_duration_since(released));
    }
}

/// What one cell measured.
#[derive(Debug, Clone, Default)]
pub struct Cell {
    /// Acquisitions within the measured time.
    pub acquisitions: u64,
    /// Measured time.
    pub elapsed: Duration,
    /// Handoff samples.
    pub handoff: Samples,
    /// Acquisitions that found the lock free.
    pub free: u64,
    /// Acquisitions per waiter.
    pub per_waiter: Vec<u64>,
    /// Sum of hold times.
    pub held: Duration,
    /// Holds that ended.
    pub holds: u64,
    /// Redis's side.
    pub redis: Delta,
}

/// The shape of one cell.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Waiters.
    pub waiters: usize,
    /// Clients the waiters are spread over (round robin).
    pub clients: usize,
    /// How long each holds.
    pub hold: Duration,
    /// How long each waits after releasing.
    pub pause: Duration,
}

/// Sleeps `d` on a blocking-pool thread, off tokio's 1 ms timer ticks (see the
/// module documentation).
pub async fn precise_sleep(d: Duration) {
    tokio::task::spawn_blocking(move || std::thread::sleep(d))
        .await
        .expect("sleeping thread");
}

/// Runs one cell for `length`.
pub fn run(which: Impl, url: &str, shape: Shape, length: Duration, tag: &str) -> Cell {
    let url = url.to_string();
    let key = format!("bench:b:{tag}");
    actix_rt::System::new().block_on(async move {
        let mut clients = Vec::new();
        for _ in 0..shape.clients {
            clients.push(Rc::new(Client::connect(which, &url, Some(&key)).await));
        }
        // Warm-up, not measured: scripts loaded, lock actors started.
        for client in &clients {
            let held = client.acquire(&key).await;
            client.release(held).await;
        }
        let tracker = Rc::new(RefCell::new(Tracker {
            per_waiter: vec![0; shape.waiters],
            ..Tracker::default()
        }));
        let mut probe = Probe::connect(&url).await;
        let before = probe.snapshot().await;
        let start = Instant::now();
        let deadline = start + length;
        for w in 0..shape.waiters {
            let client = clients[w % shape.clients].clone();
            let tracker = tracker.clone();
            let key = key.clone();
            actix_rt::spawn(async move {
                loop {
                    let asked = Instant::now();
                    let held = client.acquire(&key).await;
                    let got = Instant::now();
                    if got >= deadline {
                        break; // out of the window: not counted, and the runtime goes soon
                    }
                    let n = tracker.borrow_mut().acquired(w, asked, got);
                    precise_sleep(shape.hold).await;
                    let called = Instant::now();
                    {
                        let mut t = tracker.borrow_mut();
                        t.held += called - got;
                        t.holds += 1;
                    }
                    client.release(held).await;
                    tracker.borrow_mut().released(w, n, called, Instant::now());
                    precise_sleep(shape.pause).await;
                }
            });
        }
        // The waiters still running at the deadline are dropped with the runtime;
        // the keys they hold are flushed before the next cell.
        actix_rt::time::sleep_until(deadline.into()).await;
        let after = probe.snapshot().await;
        let mut t = tracker.borrow_mut();
        Cell {
            acquisitions: t.acquisitions,
            elapsed: length,
            handoff: std::mem::take(&mut t.handoff),
            free: t.free,
            per_waiter: std::mem::take(&mut t.per_waiter),
            held: t.held,
            holds: t.holds,
            redis: before.delta(&after, which.top_level()),
        }
    })
}

/// Most acquisitions by one waiter / fewest (`None` when one starved).
pub fn fairness(per_waiter: &[u64]) -> Option<f64> {
    let max = *per_waiter.iter().max()?;
    let min = *per_waiter.iter().min()?;
    (min > 0).then(|| max as f64 / min as f64)
}

/// One hold as a fleet child recorded it (scenario P), on the parent's clock.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// Which waiter (numbered across the whole cell).
    pub waiter: usize,
    /// When it asked.
    pub asked: Instant,
    /// When it got the lock.
    pub got: Instant,
    /// When it called release, if it did within the cell.
    pub called: Option<Instant>,
    /// When the release returned, if it did within the cell.
    pub returned: Option<Instant>,
}

/// A cell from holds recorded elsewhere (scenario P's processes): they are fed
/// to the tracker in the order they happened, as B's waiters feed it live.
pub fn replay(waiters: usize, holds: Vec<Hold>, length: Duration, redis: Delta) -> Cell {
    // (when, 0 = a release returned / 1 = an acquisition, index into holds)
    let mut events: Vec<(Instant, u8, usize)> = Vec::with_capacity(holds.len() * 2);
    for (i, h) in holds.iter().enumerate() {
        events.push((h.got, 1, i));
        if let Some(at) = h.returned {
            events.push((at, 0, i));
        }
    }
    events.sort();
    let mut t = Tracker {
        per_waiter: vec![0; waiters],
        ..Tracker::default()
    };
    let mut numbers = vec![0u64; holds.len()];
    for (_, kind, i) in events {
        let h = holds[i];
        if kind == 1 {
            numbers[i] = t.acquired(h.waiter, h.asked, h.got);
            if let Some(called) = h.called {
                t.held += called.saturating_duration_since(h.got);
                t.holds += 1;
            }
        } else if let (Some(called), Some(at)) = (h.called, h.returned) {
            t.released(h.waiter, numbers[i], called, at);
        }
    }
    Cell {
        acquisitions: t.acquisitions,
        elapsed: length,
        handoff: t.handoff,
        free: t.free,
        per_waiter: t.per_waiter,
        held: t.held,
        holds: t.holds,
        redis,
    }
}

/// One row of scenario B: all rounds of one (W, clients, implementation) merged.
#[derive(Debug, Clone, Default)]
pub struct Merged {
    /// Acquisitions over all rounds.
    pub acquisitions: u64,
    /// Holds that ended.
    pub holds: u64,
    /// Measured time over all rounds.
    pub elapsed: Duration,
    /// Every handoff sample.
    pub handoff: Samples,
    /// Acquisitions that found the lock free.
    pub free: u64,
    /// Per-waiter acquisitions, summed over rounds.
    pub per_waiter: Vec<u64>,
    /// Sum of hold times.
    pub held: Duration,
    /// Commands over all rounds.
    pub commands: u64,
    /// Top-level commands over all rounds.
    pub top_level: u64,
    /// Redis CPU seconds.
    pub cpu: f64,
    /// `WAIT` calls over all rounds.
    pub waits: u64,
    /// Acquisitions a second of each round.
    pub per_round: Vec<f64>,
}

impl Merged {
    /// Adds one round.
    pub fn add(&mut self, cell: Cell) {
        self.per_round
            .push(cell.acquisitions as f64 / cell.elapsed.as_secs_f64().max(1e-9));
        self.acquisitions += cell.acquisitions;
        self.holds += cell.holds;
        self.elapsed += cell.elapsed;
        self.handoff.extend(cell.handoff);
        self.free += cell.free;
        if self.per_waiter.is_empty() {
            self.per_waiter = vec![0; cell.per_waiter.len()];
        }
        for (sum, n) in self.per_waiter.iter_mut().zip(cell.per_waiter) {
            *sum += n;
        }
        self.held += cell.held;
        self.commands += cell.redis.commands;
        self.top_level += cell.redis.top_level;
        self.cpu += cell.redis.cpu;
        self.waits += cell.redis.waits;
    }

    /// Acquisitions a second.
    pub fn rate(&self) -> f64 {
        self.acquisitions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Mean time a holder kept the lock.
    pub fn mean_hold(&self) -> Duration {
        self.held / u32::try_from(self.holds.max(1)).unwrap_or(u32::MAX)
    }

    /// Acquisitions a second / (1 / mean hold): the share of time the lock was held.
    pub fn ceiling_ratio(&self) -> f64 {
        self.rate() * self.mean_hold().as_secs_f64()
    }

    /// Most acquisitions by one waiter / fewest (`None` when one starved).
    pub fn fairness(&self) -> Option<f64> {
        fairness(&self.per_waiter)
    }

    /// Redis commands (script-internal included) per acquisition.
    pub fn commands_per_acquisition(&self) -> f64 {
        self.commands as f64 / self.acquisitions.max(1) as f64
    }

    /// Top-level commands (requests) per acquisition.
    pub fn requests_per_acquisition(&self) -> f64 {
        self.top_level as f64 / self.acquisitions.max(1) as f64
    }

    /// Redis CPU as a percentage of one core.
    pub fn cpu_percent(&self) -> f64 {
        100.0 * self.cpu / self.elapsed.as_secs_f64().max(1e-9)
    }
}
