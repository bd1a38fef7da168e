//! The channel a waiting actor listens on, as one kit: the semaphore and latch
//! actors each wait on one channel, and both need the same three things of it.
//! They subscribe before a waiter that will wait asks Redis, so that a release
//! between a refused attempt and the subscription is not missed. They go on
//! once the subscriber confirmed, or once it could not: it then makes the
//! subscription on reconnect, and the actor's fallback timer covers the gap.
//! And they unsubscribe when nobody waits any more.
//!
//! A subscription asked for and then dropped before its confirmation came back
//! must not count as live, nor may the confirmation of an older one stand for
//! a newer one. Each subscription therefore carries a number, and only the
//! confirmation of the current one counts. (Before this kit the semaphore could
//! mark a dropped subscription live, and waited for its fallback timer then.)

use actix::prelude::*;
use tracing::debug;

use super::subscriber::{Resync, Subscribe, Subscriber, Unlocked, Unsubscribe};

/// An actor that waits on one channel: it is told of unlock messages and of
/// resubscriptions, and it knows what to do once its subscription is made.
pub(crate) trait Listener:
    Actor<Context = Context<Self>> + Handler<Unlocked> + Handler<Resync>
{
    /// Its channel.
    fn channel(&mut self) -> &mut Channel;

    /// The subscription is made (confirmed, or left to the subscriber's
    /// reconnect): waiters may ask Redis now.
    fn subscribed(&mut self, ctx: &mut Context<Self>);
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

    /// A subscription is asked for and not answered yet.
    pub(crate) fn is_pending(&self) -> bool {
        self.state == State::Pending
    }

    /// No subscription is made or asked for.
    pub(crate) fn is_off(&self) -> bool {
        self.state == State::Off
    }

    /// Drops the subscription, made or asked for.
    pub(crate) fn unsubscribe(&mut self, subscriber: &Addr<Subscriber>) {
        if self.state != State::Off {
            self.state = State::Off;
            subscriber.do_send(Unsubscribe {
                channel: self.name.clone(),
            });
        }
    }
}

/// Asks `subscriber` to route `act`'s channel to it; `act.subscribed` runs once
/// that subscription is made, unless it was dropped or asked for again meanwhile.
pub(crate) fn subscribe<A: Listener>(
    act: &mut A,
    subscriber: &Addr<Subscriber>,
    ctx: &mut Context<A>,
) {
    let channel = act.channel();
    channel.state = State::Pending;
    channel.asked = channel.asked.wrapping_add(1);
    let asked = channel.asked;
    let msg = Subscribe {
        channel: channel.name.clone(),
        unlocked: ctx.address().recipient(),
        resync: ctx.address().recipient(),
    };
    let subscriber = subscriber.clone();
    let fut = async move { subscriber.send(msg).await.unwrap_or(false) };
    ctx.spawn(fut.into_actor(act).map(move |confirmed, act, ctx| {
        let channel = act.channel();
        if channel.asked != asked || channel.state != State::Pending {
            return; // dropped, or asked for again: that answer decides
        }
        if !confirmed {
            debug!(channel = %channel.name, "subscription not confirmed; the fallback timer covers it");
        }
        channel.state = State::Live;
        act.subscribed(ctx);
    }));
}
