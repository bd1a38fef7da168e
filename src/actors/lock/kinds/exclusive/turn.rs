//! Turns between processes on one plain lock: handing it over inside this
//! process, and for how long before the other processes get it.
//!
//! A holder whose process has another waiter for the same lock hands the lock
//! over (`lua/transfer.lua`): one script call gives back the last hold and grants
//! the waiter, without freeing the lock and without an unlock message. That is one
//! round trip where a release and an acquisition were two, and it wakes nobody:
//! with an unlock message per handoff, every other process's waiter woke, asked
//! and found the lock taken again (four managers on one lock cost Redis twice the
//! commands per acquisition of one).
//!
//! Handing over for ever would starve the other processes (measured before turns
//! existed: waiters of other managers with no acquisition in a whole run, and a
//! client of another library on the same lock with 3 holds to lockwarden's 2,500).
//! So handovers come in runs. A run starts when this process takes the lock after
//! another process had it. Its budget is [`ROUNDS`] holds for each local waiter
//! there was then, so every local waiter gets its turns in a run and a process's
//! share follows its number of waiters. When the budget is spent and others listen
//! (the transfer script answers how many subscriptions the unlock channel has; a
//! release, how many heard its message), the next release is a plain one that
//! publishes, and it *yields*: the local head waiter does not ask Redis; the other
//! processes' waiters, woken by the message, take the lock, and this process waits
//! for their unlock message like anyone. If nobody takes it (the other listener was
//! not waiting after all), the head asks anyway after [`FALLBACK`]. Nobody else
//! listening, the run never ends: the lock moves between local owners one round
//! trip each.
//!
//! Woken by another process's unlock message, the head waiter asks after a short
//! random delay ([`JITTER`]) so that no process wins every race by the order in
//! which Redis delivers the message.
//!
//! Only the exclusive lock takes turns (its release and transfer say who listens);
//! the fair lock is FIFO across processes already, and a read-write lock's readers
//! share.

use std::time::{Duration, Instant};

/// How long a yielding process's head waiter holds back before asking Redis
/// itself, in case no other process took the lock. Other processes' waiters,
/// woken by the unlock message, ask within a round trip or two.
pub(in crate::actors::lock) const FALLBACK: Duration = Duration::from_millis(10);

/// Most a woken waiter waits, at random, before asking after another process's
/// unlock message. Redis delivers a message to the subscribers of a channel in a
/// fixed order (on Redis 7.0, the order they subscribed in), and the process that
/// hears first asks first: without a random start, the same process won every
/// race after a yield and a third one never got the lock (`tests/faults/turns.rs`). The
/// first of k contenders waits J/(k+1) on average.
///
/// The size decides the share of a client of another library on the same lock
/// that asks the moment it hears (a Redisson client does): it wins every race it
/// is quicker in, and a lockwarden process that wins one keeps the lock for a run
/// of holds where that client takes one. Smaller delays starved that client,
/// larger ones gave it more than its share; 60 us gave it about its share
/// (measured in `tests/faults/turns.rs`; the numbers are in docs/performance.md,
/// "Why the turn constants are what they are").
pub(super) const JITTER: Duration = Duration::from_micros(60);

/// A wake delay shorter than this is not slept: a thread's sleep is not more
/// precise (and the hop to a blocking thread costs about as much).
pub(super) const PRECISION: Duration = Duration::from_micros(20);

/// Most other processes listening for which a holder keeps the unlock channel
/// subscribed with nobody queued. Keeping it saves a process contending in a
/// loop a SUBSCRIBE and an UNSUBSCRIBE per run. But Redis delivers a message to
/// a channel's subscribers in the order they subscribed, and a process that
/// subscribes again goes to the back of that line: the churn was what kept the
/// line turning. Among many processes on few cores, where the first to be told
/// is also the first to be scheduled, the random start ([`JITTER`]) could not
/// make up for a line that no longer turned. So a process that just held the
/// lock goes to the back of the line when more than this many others listen,
/// and keeps its place when few do. A process with a single waiter saves
/// nothing by keeping it (that waiter is never queued behind a local holder),
/// and paid for it: its own unlock message came back to it, and the
/// UNSUBSCRIBE moved from the hold to just after the release. So only a run
/// that has seen another local waiter keeps it. The measurements behind each of
/// these are in docs/performance.md, "Why the turn constants are what they are".
pub(super) const KEEP_LISTENING: u16 = 3;

/// Holds per local waiter in a run. Each run that ends with others waiting costs
/// a plain release, an acquisition after it and a failed attempt in every other
/// waiting process; more rounds share that among more holds, but make the other
/// processes wait longer. Two rounds cost fewer Redis commands than one, and
/// four no fewer than two (runs then end early anyway, when no local waiter is
/// queued at a release): docs/performance.md, "Why the turn constants are what
/// they are".
const ROUNDS: u16 = 2;

/// The current run of local holds; see the module documentation. Small: a lock
/// actor lives as long as its lock is held.
#[derive(Debug, Default)]
pub(super) struct Turn {
    /// Holds in a row in this process since another process last held the lock.
    run: u16,
    /// How many holds this run may have before a release yields.
    budget: u16,
    /// How many other processes listened on the unlock channel at the last
    /// release or handover.
    others: u16,
    /// Yielding: the head waiter does not ask Redis before this, unless another
    /// process's unlock message or a busy answer ends the yield first.
    until: Option<Instant>,
    /// Redis refused a handover (the user may not run PUBSUB NUMSUB): this lock
    /// releases plainly from now on.
    pub(super) refused: bool,
    /// This run has seen another local waiter (queued at a grant, or handed the
    /// lock): only then does keeping the channel subscribed while holding save
    /// anything (see [`KEEP_LISTENING`]).
    crowded: bool,
}

impl Turn {
    /// A local waiter was granted the lock; `waiting` others wait here.
    pub(super) fn granted(&mut self, waiting: usize) {
        if self.run == 0 {
            // At least two a round: a local waiter that is between holds when the
            // run starts (not queued yet) still gets its turn, and a run of two
            // holds would pay a yield (a plain release, and a failed attempt in
            // every other waiting process) for every other hold (measured:
            // docs/performance.md, "Why the turn constants are what they are").
            let per_round = u16::try_from(waiting.saturating_add(1).max(2)).unwrap_or(u16::MAX);
            self.budget = per_round.saturating_mul(ROUNDS);
        }
        self.run = self.run.saturating_add(1);
        self.crowded = self.run > 1 || waiting > 0;
        self.until = None;
    }

    /// Another process holds or held the lock (a busy answer, or its unlock
    /// message): the next grant here starts a new run, and a yield is over.
    pub(super) fn other_held(&mut self) {
        self.run = 0;
        self.until = None;
    }

    /// Whether the lock, held here now, may go to the next local waiter without
    /// being freed.
    pub(super) fn may_hand_over(&self) -> bool {
        self.run > 0 && (self.run < self.budget || self.others == 0)
    }

    /// Whether the handover about to be made should count who listens on the
    /// channel (a command more): once per budget's worth of holds, on the one
    /// that spends the budget, whose count decides whether the next release
    /// yields. In between, `others` keeps the last count (or the last release's:
    /// PUBLISH answers it for free). Counting at a run's first handover as well
    /// decided nothing (a run shorter than its budget hands over whatever the
    /// count) and cost a command per run: most runs of two waiters per process
    /// are two holds long (tests/faults/turns.rs, three managers: 11.4 -> 10.9 Redis
    /// commands per acquisition without it).
    pub(super) fn count_now(&self) -> bool {
        self.run
            .saturating_add(1)
            .is_multiple_of(self.budget.max(1))
    }

    /// `others` other processes listen on the lock's channel.
    pub(super) fn heard(&mut self, others: u32) {
        self.others = u16::try_from(others).unwrap_or(u16::MAX);
    }

    /// The lock was freed here and `others` other processes heard it: the run is
    /// over, and this process yields (its waiters, queued now or coming later,
    /// hold back until [`FALLBACK`] or the next unlock message). Answers whether
    /// it yields. A local waiter that comes just after a release must not ask at
    /// once either: one that was pausing between holds otherwise won every race
    /// against the processes woken by the message (measured: one manager of three
    /// made 528 of 600 holds).
    pub(super) fn released(&mut self, others: u32, now: Instant) -> bool {
        self.heard(others);
        if others == 0 {
            return false;
        }
        self.run = 0;
        self.until = Some(now + FALLBACK);
        true
    }

    /// How long to wait before asking after another process's unlock message:
    /// a random part of [`JITTER`], which breaks Redis's fixed delivery order and
    /// gives a client that asks at once a fair chance (see [`JITTER`]). None when
    /// this process last saw at most one other listening, the releaser: nobody
    /// to race, and a delay would only slow the handoff (measured:
    /// docs/performance.md, "Why the turn constants are what they are").
    pub(super) fn wake_delay(&self) -> Duration {
        if self.others <= 1 {
            return Duration::ZERO;
        }
        let micros = u64::try_from(JITTER.as_micros()).unwrap_or(1).max(1);
        Duration::from_micros(crate::random::below(micros))
    }

    /// Whether this process may keep the unlock channel subscribed while it
    /// holds the lock with nobody queued: only in a run with other local waiters
    /// and while few other processes listen (see [`KEEP_LISTENING`]).
    pub(super) fn keeps_listening(&self) -> bool {
        self.crowded && self.others <= KEEP_LISTENING
    }

    /// Whether the head waiter must not ask Redis now (the clock is read
    /// only while a yield is set: this is asked on every event).
    pub(super) fn yielding(&self) -> bool {
        self.until.is_some() && self.holding_back(Instant::now()).is_some()
    }

    /// While the head waiter must not ask Redis: how much longer.
    pub(super) fn holding_back(&self, now: Instant) -> Option<Duration> {
        self.until
            .filter(|t| now < *t)
            .map(|t| t.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_serves_each_local_waiter_its_rounds_then_yields() {
        let now = Instant::now();
        let mut turn = Turn::default();
        turn.granted(2); // three here: budget 3 x ROUNDS
        turn.heard(1);
        for _ in 1..3 * ROUNDS {
            assert!(turn.may_hand_over());
            turn.granted(2);
        }
        assert!(!turn.may_hand_over(), "the budget is spent");
        assert!(turn.released(1, now), "the plain release yields");
        assert!(turn.holding_back(now).is_some());
        assert!(turn.holding_back(now + FALLBACK).is_none());
        turn.other_held();
        assert!(turn.holding_back(now).is_none());
    }

    #[test]
    fn a_woken_waiter_asks_within_the_jitter() {
        let mut turn = Turn::default();
        turn.heard(1);
        assert_eq!(
            turn.wake_delay(),
            Duration::ZERO,
            "only the releaser: no race"
        );
        turn.heard(2);
        let delays: Vec<Duration> = (0..200).map(|_| turn.wake_delay()).collect();
        assert!(delays.iter().all(|d| *d < JITTER));
        // Spread, not a constant: the random start is what breaks delivery order.
        assert!(delays.iter().any(|d| *d < JITTER / 4));
        assert!(delays.iter().any(|d| *d > JITTER * 3 / 4));
    }

    #[test]
    fn nobody_else_listening_never_ends_the_run() {
        let now = Instant::now();
        let mut turn = Turn::default();
        for _ in 0..100 {
            turn.granted(5);
            turn.heard(0);
            assert!(turn.may_hand_over());
        }
        assert!(!turn.released(0, now));
    }
}
