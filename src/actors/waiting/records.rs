//! The part of the waiting kit that makes waits visible: waiting records in
//! Redis for the waits that last (`wire/waiting.rs` has the layout), and the
//! warning for a semaphore whose key does not exist, on which a waiter would
//! wait unseen for ever. Every waiting actor owns one [`Waiting`] and
//! implements [`Waits`] so that [`tick`] can read its waiters (the semaphore
//! and latch actors through their [`Queue`](super::Queue)); the lock actor's
//! records carry the owner field each waiter will hold the lock under (who
//! waits for what, by name: what deadlock detection across processes needs).
//!
//! A wait is recorded once it has lasted [`RECORD_AFTER`]; shorter waits (nearly
//! all of them under normal load) cost nothing in Redis. While anyone waits the
//! actor ticks once per [`TICK`]: a tick writes the records of waits that just
//! crossed the threshold, removes those of waits that ended, and refreshes the
//! rest every third of the records' TTL, all in one pipeline, and only when
//! there is something to write. A write that fails is logged (NOPERM once per
//! process: the ACL predates these keys) and never fails a wait. A lock actor
//! starts ticking when it arms a waiter's wake timer (a refused attempt, a
//! deadline), not at every enqueue, so a lock granted at once costs nothing here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::prelude::*;
use tracing::{debug, warn};

use crate::actors::shared::Shared;
use crate::error::is_noperm;
use crate::keys;
use crate::wire::waiting::{self, Record, WaitKind, RECORD_TTL};

/// How long a wait lasts before it is recorded in Redis. A second: long enough
/// that the waits of a busy, healthy service (milliseconds) never pay a write,
/// short enough that an operator who looks at a stuck service sees its waiters.
pub(crate) const RECORD_AFTER: Duration = Duration::from_secs(1);

/// How often the warning for a missing semaphore key repeats while the waiters
/// stay: often enough to be in any log window someone reads, rarely enough not
/// to flood it.
pub(crate) const MISSING_WARN_EVERY: Duration = Duration::from_secs(30);

/// Whether a refusal of the records (NOPERM) was logged at warn already.
static REFUSAL_SAID: AtomicBool = AtomicBool::new(false);

/// How often an actor with waiters looks at them (no Redis unless something
/// changed or a refresh is due).
const TICK: Duration = Duration::from_secs(1);

/// An actor whose waiters are recorded.
pub(crate) trait Waits: Actor<Context = Context<Self>> {
    /// Its records' state.
    fn waiting(&mut self) -> &mut Waiting;
    /// Its waiters now.
    fn waiters_now(&self) -> Vec<Waited>;
    /// The manager's connection and client id.
    fn shared(&self) -> &Arc<Shared>;
    /// Nobody waits and nothing is recorded any more: an actor that keeps its
    /// [`Waiting`] only while it is needed (the lock actor: a held lock's actor
    /// stays small) drops it now.
    fn idle(&mut self) {}
}

/// One waiter as [`tick`] sees it.
#[derive(Debug)]
pub(crate) struct Waited {
    /// Its id, unique in the process.
    pub(crate) id: u64,
    /// When it began to wait.
    pub(crate) since: Instant,
    /// Permits it wants (1 for a lock or a latch).
    pub(crate) wants: u64,
    /// A lock waiter's owner field; `None`: `<client id>:<id>`.
    pub(crate) owner_field: Option<Arc<str>>,
    /// An election candidate's wait on its leader lock (recorded apart: it
    /// lasts for as long as the candidate runs).
    pub(crate) candidate: bool,
}

/// One actor's waiting records and missing-key warnings.
#[derive(Debug)]
pub(crate) struct Waiting {
    /// The name waited on.
    name: Arc<str>,
    /// What it is, written into each record.
    kind: WaitKind,
    /// Waiter id -> its member, for the waits recorded.
    recorded: HashMap<u64, String>,
    /// When the records were last written in full.
    refreshed: Option<Instant>,
    /// A write is in flight: the next tick waits for it.
    writing: bool,
    /// Redis refused the records (NOPERM): said once, then not tried again.
    refused: bool,
    /// The ticking timer, while anyone waits or a record is left.
    ticker: Option<SpawnHandle>,
    /// When the missing key was last warned about; `None` while it exists.
    missing_since_warned: Option<Instant>,
}

impl Waiting {
    /// Nothing recorded yet for `name`.
    pub(crate) fn new(name: Arc<str>, kind: WaitKind) -> Waiting {
        Waiting {
            name,
            kind,
            recorded: HashMap::new(),
            refreshed: None,
            writing: false,
            refused: false,
            ticker: None,
            missing_since_warned: None,
        }
    }

    /// An id for a new waiter, unique in the process (the `<n>` of its owner
    /// field in the records).
    pub(crate) fn next_id() -> u64 {
        keys::Owner::new().id()
    }

    /// The key was found missing while `waiters` wait: warn now, then at most
    /// once per [`MISSING_WARN_EVERY`] while it stays missing. Answers whether
    /// it warned.
    pub(crate) fn key_missing(&mut self, waiters: usize, waited: Duration) -> bool {
        let due = self
            .missing_since_warned
            .is_none_or(|at| at.elapsed() >= MISSING_WARN_EVERY);
        if due && waiters > 0 {
            self.missing_since_warned = Some(Instant::now());
            // Lost with Redis's data, the records went with the key: the next
            // tick writes them again rather than at the next refresh.
            self.refreshed = None;
            warn!(
                semaphore = %self.name,
                waiters,
                waited = ?waited,
                "waiting on a semaphore whose key does not exist (never set, deleted, or lost \
                 with Redis's data): nothing will release a permit until someone adds permits; \
                 set them (try_set_permits / add_permits, `lockwarden semaphore set`) or give \
                 the wait a deadline"
            );
            return true;
        }
        false
    }

    /// After an actor's restart: its timer and write belonged to the old
    /// context and are gone; the records are rewritten at the next tick.
    pub(crate) fn forget(&mut self) {
        self.ticker = None;
        self.writing = false;
        self.refreshed = None;
    }

    /// The key exists (again): the next miss warns at once.
    pub(crate) fn key_found(&mut self) {
        self.missing_since_warned = None;
    }
}

/// Starts ticking if it does not yet (a waiter arrived).
pub(crate) fn watch<A: Waits>(act: &mut A, ctx: &mut Context<A>) {
    if act.waiting().ticker.is_none() {
        let handle = ctx.run_interval(TICK, |act, ctx| tick(act, ctx));
        act.waiting().ticker = Some(handle);
    }
}

/// A waiter may have left (granted, timed out, gone): if a wait of those
/// recorded ended, the records are written now rather than at the next tick,
/// so that a process that exits right after its wait leaves no record behind
/// for an operator to read as a waiter (`status` showed the waits of exited
/// processes growing for the records' whole TTL). Free while no wait is
/// recorded, as nearly all are shorter than [`RECORD_AFTER`].
pub(crate) fn ended<A: Waits>(act: &mut A, ctx: &mut Context<A>) {
    let w = act.waiting();
    if w.recorded.is_empty() || w.writing || w.refused {
        return;
    }
    let now = act.waiters_now();
    let w = act.waiting();
    if w.recorded.keys().all(|id| now.iter().any(|n| n.id == *id)) {
        return;
    }
    tick(act, ctx);
}

/// Writes what changed since the last tick; stops ticking once nobody waits and
/// nothing is left recorded.
fn tick<A: Waits>(act: &mut A, ctx: &mut Context<A>) {
    let now = act.waiters_now();
    let client_id = act.shared().client_id.clone();
    let w = act.waiting();
    if w.writing {
        return;
    }
    if now.is_empty() && (w.recorded.is_empty() || w.refused) {
        if let Some(h) = w.ticker.take() {
            ctx.cancel_future(h);
        }
        w.recorded.clear();
        act.idle();
        return;
    }
    if w.refused {
        return;
    }
    let Some((live, gone)) = w.changes(now, &client_id) else {
        return;
    };
    write(act, live, gone, ctx);
}

impl Waiting {
    /// The records to write (`live`) and to remove (`gone`) for the waits
    /// `now`, if anything changed or a refresh is due.
    fn changes(&mut self, now: Vec<Waited>, client_id: &str) -> Option<(Vec<String>, Vec<String>)> {
        let due = self
            .refreshed
            .is_none_or(|at| at.elapsed() >= RECORD_TTL / 3);
        let mut live = Vec::new();
        let mut fresh = false;
        let mut kept = HashMap::new();
        for Waited {
            id,
            since,
            wants,
            owner_field,
            candidate,
        } in now
        {
            let waited = since.elapsed();
            if waited < RECORD_AFTER {
                continue;
            }
            let member = match self.recorded.remove(&id) {
                Some(m) => m,
                None => {
                    fresh = true;
                    let since_ms = SystemTime::now()
                        .checked_sub(waited)
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_millis() as u64);
                    Record {
                        owner_field: owner_field
                            .map_or_else(|| format!("{client_id}:{id}"), |f| f.to_string()),
                        since_ms,
                        wants,
                        kind: self.kind,
                        candidate,
                    }
                    .member()
                }
            };
            live.push(member.clone());
            kept.insert(id, member);
        }
        let gone: Vec<String> = self.recorded.drain().map(|(_, m)| m).collect();
        self.recorded = kept;
        if !fresh && gone.is_empty() && !due {
            return None;
        }
        if live.is_empty() && gone.is_empty() {
            return None;
        }
        Some((live, gone))
    }
}

/// Writes `live` and removes `gone` in one call, in the background.
fn write<A: Waits>(act: &mut A, live: Vec<String>, gone: Vec<String>, ctx: &mut Context<A>) {
    let w = act.waiting();
    w.writing = true;
    w.refreshed = Some(Instant::now());
    let name = w.name.clone();
    let mut conn = act.shared().node.conn();
    let write = async move { waiting::write(&mut conn, &name, &live, &gone).await };
    ctx.spawn(write.into_actor(act).map(|res, act, _| {
        let w = act.waiting();
        w.writing = false;
        match res {
            Ok(()) => {}
            Err(e) if is_noperm(&e) => {
                w.refused = true;
                // Once per process: a service whose ACL predates the records
                // would otherwise say it once per lock name.
                if REFUSAL_SAID.swap(true, Ordering::Relaxed) {
                    debug!(name = %w.name, error = %e, "waiting records refused");
                    return;
                }
                warn!(
                    name = %w.name,
                    error = %e,
                    "could not record who waits (the ACL lacks ~lockwarden_waiters:* or \
                     ZADD/ZREM/ZREMRANGEBYSCORE/PEXPIRE, docs/operations.md): operators will \
                     not see this process's waiters (said once per process)"
                );
            }
            Err(e) => {
                // The next refresh writes them again; a lost removal expires.
                debug!(name = %w.name, error = %e, "writing waiting records failed");
                w.refreshed = None;
            }
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The missing-key warning comes at once, then not again while the key
    /// stays missing (until [`MISSING_WARN_EVERY`]), and at once after the key
    /// was seen again.
    #[test]
    fn the_missing_key_warning_is_rate_limited() {
        let kind = WaitKind::Sync(crate::sync_view::SynchronizerKind::Semaphore);
        let mut w = Waiting::new(Arc::from("s"), kind);
        assert!(w.key_missing(1, Duration::ZERO));
        assert!(!w.key_missing(1, Duration::from_secs(5)));
        assert!(
            !w.key_missing(0, Duration::ZERO),
            "nobody waits: nothing to say"
        );
        w.key_found();
        assert!(w.key_missing(2, Duration::ZERO));
    }
}
