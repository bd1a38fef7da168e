//! The channels-and-timers part of the waiting kit (`actors/waiting/` has the
//! rest) that the lock actor and the synchronizers' [`SyncActor`] share: the
//! channels they listen on, and the alarm that wakes them when no message came.
//!
//! A waiting actor subscribes before a waiter that will wait asks Redis, so
//! that a release between a refused attempt and the subscription is not
//! missed. It goes on once the subscriber confirmed, or once it could not: the
//! subscriber then makes the subscription on reconnect, and the actor's
//! [`Alarm`] (its fallback timer, at most `Config::max_retry_interval` away)
//! covers the gap. It unsubscribes when nobody waits any more. A semaphore or
//! latch has one channel; a lock actor has one, or one per local waiter
//! for a fair lock, and a fair semaphore one per local waiter, which is why
//! [`Listener`] looks channels up by name.
//!
//! A subscription asked for and then dropped before its confirmation came back
//! must not count as live, nor may the confirmation of an older one stand for
//! a newer one. Each subscription therefore carries a number, and only the
//! confirmation of the current one counts.
//!
//! A synchronizer's channels belong to its waiting engine
//! (`actors/waiting/engine/`), which decides when to subscribe and marks them
//! ([`Channel::mark_pending`], [`Channel::off`]); its runner asks the
//! subscriber ([`subscribe`], [`unsubscribe`]).

use std::time::Duration;

use actix::prelude::*;
use tracing::{debug, warn};

use super::subscriber::{Resync, Subscribe, Subscriber, Unlocked, Unsubscribe};
#[cfg(doc)]
use super::waiting::SyncActor;

/// An actor that waits on channels: it is told of unlock messages and of
/// resubscriptions, and it knows what to do once a subscription is made.
pub(crate) trait Listener:
    Actor<Context = Context<Self>> + Handler<Unlocked> + Handler<Resync>
{
    /// Its channel named `name`, if it still has it.
    fn channel(&mut self, name: &str) -> Option<&mut Channel>;

    /// The subscription to `name` is made (confirmed, or left to the
    /// subscriber's reconnect): waiters may ask Redis now.
    fn subscribed(&mut self, name: &str, ctx: &mut Context<Self>);
}

/// Where a channel's subscription stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Off,
    /// Asked for; the subscriber has not answered.
    Pending,
    /// Made.
    Live,
}

/// One channel and its subscription; see the module documentation.
#[derive(Debug)]
pub(crate) struct Channel {
    name: String,
    state: State,
    /// Counts subscriptions asked for: a confirmation counts only for the last.
    asked: u32,
}

impl Channel {
    /// The channel `name`, not subscribed.
    pub(crate) fn new(name: String) -> Channel {
        Channel {
            name,
            state: State::Off,
            asked: 0,
        }
    }

    /// The subscription is made.
    pub(crate) fn is_live(&self) -> bool {
        self.state == State::Live
    }

    /// No subscription is made or asked for.
    pub(crate) fn is_off(&self) -> bool {
        self.state == State::Off
    }

    /// The channel's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Marks the subscription dropped without telling the subscriber (a
    /// waiting engine decides, and its runner tells); answers whether one was
    /// made or asked for, which the subscriber must then hear of.
    pub(crate) fn off(&mut self) -> bool {
        let was_on = self.state != State::Off;
        self.state = State::Off;
        was_on
    }

    /// Marks a subscription asked for (a waiting engine decides to subscribe;
    /// [`subscribe`] then asks, which marks it again).
    pub(crate) fn mark_pending(&mut self) {
        self.state = State::Pending;
    }

    /// Marks the subscription made ([`subscribe`] does this before it tells the
    /// actor; a waiting engine's tests do it themselves).
    pub(crate) fn mark_live(&mut self) {
        self.state = State::Live;
    }
}

/// Runs `then` on the actor after `delay`, beside its alarm (a random start
/// after another process's release, of a few microseconds). The runtime's
/// timers tick in whole milliseconds, so the delay is slept on a
/// blocking-pool thread.
pub(crate) fn after<A>(delay: Duration, ctx: &mut Context<A>, then: fn(&mut A, &mut Context<A>))
where
    A: Actor<Context = Context<A>>,
{
    let slept = actix_rt::task::spawn_blocking(move || std::thread::sleep(delay));
    ctx.spawn(actix::fut::wrap_future::<_, A>(slept).map(move |_, act, ctx| then(act, ctx)));
}

/// Tells `subscriber` that channel `name` is no longer wanted here.
pub(crate) fn unsubscribe(subscriber: &Addr<Subscriber>, name: &str) {
    subscriber.do_send(Unsubscribe {
        channel: name.to_owned(),
    });
}

/// Asks `subscriber` to route `act`'s channel `name` to it; `act.subscribed`
/// runs once that subscription is made, unless it was dropped or asked for
/// again meanwhile. Does nothing if `act` has no such channel.
pub(crate) fn subscribe<A: Listener>(
    act: &mut A,
    name: &str,
    subscriber: &Addr<Subscriber>,
    ctx: &mut Context<A>,
) {
    let Some(channel) = act.channel(name) else {
        return;
    };
    channel.state = State::Pending;
    channel.asked = channel.asked.wrapping_add(1);
    let asked = channel.asked;
    let msg = Subscribe {
        channel: channel.name.clone(),
        unlocked: ctx.address().recipient(),
        resync: ctx.address().recipient(),
    };
    let name = channel.name.clone();
    let subscriber = subscriber.clone();
    ctx.spawn(
        subscriber
            .send(msg)
            .into_actor(act)
            .map(move |answer, act, ctx| {
                let Some(channel) = act.channel(&name) else {
                    return; // dropped
                };
                if channel.asked != asked || channel.state != State::Pending {
                    return; // dropped, or asked for again: that answer decides
                }
                match answer {
                    Ok(true) => {}
                    Ok(false) => {
                        debug!(%name, "subscription not confirmed; the fallback timer covers it")
                    }
                    Err(_) => warn!(%name, "the subscriber is gone; waiters rely on their timers"),
                }
                channel.state = State::Live;
                act.subscribed(&name, ctx);
            }),
    );
}

/// A waiting actor's one-shot timer: setting it replaces the one set before,
/// and it knows whether it is set. The actor keeps it in a field that
/// [`set`](Alarm::set) is told how to reach, so that the alarm clears itself
/// when it rings.
#[derive(Debug, Default)]
pub(crate) struct Alarm(Option<SpawnHandle>);

impl Alarm {
    /// Runs `ring` after `delay`, in place of what was set before. `slot` finds
    /// this alarm in the actor.
    pub(crate) fn set<A>(
        &mut self,
        ctx: &mut Context<A>,
        delay: Duration,
        slot: fn(&mut A) -> &mut Alarm,
        ring: impl FnOnce(&mut A, &mut Context<A>) + 'static,
    ) where
        A: Actor<Context = Context<A>>,
    {
        self.cancel(ctx);
        self.0 = Some(ctx.run_later(delay, move |act, ctx| {
            slot(act).0 = None;
            ring(act, ctx);
        }));
    }

    /// Unsets it.
    pub(crate) fn cancel<A>(&mut self, ctx: &mut Context<A>)
    where
        A: Actor<Context = Context<A>>,
    {
        if let Some(handle) = self.0.take() {
            ctx.cancel_future(handle);
        }
    }

    /// Whether it is set and has not rung.
    pub(crate) fn is_set(&self) -> bool {
        self.0.is_some()
    }

    /// Forgets it without cancelling: after an actor's restart, its timers
    /// belonged to the old context and are gone.
    pub(crate) fn forget(&mut self) {
        self.0 = None;
    }
}
