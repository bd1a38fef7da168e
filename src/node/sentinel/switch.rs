//! Listening for Sentinel's `+switch-master` announcements, so that the
//! [`Follower`] moves to a new master the moment a failover is done.
//!
//! Without it the Follower learns of a failover from a call: one that fails on
//! the dead master's connection, or answers READONLY from a demoted one, or the
//! subscriber's connection dropping. A master that is cut off rather than dead (a
//! network partition, a frozen process) drops no connection, so the first call
//! after the failover would wait out the whole response timeout on it, and the
//! subscriber would stay on it, deaf to the new master's unlock messages. Every
//! Sentinel publishes `+switch-master <name> <old ip> <old port> <new ip> <new
//! port>` on its own pub/sub when it switches to a new master, so one listener
//! per Sentinel (the first to hear wins; the others' announcements find the
//! Follower already there) subscribes to that channel and makes the Follower look
//! the master up again at once (`Follower::look_again`, the same path a failed
//! call takes). Each listener reconnects with backoff when its Sentinel goes
//! away, logging every failure; it holds the Follower only weakly and ends when
//! the Follower (the manager's command connection) is gone.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::{select, Either};
use futures::StreamExt;
use redis::RedisResult;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::Follower;
use crate::durations::backoff;

/// The channel every Sentinel announces a finished failover on.
const CHANNEL: &str = "+switch-master";

/// What a listener needs besides its Sentinel's URL.
#[derive(Clone)]
pub(super) struct Listen {
    /// The master name to follow; other masters' switches are ignored.
    pub(super) name: String,
    /// Weak: a listener must not keep the connection alive.
    pub(super) follower: Weak<Follower>,
    /// Ends (its sender dropped) when the Follower goes.
    pub(super) gone: watch::Receiver<()>,
    /// First and longest pause between reconnection attempts.
    pub(super) backoff: (Duration, Duration),
    /// How long connecting to a Sentinel may take.
    pub(super) connect_timeout: Duration,
}

/// Starts one listener per Sentinel (each client has the Sentinel's password
/// and TLS settings, as the lookups use them: `dial.rs`).
pub(super) fn start(sentinels: &[redis::Client], listen: &Listen) {
    for client in sentinels {
        tokio::spawn(supervise(client.clone(), listen.clone()));
    }
}

/// Keeps one Sentinel's listener running until the Follower is gone.
async fn supervise(client: redis::Client, listen: Listen) {
    // The address for the log, without the password a URL may hold.
    let at = client.get_connection_info().addr().to_string();
    let mut attempt = 0u32;
    loop {
        let outcome = {
            let mut gone = listen.gone.clone();
            let changed = std::pin::pin!(gone.changed());
            let run = std::pin::pin!(listen_once(&client, &at, &listen, &mut attempt));
            match select(run, changed).await {
                Either::Left((outcome, _)) => outcome,
                Either::Right(_) => return,
            }
        };
        if listen.follower.strong_count() == 0 {
            return;
        }
        let (first, longest) = listen.backoff;
        let delay = backoff(first, longest, attempt);
        match outcome {
            Ok(()) => {
                warn!(sentinel = %at, retry_in = ?delay, "lost the Sentinel's failover announcements; reconnecting")
            }
            Err(e) => {
                warn!(sentinel = %at, error = %e, attempt, retry_in = ?delay, "cannot listen for the Sentinel's failover announcements; retrying")
            }
        }
        attempt = attempt.saturating_add(1);
        let pause = std::pin::pin!(tokio::time::sleep(delay));
        let mut gone = listen.gone.clone();
        let changed = std::pin::pin!(gone.changed());
        if let Either::Right(_) = select(pause, changed).await {
            return;
        }
    }
}

/// Subscribes to one Sentinel's announcements and acts on them until its
/// connection ends (`Ok`) or cannot be made (`Err`).
async fn listen_once(
    client: &redis::Client,
    at: &str,
    listen: &Listen,
    attempt: &mut u32,
) -> RedisResult<()> {
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(CHANNEL).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    let mut pubsub = tokio::time::timeout(listen.connect_timeout, connect)
        .await
        .map_err(|_| {
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "timed out connecting to the Sentinel",
            ))
        })??;
    if *attempt > 0 {
        info!(sentinel = %at, "listening for failover announcements again");
    }
    *attempt = 0;
    debug!(sentinel = %at, "listening for failover announcements");
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let Ok(text) = msg.get_payload::<String>() else {
            continue;
        };
        if text.split(' ').next() != Some(listen.name.as_str()) {
            continue;
        }
        let Some(follower) = listen.follower.upgrade() else {
            return Ok(());
        };
        info!(sentinel = %at, switch = %text, "Sentinel announced a new master; following it");
        follower.look_again();
        drop::<Arc<Follower>>(follower);
    }
    Ok(())
}
