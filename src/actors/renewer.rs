//! The watchdog: one [`Renewer`] per manager extends the lease of every lock that
//! manager holds in watchdog mode, many locks per script call.
//!
//! Renewing each lock on its own timer costs one script call (and one timer) per
//! held lock per period: at 100,000 held locks that is most of what Redis does. So
//! lock actors do not renew; they enter their watchdog holdings in the manager's
//! [`RenewTable`] and take them out when they end, and the renewer sweeps the table.
//! The renewal period is cut into [`SLOTS`] slots and each tick renews only one
//! slot's holdings. A holding joins the emptiest of the slots swept in the last half
//! period, so its first renewal comes between half a period and a period after it
//! was granted (never later than a timer of its own would have), and a burst of
//! acquisitions is spread over half the ticks instead of landing on one. A slot's exclusive and fair locks
//! go to Redis as one `renew.lua` call per [`CHUNK`] keys.
//!
//! The renewer also decides when a watchdog holding is lost: when Redis says the
//! owner no longer holds it (`OwnerGone`), or when no renewal succeeded before the
//! lease that the last success set runs out (`Unreachable`; measured on this
//! process's monotonic clock from the *send* time of that success, so it errs
//! early; when that time has come without a renewal having been tried, one is
//! tried first, with a short budget, since the request may have waited in Redis). It then tells the lock actor with [`Lapsed`], which informs
//! the guards.
//!
//! The renewer sits below the lock actor: it knows a holding only by what the
//! [`RenewTable`] entry says (names, field, which script renews it, and a weak
//! recipient for [`Lapsed`]), never the lock actor's type. Batches are cut by node
//! group ([`Node::group`]), so on a cluster one call never spans two slots.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, warn};

use super::registry::Registration;
use crate::config::millis;
use crate::config::Config;
use crate::error::{redis_is_transient, LostReason};
use crate::node::{Group, Node};
use crate::stats::{record, Counters};
use crate::wire::{self, RenewHashes, RwRenew, XsemRenew};

/// One renewal call in flight: the holdings it renews and, once answered,
/// whether each is still held.
type Call =
    std::pin::Pin<Box<dyn std::future::Future<Output = (Vec<u64>, redis::RedisResult<Vec<bool>>)>>>;

/// Slots per renewal period: a tick every period / `SLOTS` renews one slot.
const SLOTS: usize = 10;

/// Keys per `renew.lua` call. A call this size keeps Redis busy for well under a
/// millisecond, so other clients' commands never wait long behind it.
const CHUNK: usize = 512;

/// A watchdog holding's lease ran out or its owner no longer holds it (sent to the
/// lock actor, which reports the loss to the guards).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Lapsed {
    /// The holding.
    pub(crate) epoch: u64,
    /// Why it is lost.
    pub(crate) reason: LostReason,
}

/// Which script renews a holding (the lock kind decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// `lua/renew.lua`, many holdings per call: exclusive and fair locks.
    Hash,
    /// `lua/rw_renew.lua`, one holder per call: a read-write lock's reader, or
    /// its writer (`write`).
    ReadWrite {
        /// Whether it is the write side.
        write: bool,
    },
    /// `lua/xsem_renew.lua`, one holder per call: the permits one guard holds of
    /// a permit-expirable semaphore (the `field` is their ids, comma-separated).
    Permits,
}

/// One watchdog holding to renew.
#[derive(Debug)]
pub(crate) struct Watched {
    /// The lock name (the hash key).
    pub(crate) name: Arc<str>,
    /// The holder's hash field.
    pub(crate) field: Arc<str>,
    /// Which script renews it.
    pub(crate) renewal: Renewal,
    /// Who to tell when it is lost. Weakly: renewal must not keep a lock actor
    /// alive, and only a lapse needs to reach it.
    pub(crate) lock: WeakRecipient<Lapsed>,
    /// Until when it is surely held (send time of the last success plus its lease).
    pub(crate) valid_until: Instant,
}

#[derive(Debug)]
struct Entry {
    held: Watched,
    /// The slot it is swept in.
    slot: usize,
    /// A renewal of it is in flight.
    renewing: bool,
    /// Its lease has run out here and one last renewal was tried (see `collect`).
    late: bool,
}

#[derive(Debug, Default)]
struct Table {
    /// Holding epoch (unique in the process) -> entry.
    entries: HashMap<u64, Entry>,
    /// The epochs of each slot. Removal is lazy: a sweep drops epochs that are no
    /// longer entries, so taking a holding out costs one hash removal.
    slots: [Vec<u64>; SLOTS],
    /// The slot swept last.
    current: usize,
}

/// The watchdog holdings of one manager, shared by its lock actors (which add and
/// remove them) and its renewer (which sweeps them). A plain mutex rather than
/// messages: entering a holding is on every watchdog acquisition's path, and a
/// table insert is far cheaper than a mailbox round.
#[derive(Debug, Default)]
pub(crate) struct RenewTable {
    table: Mutex<Table>,
}

impl RenewTable {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // Nothing can panic while the table is locked; if it ever did, the data
        // (plain maps) is still consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts renewing a holding, or, if it is renewed already, notes a later
    /// `valid_until` (a re-entry set the lease again).
    pub(crate) fn watch(&self, epoch: u64, held: Watched) {
        let mut t = self.lock();
        if let Some(e) = t.entries.get_mut(&epoch) {
            e.held.valid_until = e.held.valid_until.max(held.valid_until);
            return;
        }
        // Of the slots swept in the last half period (so the first renewal comes
        // between half a period and a period after the grant), the emptiest: a
        // burst of acquisitions is spread over several ticks instead of one.
        let slot = (0..SLOTS / 2)
            .map(|back| (t.current + SLOTS - back) % SLOTS)
            .min_by_key(|&s| t.slots[s].len())
            .unwrap_or(t.current);
        t.slots[slot].push(epoch);
        t.entries.insert(
            epoch,
            Entry {
                held,
                slot,
                renewing: false,
                late: false,
            },
        );
    }

    /// Stops renewing a holding (released or lost). Unknown epochs are ignored.
    pub(crate) fn unwatch(&self, epoch: u64) {
        self.lock().entries.remove(&epoch);
    }
}

/// A holding that `renew.lua` renews: (epoch, lock name, owner field).
type HashHolding = (u64, Arc<str>, Arc<str>);

/// What one tick sends: the renewable holdings of one slot, by script.
#[derive(Default)]
struct Due {
    /// Exclusive and fair holdings: `renew.lua` takes many at once (of one group).
    hashes: Vec<HashHolding>,
    /// Read-write holdings: one `rw_renew.lua` call each.
    rw: Vec<(u64, bool, Arc<str>, Arc<str>)>,
    /// Holdings whose lease ran out unrenewed.
    lapsed: Vec<(u64, WeakRecipient<Lapsed>)>,
    /// Permit-expirable semaphore holders: one `xsem_renew.lua` call each.
    permits: Vec<HashHolding>,
}

/// The actor that sweeps a manager's [`RenewTable`]; see the module documentation.
pub(crate) struct Renewer {
    /// The table, weakly: the renewer stops once the manager and all its lock
    /// actors (which hold the table) are gone.
    table: Weak<RenewTable>,
    /// Where the locks are.
    node: Node,
    /// The watchdog lease set by each renewal.
    lease: Duration,
    /// The renewal period (cut into [`SLOTS`] ticks).
    every: Duration,
    /// How long a renewal sent after its holding's lease ran out here may take to
    /// answer before the holding is declared lost.
    late_budget: Duration,
    /// Health counters (failed renewals, lost locks).
    counters: Arc<Counters>,
    /// The manager's client registry entry, rewritten every [`SLOTS`] ticks.
    registration: Arc<Registration>,
    /// Ticks so far.
    ticks: usize,
}

impl Renewer {
    pub(crate) fn new(
        table: Weak<RenewTable>,
        node: Node,
        config: &Config,
        counters: Arc<Counters>,
        registration: Arc<Registration>,
    ) -> Renewer {
        Renewer {
            table,
            node,
            lease: config.watchdog_lease,
            every: config.renew_every(),
            late_budget: config.response_timeout.min(config.watchdog_lease / 4),
            counters,
            registration,
            ticks: 0,
        }
    }

    /// Takes one slot's due holdings out of the table.
    fn collect(table: &RenewTable, now: Instant) -> Due {
        let mut t = table.lock();
        let t = &mut *t;
        t.current = (t.current + 1) % SLOTS;
        let slot = t.current;
        let mut due = Due::default();
        let mut ids = std::mem::take(&mut t.slots[slot]);
        ids.retain(|id| {
            let Some(e) = t.entries.get_mut(id) else {
                return false;
            };
            if e.slot != slot {
                return false;
            }
            if e.held.valid_until <= now {
                if e.late && !e.renewing {
                    due.lapsed.push((*id, e.held.lock.clone()));
                    return true; // removed below
                }
                // valid_until counts from when the grant or renewal was sent; if
                // the request waited in Redis (CLIENT PAUSE), Redis's TTL runs out
                // later than that. One renewal is tried before declaring the loss:
                // only Redis knows whether the owner still holds it.
                e.late = true;
            }
            if !e.renewing {
                e.renewing = true;
                let (name, field) = (e.held.name.clone(), e.held.field.clone());
                match e.held.renewal {
                    Renewal::Hash => due.hashes.push((*id, name, field)),
                    Renewal::ReadWrite { write } => due.rw.push((*id, write, name, field)),
                    Renewal::Permits => due.permits.push((*id, name, field)),
                }
            }
            true
        });
        for (id, _) in &due.lapsed {
            t.entries.remove(id);
        }
        ids.retain(|id| t.entries.contains_key(id));
        t.slots[slot] = ids;
        due
    }

    /// Every holding not being renewed already, whatever its slot (after a
    /// reconnect, when any of them may have been lost).
    fn collect_all(table: &RenewTable) -> Due {
        let mut t = table.lock();
        let mut due = Due::default();
        for (id, e) in t.entries.iter_mut().filter(|(_, e)| !e.renewing) {
            e.renewing = true;
            let (name, field) = (e.held.name.clone(), e.held.field.clone());
            match e.held.renewal {
                Renewal::Hash => due.hashes.push((*id, name, field)),
                Renewal::ReadWrite { write } => due.rw.push((*id, write, name, field)),
                Renewal::Permits => due.permits.push((*id, name, field)),
            }
        }
        due
    }

    /// One tick: renew the next slot's holdings.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        let Some(table) = self.table.upgrade() else {
            ctx.stop();
            return;
        };
        let now = Instant::now();
        let due = Self::collect(&table, now);
        self.renew(due, now, ctx);
        self.ticks = self.ticks.wrapping_add(1);
        if self.ticks.is_multiple_of(SLOTS) {
            self.register(ctx);
        }
    }

    /// Rewrites the client registry entry (once per renewal period, and after a
    /// reconnect): one small call per manager, whatever it holds.
    fn register(&self, ctx: &mut Context<Self>) {
        let (registration, conn) = (self.registration.clone(), self.node.conn());
        ctx.spawn(actix::fut::wrap_future(async move {
            registration.refresh(conn).await
        }));
    }

    /// Sends the renewals of `due` (batched by node group) and reports its lapsed
    /// holdings.
    fn renew(&mut self, due: Due, now: Instant, ctx: &mut Context<Self>) {
        for (epoch, lock) in due.lapsed {
            self.lapse(epoch, &lock, LostReason::Unreachable);
        }
        let lease_ms = millis(self.lease);
        let mut groups: BTreeMap<Group, Vec<HashHolding>> = BTreeMap::new();
        for held in due.hashes {
            groups
                .entry(self.node.group(&held.1))
                .or_default()
                .push(held);
        }
        let mut calls: Vec<Call> = Vec::new();
        let mut all: Vec<u64> = Vec::new();
        for chunk in groups.values().flat_map(|g| g.chunks(CHUNK)) {
            let ids: Vec<u64> = chunk.iter().map(|(id, _, _)| *id).collect();
            record::renewal_batch(ids.len());
            all.extend(&ids);
            let locks: Vec<(Arc<str>, Arc<str>)> = chunk
                .iter()
                .map(|(_, name, field)| (name.clone(), field.clone()))
                .collect();
            let mut conn = self.node.conn();
            calls.push(Box::pin(async move {
                let locks: Vec<(&str, &str)> = locks.iter().map(|(n, f)| (&**n, &**f)).collect();
                let call = RenewHashes {
                    locks: &locks,
                    lease_ms,
                };
                (ids, wire::call(&mut conn, &call).await)
            }));
        }
        for (id, write, name, field) in due.rw {
            let mut conn = self.node.conn();
            all.push(id);
            calls.push(Box::pin(async move {
                let call = RwRenew {
                    name: &name,
                    field: &field,
                    write,
                    lease_ms,
                };
                (
                    vec![id],
                    wire::call(&mut conn, &call).await.map(|held| vec![held]),
                )
            }));
        }
        for (id, name, ids) in due.permits {
            let mut conn = self.node.conn();
            all.push(id);
            calls.push(Box::pin(async move {
                let call = XsemRenew {
                    name: &name,
                    ids: &ids,
                    lease_ms,
                };
                (
                    vec![id],
                    wire::call(&mut conn, &call).await.map(|held| vec![held]),
                )
            }));
        }
        self.send(calls, all, now, ctx);
    }

    /// Runs one tick's renewal calls and applies each answer as it comes: whether
    /// each holding is still held (`renew_many` checks there is one per id), or an
    /// error for all of a call's. The calls run as one stream in one spawned
    /// future, with one deadline timer: an actix context polls every item it holds
    /// at each wake-up, and on a cluster, where a call renews the locks of one slot,
    /// thousands of held locks made thousands of calls per tick; one item each
    /// made every answer cost a pass over all of them (2,000 locks on 3 masters
    /// were lost this way, their answers starved past the lease).
    fn send(&mut self, calls: Vec<Call>, ids: Vec<u64>, sent: Instant, ctx: &mut Context<Self>) {
        if calls.is_empty() {
            return;
        }
        self.guard(ids, sent, ctx);
        let answers: futures::stream::FuturesUnordered<Call> = calls.into_iter().collect();
        ctx.spawn(
            actix::fut::wrap_stream::<_, Self>(answers)
                .map(move |(ids, answer), act, _ctx| act.apply(&ids, sent, answer))
                .finish(),
        );
    }

    /// Applies one renewal call's answer for `ids`, sent at `sent`.
    fn apply(&mut self, ids: &[u64], sent: Instant, answer: redis::RedisResult<Vec<bool>>) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        let lease = self.lease;
        let mut gone = Vec::new();
        // A passing refusal (BUSY, OOM, LOADING, a dropped connection) is tried
        // again at the next tick, not a whole period later, when the lease may
        // have run out.
        let soon = matches!(&answer, Err(e) if redis_is_transient(e));
        {
            let mut t = table.lock();
            let next = (t.current + 1) % SLOTS;
            for (i, id) in ids.iter().enumerate() {
                let Some(e) = t.entries.get_mut(id) else {
                    continue;
                };
                e.renewing = false;
                match &answer {
                    Ok(held) if held[i] => {
                        e.held.valid_until = e.held.valid_until.max(sent + lease);
                        e.late = false;
                    }
                    Ok(_) => gone.push(*id),
                    Err(_) => {
                        if soon && e.slot != next {
                            // Moved: its old slot drops it lazily.
                            e.slot = next;
                            t.slots[next].push(*id);
                        }
                    }
                }
            }
        }
        match &answer {
            Ok(_) => record::renewals(ids.len() - gone.len(), gone.len(), 0),
            Err(_) => record::renewals(0, 0, ids.len()),
        }
        if let Err(error) = &answer {
            self.counters.renewal_failed();
            warn!(locks = ids.len(), %error, "renewal failed; retrying until the leases run out");
        }
        for id in gone {
            let lock = table.lock().entries.remove(&id);
            if let Some(e) = lock {
                self.lapse(id, &e.held.lock, LostReason::OwnerGone);
            }
        }
    }

    /// Arms the timer that declares holdings among `ids` lost once their lease has
    /// run out without a renewal since `sent`: at the earliest of their current
    /// leases (or, for a renewal sent after its lease ran out here, a short budget
    /// from now).
    fn guard(&mut self, ids: Vec<u64>, sent: Instant, ctx: &mut Context<Self>) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        let deadline = {
            let t = table.lock();
            ids.iter()
                .filter_map(|id| t.entries.get(id).map(|e| e.held.valid_until))
                .min()
        };
        let Some(at) = deadline else {
            return;
        };
        let now = Instant::now();
        let delay = if at > now { at - now } else { self.late_budget };
        ctx.run_later(delay, move |act, ctx| act.expire(ids, sent, ctx));
    }

    /// The deadline of a renewal round sent at `sent` came: the holdings among
    /// `ids` whose lease has run out are lost; those not renewed since `sent`
    /// whose lease runs out later get a timer of their own.
    fn expire(&mut self, ids: Vec<u64>, sent: Instant, ctx: &mut Context<Self>) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        let now = Instant::now();
        let renewed_until = sent + self.lease;
        let (lapsed, waiting) = {
            let mut t = table.lock();
            let (due, rest): (Vec<u64>, Vec<u64>) = ids
                .into_iter()
                .filter(|id| t.entries.contains_key(id))
                .partition(|id| t.entries.get(id).is_some_and(|e| e.held.valid_until <= now));
            let waiting: Vec<u64> = rest
                .into_iter()
                .filter(|id| {
                    t.entries
                        .get(id)
                        .is_some_and(|e| e.held.valid_until < renewed_until)
                })
                .collect();
            let lapsed: Vec<(u64, WeakRecipient<Lapsed>)> = due
                .into_iter()
                .filter_map(|id| t.entries.remove(&id).map(|e| (id, e.held.lock)))
                .collect();
            (lapsed, waiting)
        };
        for (epoch, lock) in lapsed {
            self.lapse(epoch, &lock, LostReason::Unreachable);
        }
        if !waiting.is_empty() {
            self.guard(waiting, sent, ctx);
        }
    }

    /// Tells a lock actor that a holding is lost (it was taken out of the table).
    fn lapse(&self, epoch: u64, lock: &WeakRecipient<Lapsed>, reason: LostReason) {
        debug!(epoch, %reason, "watchdog holding lapsed");
        if let Some(lock) = lock.upgrade().filter(Recipient::connected) {
            lock.do_send(Lapsed { epoch, reason });
        } else {
            // The lock actor is gone; its guards were told when it stopped.
            self.counters.lost(reason, None);
            warn!(epoch, %reason, "lock lost after its lock actor stopped");
        }
    }
}

/// The connection to Redis was re-established: locks may have been lost meanwhile
/// (a restart without persistence, a failover to a replica that missed writes), so
/// every holding is checked now rather than at its slot's next turn.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub(crate) struct Reconnected;

impl Handler<Reconnected> for Renewer {
    type Result = ();

    fn handle(&mut self, _msg: Reconnected, ctx: &mut Context<Self>) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        // The server may have restarted without its data: the entry too.
        self.register(ctx);
        let due = Self::collect_all(&table);
        let count = due.hashes.len() + due.rw.len();
        if count > 0 {
            debug!(
                holdings = count,
                "checking every held lock after a reconnect"
            );
            self.renew(due, Instant::now(), ctx);
        }
    }
}

impl Actor for Renewer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let every = self.every / SLOTS as u32;
        ctx.run_interval(every.max(Duration::from_millis(1)), |act, ctx| {
            act.tick(ctx)
        });
    }
}
