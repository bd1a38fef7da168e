//! The [`SemaphoreActor`]: everything about one semaphore name in this process, its
//! waiters, the one attempt in flight and the subscription to its channel. The same
//! actor serves a plain semaphore and a permit-expirable one (`expirable`: its
//! attempts take permits with ids and expiries); giving permits back and the
//! permit-expirable holdings are in `permits.rs`.
//!
//! A semaphore is not a lock (nobody owns a permit; Redisson's `RSemaphore` keeps
//! only a number), so it has an actor of its own rather than a `KindRules` file of
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

pub(crate) mod permits;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::actors::listen::{self, Alarm, Channel, Listener};
use crate::actors::shared::{until_first, Shared, ShutDown};
use crate::actors::subscriber::{Resync, Unlocked};
use crate::actors::waiting::{self, Waited, Waiting, Waits};
use crate::durations::{backoff, millis};
use crate::error::{redis_is_transient, LockError};
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire::waiting::WaitKind;
use crate::wire::{self, ExpirableAcquire, ExpirableTake, SemAcquire, SemTake};

/// What one attempt found, for either kind of semaphore.
#[derive(Debug, Clone, Copy)]
enum Attempt {
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
/// zero: one attempt). Answers once they are taken.
#[derive(Message, Debug)]
#[rtype(result = "Result<Grant, LockError>")]
pub(crate) struct TakePermits {
    /// How many, at least 1 (checked by the caller).
    pub(crate) permits: u32,
    /// How long to wait.
    pub(crate) wait: Option<Duration>,
    /// A permit-expirable semaphore's lease (`None`: the watchdog renews them);
    /// ignored by a plain one.
    pub(crate) lease: Option<Duration>,
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

/// One waiting caller.
#[derive(Debug)]
struct Waiter {
    /// Its id in the waiting records (`actors/waiting.rs`).
    id: u64,
    /// Permits it wants.
    permits: u32,
    /// When it gives up (`None`: never).
    deadline: Option<Instant>,
    /// A single attempt (zero wait).
    once: bool,
    /// When it arrived, for the `Timeout` it may get.
    since: Instant,
    /// A permit-expirable semaphore's lease for it (`None`: watchdog).
    lease: Option<Duration>,
    /// The transient Redis error its last attempt met, answered at its deadline.
    last_error: Option<LockError>,
    /// Where its answer goes; closed when the caller went away.
    tx: oneshot::Sender<Result<Grant, LockError>>,
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
    /// Waiters in arrival order.
    waiters: VecDeque<Waiter>,
    /// An attempt is in flight.
    trying: bool,
    /// A wake arrived while the attempt was in flight: ask again at once.
    again: bool,
    /// The fallback / deadline timer.
    timer: Alarm,
    /// Unsubscribes once nobody waited for `Config::idle_timeout`.
    idle: Alarm,
    /// Transient failures in a row, for the backoff.
    failures: u32,
    /// The waiting records and the missing-key warning (`actors/waiting.rs`).
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
            waiters: VecDeque::new(),
            trying: false,
            again: false,
            timer: Alarm::default(),
            idle: Alarm::default(),
            failures: 0,
        }
    }

    /// Which kind it serves, as its key's label names it.
    pub(super) fn kind(&self) -> SynchronizerKind {
        kind_of(self.expirable)
    }

    /// Answers the waiters whose caller left or whose deadline passed.
    fn sweep(&mut self) {
        let now = Instant::now();
        let mut kept = VecDeque::with_capacity(self.waiters.len());
        for mut w in self.waiters.drain(..) {
            if w.tx.is_closed() {
                continue;
            }
            if !w.once && w.deadline.is_some_and(|d| d <= now) {
                let err = w.last_error.take().unwrap_or(LockError::Timeout {
                    waited: now - w.since,
                    holder: None,
                });
                let _ = w.tx.send(Err(err));
                continue;
            }
            kept.push_back(w);
        }
        self.waiters = kept;
    }

    /// Lets the head ask Redis, if it may now.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.trying {
            self.again = true;
            return;
        }
        self.sweep();
        let Some(head) = self.waiters.front() else {
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
        self.trying = true;
        self.again = false;
        let (permits, lease) = (head.permits, head.lease);
        let name = self.name.clone();
        let mut conn = self.shared.node.conn();
        let ids = if self.expirable {
            permits::new_ids(permits)
        } else {
            Vec::new()
        };
        let lease_ms = millis(lease.unwrap_or(self.shared.config.watchdog_lease));
        let sent = Instant::now();
        let expirable = self.expirable;
        let attempt = async move {
            let res = if expirable {
                let call = ExpirableAcquire {
                    name: &name,
                    ids: &ids,
                    lease_ms,
                };
                wire::call(&mut conn, &call).await.map(|t| match t {
                    ExpirableTake::Taken { left } => Attempt::Taken { left },
                    ExpirableTake::Short {
                        expires_in_ms,
                        missing,
                        ..
                    } => Attempt::Short {
                        retry_in: expires_in_ms.map(Duration::from_millis),
                        missing,
                    },
                })
            } else {
                let call = SemAcquire {
                    name: &name,
                    permits,
                };
                wire::call(&mut conn, &call).await.map(|t| match t {
                    SemTake::Taken { left } => Attempt::Taken { left },
                    SemTake::Short { missing, .. } => Attempt::Short {
                        retry_in: None,
                        missing,
                    },
                })
            };
            (res, ids)
        };
        ctx.spawn(attempt.into_actor(self).map(move |(res, ids), act, ctx| {
            act.trying = false;
            act.attempted(res, ids, sent, ctx);
        }));
    }

    /// What the head's attempt found.
    fn attempted(
        &mut self,
        res: redis::RedisResult<Attempt>,
        ids: Vec<String>,
        sent: Instant,
        ctx: &mut Context<Self>,
    ) {
        if res.is_err() && !ids.is_empty() {
            // The reply is lost, not the script: it may have taken these permits.
            // Giving back ids that were not taken changes nothing.
            self.give_ids(ids.clone(), ctx);
        }
        let Some(head) = self.waiters.front_mut() else {
            if res
                .as_ref()
                .is_ok_and(|a| matches!(a, Attempt::Taken { .. }))
            {
                self.give_ids(ids, ctx);
            }
            return;
        };
        match res {
            Ok(Attempt::Taken { left }) => {
                self.failures = 0;
                self.waiting.key_found();
                let Some(w) = self.waiters.pop_front() else {
                    return;
                };
                let grant = if self.expirable {
                    let granted = self.hold(ids.clone(), w.lease, sent, ctx);
                    Grant {
                        permits: Some(granted),
                    }
                } else {
                    Grant { permits: None }
                };
                if let Err(Ok(grant)) = w.tx.send(Ok(grant)) {
                    // The caller went away while its permits were being taken.
                    debug!(semaphore = %self.name, permits = w.permits, "taken for a caller that left; giving back");
                    match grant.permits {
                        Some(granted) => self.end_holding(granted.epoch, ctx),
                        None => self.give(w.permits, ctx),
                    }
                }
                let next_fits = self
                    .waiters
                    .front()
                    .is_some_and(|n| u64::from(n.permits) <= left);
                if next_fits || self.again {
                    self.pump(ctx);
                } else {
                    self.arm(ctx, self.shared.config.max_retry_interval);
                }
            }
            Ok(Attempt::Short { retry_in, missing }) => {
                self.failures = 0;
                if !missing {
                    self.waiting.key_found();
                } else if !head.once {
                    let waited = head.since.elapsed();
                    let waiting = self.waiters.iter().filter(|w| !w.once).count();
                    self.waiting.key_missing(waiting, waited);
                }
                let Some(head) = self.waiters.front_mut() else {
                    return;
                };
                if head.once {
                    if let Some(w) = self.waiters.pop_front() {
                        let waited = w.since.elapsed();
                        let _ = w.tx.send(Err(LockError::Timeout {
                            waited,
                            holder: None,
                        }));
                    }
                    self.pump(ctx);
                } else if self.again {
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
                head.last_error = Some(e.into());
                let delay = backoff(
                    self.shared.config.reconnect_min,
                    self.shared.config.reconnect_max,
                    self.failures,
                );
                self.failures = self.failures.saturating_add(1);
                self.arm(ctx, delay);
            }
            Err(e) => {
                warn!(semaphore = %self.name, error = %e, "semaphore attempt failed");
                if let Some(w) = self.waiters.pop_front() {
                    let _ = w.tx.send(Err(e.into()));
                }
                self.pump(ctx);
            }
        }
    }

    /// Wakes `pump` after `delay`, or at the earliest waiter deadline if sooner.
    fn arm(&mut self, ctx: &mut Context<Self>, delay: Duration) {
        let delay = until_first(delay, self.waiters.iter().filter_map(|w| w.deadline));
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
        for w in self.waiters.drain(..) {
            let _ = w.tx.send(Err(LockError::ShuttingDown));
        }
        self.timer.cancel(ctx);
        0
    }
}

impl Waits for SemaphoreActor {
    fn waiting(&mut self) -> &mut Waiting {
        &mut self.waiting
    }

    fn waiters_now(&self) -> Vec<Waited> {
        let waits = self.waiters.iter().filter(|w| !w.once && !w.tx.is_closed());
        waits
            .map(|w| Waited {
                id: w.id,
                since: w.since,
                wants: u64::from(w.permits),
                owner_field: None,
            })
            .collect()
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl Handler<TakePermits> for SemaphoreActor {
    type Result = ResponseFuture<Result<Grant, LockError>>;

    fn handle(&mut self, msg: TakePermits, ctx: &mut Context<Self>) -> Self::Result {
        if self.shared.is_shutting_down() {
            return Box::pin(async { Err(LockError::ShuttingDown) });
        }
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        let once = msg.wait == Some(Duration::ZERO);
        if once && !self.waiters.is_empty() {
            // What frees up is promised to the waiters already queued here.
            let _ = tx.send(Err(LockError::Timeout {
                waited: Duration::ZERO,
                holder: None,
            }));
        } else {
            let first = self.waiters.is_empty();
            self.waiters.push_back(Waiter {
                id: Waiting::next_id(),
                permits: msg.permits,
                deadline: msg.wait.and_then(|w| now.checked_add(w)),
                once,
                since: now,
                lease: msg.lease,
                last_error: None,
                tx,
            });
            if !once {
                waiting::watch(self, ctx);
            }
            if first && !self.trying {
                self.pump(ctx);
            } else if msg.wait.is_some() {
                // Queued behind others: it asks when it is the head; until then
                // only its deadline needs watching.
                self.arm(ctx, self.shared.config.max_retry_interval);
            }
        }
        Box::pin(async move { rx.await.map_err(|_| LockError::Stopped)? })
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
