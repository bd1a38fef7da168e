//! Pub/sub connections for the subscriber, whatever the deployment.
//!
//! The subscriber needs three things from a connection: subscribe and unsubscribe
//! a channel ([`Sink`]), and a stream of what happened ([`Event`]): a message, a
//! channel the server dropped by itself, a node connection that went away. On a
//! standalone server or a Sentinel-managed master that is one dedicated redis-rs
//! `PubSub` connection, whose stream ends when it drops (the subscriber is then
//! restarted and resubscribes everything), or, under Sentinel, when the command
//! connection moved to another master (the old one may never drop it). On a cluster it is one RESP3 cluster
//! connection whose pushes come through a channel: with sharded pub/sub each lock's
//! channel is subscribed on the master owning its slot, redis-rs resubscribes a
//! node's channels when it reconnects to it, and the stream goes on across node
//! failures, reporting each one as [`Event::Disconnected`]. What redis-rs does not
//! do is follow a slot that moved: the old owner sends an unsolicited SUNSUBSCRIBE
//! for every channel of the slot, which arrives here as [`Event::Dropped`], and the
//! subscriber subscribes it again (redis-rs then routes it to the new owner).

use std::sync::Weak;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use redis::aio::PubSubSink;
use redis::cluster_async::ClusterConnection;
use redis::{PushKind, RedisResult, Value};

use super::cluster;
use super::sentinel::Follower;
use crate::config::Config;
use crate::wire::Publish;

/// What the subscriber hears from its connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A message on a subscribed channel.
    Message {
        /// The channel.
        channel: String,
        /// The payload.
        payload: Vec<u8>,
    },
    /// The server unsubscribed `channel` by itself (its slot moved to another
    /// master): it must be subscribed again where the slot now lives.
    Dropped {
        /// The channel.
        channel: String,
    },
    /// One node's connection dropped (a cluster only; elsewhere the stream ends):
    /// messages may have been missed and locks lost.
    Disconnected,
}

/// Subscribes and unsubscribes on a live connection. Cheap to clone.
#[derive(Clone)]
pub(crate) enum Sink {
    /// A server's dedicated pub/sub connection.
    Server(PubSubSink),
    /// A cluster connection: sharded (SSUBSCRIBE) or plain.
    Cluster(ClusterConnection, Publish),
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sink::Server(_) => f.write_str("Sink::Server"),
            Sink::Cluster(_, publish) => write!(f, "Sink::Cluster({publish:?})"),
        }
    }
}

impl Sink {
    /// Subscribes `channels`, returning once the server confirmed them.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> RedisResult<()> {
        match self {
            Sink::Server(sink) => sink.subscribe(channels).await,
            // Sharded subscriptions are per slot: one command per channel, so that
            // redis-rs routes each to its slot's master.
            Sink::Cluster(conn, Publish::Sharded) => {
                for channel in channels {
                    conn.ssubscribe(channel).await?;
                }
                Ok(())
            }
            Sink::Cluster(conn, Publish::Plain) => conn.subscribe(channels).await,
        }
    }

    /// Unsubscribes `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Sink::Server(sink) => sink.unsubscribe(channel).await,
            Sink::Cluster(conn, Publish::Sharded) => conn.sunsubscribe(channel).await,
            Sink::Cluster(conn, Publish::Plain) => conn.unsubscribe(channel).await,
        }
    }
}

/// Opens pub/sub connections for the subscriber (a new one each time the
/// subscriber (re)starts).
#[derive(Clone, Debug)]
pub(crate) struct PubSubSource {
    /// Where to connect.
    target: Target,
    /// How long one attempt may take.
    timeout: Duration,
}

/// Where the subscriber's connections go.
#[derive(Clone, Debug)]
pub(super) enum Target {
    /// Always this server (boxed: a client is large, and this enum is cloned).
    Server(Box<redis::Client>),
    /// The master the Sentinels name when the connection is opened (held
    /// weakly: the command connection owns the Follower).
    Master(Weak<Follower>),
    /// A cluster: its seeds, the settings, and which channels its scripts use.
    Cluster(Vec<String>, Box<Config>, Publish),
}

impl PubSubSource {
    /// A source that opens connections to `target`, each bounded by `timeout`.
    pub(super) fn new(target: Target, timeout: Duration) -> PubSubSource {
        PubSubSource { target, timeout }
    }

    /// A new connection, or why there is none (a timeout included).
    pub(crate) async fn open(&self) -> Result<(Sink, BoxStream<'static, Event>), String> {
        let target = self.target.clone();
        let open = async move {
            let mut until = None;
            let server = match target {
                Target::Server(client) => client.get_async_pubsub().await?,
                Target::Master(follower) => {
                    let Some(strong) = follower.upgrade() else {
                        return Err(redis::RedisError::from((
                            redis::ErrorKind::Client,
                            "the lock manager stopped",
                        )));
                    };
                    let client = strong.master().await?;
                    let at = client.get_connection_info().addr().to_string();
                    // The connection ends when the command connection moves to
                    // another master: the subscriber then reopens it there.
                    until = Some(Follower::moved_away(follower, at));
                    client.get_async_pubsub().await?
                }
                Target::Cluster(seeds, config, publish) => {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                    let conn = cluster::connect_pubsub(&seeds, &config, tx).await?;
                    let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
                        .filter_map(|push| async move { event(push.kind, push.data) });
                    return Ok((Sink::Cluster(conn, publish), events.boxed()));
                }
            };
            let (sink, stream) = server.split();
            let events = stream.map(|msg| Event::Message {
                channel: msg.get_channel_name().to_string(),
                payload: msg.get_payload_bytes().to_vec(),
            });
            let events = match until {
                Some(moved) => events.take_until(moved).boxed(),
                None => events.boxed(),
            };
            Ok::<_, redis::RedisError>((Sink::Server(sink), events))
        };
        tokio::time::timeout(self.timeout, open)
            .await
            .map_err(|_| "timed out connecting".to_string())?
            .map_err(|e| e.to_string())
    }
}

/// Reads one RESP3 push of a cluster connection; confirmations of our own
/// commands and kinds we never subscribe to are dropped.
fn event(kind: PushKind, data: Vec<Value>) -> Option<Event> {
    let text = |v: &Value| redis::from_redis_value_ref::<String>(v).ok();
    match kind {
        PushKind::Message | PushKind::SMessage => match data.as_slice() {
            [channel, payload] => Some(Event::Message {
                channel: text(channel)?,
                payload: redis::from_redis_value_ref::<Vec<u8>>(payload).ok()?,
            }),
            _ => None,
        },
        PushKind::SUnsubscribe => Some(Event::Dropped {
            channel: text(data.first()?)?,
        }),
        PushKind::Disconnection => Some(Event::Disconnected),
        _ => None,
    }
}
