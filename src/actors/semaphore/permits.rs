//! How a semaphore's actor gives permits back ([`GivePermits`], for every kind
//! of semaphore, under one op id through transient errors), and what the
//! [`Expirable`] policy adds to its [`SyncActor`]: the permits this process
//! holds, by holding (one per guard), their renewal and their loss.
//!
//! Each take gets fresh permit ids (32 hex digits) and one holding. A permit taken
//! with a lease expires on the Redis clock at that lease after the grant; a timer
//! here, counted from when the take was sent (so it errs early), tells the guard
//! `LeaseExpired`. A permit taken without one gets the watchdog lease and is
//! renewed by the manager's renewer like a watchdog lock (`Renewal::Permits`, one
//! `expirable_renew.lua` call per holding), so the permits of a process that dies come
//! back within one lease; when a renewal finds a permit expired or gone (reclaimed
//! by another client after a pause, deleted by an operator) or cannot reach Redis
//! before the lease runs out, the renewer sends `Lapsed` and the guard's `lost()`
//! resolves with the reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tracing::warn;

use super::{Expirable, Takes};
use crate::actors::renewer::{Lapsed, Renewal, Watched};
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::Event;
use crate::actors::waiting::{self, op_id, send_once, SyncActor};
use crate::error::{LockError, LostReason};
use crate::reply::Reply;
use crate::signal::{LostSignal, LostWatch};
use crate::sync_view::SynchronizerKind;
use crate::wire::{self, ExpirableRelease, FairSemRelease, SemAdded, SemRelease};

/// Holding epochs of permits, from the top half of the range: the renewal table
/// is keyed by epoch, and lock holdings count up from 1, so the two never meet.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1 << 63);

/// A permit-expirable semaphore's grant, as the guard keeps it.
#[derive(Debug)]
pub(crate) struct Granted {
    /// The permits' ids.
    pub(crate) ids: Vec<String>,
    /// The holding in the actor.
    pub(crate) epoch: u64,
    /// Resolves when the permits are lost while held.
    pub(crate) lost: LostWatch,
}

/// One guard's permits.
#[derive(Debug)]
struct Holding {
    ids: Vec<String>,
    signal: LostSignal,
    /// Reads the signal's state.
    watch: LostWatch,
    /// The explicit lease's expiry timer.
    timer: Option<SpawnHandle>,
}

/// The holdings of one semaphore actor.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    map: HashMap<u64, Holding>,
}

/// `n` fresh permit ids: 16 random bytes as 32 hex digits, as Redisson makes them.
pub(super) fn new_ids(n: u32) -> Vec<String> {
    (0..n)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect()
}

/// Give permits back (a guard's release, or `SemaphoreHandle::release`); answers
/// the permits available after it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct GivePermits {
    /// How many, at least 1.
    pub(crate) permits: u32,
    /// Where the permits now available go (sent with `do_send`: see `reply.rs`).
    pub(crate) reply: Reply<Result<u64, LockError>>,
}

/// Runs the release script (`fair`: the fair semaphore's, which also tells
/// the head of its queue) under one op id, so that it adds the permits once
/// however often it is sent (`actors/waiting/once.rs`); transient errors are
/// retried within the op id's window, after which the caller hears
/// [`LockError::InFlight`].
pub(super) async fn give_back(
    shared: Arc<Shared>,
    name: Arc<str>,
    permits: u32,
    kind: SynchronizerKind,
    fair: bool,
) -> Result<u64, LockError> {
    let _counted = shared.unsettled.enter();
    let op = op_id();
    let once = waiting::once(&shared.config, &op);
    let what = || format!("giving back {permits} permit(s) of semaphore {name:?}");
    let added = send_once(&shared.config, what, || {
        let mut conn = shared.node.conn();
        let name = name.clone();
        async move {
            if fair {
                let call = FairSemRelease {
                    name: &name,
                    permits,
                    once,
                };
                wire::call(&mut conn, &call).await
            } else {
                let call = SemRelease {
                    name: &name,
                    permits,
                    once,
                };
                wire::call(&mut conn, &call).await
            }
        }
    })
    .await?;
    match added {
        SemAdded::Available { now, created } => {
            if created {
                // Permits added to no semaphore made it: label it.
                let mut conn = shared.node.conn();
                wire::label(&mut conn, &name, Some(kind)).await;
            }
            Ok(now)
        }
        SemAdded::Overflow(_) => Err(LockError::InvalidAmount {
            what: "permits",
            amount: u64::from(permits),
            reason: "the semaphore would hold more than 2147483647 permits",
        }),
    }
}

impl<P: Takes> Handler<GivePermits> for SyncActor<P> {
    type Result = ();

    fn handle(&mut self, msg: GivePermits, ctx: &mut Context<Self>) {
        let (shared, name) = (self.shared.clone(), self.name.clone());
        let GivePermits { permits, reply } = msg;
        let given = async move {
            let res = give_back(shared, name.clone(), permits, P::KIND, P::FAIR).await;
            if let Err(e) = &res {
                // A guard dropped without awaiting its release learns nothing:
                // say it here.
                warn!(semaphore = %name, permits, error = %e, "giving back permits failed");
            }
            reply.send(res);
        };
        // Local waiters need not wait for the message to come back round (a
        // fair release also tells the head of its queue on its channel).
        ctx.spawn(
            given
                .into_actor(self)
                .map(|_, act, ctx| act.run(Event::Wake, ctx)),
        );
    }
}

/// Give back one guard's permits (its release, or its drop).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct ReturnPermits {
    /// The holding.
    pub(crate) epoch: u64,
    /// Where the outcome goes (sent with `do_send`: see `reply.rs`).
    pub(crate) reply: Reply<Result<(), LockError>>,
}

impl SyncActor<Expirable> {
    /// Records a grant of `ids`: renewed by the renewer without a lease, lost at
    /// the lease's end with one.
    pub(super) fn hold(
        &mut self,
        ids: Vec<String>,
        lease: Option<Duration>,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) -> Granted {
        let epoch = NEXT_EPOCH.fetch_add(1, Ordering::Relaxed);
        let signal = LostSignal::new();
        let lost = signal.watch();
        let timer = match lease {
            None => {
                let watched = Watched {
                    name: self.name.clone(),
                    field: Arc::from(ids.join(",")),
                    renewal: Renewal::Permits,
                    lock: ctx.address().downgrade().recipient(),
                    valid_until: sent + self.shared.config.watchdog_lease,
                };
                self.shared.renewals.watch(epoch, watched);
                None
            }
            Some(lease) => {
                let left = lease.saturating_sub(sent.elapsed());
                Some(ctx.run_later(left, move |act, _| {
                    act.lapse(epoch, LostReason::LeaseExpired)
                }))
            }
        };
        self.extra.map.insert(
            epoch,
            Holding {
                ids: ids.clone(),
                watch: signal.watch(),
                signal,
                timer,
            },
        );
        Granted { ids, epoch, lost }
    }

    /// The holding's permits are lost: its guard learns why; the ids stay until
    /// the guard gives them back (some may still be taken).
    fn lapse(&mut self, epoch: u64, reason: LostReason) {
        self.shared.renewals.unwatch(epoch);
        if let Some(h) = self.extra.map.get_mut(&epoch) {
            h.timer = None;
            if h.watch.lost().is_none() {
                warn!(semaphore = %self.name, %reason, permits = h.ids.len(), "permits lost");
            }
            h.signal.lose(reason);
        }
    }

    /// Takes a holding out (renewal, timer); answers its ids.
    pub(super) fn forget(&mut self, epoch: u64, ctx: &mut Context<Self>) -> Option<Vec<String>> {
        self.shared.renewals.unwatch(epoch);
        let h = self.extra.map.remove(&epoch)?;
        if let Some(timer) = h.timer {
            ctx.cancel_future(timer);
        }
        Some(h.ids)
    }
}

/// Runs the release script under one op id (a retry after a lost reply answers
/// what the first copy gave back), retrying transient errors within the op id's
/// window; answers how many were still taken. Past the window the permits
/// expire with their lease anyway.
async fn return_ids(
    shared: Arc<Shared>,
    name: Arc<str>,
    ids: Vec<String>,
) -> Result<usize, LockError> {
    let _counted = shared.unsettled.enter();
    let op = op_id();
    let once = waiting::once(&shared.config, &op);
    let what = || format!("giving back {} permit(s) of semaphore {name:?}", ids.len());
    send_once(&shared.config, what, || {
        let (mut conn, name, ids) = (shared.node.conn(), name.clone(), ids.clone());
        async move {
            let call = ExpirableRelease {
                name: &name,
                ids: &ids,
                once,
                undo: false,
            };
            wire::call(&mut conn, &call).await
        }
    })
    .await
}

impl Handler<ReturnPermits> for SyncActor<Expirable> {
    type Result = ();

    fn handle(&mut self, msg: ReturnPermits, ctx: &mut Context<Self>) {
        let ReturnPermits { epoch, reply } = msg;
        let lost = self.extra.map.get(&epoch).and_then(|h| h.watch.lost());
        let Some(ids) = self.forget(epoch, ctx) else {
            reply.send(Err(LockError::NotHeld));
            return;
        };
        let expected = ids.len();
        let fut = return_ids(self.shared.clone(), self.name.clone(), ids);
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            act.run(Event::Look, ctx);
            let outcome = match (res, lost) {
                (Err(e), _) => Err(e),
                (_, Some(reason)) => Err(LockError::Lost(reason)),
                (Ok(back), None) if back < expected => Err(LockError::Lost(LostReason::OwnerGone)),
                _ => Ok(()),
            };
            reply.send(outcome);
        }));
    }
}

impl Handler<Lapsed> for SyncActor<Expirable> {
    type Result = ();

    fn handle(&mut self, msg: Lapsed, _ctx: &mut Context<Self>) {
        self.lapse(msg.epoch, msg.reason);
    }
}
