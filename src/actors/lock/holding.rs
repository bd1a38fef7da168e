//! The held lock: what this manager knows while its owners hold the lock, and the
//! lock actor's work on it (grant, expiry, loss). Its release is `release.rs`.
//!
//! Redis is the truth about who holds a lock; this is the local cache that lets the
//! actor report its loss and hand it to the next local waiter without asking Redis
//! first. Watchdog holdings are renewed by the manager's [`crate::actors::renewer`], which
//! renews many locks per call; this file enters them in its table and takes them
//! out when they end. An exclusive or fair lock has at most one live holding here;
//! a read-write lock has one per (owner, side): many readers, or a writer and its
//! own read holds. Each holding gets an epoch: guards carry it, so a guard from a
//! holding that was lost can never act on a later holding of the same owner, nor a
//! read guard on the same owner's write holding.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::{debug, warn};

use super::LockActor;
use crate::actors::renewer::Renewal;
use crate::actors::renewer::{Lapsed, Watched};
use crate::actors::shared::Shared;
use crate::error::LostReason;
use crate::guard::{LockGuard, LockLost};
use crate::keys::Owner;
use crate::kind::AcquireKind;
use crate::signal::LostSignal;

/// Holding epochs are unique in the process, so the manager's renewal table can
/// key holdings of all its lock actors by epoch alone.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// The live holding of the lock by one local owner, of one kind.
#[derive(Debug)]
pub(crate) struct Holding {
    /// Distinguishes this holding from every other of this lock actor.
    pub(crate) epoch: u64,
    /// What is held (a read-write lock's side).
    pub(crate) kind: AcquireKind,
    /// The holding owner.
    pub(crate) owner: Owner,
    /// Its hash field (`:write` after the owner field for a writer).
    pub(crate) field: Arc<str>,
    /// Guards of this holding not yet released (equals the Redis hold count unless
    /// something outside this manager changed it).
    pub(crate) guards: u32,
    /// Whether the watchdog renews it (some guard was taken without a lease); it
    /// is then in the manager's renewal table until it ends.
    pub(crate) watchdog: bool,
    /// The lease last set in Redis, used again when a release leaves holds.
    pub(crate) lease: Duration,
    /// Until when the lock is surely held: the send time of the last successful
    /// acquisition or release plus its lease, on this process's monotonic clock.
    /// For a watchdog holding the renewer keeps the newer value.
    pub(crate) valid_until: Instant,
    /// Tells the guards when the lock is lost.
    pub(crate) lost_tx: LostSignal,
    /// Actors that asked for a [`LockLost`] message.
    pub(crate) watchers: Vec<Recipient<LockLost>>,
    /// When it was first granted (for the hold-time metric).
    pub(crate) since: Instant,
}

/// Who a successful acquisition belongs to.
#[derive(Debug)]
pub(super) struct Claim {
    /// What was taken.
    pub(super) kind: AcquireKind,
    /// The owner that now holds the lock.
    pub(super) owner: Owner,
    /// Its hash field.
    pub(super) field: Arc<str>,
    /// The explicit lease, or `None` for watchdog mode.
    pub(super) lease: Option<Duration>,
    /// Who else to tell if the lock is lost.
    pub(super) on_lost: Option<Recipient<LockLost>>,
    /// The task whose unit of work the guard joins (`src/unit.rs`).
    pub(super) task: Option<tokio::task::Id>,
}

/// The live holdings of one lock actor.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    /// In no particular order; a handful at most in practice.
    live: Vec<Holding>,
}

impl Holdings {
    pub(crate) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Holding> {
        self.live.iter()
    }

    pub(crate) fn get(&self, epoch: u64) -> Option<&Holding> {
        self.live.iter().find(|h| h.epoch == epoch)
    }

    pub(super) fn get_mut(&mut self, epoch: u64) -> Option<&mut Holding> {
        self.live.iter_mut().find(|h| h.epoch == epoch)
    }

    /// The holding of this owner and kind.
    pub(crate) fn of(&self, owner: Owner, kind: AcquireKind) -> Option<&Holding> {
        self.live
            .iter()
            .find(|h| h.owner == owner && h.kind == kind)
    }

    /// Takes a holding out (its caller stops renewing it: see `LockActor::forget`).
    fn remove(&mut self, epoch: u64) -> Option<Holding> {
        let at = self.live.iter().position(|h| h.epoch == epoch)?;
        Some(self.live.swap_remove(at))
    }

    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Holding> + '_ {
        self.live.drain(..)
    }

    /// The index of the holding of this owner and kind, made (with no guard
    /// yet) if there is none.
    pub(super) fn entry(
        &mut self,
        kind: AcquireKind,
        owner: Owner,
        field: &Arc<str>,
        lease: Duration,
        sent: Instant,
    ) -> usize {
        if let Some(at) = self
            .live
            .iter()
            .position(|h| h.owner == owner && h.kind == kind)
        {
            return at;
        }
        let epoch = NEXT_EPOCH.fetch_add(1, Ordering::Relaxed);
        // Almost every lock has one holding at a time; a Vec's first push
        // would make room for four (300 bytes more per held lock).
        self.live.reserve_exact(1);
        self.live.push(Holding {
            epoch,
            kind,
            owner,
            field: field.clone(),
            guards: 0,
            watchdog: false,
            lease,
            valid_until: sent,
            lost_tx: LostSignal::new(),
            watchers: Vec::new(),
            since: Instant::now(),
        });
        self.live.len() - 1
    }

    /// Whether a local holding of another owner keeps an acquisition of `kind` by
    /// `owner` from succeeding (then asking Redis is pointless: the local release
    /// will pump again).
    pub(crate) fn blocks(&self, owner: Owner, kind: AcquireKind) -> bool {
        self.live
            .iter()
            .any(|h| keeps_out((h.owner, h.kind), owner, kind))
    }

    /// Whether an acquisition of `kind` by `owner` is a re-entry (or a writer's
    /// downgrade) that must not wait behind others who wait for that owner.
    pub(crate) fn reenters(&self, owner: Owner, kind: AcquireKind) -> bool {
        self.live
            .iter()
            .any(|h| h.owner == owner && kind.reenters(h.kind))
    }

    /// Whether a write request by `owner` is an upgrade: it holds read holds here
    /// and not the write lock, so waiting would wait for itself.
    pub(crate) fn is_upgrade(&self, owner: Owner, kind: AcquireKind) -> bool {
        kind.upgrade_from()
            .is_some_and(|from| self.of(owner, from).is_some())
            && self.of(owner, kind).is_none()
    }
}

/// Whether `holder` (an owner and what it holds) keeps an acquisition of
/// `kind` by `owner` from succeeding.
pub(crate) fn keeps_out(holder: (Owner, AcquireKind), owner: Owner, kind: AcquireKind) -> bool {
    let (h_owner, h_kind) = holder;
    h_owner != owner && (h_kind.excludes(kind) || kind.excludes(h_kind))
}

/// Holdings that were lost while guards of them are still alive: their release
/// must answer "lost" without touching Redis, where the lock may belong to someone
/// else by now.
#[derive(Debug, Default)]
pub(crate) struct LostHoldings {
    /// (epoch, why, guards not yet released); a Vec because it is nearly always
    /// empty, and an empty Vec is half the size of an empty map in every actor.
    by_epoch: Vec<(u64, LostReason, u32)>,
}

impl LostHoldings {
    pub(crate) fn insert(&mut self, epoch: u64, reason: LostReason, guards: u32) {
        if guards > 0 {
            self.by_epoch.push((epoch, reason, guards));
        }
    }

    /// Accounts for one released guard of a lost holding; returns why it was lost.
    pub(crate) fn release_one(&mut self, epoch: u64) -> Option<LostReason> {
        let at = self.by_epoch.iter().position(|(e, _, _)| *e == epoch)?;
        let (_, reason, guards) = &mut self.by_epoch[at];
        let reason = *reason;
        *guards -= 1;
        if *guards == 0 {
            self.by_epoch.swap_remove(at);
        }
        Some(reason)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_epoch.is_empty()
    }
}

/// The holding side of a lock actor: the holds of this process, kept or
/// lost. (The releases in flight are the actor's own part, `release.rs`:
/// the release path reads the kinds, which read the holdings.)
#[derive(Default)]
pub(super) struct Held {
    /// The local owners holding the lock.
    pub(super) holdings: Holdings,
    /// Lost holdings whose guards are still alive.
    pub(super) lost: LostHoldings,
}

impl Held {
    /// Takes holding `epoch` out, records how long it was held (under the
    /// label `metric`), and stops renewing it.
    pub(super) fn forget(
        &mut self,
        epoch: u64,
        shared: &Shared,
        metric: Option<&str>,
    ) -> Option<Holding> {
        let h = self.holdings.remove(epoch)?;
        crate::stats::record::held(h.kind, h.since.elapsed(), metric);
        if h.watchdog {
            shared.renewals.unwatch(epoch);
        }
        Some(h)
    }

    /// Until when a release of the last hold of holding `epoch` is worth
    /// retrying: past this the lease has surely run out in Redis (for a
    /// watchdog holding, counted from the last renewal that succeeded), so the
    /// lock is free whatever became of the release.
    pub(super) fn lease_end(&self, epoch: u64, sent: Instant, shared: &Shared) -> Option<Instant> {
        let h = self.holdings.get(epoch)?;
        let end = match h.watchdog {
            true => shared.renewals.earliest(&[epoch]).unwrap_or(sent + h.lease),
            false => h.valid_until,
        };
        Some(end.min(sent + h.lease))
    }
}

/// The lock `name` as a metric label, when the config opts in
/// (`Config::metric_lock_names`).
pub(super) fn metric_name<'a>(shared: &Shared, name: &'a str) -> Option<&'a str> {
    shared.config.metric_lock_names.then_some(name)
}

/// What making a guard needs beside the holding: the lock, the manager's
/// parts, how the watchdog renews it, and the actor's address (the guard's
/// release goes there; the renewal table keeps a weak copy).
pub(super) struct Granting<'a> {
    pub(super) name: &'a Arc<str>,
    pub(super) shared: &'a Shared,
    pub(super) renewal: Renewal,
    pub(super) addr: Addr<LockActor>,
}

impl Granting<'_> {
    /// Enters watchdog holding `h` in the renewal table, or notes its later
    /// `valid_until` there; a holding with an explicit lease is not renewed.
    fn watch(&self, h: &Holding) {
        if !h.watchdog {
            return;
        }
        let held = Watched {
            name: self.name.clone(),
            field: h.field.clone(),
            renewal: self.renewal,
            lock: self.addr.downgrade().recipient(),
            valid_until: h.valid_until,
        };
        self.shared.renewals.watch(h.epoch, held);
    }
}

impl Held {
    /// Records a successful acquisition and makes its guard (the caller has
    /// declared lost the holdings it excludes: [`Held::stale`]).
    pub(super) fn grant(
        &mut self,
        claim: Claim,
        token: u64,
        sent: Instant,
        g: Granting<'_>,
    ) -> LockGuard {
        let Claim {
            kind,
            owner,
            field,
            lease,
            on_lost,
            task,
        } = claim;
        g.shared.counters.acquired();
        let lease_len = lease.unwrap_or(g.shared.config.watchdog_lease);
        let at = self.holdings.entry(kind, owner, &field, lease_len, sent);
        let h = &mut self.holdings.live[at];
        let epoch = h.epoch;
        h.guards += 1;
        h.lease = lease_len;
        h.valid_until = sent + lease_len;
        h.watchdog |= lease.is_none();
        h.watchers.extend(on_lost);
        let lost_rx = h.lost_tx.watch();
        g.watch(h);
        let name = g.name.clone();
        let mut guard = LockGuard::new(
            g.addr.recipient(),
            name,
            kind,
            owner,
            field,
            token,
            lease,
            epoch,
            lost_rx,
        );
        guard.set_release_wait(g.shared.config.release_wait);
        if let Some(task) = task {
            // Joined before it is delivered: a guard its caller no longer
            // takes is dropped, which leaves the unit again.
            guard.join_unit(task);
        }
        guard
    }

    /// A call sent at `sent` set holding `epoch`'s lease again (a lock handed
    /// over had its short lease made the holder's own): it is surely held
    /// until `sent` plus its lease, if that is later than known.
    pub(super) fn extended(&mut self, epoch: u64, sent: Instant, g: Granting<'_>) {
        let Some(h) = self.holdings.get_mut(epoch) else {
            return;
        };
        h.valid_until = h.valid_until.max(sent + h.lease);
        g.watch(h);
    }

    /// The holdings Redis's grant to `owner` as `kind` shows lost: a local
    /// holding that excludes it can only be one that is lost already (no
    /// waiter asks past a live one).
    pub(super) fn stale(&self, owner: Owner, kind: AcquireKind) -> Vec<u64> {
        let stale = self
            .holdings
            .iter()
            .filter(|h| keeps_out((h.owner, h.kind), owner, kind));
        stale.map(|h| h.epoch).collect()
    }

    /// Holding `epoch` of the lock `name` is lost: its guards and watchers are
    /// told, and a guard's release answers `Lost` from now on. Answers whether
    /// it was live.
    pub(super) fn lose(
        &mut self,
        epoch: u64,
        reason: LostReason,
        shared: &Shared,
        name: &str,
    ) -> bool {
        let metric = metric_name(shared, name);
        let Some(h) = self.forget(epoch, shared, metric) else {
            return false;
        };
        shared.counters.lost(reason, metric);
        warn!(lock = %name, kind = %h.kind, owner = %h.owner, %reason, "lock lost while held");
        h.lost_tx.lose(reason);
        for watcher in &h.watchers {
            watcher.do_send(LockLost {
                name: name.to_string(),
                owner: h.owner,
                owner_field: h.field.to_string(),
                reason,
            });
        }
        self.lost.insert(h.epoch, reason, h.guards);
        true
    }

    /// When the first holding with an explicit lease runs out (watchdog
    /// holdings need no timer here: the renewer declares them lost).
    pub(super) fn next_expiry(&self) -> Option<Instant> {
        let explicit = self.holdings.iter().filter(|h| !h.watchdog);
        explicit.map(|h| h.valid_until).min()
    }

    /// The holdings with an explicit lease that ran out by `now`.
    pub(super) fn expired(&self, now: Instant) -> Vec<u64> {
        let due = self
            .holdings
            .iter()
            .filter(|h| !h.watchdog && now >= h.valid_until);
        due.map(|h| h.epoch).collect()
    }
}

impl Handler<Lapsed> for LockActor {
    type Result = ();

    fn handle(&mut self, msg: Lapsed, ctx: &mut Context<Self>) {
        if self
            .held
            .holdings
            .get(msg.epoch)
            .is_some_and(|h| h.guards == 0)
        {
            // Its last hold is being released: a renewal that ran after the release
            // script finds the owner gone before this actor has seen the release's
            // reply. The release settles the holding either way.
            debug!(lock = %self.name, epoch = msg.epoch, "lapse of a holding being released");
            return;
        }
        self.lose(msg.epoch, msg.reason, ctx);
        self.look(ctx);
    }
}
