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
//! tried first, with a short budget, since the request may have waited in Redis).
//! Either is `Paused` instead when the lease ran out while the renewer itself did
//! not run for a whole renewal period (the process stopped; see `stall.rs`). It
//! then tells the lock actor with [`Lapsed`], which informs the guards.
//!
//! The renewer sits below the lock actor: it knows a holding only by what the
//! [`RenewTable`] entry says (names, field, which script renews it, and a weak
//! recipient for [`Lapsed`]), never the lock actor's type. Batches are cut by node
//! group ([`Node::group`]), so on a cluster one call never spans two slots.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::WeakRecipient;
use tracing::{debug, warn};

mod stall;
mod table;

use stall::Stalls;
use table::{Due, HashHolding, SLOTS};
pub(crate) use table::{Lapsed, RenewTable, Renewal, Watched};

use super::registry::Registration;
use crate::config::Config;
use crate::durations::millis;
use crate::error::{redis_is_transient, LostReason};
use crate::node::{Group, Node};
use crate::stats::{record, Counters};
use crate::wire::{self, ExpirableRenew, RenewHashes, RwRenew};

/// One renewal call in flight: the holdings it renews and, once answered,
/// whether each is still held.
type Call =
    std::pin::Pin<Box<dyn std::future::Future<Output = (Vec<u64>, redis::RedisResult<Vec<bool>>)>>>;

/// Keys per `renew.lua` call. A call this size keeps Redis busy for well under a
/// millisecond, so other clients' commands never wait long behind it.
const CHUNK: usize = 512;

/// The actor that sweeps a manager's [`RenewTable`]; see the module documentation.
pub(crate) struct Renewer {
    /// The table, weakly: the renewer stops once the manager and all its lock
    /// actors (which hold the table) are gone.
    table: Weak<RenewTable>,
    /// Where the locks are.
    node: Node,
    /// The watchdog lease set by each renewal.
    lease: Duration,
    /// The manager gives its locks a lock-delay (`Config::lock_delay`): renewals
    /// read and keep each hash's mark.
    marked: bool,
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
    /// When the renewer last ran and the latest stretch it did not: a lease that
    /// ran out inside one was lost to a pause of this process, not to Redis.
    stalls: Stalls,
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
            marked: !config.lock_delay.is_zero(),
            every: config.renew_every(),
            late_budget: config.response_timeout.min(config.watchdog_lease / 4),
            counters,
            registration,
            ticks: 0,
            stalls: Stalls::new(config.renew_every(), Instant::now()),
        }
    }

    /// One tick: renew the next slot's holdings.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        let Some(table) = self.table.upgrade() else {
            ctx.stop();
            return;
        };
        let now = Instant::now();
        self.stalls.ran(now);
        let due = table.collect(now);
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
        for (epoch, valid_until, lock) in due.lapsed {
            let reason = self.stalls.reason(valid_until, LostReason::Unreachable);
            self.lapse(epoch, &lock, reason);
        }
        let lease_ms = millis(self.lease);
        let (mut calls, mut all) = self.hash_calls(due.hashes, lease_ms);
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
                let call = ExpirableRenew {
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

    /// The renewals of the lock hashes `hashes`: one call per node group and
    /// chunk of [`CHUNK`], with the holding ids each call answers for.
    fn hash_calls(&self, hashes: Vec<HashHolding>, lease_ms: u64) -> (Vec<Call>, Vec<u64>) {
        let mut groups: BTreeMap<Group, Vec<HashHolding>> = BTreeMap::new();
        for held in hashes {
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
            let marked = self.marked;
            calls.push(Box::pin(async move {
                let locks: Vec<(&str, &str)> = locks.iter().map(|(n, f)| (&**n, &**f)).collect();
                let call = RenewHashes {
                    locks: &locks,
                    lease_ms,
                    marked,
                };
                (ids, wire::call(&mut conn, &call).await)
            }));
        }
        (calls, all)
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
        self.stalls.ran(Instant::now());
        // A passing refusal (BUSY, OOM, LOADING, a dropped connection) is tried
        // again at the next tick, not a whole period later, when the lease may
        // have run out.
        let soon = matches!(&answer, Err(e) if redis_is_transient(e));
        let gone = table.apply_answer(ids, sent, self.lease, &answer, soon);
        match &answer {
            Ok(_) => record::renewals(ids.len() - gone.len(), gone.len(), 0),
            Err(_) => record::renewals(0, 0, ids.len()),
        }
        if let Err(error) = &answer {
            self.counters.renewal_failed();
            warn!(locks = ids.len(), %error, "renewal failed; retrying until the leases run out");
        }
        for id in gone {
            if let Some((valid_until, lock)) = table.take(id) {
                // Gone because its lease ran out while this process did not run?
                let reason = self.stalls.reason(valid_until, LostReason::OwnerGone);
                self.lapse(id, &lock, reason);
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
        let Some(at) = table.earliest(&ids) else {
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
        self.stalls.ran(now);
        let renewed_until = sent + self.lease;
        let (lapsed, waiting) = table.take_expired(ids, now, renewed_until);
        for (epoch, valid_until, lock) in lapsed {
            let reason = self.stalls.reason(valid_until, LostReason::Unreachable);
            self.lapse(epoch, &lock, reason);
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
        self.stalls.ran(Instant::now());
        // The server may have restarted without its data: the entry too.
        self.register(ctx);
        let due = table.collect_all();
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
