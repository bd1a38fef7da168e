//! The two semaphore policies without a queue in Redis: [`Plain`] (Redisson's
//! `RSemaphore`: a number at the name) and [`Expirable`] (its
//! `RPermitExpirableSemaphore`: permits with ids and expiries). They decide
//! alike: the head of the local queue asks, after it listens on the name's
//! one channel; a grant lets the next ask at once only if the permits left
//! cover it; a short answer waits for a wake, or for a permit's lease to run
//! out. They differ only in their scripts and in their grant: a
//! permit-expirable take is a holding, renewed or timed (`permits.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use futures::FutureExt;

use super::permits::new_ids;
use super::{Grant, Takes};
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::{Ask, Found, Policy, Then, Waiter, Waiters};
use crate::actors::waiting::{self, Calls, SyncActor};
use crate::keys;
use crate::sync_view::SynchronizerKind;
use crate::wire::{
    self, ExpirableAcquire, ExpirableRelease, ExpirableTake, SemAcquire, SemTake, SemUndo, Undone,
};

/// What one waiting take of either policy wants.
#[derive(Debug, Clone)]
pub(crate) struct SemWant {
    /// Permits it wants.
    pub(crate) permits: u32,
    /// A permit-expirable take's lease (`None`: the watchdog renews them).
    pub(crate) lease: Option<Duration>,
    /// A permit-expirable take's permit ids, made once so that every
    /// attempt asks for the same permits (empty for a plain one).
    pub(crate) ids: Vec<String>,
}

/// The plain semaphore's policy.
#[derive(Debug)]
pub(crate) struct Plain {
    name: Arc<str>,
}

/// The permit-expirable semaphore's policy.
#[derive(Debug)]
pub(crate) struct Expirable {
    name: Arc<str>,
}

impl Plain {
    pub(crate) fn new(name: Arc<str>) -> Plain {
        Plain { name }
    }
}

impl Expirable {
    pub(crate) fn new(name: Arc<str>) -> Expirable {
        Expirable { name }
    }
}

/// The name's one channel, for a waiter that will wait.
fn channel_of<P: Policy>(name: &str, w: &Waiter<P>) -> Option<String> {
    (!w.once).then(|| keys::semaphore_channel(name))
}

/// After a grant: the next head asks at once only if the permits left cover
/// it (else it waits for a release).
fn next_fits<P: Policy<Want = SemWant>>(left: u64, waiters: &Waiters<P>) -> Then {
    let fits = waiters
        .front()
        .is_some_and(|n| u64::from(n.want.want.permits) <= left);
    if fits {
        Then::Pump
    } else {
        Then::Wait(None)
    }
}

/// The op id an attempt of a semaphore carries (every semaphore waiter has one).
fn op_of(ask: &Ask<SemWant>) -> Arc<str> {
    ask.op.clone().unwrap_or_else(waiting::op_id)
}

/// The decisions both policies share (see the module documentation), written
/// once for each `impl Policy`: `$reply` is the policy's take script's answer.
macro_rules! alike {
    ($reply:ty) => {
        type Want = SemWant;
        type Grant = Grant;
        type Won = ();
        type Reply = $reply;
        const LABEL: &'static str = "semaphore";

        fn name(&self) -> &str {
            &self.name
        }

        fn wants(&self, want: &SemWant) -> u64 {
            u64::from(want.permits)
        }

        /// Only a newcomer to an idle queue asks; the others wait for a wake.
        fn asks_on_arrival(&self, first: bool, in_flight: bool) -> bool {
            first && !in_flight
        }

        fn channel(&self, w: &Waiter<Self>) -> Option<String> {
            channel_of::<Self>(&self.name, w)
        }

        fn lingers(&self) -> bool {
            true
        }

        fn after_grant(&mut self, left: u64, _: &Self::Want, waiters: &mut Waiters<Self>) -> Then {
            next_fits::<Self>(left, waiters)
        }
    };
}

impl Policy for Plain {
    alike!(SemTake);

    fn classify(&mut self, reply: SemTake) -> Found<()> {
        match reply {
            SemTake::Taken { left } => Found::Taken { left, won: () },
            SemTake::Short { missing, .. } => Found::Short {
                retry_in: None,
                missing,
                first: None,
            },
        }
    }
}

impl Policy for Expirable {
    alike!(ExpirableTake);

    /// A permit with a lease frees by itself at its expiry: ask again then,
    /// without waiting for the fallback.
    fn classify(&mut self, reply: ExpirableTake) -> Found<()> {
        match reply {
            ExpirableTake::Taken { left } => Found::Taken { left, won: () },
            ExpirableTake::Short {
                expires_in_ms,
                missing,
                ..
            } => Found::Short {
                retry_in: expires_in_ms.map(Duration::from_millis),
                missing,
                first: None,
            },
        }
    }
}

impl Calls for Plain {
    type Extra = ();
    const KIND: SynchronizerKind = SynchronizerKind::Semaphore;

    fn ask(
        shared: &Shared,
        name: &Arc<str>,
        ask: Ask<SemWant>,
    ) -> LocalBoxFuture<'static, redis::RedisResult<SemTake>> {
        let (mut conn, name, config) = (shared.node.conn(), name.clone(), shared.config.clone());
        let op = op_of(&ask);
        async move {
            let once = waiting::once(&config, &op);
            let permits = ask.want.permits;
            let call = SemAcquire {
                name: &name,
                permits,
                once,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    fn undo(
        shared: &Shared,
        name: &Arc<str>,
        op: &Arc<str>,
        want: &SemWant,
    ) -> LocalBoxFuture<'static, redis::RedisResult<Undone>> {
        let (mut conn, name, config) = (shared.node.conn(), name.clone(), shared.config.clone());
        let (op, permits) = (op.clone(), want.permits);
        async move {
            let once = waiting::once(&config, &op);
            let call = SemUndo {
                name: &name,
                permits,
                once,
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    fn grant(
        _act: &mut SyncActor<Self>,
        _want: &SemWant,
        _won: Option<()>,
        _sent: Instant,
        _ctx: &mut Context<SyncActor<Self>>,
    ) -> Grant {
        Grant { permits: None }
    }
}

impl Calls for Expirable {
    type Extra = super::permits::Holdings;
    const KIND: SynchronizerKind = SynchronizerKind::PermitSemaphore;

    fn ask(
        shared: &Shared,
        name: &Arc<str>,
        ask: Ask<SemWant>,
    ) -> LocalBoxFuture<'static, redis::RedisResult<ExpirableTake>> {
        let (mut conn, name, config) = (shared.node.conn(), name.clone(), shared.config.clone());
        let op = op_of(&ask);
        let lease_ms = crate::durations::millis(ask.want.lease.unwrap_or(config.watchdog_lease));
        async move {
            let call = ExpirableAcquire {
                name: &name,
                ids: &ask.want.ids,
                lease_ms,
                once: waiting::once(&config, &op),
            };
            wire::call(&mut conn, &call).await
        }
        .boxed_local()
    }

    /// Gives back whichever of the take's permits a copy took.
    fn undo(
        shared: &Shared,
        name: &Arc<str>,
        op: &Arc<str>,
        want: &SemWant,
    ) -> LocalBoxFuture<'static, redis::RedisResult<Undone>> {
        let (mut conn, name, config) = (shared.node.conn(), name.clone(), shared.config.clone());
        let (op, ids) = (op.clone(), want.ids.clone());
        async move {
            let call = ExpirableRelease {
                name: &name,
                ids: &ids,
                once: waiting::once(&config, &op),
                undo: true,
            };
            let back = wire::call(&mut conn, &call).await?;
            Ok(if back > 0 {
                Undone::GaveBack
            } else {
                Undone::Cancelled
            })
        }
        .boxed_local()
    }

    fn grant(
        act: &mut SyncActor<Self>,
        want: &SemWant,
        _won: Option<()>,
        sent: Instant,
        ctx: &mut Context<SyncActor<Self>>,
    ) -> Grant {
        let granted = act.hold(want.ids.clone(), want.lease, sent, ctx);
        Grant {
            permits: Some(granted),
        }
    }

    /// Nobody takes the holding: it ends here (the undo gives the permits back).
    fn ungrant(act: &mut SyncActor<Self>, grant: Grant, ctx: &mut Context<SyncActor<Self>>) {
        if let Some(granted) = grant.permits {
            let _ = act.forget(granted.epoch, ctx);
        }
    }
}

impl Takes for Plain {
    fn want(&self, permits: u32, lease: Option<Duration>) -> SemWant {
        SemWant {
            permits,
            lease,
            ids: Vec::new(),
        }
    }
}

impl Takes for Expirable {
    fn want(&self, permits: u32, lease: Option<Duration>) -> SemWant {
        SemWant {
            permits,
            lease,
            ids: new_ids(permits),
        }
    }
}
