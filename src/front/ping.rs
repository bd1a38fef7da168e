//! [`Ping`]: is the manager connected to Redis now? The question a readiness
//! endpoint asks.
//!
//! A running manager says nothing about its connection until a call needs it:
//! it reconnects by itself, and a lock call waits out a server that is away
//! within the caller's wait. A health endpoint wants the answer now and bounded,
//! so `Ping` sends one `PING` on the manager's command connection (the one every
//! lock call uses: on a Sentinel setup the current master's, on a cluster every
//! master's, as redis-rs routes PING there), and answers the round trip or why
//! there was none within its bound. It goes through the manager's mailbox, so a
//! manager that stopped answers [`LockError::Stopped`]. It takes no lock and
//! writes nothing.

use std::time::{Duration, Instant};

use actix::prelude::*;

use super::manager::LockManager;
use crate::error::{is_noperm, LockError};

/// Asks whether the manager reaches Redis now: one `PING` on its command
/// connection, answered within [`Ping::within`] (500 ms by default). `Ok` is the
/// round trip; an error says why there was none (for a bound that ran out, "Redis
/// did not answer a PING within ..."; [`LockError::is_retryable`] is true for
/// a server that is away). A least-privilege user without `+ping` counts as
/// connected: Redis answered, if only with NOPERM.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) {
/// use std::time::Duration;
/// use lockwarden::Locks;
/// // In a readiness handler: 200 if connected, 503 otherwise.
/// let ready = manager.ping(Duration::from_millis(500)).await.is_ok();
/// # }
/// ```
#[derive(Message, Debug, Clone, Copy)]
#[rtype(result = "Result<Duration, LockError>")]
pub struct Ping {
    /// How long to wait for the answer.
    within: Duration,
}

impl Ping {
    /// A ping answered within 500 ms: shorter than the 1 s a readiness probe
    /// usually allows, long enough for a server a region away.
    pub fn new() -> Ping {
        Ping {
            within: Duration::from_millis(500),
        }
    }

    /// Waits at most `within` for the answer. Defaults to 500 ms.
    pub fn within(mut self, within: Duration) -> Ping {
        self.within = within;
        self
    }
}

impl Default for Ping {
    fn default() -> Ping {
        Ping::new()
    }
}

impl Handler<Ping> for LockManager {
    // Nothing of the manager is touched after the PING is sent.
    type Result = ResponseFuture<Result<Duration, LockError>>;

    fn handle(&mut self, msg: Ping, _ctx: &mut Context<Self>) -> Self::Result {
        let mut conn = self.shared().node.conn();
        Box::pin(async move {
            let cmd = redis::cmd("PING");
            let sent = Instant::now();
            let ping = cmd.query_async::<redis::Value>(&mut conn);
            match tokio::time::timeout(msg.within, ping).await {
                Ok(Ok(_)) => Ok(sent.elapsed()),
                Ok(Err(e)) if is_noperm(&e) => Ok(sent.elapsed()),
                Ok(Err(e)) => Err(e.into()),
                Err(_) => Err(LockError::Redis(redis::RedisError::from(
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "Redis did not answer a PING within {:?} (is it reachable?)",
                            msg.within
                        ),
                    ),
                ))),
            }
        })
    }
}
