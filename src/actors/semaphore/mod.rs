//! The [`SemaphoreActor`]: everything about one semaphore name in this process, its
//! waiters, the one attempt in flight and the subscription to its channel. The same
//! actor serves a plain semaphore and a permit-expirable one (`expirable`: its
//! attempts take permits with ids and expiries); giving permits back and the
//! permit-expirable holdings are in `permits.rs`.
//!
//! A semaphore is not a lock (nobody owns a permit; Redisson's `RSemaphore` keeps
//! only a number), so it has an actor of its own rather than a kind file of
//! the lock actor, but it follows the same waiting rules: waiters are woken by the
//! channel `redisson_sc:{name}` (every release publishes the permits available),
//! with a fallback timer (`Config::max_retry_interval`) since pub/sub may lose a
//! message, and a [`Resync`] after the subscriber reconnects. Local waiters do not
//! stampede Redis: only the head of the queue asks, one attempt at a time; a wake
//! that arrives while it is in flight makes it ask once more.
//!
//! **Starvation.** Waiters of one process are served strictly in arrival order:
//! a head asking for five permits is not overtaken by a later local waiter asking
//! for one, and a try-once call ([`TakePermits`] with a zero wait) that finds
//! waiters queued here answers "no" without asking Redis, since what is free is
//! promised to the head. Across processes Redisson's layout has no queue (a key and
//! a channel), so there every process's head competes on each release, as
//! Redisson's own waiters do; a process whose head wants many permits still gets
//! them once enough are free at one moment, but a steady stream of single-permit
//! takers elsewhere can delay it without bound. Where that matters, give the large
//! takers their own semaphore or hold the small ones to the same process.

pub(crate) mod fair;
pub(crate) mod permits;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::actors::listen::{self, Alarm, Channel, Listener};
use crate::actors::shared::{until_first, Shared, ShutDown};
use crate::actors::subscriber::{Resync, Unlocked};
use crate::actors::waiting::{self, on_leaving, timeout, Attempt, Queue, Waited, Waiting, Waits};
use crate::durations::millis;
use crate::error::{redis_is_transient, LockError};
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire::waiting::WaitKind;
use crate::wire::{self, ExpirableAcquire, ExpirableTake, SemAcquire, SemTake};

/// What one attempt found, for either kind of semaphore.
#[derive(Debug, Clone, Copy)]
enum Found {
    /// Taken; this many left.
    Taken { left: u64 },
    /// Too few; a permit with a lease expires in `retry_in`, if any.
    /// `missing`: the key does not exist at all.
    Short {
        retry_in: Option<Duration>,
        missing: bool,
    },
}

/// Take `permits` of the semaphore, waiting up to `wait` (`None`: until taken;
/// zero: one attempt). Answers on `reply` once they are taken. Sent with
/// [`take`], which makes both channels.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct TakePermits {
    /// How many, at least 1 (checked by the caller).
    pub(crate) permits: u32,
    /// How long to wait.
    pub(crate) wait: Option<Duration>,
    /// A permit-expirable semaphore's lease (`None`: the watchdog renews them);
    /// ignored by a plain one.
    pub(crate) lease: Option<Duration>,
    /// Where the answer goes: the caller's end is dropped when it stops
    /// waiting, so a grant that finds nobody goes back.
    pub(crate) reply: oneshot::Sender<Result<Grant, LockError>>,
    /// Resolves when the caller stops waiting (or has its answer): the fair
    /// semaphore's actor takes the waiter's place out of Redis at once.
    pub(crate) gone: oneshot::Receiver<()>,
}

impl TakePermits {
    /// Answers the take at once, and says so, when it must not queue: the
    /// manager is shutting down, or it is a single try while `queued` callers
    /// here arrived first (what frees up is theirs, in either kind of
    /// semaphore). Otherwise hands the take back.
    pub(crate) fn answered_at_once(self, shared: &Shared, queued: bool) -> Option<TakePermits> {
        let refusal = if shared.is_shutting_down() {
            LockError::ShuttingDown
        } else if queued && self.wait == Some(Duration::ZERO) {
            timeout(Duration::ZERO)
        } else {
            return Some(self);
        };
        let _ = self.reply.send(Err(refusal));
        None
    }
}

/// Sends [`TakePermits`] to a semaphore's actor (either kind, or the fair one)
/// and waits for the answer; dropping this future takes the waiter out at once
/// ([`LockError::Stopped`] if the actor stopped first).
pub(crate) async fn take(
    to: &Recipient<TakePermits>,
    permits: u32,
    wait: Option<Duration>,
    lease: Option<Duration>,
) -> Result<Grant, LockError> {
    let (reply, answer) = oneshot::channel();
    // Dropped with this future: the actor hears it through `gone`.
    let (_here, gone) = oneshot::channel::<()>();
    to.do_send(TakePermits {
        permits,
        wait,
        lease,
        reply,
        gone,
    });
    answer.await.unwrap_or(Err(LockError::Stopped))
}

/// The kind of a semaphore that is (or is not) permit-expirable.
fn kind_of(expirable: bool) -> SynchronizerKind {
    if expirable {
        SynchronizerKind::PermitSemaphore
    } else {
        SynchronizerKind::Semaphore
    }
}

/// What a take gave: nothing more for a plain semaphore; the permits' ids and
/// their holding for a permit-expirable one (`permits.rs`).
#[derive(Debug)]
pub(crate) struct Grant {
    /// The permit-expirable semaphore's holding.
    pub(crate) permits: Option<permits::Granted>,
}

/// What one waiting caller wants (the rest of it, deadline and answer, is the
/// kit's waiter: `actors/waiting/queue.rs`), and the op id its attempts carry.
#[derive(Debug, Clone)]
pub(super) struct Want {
    /// Permits it wants.
    pub(super) permits: u32,
    /// A permit-expirable semaphore's lease for it (`None`: watchdog).
    pub(super) lease: Option<Duration>,
    /// The op id of its take, the same for each of its attempts
    /// (`actors/waiting/once.rs`): an attempt asked again after a lost reply
    /// learns what the first copy did.
    pub(super) op: Arc<str>,
    /// A permit-expirable semaphore's permit ids for it, made once so that
    /// every attempt asks for the same permits (empty for a plain one).
    pub(super) ids: Vec<String>,
    /// Its attempt is in flight.
    pub(super) asking: bool,
    /// An attempt of its op id failed without an answer: a copy may have run,
    /// or may still run. Until an answer says `Taken`, leaving undoes its take.
    pub(super) lost: bool,
}

impl Want {
    /// Whether a copy of its take may have run unseen: if it leaves now, its
    /// take is undone (`SemaphoreActor::undo`).
    fn unsure(&self) -> bool {
        self.asking || self.lost
    }
}

/// See the module documentation.
pub(crate) struct SemaphoreActor {
    /// The semaphore's name (its key).
    pub(super) name: Arc<str>,
    /// A permit-expirable semaphore (ids, expiries, renewal) rather than a plain
    /// one.
    pub(super) expirable: bool,
    /// A permit-expirable semaphore's holdings in this process.
    pub(super) holdings: permits::Holdings,
    /// Its channel and the subscription to it (`actors/listen.rs`).
    channel: Channel,
    /// The manager's connection, subscriber and settings.
    pub(super) shared: Arc<Shared>,
    /// Waiters in arrival order (`actors/waiting/queue.rs`).
    waiters: Queue<Want, Grant>,
    /// The head's attempt in flight, wakes meanwhile, failures in a row
    /// (`actors/waiting/attempt.rs`).
    attempt: Attempt,
    /// The fallback / deadline timer.
    timer: Alarm,
    /// Unsubscribes once nobody waited for `Config::idle_timeout`.
    idle: Alarm,
    /// The waiting records and the missing-key warning
    /// (`actors/waiting/records.rs`).
    waiting: Waiting,
}

impl SemaphoreActor {
    pub(crate) fn new(name: Arc<str>, shared: Arc<Shared>, expirable: bool) -> SemaphoreActor {
        SemaphoreActor {
            waiting: Waiting::new(name.clone(), WaitKind::Sync(kind_of(expirable))),
            expirable,
            holdings: Default::default(),
            channel: Channel::new(keys::semaphore_channel(&name)),
            name,
            shared,
            waiters: Queue::default(),
            attempt: Attempt::default(),
            timer: Alarm::default(),
            idle: Alarm::default(),
        }
    }

    /// Which kind it serves, as its key's label names it.
    pub(super) fn kind(&self) -> SynchronizerKind {
        kind_of(self.expirable)
    }

    /// Answers the waiters whose caller left or whose deadline passed; answers
    /// whether there were any.
    fn sweep(&mut self, ctx: &mut Context<Self>) -> bool {
        let gone = self.waiters.sweep(|waited| Err(timeout(waited)));
        let any = !gone.is_empty();
        self.left(gone, ctx);
        any
    }

    /// These waiters are done here: a take of theirs that may have run unseen
    /// is undone.
    fn left(&mut self, gone: Vec<Want>, ctx: &mut Context<Self>) {
        for want in gone {
            if want.unsure() {
                self.undo(want, ctx);
            }
        }
    }

    /// Lets the head ask Redis, if it may now.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        // Waiters that left or ran out of time are answered now, even while
        // an attempt is in flight: a caller hears its deadline on time, and the
        // take of an asking head that left is undone at once, while this
        // process still runs to send it.
        let _ = self.sweep(ctx);
        if !self.attempt.wake() {
            return;
        }
        let Some(head) = self.waiters.front_mut() else {
            self.went_idle(ctx);
            return;
        };
        self.idle.cancel(ctx);
        // A waiter that will wait subscribes before it asks: a release between a
        // refused attempt and the subscription would otherwise go unheard.
        if !head.once && !self.channel.is_live() {
            if self.channel.is_off() {
                let (subscriber, name) = (
                    self.shared.subscriber.clone(),
                    self.channel.name().to_owned(),
                );
                listen::subscribe(self, &name, &subscriber, ctx);
            }
            return;
        }
        self.attempt.start();
        head.want.asking = true;
        let Want {
            permits,
            lease,
            op,
            ids,
            ..
        } = head.want.clone();
        let name = self.name.clone();
        let mut conn = self.shared.node.conn();
        let lease_ms = millis(lease.unwrap_or(self.shared.config.watchdog_lease));
        let once_ms = millis(self.shared.config.latch_ttl);
        let sent = Instant::now();
        let expirable = self.expirable;
        let attempt = async move {
            let once = wire::Once {
                id: &op,
                ttl_ms: once_ms,
            };
            if expirable {
                let call = ExpirableAcquire {
                    name: &name,
                    ids: &ids,
                    lease_ms,
                    once,
                };
                wire::call(&mut conn, &call).await.map(|t| match t {
                    ExpirableTake::Taken { left } => Found::Taken { left },
                    ExpirableTake::Short {
                        expires_in_ms,
                        missing,
                        ..
                    } => Found::Short {
                        retry_in: expires_in_ms.map(Duration::from_millis),
                        missing,
                    },
                })
            } else {
                let call = SemAcquire {
                    name: &name,
                    permits,
                    once,
                };
                wire::call(&mut conn, &call).await.map(|t| match t {
                    SemTake::Taken { left } => Found::Taken { left },
                    SemTake::Short { missing, .. } => Found::Short {
                        retry_in: None,
                        missing,
                    },
                })
            }
        };
        ctx.spawn(attempt.into_actor(self).map(move |res, act, ctx| {
            act.attempt.finish();
            act.attempted(res, sent, ctx);
        }));
        // Deadlines are kept while the attempt is in flight too.
        self.arm(ctx, self.shared.config.max_retry_interval);
    }

    /// What the head's attempt found. The head is the waiter that asked: it
    /// stays at the front while its attempt is in flight (`pump` sweeps only
    /// between attempts), unless the manager shut down meanwhile, which undid
    /// its take already.
    fn attempted(
        &mut self,
        res: redis::RedisResult<Found>,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) {
        let Some(head) = self.waiters.front_mut() else {
            return;
        };
        if !head.want.asking {
            // The waiter that asked left meanwhile, and its take was undone:
            // the new head asks for itself.
            return self.pump(ctx);
        }
        head.want.asking = false;
        if res.is_err() {
            head.want.lost = true;
        }
        match res {
            Ok(Found::Taken { left }) => {
                self.attempt.succeeded();
                self.waiting.key_found();
                let Some(w) = self.waiters.pop_front() else {
                    return;
                };
                let want = w.want.clone();
                let grant = if self.expirable {
                    let granted = self.hold(want.ids.clone(), want.lease, sent, ctx);
                    Grant {
                        permits: Some(granted),
                    }
                } else {
                    Grant { permits: None }
                };
                if let Err(Ok(grant)) = w.answer(Ok(grant)) {
                    // The caller went away while its permits were being taken:
                    // its op id gives them back once.
                    debug!(semaphore = %self.name, permits = want.permits, "taken for a caller that left; giving back");
                    if let Some(granted) = grant.permits {
                        let _ = self.forget(granted.epoch, ctx);
                    }
                    self.undo(want, ctx);
                }
                let next_fits = self
                    .waiters
                    .front()
                    .is_some_and(|n| u64::from(n.want.permits) <= left);
                if next_fits || self.attempt.again() {
                    self.pump(ctx);
                } else {
                    self.arm(ctx, self.shared.config.max_retry_interval);
                }
            }
            Ok(Found::Short { retry_in, missing }) => {
                self.attempt.succeeded();
                if !missing {
                    self.waiting.key_found();
                } else if !head.once {
                    let waited = head.since.elapsed();
                    let waiting = self.waiters.lasting();
                    self.waiting.key_missing(waiting, waited);
                }
                let Some(head) = self.waiters.front_mut() else {
                    return;
                };
                if head.once {
                    if let Some(w) = self.waiters.pop_front() {
                        w.time_out();
                    }
                    self.pump(ctx);
                } else if self.attempt.again() {
                    self.pump(ctx);
                } else {
                    // A permit with a lease frees by itself at its expiry: ask
                    // again then, without waiting for the fallback.
                    let fallback = self.shared.config.max_retry_interval;
                    self.arm(ctx, retry_in.map_or(fallback, |r| r.min(fallback)));
                }
            }
            Err(e) if redis_is_transient(&e) && !head.once => {
                warn!(semaphore = %self.name, error = %e, "semaphore attempt failed; retrying");
                head.last_error = Some(e.clone().into());
                let delay = self.attempt.failed(&self.shared.config, e);
                self.arm(ctx, delay);
            }
            Err(e) => {
                warn!(semaphore = %self.name, error = %e, "semaphore attempt failed");
                if let Some(w) = self.waiters.pop_front() {
                    let want = w.want.clone();
                    let _ = w.answer(Err(e.into()));
                    // A refused take changed nothing; one whose answer is lost
                    // (or unconfirmed by replicas) may have: undone either way.
                    self.undo(want, ctx);
                }
                self.pump(ctx);
            }
        }
    }

    /// Wakes `pump` after `delay`, or at the earliest waiter deadline if sooner.
    fn arm(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let delay = until_first(delay, self.waiters.deadlines());
        self.timer
            .set(ctx, delay, |act: &mut Self| &mut act.timer, Self::pump);
    }

    /// Nobody waits: keep the subscription for a while (waiters come in bursts),
    /// then drop it.
    fn went_idle(&mut self, ctx: &mut Context<Self>) {
        self.timer.cancel(ctx);
        if !self.channel.is_live() || self.idle.is_set() {
            return;
        }
        let after = self.shared.config.idle_timeout;
        self.idle.set(
            ctx,
            after,
            |act: &mut Self| &mut act.idle,
            |act, _| {
                if act.waiters.is_empty() && act.channel.is_live() {
                    act.unsubscribe();
                }
            },
        );
    }

    fn unsubscribe(&mut self) {
        self.channel.unsubscribe(&self.shared.subscriber);
    }
}

impl Actor for SemaphoreActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.unsubscribe();
    }
}

/// The manager shuts down: every waiter is answered `ShuttingDown` (new ones
/// are refused by `TakePermits`). Permits held stay with their guards, which
/// give them back as usual.
impl Handler<ShutDown> for SemaphoreActor {
    type Result = usize;

    fn handle(&mut self, _msg: ShutDown, ctx: &mut Context<Self>) -> usize {
        let gone = self.waiters.answer_all(|| Err(LockError::ShuttingDown));
        self.left(gone, ctx);
        self.timer.cancel(ctx);
        0
    }
}

impl Waits for SemaphoreActor {
    fn waiting(&mut self) -> &mut Waiting {
        &mut self.waiting
    }

    fn waiters_now(&self) -> Vec<Waited> {
        self.waiters.waited(|w| u64::from(w.permits))
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Handler<TakePermits> for SemaphoreActor {
    type Result = ();

    fn handle(&mut self, msg: TakePermits, ctx: &mut Context<Self>) {
        let Some(msg) = msg.answered_at_once(&self.shared, !self.waiters.is_empty()) else {
            return;
        };
        let TakePermits {
            permits,
            wait,
            lease,
            reply,
            gone,
        } = msg;
        // A caller that stops waiting is swept at once (its take undone if an
        // attempt of it is in flight). Only a sweep that took someone out
        // pumps: a wake per finished call would cost an attempt each.
        on_leaving(gone, ctx, |act: &mut Self, ctx| {
            if act.sweep(ctx) {
                act.pump(ctx);
            }
        });
        let once = wait == Some(Duration::ZERO);
        let first = self.waiters.is_empty();
        let ids = if self.expirable {
            permits::new_ids(permits)
        } else {
            Vec::new()
        };
        let want = Want {
            permits,
            lease,
            op: waiting::op_id(),
            ids,
            asking: false,
            lost: false,
        };
        self.waiters.arrive_with(want, wait, once, reply);
        if !once {
            waiting::watch(self, ctx);
        }
        if first && !self.attempt.in_flight() {
            self.pump(ctx);
        } else if wait.is_some() {
            // Queued behind others: it asks when it is the head; until then
            // only its deadline needs watching.
            self.arm(ctx, self.shared.config.max_retry_interval);
        }
    }
}

impl Handler<Unlocked> for SemaphoreActor {
    type Result = ();

    fn handle(&mut self, _msg: Unlocked, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}

impl Listener for SemaphoreActor {
    fn channel(&mut self, _name: &str) -> Option<&mut Channel> {
        Some(&mut self.channel)
    }

    /// `pump` runs again: the head may ask Redis now.
    fn subscribed(&mut self, _name: &str, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}

impl Handler<Resync> for SemaphoreActor {
    type Result = ();

    fn handle(&mut self, _msg: Resync, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}
