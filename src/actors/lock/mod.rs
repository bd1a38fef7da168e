//! The [`LockActor`]: one per lock name and kind, owning that lock's waiters, timers
//! and the local view of who holds it.
//!
//! Everything that happens to one lock in this process is serialised through its
//! actor, which is what keeps the rules simple: a waiter behind a local holder it
//! cannot share with does not ask Redis at all (the local release hands over),
//! and the watchdog and the waiters' timers are timers the actor keeps and
//! cancels. The Redis side is only ever changed by the scripts in [`crate::wire`].
//!
//! This file is the actor: its parts, and the glue that carries out what they
//! decide (every `impl LockActor` block is here, but the waiting engine's
//! runner, `runner`: the effects the engine hands back, carried out). Each
//! other file owns one part,
//! a type whose methods decide or make the Redis call: the waiting engine's lock
//! policy and the waiting side (`waits`, run by the engine of
//! `actors/waiting/engine/`), what a waiter is (`waiters`), the acquisition
//! calls (`acquire`), the holdings (`holding`), the release and its answer
//! (`release`), the hand-over to a local waiter (`handover`), the deadlock
//! checks (`deadlock`), the timers and the kind's chores (`timers`), the idle
//! handshake and supervision (`life`), the shutdown (`shutdown`), the messages
//! (`messages`) and the kinds (`kinds/`: the exclusive lock's turns, the fair
//! lock's places, the spin lock's backoff, each kind's decisions as data).

mod acquire;
mod deadlock;
mod handoff;
mod handover;
mod holding;
mod kinds;
mod life;
mod messages;
mod release;
mod runner;
mod shutdown;
#[cfg(test)]
mod tests;
mod timers;
mod waiters;
mod waits;

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use actix::WeakRecipient;

use super::listen::Alarm;
use super::shared::Shared;
use super::waiting::engine::Event;
use crate::error::{LockError, LostReason};
use crate::guard::{LockGuard, ReleaseOutcome};
use crate::kind::Kind;
use crate::wire::ReleaseReply;

use deadlock::Detector;
use holding::{Claim, Held};
use kinds::{AfterRelease, Chore, Giveback};
use life::Life;
#[cfg(test)]
pub(crate) use messages::{Derail, QueueLen};
pub(crate) use messages::{Enqueue, Idle, IsQuiet, ManagerGone};
use release::{Releases, Releasing, Then};
use timers::Timers;
pub(crate) use waiters::Request;
use waits::{HandOver, Side, Wait};

/// What a release's caller gets back, in the actor's context.
type ReleaseFuture = ResponseActFuture<LockActor, Result<ReleaseOutcome, LockError>>;

/// The actor of one lock name and kind; see the module documentation. A short
/// list of owned parts, each a type whose methods change it.
pub(crate) struct LockActor {
    /// The lock name (also the lock key).
    name: Arc<str>,
    /// Connection, config, client id, subscriber and counters of the manager.
    shared: Arc<Shared>,
    /// The waiting side: its kind, who waits, what is asked of Redis for
    /// them, what they listen on.
    wait: Wait,
    /// The holding side: who holds, what was lost, what is being given back.
    held: Held,
    /// Release scripts in flight (`release.rs`).
    releases: Releases,
    /// The wake, expiry and idle timers, and the kind's periodic one (`timers.rs`).
    timers: Timers,
    /// The manager, the idle handshake's count and the restart flags (`life.rs`).
    life: Life,
}

impl LockActor {
    pub(crate) fn new(
        name: Arc<str>,
        kind: Kind,
        shared: Arc<Shared>,
        manager: WeakRecipient<Idle>,
    ) -> Self {
        LockActor {
            name,
            shared,
            wait: Wait::new(kind),
            held: Held::default(),
            releases: Releases::default(),
            timers: Timers::default(),
            life: Life::new(manager),
        }
    }

    /// Brings what lives beside the engine in line with what is left to do:
    /// keeps the kind's periodic timer and sends its chores, drops what ended
    /// of the waiting records and deadlock checks, and starts the idle
    /// countdown when nothing at all is going on.
    /// (Not "settle": that word is the `Settle` message's, nothing on the wire.)
    fn reconcile(&mut self, ctx: &mut Context<Self>) {
        let config = self.shared.config.clone();
        let every = self.with_kind(|kind, queue| kind.tick_every(queue, &config));
        self.timers.keep_ticking(every, ctx, |act, ctx| {
            let (name, shared) = (act.name.clone(), act.shared.clone());
            let chore = act.with_kind(|kind, queue| kind.tick(queue, &name, &shared));
            act.run_chore(chore, ctx);
        });
        self.send_chores(ctx);
        self.forget_ended_waits(ctx);
        if self.wait.records.is_some() {
            // A recorded wait that ended is unrecorded now, not at the next
            // tick: a process that exits right after its wait leaves no record
            // behind. Only while records exist (they are boxed on demand).
            crate::actors::waiting::ended(self, ctx);
        }
        let (idle, after) = (self.is_idle(), self.shared.config.idle_timeout);
        self.timers.idle_countdown(idle, after, ctx, |act, ctx| {
            let kind = act.wait.side.kind().kind();
            act.life.ask_to_retire(act.name.clone(), kind, ctx)
        });
    }

    /// Nothing at all is going on: no waiter, holding, call or subscription.
    fn is_idle(&self) -> bool {
        matches!(self.wait.side, Side::Idle { .. })
            && self.held.holdings.is_empty()
            && self.held.lost.is_empty()
            && self.releases.none()
            && !self.wait.side.kind().busy_with_chores()
            && self.wait.detector.is_none()
            && self.wait.check.is_none()
    }

    /// Sends the Redis work the kind has pending.
    fn send_chores(&mut self, ctx: &mut Context<Self>) {
        let (name, shared) = (self.name.clone(), self.shared.clone());
        while let Some(chore) = self.with_kind(|kind, queue| kind.chore(queue, &name, &shared)) {
            self.run_chore(Some(chore), ctx);
        }
    }

    /// Records a successful acquisition and makes its guard; a local holding
    /// the grant shows stale is declared lost first.
    fn grant(
        &mut self,
        claim: Claim,
        token: u64,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) -> LockGuard {
        for epoch in self.held.stale(claim.owner, claim.kind) {
            self.lose(epoch, LostReason::OwnerGone, ctx);
        }
        let renewal = self.wait.side.kind().scripts().renewal(claim.kind);
        let g = holding::Granting {
            name: &self.name,
            shared: &self.shared,
            renewal,
            addr: ctx.address(),
        };
        let guard = self.held.grant(claim, token, sent, g);
        self.arm_expiry(ctx);
        guard
    }

    /// Holding `epoch` is lost (its guards are told). The caller looks again.
    fn lose(&mut self, epoch: u64, reason: LostReason, ctx: &mut Context<Self>) {
        if self.held.lose(epoch, reason, &self.shared, &self.name) {
            self.arm_expiry(ctx);
        }
    }

    /// Takes holding `epoch` out and stops renewing it.
    fn forget(&mut self, epoch: u64) -> Option<holding::Holding> {
        let metric = holding::metric_name(&self.shared, &self.name);
        self.held.forget(epoch, &self.shared, metric)
    }

    /// Arms (or re-arms) the timer that declares holdings with an explicit
    /// lease lost when their lease runs out.
    fn arm_expiry(&mut self, ctx: &mut Context<Self>) {
        self.timers.expiry.cancel(ctx);
        let Some(first) = self.held.next_expiry() else {
            return;
        };
        let delay = first.saturating_duration_since(Instant::now());
        let slot: fn(&mut Self) -> &mut Alarm = |act| &mut act.timers.expiry;
        self.timers.expiry.set(ctx, delay, slot, |act, ctx| {
            for epoch in act.held.expired(Instant::now()) {
                act.lose(epoch, LostReason::LeaseExpired, ctx);
            }
            act.arm_expiry(ctx);
            act.look(ctx);
        });
    }

    /// Spawns a chore; its outcome goes to the kind, which says whether
    /// waiters may try now.
    fn run_chore(&mut self, chore: Option<Chore>, ctx: &mut Context<Self>) {
        let Some(chore) = chore else {
            return;
        };
        Timers::spawn_chore(chore, ctx, |act, done, ctx| {
            let name = act.name.clone();
            if act.with_kind(|kind, queue| kind.chore_done(done, queue, &name)) {
                act.run(Event::Look, ctx);
            } else {
                act.reconcile(ctx);
            }
        });
    }
}

/// The release path: the work of each step is `release.rs`'s and
/// `handover.rs`'s; here it is spawned and its answer applied.
impl LockActor {
    /// Runs the release script for one hold of a live holding (or, for its
    /// last hold, hands the lock over when the kind says so).
    fn release_hold(&mut self, epoch: u64, ctx: &mut Context<Self>) -> ReleaseFuture {
        let Some(releasing) = Releasing::of(&mut self.held, epoch, &self.name, &self.shared) else {
            return Box::pin(fut::ready(Err(LockError::NotHeld)));
        };
        if releasing.last {
            if let Some(handover) = self.hand_over(epoch, &releasing.giveback, ctx) {
                return handover;
            }
        }
        self.releases.start();
        let sent = releasing.sent;
        let fut = releasing.send(self.wait.side.kind().scripts(), self.shared.clone());
        Box::pin(fut.into_actor(self).map(move |res, act, ctx| {
            let out = act.on_released(epoch, sent, res, ctx);
            act.look(ctx);
            out
        }))
    }

    /// Applies a release script's answer ([`Releases::answered`]).
    fn on_released(
        &mut self,
        epoch: u64,
        sent: Instant,
        res: redis::RedisResult<ReleaseReply>,
        ctx: &mut Context<Self>,
    ) -> Result<ReleaseOutcome, LockError> {
        let holdings = &self.held.holdings;
        let (out, then) = self
            .releases
            .answered(holdings, epoch, res, &self.name, &self.shared);
        for step in then {
            match step {
                Then::Freed { published, heard } => {
                    let after = self.wait.side.released(published, heard, &self.name);
                    if after == AfterRelease::Yield {
                        // The head waiter holds back; the engine learns it as
                        // the queue looks.
                        self.run(Event::Look, ctx);
                    }
                }
                Then::Forget => {
                    self.forget(epoch);
                    self.arm_expiry(ctx);
                }
                Then::Lose => self.lose(epoch, LostReason::OwnerGone, ctx),
                Then::Renew => {
                    if let Some(h) = self.held.holdings.get_mut(epoch) {
                        h.valid_until = sent + h.lease;
                    }
                    self.arm_expiry(ctx);
                }
                Then::ReleaseAgain => {
                    let fut = self.release_hold(epoch, ctx);
                    ctx.spawn(fut.map(|_, _, _| ()));
                }
                Then::Restart(why) => self.life.restart(&self.name, &why, ctx),
            }
        }
        out
    }

    /// The last hold of holding `epoch` is being given back: hands the lock to
    /// the local head waiter in the same call when the kind says so and
    /// nothing in flight (an attempt, a check, another release) would race
    /// with it. `None`: a plain release must run.
    fn hand_over(
        &mut self,
        epoch: u64,
        giveback: &Giveback,
        ctx: &mut Context<Self>,
    ) -> Option<ReleaseFuture> {
        if self.wait.check.is_some() || !self.releases.none() {
            return None;
        }
        let holder = self.held.holdings.get(epoch)?.owner;
        let HandOver {
            ask,
            count,
            effects,
        } = self.wait.side.hand_over_to(holder)?;
        self.apply(effects, ctx);
        let (waiter, to) = (ask.waiter, self.calls().attempt_of(&ask.want));
        self.releases.start();
        let (scripts, shared, sent) = (self.calls().scripts, self.shared.clone(), Instant::now());
        let fut = handover::transfer(scripts, shared, giveback.clone(), to, count, sent);
        Some(Box::pin(fut.into_actor(self).map(
            move |handing, act, ctx| {
                let read = handing.read(act.wait.side.listens(&act.name), &act.name);
                if let Some(books) = read.books {
                    act.with_kind(|kind, _| kind.handed(books));
                }
                let out = act.on_released(epoch, sent, read.release, ctx);
                act.run(
                    acquire::handed_to(waiter, sent, read.granted, read.unknown),
                    ctx,
                );
                out
            },
        )))
    }
}

/// The deadlock checks: what is due and what a check found are the
/// [`Detector`]'s, and a round is its message ([`deadlock::Round`]); here
/// the rounds are armed, and what ended is forgotten.
impl LockActor {
    /// Someone waits: arms the next round of checks, if detection is on and
    /// none is armed or running.
    fn watch_for_deadlocks(&mut self, ctx: &mut Context<Self>) {
        let Some(timeout) = self.shared.config.deadlock_timeout else {
            return;
        };
        let (detector, waiters) = (self.wait.detector.as_deref_mut(), self.wait.side.waiters());
        let Some(at) = Detector::next_round(detector, waiters, timeout) else {
            return;
        };
        let delay = at.saturating_duration_since(Instant::now());
        let slot: fn(&mut Self) -> &mut Alarm = |act| act.detector().alarm();
        let alarm = self.detector().alarm();
        alarm.set(ctx, delay, slot, |_, ctx| ctx.notify(deadlock::Round));
    }

    fn detector(&mut self) -> &mut Detector {
        self.wait.detector.get_or_insert_with(Box::default)
    }

    /// Drops what was checked of waits that ended, publishes the waits left
    /// (the holders this process's walks read must be the ones holding now),
    /// and drops the detector once nothing is left.
    fn forget_ended_waits(&mut self, ctx: &mut Context<Self>) {
        let Some(detector) = self.wait.detector.as_mut() else {
            return;
        };
        let side = &self.wait.side;
        let waits = |id| side.waiters().any(|w| w.id == id && !w.is_gone());
        let left = detector.forget_ended(waits, &self.name, &self.shared);
        let kind = self.wait.side.kind().kind();
        deadlock::publish(&self.shared, &self.name, kind, &self.held.holdings, left);
        if !self.wait.side.has_waiters() && detector.is_done() {
            detector.alarm().cancel(ctx);
            self.wait.detector = None;
        }
    }
}
