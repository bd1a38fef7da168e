//! What a lock actor does when its manager shuts down ([`ShutDown`]): it answers
//! every waiter with `LockError::ShuttingDown`, tells each live holding's guards
//! and watchers that the lock is gone (`LostReason::ShutDown`), and only then
//! gives every hold back in Redis with the kind's own release script, so that a
//! process on its way out hands its locks to the next waiter at once instead of
//! leaving them to expire a lease later.
//!
//! The holders are told before the release is sent, so that a `Leader` hears it
//! is deposed before the release script can even reach Redis (the new leader
//! needs that script, an unlock message and an acquisition after it). What the
//! guards' owners do with them afterwards is harmless: the holding is in the
//! lost set, so a release answers `Lost(ShutDown)` without touching Redis, and a
//! drop does nothing.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use futures::future::join_all;
use tracing::{debug, warn};

use super::holding::{metric_name, Held};
use super::kinds::{Giveback, Scripts};
use super::release::with_latch;
use super::LockActor;
use crate::actors::shared::{Shared, ShutDown};
use crate::actors::waiting::engine::Event;
use crate::durations::millis;
use crate::error::LostReason;
use crate::guard::LockLost;
use crate::wire::ReleaseReply;

/// Most release scripts sent for one holding: its guards' holds, and a few more
/// when Redis counts holds no guard accounts for (an attempt whose reply was
/// lost). Past it the rest expires with the lease, which nothing renews now.
const MAX_RELEASES_PER_HOLDING: u32 = 64;

impl Handler<ShutDown> for LockActor {
    type Result = ResponseActFuture<Self, usize>;

    fn handle(&mut self, _msg: ShutDown, ctx: &mut Context<Self>) -> Self::Result {
        self.run(Event::Shutdown, ctx);
        let givebacks = holdings_given_up(&mut self.held, &self.name, &self.shared);
        self.arm_expiry(ctx);
        let (scripts, shared) = (self.wait.side.kind().scripts(), self.shared.clone());
        let name = self.name.clone();
        let count = givebacks.len();
        for _ in 0..count {
            self.releases.start();
        }
        let all = join_all(givebacks.into_iter().map(|(giveback, guards, until)| {
            let (shared, name) = (shared.clone(), name.clone());
            give_back(scripts, shared, name, giveback, guards, until)
        }));
        Box::pin(all.into_actor(self).map(move |released, act, ctx| {
            for _ in 0..count {
                act.releases.done();
            }
            act.reconcile(ctx);
            released.into_iter().filter(|r| *r).count()
        }))
    }
}

/// Tells every live holding's guards and watchers that the lock is gone,
/// moves it to the lost set, and answers what to give back in Redis: each
/// holding's give-back, its guards, and until when a retry is worth it.
fn holdings_given_up(
    held: &mut Held,
    name: &Arc<str>,
    shared: &Shared,
) -> Vec<(Giveback, u32, Instant)> {
    // Holdings whose last guard is being released already are left to that
    // release (the manager waits for it with `IsQuiet`).
    let epochs: Vec<u64> = held
        .holdings
        .iter()
        .filter(|h| h.guards > 0)
        .map(|h| h.epoch)
        .collect();
    let sent = Instant::now();
    let mut givebacks = Vec::with_capacity(epochs.len());
    for epoch in epochs {
        // Until when a retry is worth it: the end of the lease (past it the
        // lock is free anyway), read before `forget` stops the renewals.
        let Some(lease_end) = held.lease_end(epoch, sent, shared) else {
            continue;
        };
        let Some(h) = held.forget(epoch, shared, metric_name(shared, name)) else {
            continue;
        };
        h.lost_tx.lose(LostReason::ShutDown);
        for watcher in &h.watchers {
            watcher.do_send(LockLost {
                name: name.to_string(),
                owner: h.owner,
                owner_field: h.field.to_string(),
                reason: LostReason::ShutDown,
            });
        }
        held.lost.insert(h.epoch, LostReason::ShutDown, h.guards);
        let giveback = Giveback {
            name: name.clone(),
            kind: h.kind,
            field: h.field.clone(),
            lease_ms: millis(h.lease),
            request_id: Arc::from(""),
            retry: false,
        };
        givebacks.push((giveback, h.guards, lease_end));
    }
    givebacks
}

/// Gives back every hold of one holding (one release per guard, and a few more
/// if Redis counts holds no guard accounts for); answers whether the lock was
/// freed.
async fn give_back(
    scripts: &'static dyn Scripts,
    shared: Arc<Shared>,
    name: Arc<str>,
    giveback: Giveback,
    guards: u32,
    until: Instant,
) -> bool {
    let mut sent = 0u32;
    loop {
        // One request id per hold given back, kept across the retries
        // of that hold (the latch answers a retry with the first
        // outcome).
        let request = Giveback {
            request_id: Arc::from(crate::random::request_id()),
            ..giveback.clone()
        };
        let started = Instant::now();
        let (res, _late) = with_latch(shared.config.clone(), started, Some(until), |retry| {
            scripts.release(
                &shared,
                Giveback {
                    retry,
                    ..request.clone()
                },
            )
        })
        .await;
        sent += 1;
        match res {
            Ok(ReleaseReply::StillHeld(holds))
                if sent < guards.max(1) + MAX_RELEASES_PER_HOLDING =>
            {
                debug!(lock = %name, holds, "shutdown: holds left, giving back the next");
            }
            Ok(ReleaseReply::StillHeld(holds)) => {
                warn!(lock = %name, holds, "shutdown: holds left after every release; they expire with the lease");
                return false;
            }
            Ok(ReleaseReply::Released { .. }) => {
                shared.counters.released();
                return true;
            }
            Ok(ReleaseReply::NotHeld) => {
                debug!(lock = %name, "shutdown: the lock was no longer held here");
                return false;
            }
            Err(e) => {
                warn!(lock = %name, error = %e, "shutdown: release failed; the lock frees when its lease runs out");
                return false;
            }
        }
    }
}
