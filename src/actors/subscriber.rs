//! The [`Subscriber`] actor: the process's one pub/sub connection, routing unlock
//! messages to the lock actors that wait on them.
//!
//! Pub/sub is only a hint (messages published while the connection is down are gone
//! for good), so every lock actor also keeps a fallback timer. What the subscriber
//! adds is speed: a waiter learns of a release one message after it happens instead
//! of when the holder's TTL would have run out. It runs under an actix `Supervisor`:
//! when the connection drops, its message stream ends, the actor stops and is
//! restarted as the same struct, so the channel map survives. On every (re)connect it
//! subscribes every routed channel again and sends [`Resync`] to each lock actor so
//! that an unlock missed during the gap cannot leave a waiter asleep.
//!
//! On a Redis Cluster the connection (`node::Sink`) spans the shards and outlives a
//! node that drops: redis-rs resubscribes that node's channels when it comes back.
//! The subscriber still has two jobs there. When a node's connection drops
//! ([`Event::Disconnected`]) it subscribes every routed channel again, with
//! backoff until the shard answers (a failover takes seconds), then resyncs and
//! tells the renewer, as after a reconnect. When the server drops one channel by
//! itself because its slot moved ([`Event::Dropped`]), it subscribes that one
//! again, on the slot's new owner, and resyncs its lock actor.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use actix::WeakRecipient;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::renewer::Reconnected;
use crate::config::Config;
use crate::durations::backoff;
use crate::keys;
use crate::node::{Event, PubSubSource, Sink};
use crate::stats::Counters;

/// A lock's unlock message arrived: retry for one waiter, or for all of them.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub(crate) struct Unlocked {
    /// The channel it came on (a fair lock has one per waiter).
    pub(crate) channel: String,
    /// `true` for message `1` (all waiters may proceed), `false` for `0`.
    pub(crate) wake_all: bool,
    /// A direct handoff's message (`g<token>,<owner field>`, on a handoff
    /// channel: `lua/release.lua`): that field holds the lock now.
    pub(crate) grant: Option<String>,
}

/// The subscriber (re)connected: messages may have been lost, so retry now.
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "()")]
pub(crate) struct Resync;

/// Route `channel`'s messages to `recipient`, subscribing if needed. Replies `true`
/// once Redis confirmed the subscription, `false` if it could not be made now (it
/// is made on reconnect, followed by a [`Resync`]).
#[derive(Message)]
#[rtype(result = "bool")]
pub(crate) struct Subscribe {
    pub(crate) channel: String,
    pub(crate) unlocked: Recipient<Unlocked>,
    pub(crate) resync: Recipient<Resync>,
}

/// Stop routing `channel` and unsubscribe from it.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Unsubscribe {
    pub(crate) channel: String,
}

/// Where one channel's messages go. Weak: routing must not keep a lock actor alive
/// (a retired one must be able to stop), and a dead one is simply skipped.
struct Route {
    /// Receives the unlock messages.
    unlocked: WeakRecipient<Unlocked>,
    /// Receives a [`Resync`] after every reconnect.
    resync: WeakRecipient<Resync>,
    /// Redis refused the subscription for want of rights. Left out of every
    /// resubscription: one refused channel in a batch would fail the whole
    /// reconnect, over and over. Its actor polls; the route goes when it
    /// unsubscribes, and its next subscription asks again (rights may have come).
    denied: bool,
}

/// The pub/sub actor; see the module documentation.
pub(crate) struct Subscriber {
    /// Where its connections come from (the node seam).
    source: PubSubSource,
    /// Settings: backoff and timeouts.
    config: Arc<Config>,
    /// Subscribes and unsubscribes on the live connection; `None` while disconnected.
    sink: Option<Sink>,
    /// Channel -> lock actor. Kept across restarts: it is what gets resubscribed.
    routes: HashMap<String, Route>,
    /// Failed connection attempts since the last success, for the backoff.
    attempts: u32,
    /// Shared counters (reconnects).
    counters: Arc<Counters>,
    /// Told after every reconnect (not a first connect that succeeded at its
    /// first attempt): the renewer then checks
    /// every held lock at once, since a server that went away may have lost them.
    reconnected: Recipient<Reconnected>,
    /// Whether a connection was ever made (the next one is a reconnect).
    connected_once: bool,
    /// A resubscription after a dropped cluster node is under way.
    resubscribing: bool,
    /// Whether a subscription refused for want of rights was already logged at
    /// warn: said once per manager, since every lock it waits on would say it.
    told_denied: bool,
    /// Closed when the manager and every actor sharing it are gone (its sender
    /// lives in their `Shared`). The subscriber then stops, and its connection
    /// closes: the stream it reads would otherwise keep it running, connected,
    /// for as long as the process lives.
    manager: watch::Receiver<()>,
}

impl Subscriber {
    pub(crate) fn new(
        source: PubSubSource,
        config: Arc<Config>,
        counters: Arc<Counters>,
        reconnected: Recipient<Reconnected>,
        manager: watch::Receiver<()>,
    ) -> Subscriber {
        Subscriber {
            manager,
            reconnected,
            connected_once: false,
            resubscribing: false,
            told_denied: false,
            source,
            config,
            sink: None,
            routes: HashMap::new(),
            attempts: 0,
            counters,
        }
    }

    /// Connects, then resubscribes every routed channel and resyncs their actors.
    /// Nothing else is handled until this finishes (`ctx.wait`), so no Subscribe can
    /// slip in between the connection and the resubscription.
    fn connect(&mut self, ctx: &mut Context<Self>) {
        let source = self.source.clone();
        let timeout = self.config.connection_timeout;
        let channels = self.subscribable();
        let fut = async move {
            let (mut sink, stream) = source.open().await?;
            if !channels.is_empty() {
                tokio::time::timeout(timeout, sink.subscribe(&channels))
                    .await
                    .map_err(|_| "timed out resubscribing".to_string())?
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>((sink, stream, channels.len()))
        };
        ctx.wait(fut.into_actor(self).map(|res, act, ctx| match res {
            Ok((sink, stream, resubscribed)) => {
                if act.attempts > 0 {
                    info!(channels = resubscribed, "pub/sub reconnected and resubscribed");
                } else {
                    debug!("pub/sub connected");
                }
                // A first connection that only came after failed attempts is a
                // reconnect too: the server went away after the manager started
                // (locks may already be held on it).
                let after_failures = act.attempts > 0;
                act.attempts = 0;
                if std::mem::replace(&mut act.connected_once, true) || after_failures {
                    crate::stats::record::resubscribed(resubscribed);
                    // The pub/sub connection and the command connection reach the
                    // same server: this one coming back is the earliest sign that
                    // the server may have restarted or failed over.
                    act.reconnected.do_send(Reconnected);
                }
                act.sink = Some(sink);
                ctx.add_stream(stream);
                act.routes.retain(|_, route| route.resync.upgrade().is_some());
                info!(channels = act.routes.len(), "resyncing lock actors after (re)connect");
                for route in act.routes.values() {
                    if let Some(actor) = route.resync.upgrade() {
                        actor.do_send(Resync);
                    }
                }
            }
            Err(why) => {
                let delay = backoff(
                    act.config.reconnect_min,
                    act.config.reconnect_max,
                    act.attempts,
                );
                act.attempts = act.attempts.saturating_add(1);
                warn!(error = %why, retry_in = ?delay, attempt = act.attempts, "pub/sub connection failed");
                // Stopping hands the actor to its Supervisor, which restarts it.
                ctx.run_later(delay, |_, ctx| ctx.stop());
            }
        }));
    }
}

impl Actor for Subscriber {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let mut manager = self.manager.clone();
        // Nothing is ever sent: `changed` ends only when the sender is dropped.
        let gone = async move { while manager.changed().await.is_ok() {} };
        ctx.spawn(gone.into_actor(self).map(|(), _, ctx| {
            debug!("the manager is gone; the subscriber stops");
            ctx.stop();
        }));
        self.connect(ctx);
    }
}

impl Supervised for Subscriber {
    fn restarting(&mut self, _ctx: &mut Context<Self>) {
        // The old stream and sink belong to a dead connection.
        self.sink = None;
        self.counters.reconnect();
    }
}

impl StreamHandler<Event> for Subscriber {
    fn handle(&mut self, event: Event, ctx: &mut Context<Self>) {
        match event {
            Event::Message { channel, payload } => self.route(channel, &payload),
            Event::Dropped { channel } => self.dropped(channel, ctx),
            Event::Disconnected => {
                self.counters.reconnect();
                self.resubscribe_all(ctx, 0);
            }
        }
    }

    fn finished(&mut self, ctx: &mut Context<Self>) {
        warn!(
            channels = self.routes.len(),
            "pub/sub connection lost; reconnecting"
        );
        ctx.stop();
    }
}

impl Subscriber {
    /// The routed channels to subscribe again after a reconnect: all but those
    /// Redis refused for want of rights.
    fn subscribable(&self) -> Vec<String> {
        let routes = self.routes.iter().filter(|(_, route)| !route.denied);
        routes.map(|(channel, _)| channel.clone()).collect()
    }

    /// Logs a subscription Redis refused for want of rights: once per manager at
    /// warn (without it every waiter is late by up to `max_retry_interval`, and
    /// nothing else would say why), then at debug.
    fn tell_denied(&mut self, channel: &str, error: &redis::RedisError) {
        if std::mem::replace(&mut self.told_denied, true) {
            debug!(error = %error, channel, "subscribe refused (no rights); waiters poll");
            return;
        }
        warn!(
            error = %error,
            channel,
            poll_every = ?self.config.max_retry_interval,
            "Redis refused SUBSCRIBE for want of rights: waiters are not woken by \
             releases and poll instead, so they are late by up to poll_every; give \
             this Redis user +subscribe +unsubscribe (+ssubscribe +sunsubscribe on \
             a cluster) and the channel patterns in docs/operations.md (said once)"
        );
    }

    /// Hands an unlock message to the lock actor routed on its channel.
    fn route(&self, channel: String, payload: &[u8]) {
        let Some(actor) = self.routes.get(&channel).and_then(|r| r.unlocked.upgrade()) else {
            return;
        };
        match payload {
            b if b == keys::WAKE_ONE.as_bytes() => actor.do_send(Unlocked {
                channel,
                wake_all: false,
                grant: None,
            }),
            b if b == keys::WAKE_ALL.as_bytes() => actor.do_send(Unlocked {
                channel,
                wake_all: true,
                grant: None,
            }),
            // A semaphore's channel carries the number of permits available after
            // a release (Redisson's message): any waiter may fit now.
            b if is_number(b) => actor.do_send(Unlocked {
                channel,
                wake_all: true,
                grant: None,
            }),
            b if b.first() == Some(&b'g') => actor.do_send(Unlocked {
                channel,
                wake_all: false,
                grant: Some(String::from_utf8_lossy(&b[1..]).into_owned()),
            }),
            other => debug!(channel, payload = ?other, "ignored unknown message"),
        }
    }

    /// The server dropped `channel` (its slot moved): subscribe it again, which
    /// redis-rs routes to the slot's new owner, then resync its lock actor, since
    /// a release may have happened in between. An unrouted channel is one this
    /// actor unsubscribed itself.
    fn dropped(&mut self, channel: String, ctx: &mut Context<Self>) {
        let Some(route) = self.routes.get(&channel) else {
            return;
        };
        let Some(mut sink) = self.sink.clone() else {
            return;
        };
        let resync = route.resync.clone();
        let timeout = self.config.response_timeout;
        info!(
            channel,
            "the server dropped a subscription (slot moved); subscribing again"
        );
        let fut = async move {
            tokio::time::timeout(timeout, sink.subscribe(std::slice::from_ref(&channel)))
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| {
            if res.is_ok() {
                crate::stats::record::resubscribed(1);
            }
            if let Err(why) = res {
                // The slot may still be moving: treat it as a dropped node, which
                // retries every channel with backoff.
                warn!(error = %why, "resubscribing a moved channel failed; retrying");
                act.resubscribe_all(ctx, 0);
            }
            if let Some(actor) = resync.upgrade() {
                actor.do_send(Resync);
            }
        }));
    }

    /// A cluster node's connection dropped: subscribe every routed channel again
    /// (with backoff until the shards answer), then resync every lock actor and
    /// tell the renewer, as after a reconnect of a single server's connection.
    fn resubscribe_all(&mut self, ctx: &mut Context<Self>, attempt: u32) {
        if attempt == 0 && std::mem::replace(&mut self.resubscribing, true) {
            return; // one round at a time; it covers this drop too
        }
        let Some(mut sink) = self.sink.clone() else {
            self.resubscribing = false;
            return;
        };
        let delay = backoff(
            self.config.reconnect_min,
            self.config.reconnect_max,
            attempt,
        );
        let channels = self.subscribable();
        let timeout = self.config.response_timeout;
        let fut = async move {
            tokio::time::sleep(delay).await;
            tokio::time::timeout(timeout, sink.subscribe(&channels))
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        };
        ctx.spawn(fut.into_actor(self).map(move |res, act, ctx| match res {
            Ok(()) => {
                act.resubscribing = false;
                crate::stats::record::resubscribed(act.routes.len());
                info!(
                    channels = act.routes.len(),
                    "cluster pub/sub resubscribed after a node dropped; resyncing"
                );
                act.reconnected.do_send(Reconnected);
                for route in act.routes.values() {
                    if let Some(actor) = route.resync.upgrade() {
                        actor.do_send(Resync);
                    }
                }
            }
            Err(why) => {
                warn!(error = %why, attempt, "cluster pub/sub resubscription failed; retrying");
                act.resubscribe_all(ctx, attempt.saturating_add(1));
            }
        }));
    }
}

impl Handler<Subscribe> for Subscriber {
    // Atomic: nothing else is handled until Redis confirms, so subscribes and
    // unsubscribes of one channel reach Redis in the order they were asked for.
    type Result = AtomicResponse<Self, bool>;

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Context<Self>) -> Self::Result {
        // The route goes in first: a message that arrives right after the
        // confirmation must find it.
        self.routes.insert(
            msg.channel.clone(),
            Route {
                unlocked: msg.unlocked.downgrade(),
                resync: msg.resync.downgrade(),
                denied: false,
            },
        );
        let sink = self.sink.clone();
        let timeout = self.config.response_timeout;
        let channel = msg.channel;
        let fut = async move {
            let Some(mut sink) = sink else {
                return (channel, None);
            };
            let subscribing = sink.subscribe(std::slice::from_ref(&channel));
            let result = tokio::time::timeout(timeout, subscribing).await;
            (channel, Some(result))
        };
        let fut = fut
            .into_actor(self)
            .map(|(channel, result), act, _| match result {
                None => false,
                Some(Ok(Ok(()))) => true,
                Some(Ok(Err(e))) if crate::error::is_noperm(&e) => {
                    act.tell_denied(&channel, &e);
                    if let Some(route) = act.routes.get_mut(&channel) {
                        route.denied = true;
                    }
                    false
                }
                Some(Ok(Err(e))) => {
                    warn!(error = %e, channel, "subscribe failed; relying on reconnect and timers");
                    false
                }
                Some(Err(_)) => {
                    warn!(
                        channel,
                        "subscribe timed out; relying on reconnect and timers"
                    );
                    false
                }
            });
        AtomicResponse::new(Box::pin(fut))
    }
}

impl Handler<Unsubscribe> for Subscriber {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Unsubscribe, _ctx: &mut Context<Self>) -> Self::Result {
        let sink = if self.routes.remove(&msg.channel).is_some() {
            self.sink.clone()
        } else {
            None
        };
        let timeout: Duration = self.config.response_timeout;
        let fut = async move {
            let Some(mut sink) = sink else { return };
            match tokio::time::timeout(timeout, sink.unsubscribe(&msg.channel)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(error = %e, "unsubscribe failed; the connection is probably gone")
                }
                Err(_) => debug!("unsubscribe timed out"),
            }
        };
        AtomicResponse::new(Box::pin(fut.into_actor(self)))
    }
}

/// Whether a message is a decimal number (a semaphore's available permits).
fn is_number(payload: &[u8]) -> bool {
    let digits = payload.strip_prefix(b"-").unwrap_or(payload);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}
