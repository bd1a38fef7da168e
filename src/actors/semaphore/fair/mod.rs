//! The [`FairSemaphoreActor`]: the waiters of one fair semaphore in this
//! process, served in the order they arrived across every process, built from
//! the waiting kit (`actors/waiting/`) and a script of its own
//! (`lua/fair_sem_*.lua`).
//!
//! Each waiter takes a place in the semaphore's queue in Redis with its first
//! attempt (local waiters one at a time, in their arrival order, so that their
//! places keep it); the script grants permits only to the head of the queue,
//! and only when enough are free: strict FIFO, as
//! `java.util.concurrent.Semaphore(fair = true)`, so a head that wants more
//! than is free holds up the smaller waiters behind it. A queued waiter asks
//! again only when told: on its own channel (a fair release, a head that
//! left, lapsed or took its permits and left some), by a refresh of the places
//! that finds it at the head with permits free, or by the fallback timer
//! (`Config::max_retry_interval`). [`Places`] keeps the places alive every
//! third of `Config::fair_waiter_lease` and takes a waiter that gives up out at
//! once; a waiter whose process died lapses and is skipped.
//!
//! The permits are the plain semaphore's key, so plain acquirers (this crate's
//! or Redisson's) share them; they do not queue and can take permits ahead of
//! the queue. Their releases are heard by the fair waiters through the
//! refresh and the fallback timer; fair releases tell the head at once.

mod hooks;

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tracing::{debug, warn};

use super::Grant;
use crate::actors::listen::{self, Alarm, Channel};
use crate::actors::shared::{until_first, Shared};
use crate::actors::waiting::{
    keep_refreshing, leave, send_once, timeout, Attempt, Places, Queue, Waiting,
};
use crate::durations::millis;
use crate::error::redis_is_transient;
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire::waiting::WaitKind;
use crate::wire::{self, FairSemAcquire, FairSemUndo, SemTake, Undone};

/// What one fair waiter wants, and where it stands in the queue.
#[derive(Debug, Clone)]
struct FairWant {
    /// Permits it wants.
    permits: u32,
    /// Its id in the queue and its channel, `<client id>:<n>` (the `<n>` of its
    /// waiting record).
    id: Arc<str>,
    /// It holds a place in the queue (its last attempt took or kept one).
    queued: bool,
    /// It should ask Redis at the next pump: it has no place yet, or it was
    /// told it may be at the head.
    due: bool,
    /// Its attempt is in flight.
    asking: bool,
    /// An attempt of its id failed without an answer: a copy may have run, or
    /// may still run. Until an answer says `Taken`, leaving undoes its take.
    lost: bool,
}

impl FairWant {
    /// Whether a copy of its take may have run unseen (see `lost`): leaving
    /// then goes through the undo script rather than a plain leave.
    fn unsure(&self) -> bool {
        self.asking || self.lost
    }
}

/// See the module documentation.
pub(crate) struct FairSemaphoreActor {
    /// The semaphore's name (its key).
    name: Arc<str>,
    /// The manager's connection, subscriber and settings.
    shared: Arc<Shared>,
    /// Local waiters in arrival order (`actors/waiting/queue.rs`).
    waiters: Queue<FairWant, Grant>,
    /// The attempt in flight and the failures in a row.
    attempt: Attempt,
    /// The waiters' places in the Redis queue (`actors/waiting/places.rs`).
    places: Places,
    /// One channel per waiter, its own (`actors/listen.rs`).
    channels: Vec<Channel>,
    /// The fallback / deadline timer.
    timer: Alarm,
    /// The waiting records and the missing-key warning.
    waiting: Waiting,
}

impl FairSemaphoreActor {
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>) -> FairSemaphoreActor {
        FairSemaphoreActor {
            waiting: Waiting::new(name.clone(), WaitKind::Sync(SynchronizerKind::Semaphore)),
            places: Places::default(),
            name,
            shared,
            waiters: Queue::default(),
            attempt: Attempt::default(),
            channels: Vec::new(),
            timer: Alarm::default(),
        }
    }

    /// The channel of the waiter `id`.
    fn channel_of(&self, id: &str) -> String {
        keys::sem_waiter_channel(&self.name, id)
    }

    /// Answers the waiters that left or ran out of time; those with a place
    /// leave the queue at once, and their channels are dropped.
    fn sweep(&mut self, ctx: &mut Context<Self>) {
        let gone = self.waiters.sweep(|waited| Err(timeout(waited)));
        self.forget(gone, ctx);
    }

    /// These waiters are done here: their places are left, their channels
    /// dropped.
    fn forget(&mut self, gone: Vec<FairWant>, ctx: &mut Context<Self>) {
        if gone.is_empty() {
            return;
        }
        for w in &gone {
            let name = self.channel_of(&w.id);
            if let Some(at) = self.channels.iter().position(|c| c.name() == name) {
                let mut channel = self.channels.swap_remove(at);
                channel.unsubscribe(&self.shared.subscriber);
            }
        }
        let (unsure, sure): (Vec<FairWant>, Vec<FairWant>) =
            gone.into_iter().partition(FairWant::unsure);
        for w in unsure {
            // The undo leaves the queue too.
            self.undo(w, ctx);
        }
        let queued = sure
            .into_iter()
            .filter(|w| w.queued)
            .map(|w| w.id)
            .collect();
        leave(self, queued, ctx);
    }

    /// Undoes the take of waiter `w` (it left, or its grant found nobody):
    /// out of the queue, its permits back if a copy took them, none taken by a
    /// copy that runs later (`lua/fair_sem_undo.lua`). In the background.
    fn undo(&mut self, w: FairWant, ctx: &mut Context<Self>) {
        let (shared, name) = (self.shared.clone(), self.name.clone());
        let ticket = shared.unsettled.enter();
        let fut = async move {
            let _counted = ticket;
            let once_ttl_ms = millis(shared.config.latch_ttl);
            let what = || {
                format!(
                    "undoing a take of {} permit(s) of fair semaphore {name:?}",
                    w.permits
                )
            };
            send_once(&shared.config, what, || {
                let (mut conn, name, id) = (shared.node.conn(), name.clone(), w.id.clone());
                async move {
                    let call = FairSemUndo {
                        name: &name,
                        waiter: &id,
                        permits: w.permits,
                        once_ttl_ms,
                    };
                    wire::call(&mut conn, &call).await
                }
            })
            .await
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, ctx| {
            match res {
                Ok(Undone::GaveBack) => {
                    debug!(semaphore = %act.name, "permits taken for a waiter that left are back")
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(semaphore = %act.name, error = %e, "undoing a fair waiter's take failed")
                }
            }
            act.pump(ctx);
        }));
    }

    /// Lets the first due waiter ask Redis, if one may now.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        // Waiters that left or ran out of time are answered now, even while
        // an attempt is in flight (an asking waiter's take is undone at once).
        self.sweep(ctx);
        if !self.attempt.wake() {
            return;
        }
        keep_refreshing(self, self.shared.config.fair_refresh_every(), ctx);
        if self.waiters.is_empty() {
            self.timer.cancel(ctx);
            return;
        }
        let Some(w) = self.waiters.iter().find(|w| w.want.due) else {
            self.arm(ctx, self.shared.config.max_retry_interval);
            return;
        };
        let (local, once, want) = (w.id, w.once, w.want.clone());
        // A waiter that will wait listens on its own channel before it takes a
        // place: the head's message could come before a later subscription.
        if !once {
            let name = self.channel_of(&want.id);
            match self.channels.iter().find(|c| c.name() == name) {
                Some(c) if c.is_live() => {}
                Some(_) => return, // its confirmation pumps
                None => {
                    self.channels.push(Channel::new(name.clone()));
                    let subscriber = self.shared.subscriber.clone();
                    listen::subscribe(self, &name, &subscriber, ctx);
                    return;
                }
            }
        }
        self.attempt.start();
        if let Some(w) = self.waiters.get_mut(local) {
            w.want.asking = true;
        }
        let name = self.name.clone();
        let mut conn = self.shared.node.conn();
        let place_ms = millis(self.shared.config.fair_waiter_lease);
        let once_ttl_ms = millis(self.shared.config.latch_ttl);
        let (waiter, permits) = (want.id.clone(), want.permits);
        let call = async move {
            let call = FairSemAcquire {
                name: &name,
                waiter: &waiter,
                permits,
                place_ms,
                queue: !once,
                once_ttl_ms,
            };
            wire::call(&mut conn, &call).await
        };
        let asked = want.clone();
        ctx.spawn(call.into_actor(self).map(move |res, act, ctx| {
            act.attempt.finish();
            act.attempted(local, asked, res, ctx);
        }));
    }

    /// What the attempt of the waiter `local` (which wanted `asked`) found.
    fn attempted(
        &mut self,
        local: u64,
        asked: FairWant,
        res: redis::RedisResult<SemTake>,
        ctx: &mut Context<Self>,
    ) {
        let permits = asked.permits;
        let Some(w) = self.waiters.get_mut(local) else {
            // Answered meanwhile (shutdown): leaving undid its take already.
            return self.pump(ctx);
        };
        w.want.asking = false;
        match res {
            Ok(SemTake::Taken { left }) => {
                self.attempt.succeeded();
                self.waiting.key_found();
                if let Some(w) = self.waiters.remove(local) {
                    let want = FairWant {
                        queued: false,
                        lost: false,
                        ..w.want.clone()
                    };
                    if w.answer(Ok(Grant { permits: None })).is_err() {
                        // The caller left while its permits were being taken:
                        // its id gives them back once.
                        debug!(semaphore = %self.name, permits, "taken for a caller that left; giving back");
                        self.undo(want.clone(), ctx);
                    }
                    self.forget(vec![want], ctx);
                }
                if left > 0 {
                    // The script told the new head; if it is here, it asks now.
                    if let Some(next) = self.waiters.iter_mut().find(|w| w.want.queued) {
                        next.want.due = true;
                    }
                }
            }
            Ok(SemTake::Short { missing, .. }) => {
                self.attempt.succeeded();
                let lasting = self.waiters.lasting();
                let Some(w) = self.waiters.get_mut(local) else {
                    return self.pump(ctx);
                };
                if w.once {
                    if let Some(w) = self.waiters.remove(local) {
                        w.time_out();
                    }
                    return self.pump(ctx);
                }
                w.want.queued = true;
                w.want.due = false;
                if missing {
                    let waited = w.since.elapsed();
                    self.waiting.key_missing(lasting, waited);
                } else {
                    self.waiting.key_found();
                }
            }
            Err(e) if redis_is_transient(&e) => {
                warn!(semaphore = %self.name, error = %e, "fair semaphore attempt failed; retrying");
                w.want.lost = true;
                let delay = self.attempt.failed(&self.shared.config, e.clone());
                match self.waiters.get_mut(local) {
                    Some(w) if !w.once => {
                        w.last_error = Some(e.into());
                        self.arm(ctx, delay);
                        return;
                    }
                    Some(_) => {
                        if let Some(w) = self.waiters.remove(local) {
                            let _ = w.answer(Err(e.into()));
                        }
                    }
                    None => {}
                }
            }
            Err(e) => {
                warn!(semaphore = %self.name, error = %e, "fair semaphore attempt failed");
                w.want.lost = true;
                if let Some(w) = self.waiters.remove(local) {
                    let want = w.want.clone();
                    let _ = w.answer(Err(e.into()));
                    self.forget(vec![want], ctx);
                }
            }
        }
        self.pump(ctx);
    }

    /// The first local waiter with a place asks at the next pump: it is the
    /// only one here that can be the head.
    fn nudge(&mut self) {
        if let Some(w) = self.waiters.iter_mut().find(|w| w.want.queued) {
            w.want.due = true;
        }
    }

    /// Wakes after `delay` (or at the earliest deadline if sooner): the first
    /// waiter asks again, in case a message was lost.
    fn arm(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let delay = until_first(delay, self.waiters.deadlines());
        self.timer.set(
            ctx,
            delay,
            |act: &mut Self| &mut act.timer,
            |act, ctx| {
                act.nudge();
                act.pump(ctx);
            },
        );
    }
}
