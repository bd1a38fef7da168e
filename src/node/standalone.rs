//! A standalone server behind the seam: redis-rs's `ConnectionManager`, replaced
//! by a fresh one after a call timed out.
//!
//! A multiplexed connection pairs replies with requests by their order on the
//! socket. A request whose bytes never reached the server is never answered,
//! and from then on every reply is handed to the request before its own: each
//! later call times out, for as long as the socket stays open, and a grant the
//! server made is never seen by the process that asked (its lock stays taken,
//! unrenewed, for its whole lease). TCP itself does not lose bytes, but a
//! middlebox that swallows them does, and so does the chaos suite's blackholed
//! link (tests/support/proxy.rs): a manager whose link was blackholed for 3 s
//! timed out every call for as long as it ran. `ConnectionManager` reconnects
//! when the connection drops, not after a timeout, so this is built here, at
//! the seam: after a timed-out call the connection is replaced, once at a time,
//! and calls in flight on the old one end on their own (a reply or their own
//! timeout). A call that timed out for a slow server (a long script) costs one
//! reconnect, which is cheap beside the timeout itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tracing::{debug, warn};

/// The command connection to a standalone server.
pub(crate) struct Standalone {
    /// The connection in use.
    current: RwLock<ConnectionManager>,
    /// How to make a new one; `None`: never replaced (a test's connection).
    make: Option<(Client, ConnectionManagerConfig)>,
    /// A replacement is being made.
    replacing: AtomicBool,
}

impl std::fmt::Debug for Standalone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Standalone")
    }
}

impl Standalone {
    /// `conn`, replaced through `client` and `settings` after a timeout.
    pub(crate) fn new(
        conn: ConnectionManager,
        client: Client,
        settings: ConnectionManagerConfig,
    ) -> Standalone {
        Standalone {
            current: RwLock::new(conn),
            make: Some((client, settings)),
            replacing: AtomicBool::new(false),
        }
    }

    /// `conn`, never replaced.
    #[cfg(test)]
    pub(crate) fn fixed(conn: ConnectionManager) -> Standalone {
        Standalone {
            current: RwLock::new(conn),
            make: None,
            replacing: AtomicBool::new(false),
        }
    }

    /// The connection in use (a clone shares it).
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Looks at a call's outcome: after a timeout, the connection is replaced.
    fn saw<T>(self: &Arc<Self>, outcome: &RedisResult<T>) {
        if matches!(outcome, Err(e) if e.is_timeout()) {
            self.replace();
        }
    }

    /// Makes a new connection in the background and puts it in place (one
    /// replacement at a time; a failed one is logged, and the next timeout
    /// tries again).
    fn replace(self: &Arc<Self>) {
        let Some((client, settings)) = self.make.clone() else {
            return;
        };
        if self.replacing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            match ConnectionManager::new_with_config(client, settings).await {
                Ok(conn) => {
                    *me.current.write().unwrap_or_else(|e| e.into_inner()) = conn;
                    debug!("a call timed out: the command connection was replaced");
                }
                Err(e) => warn!(
                    error = %e,
                    "a call timed out and a new command connection could not be made; \
                     the next timeout tries again"
                ),
            }
            me.replacing.store(false, Ordering::Release);
        });
    }
}

/// A command on the standalone connection.
pub(crate) fn request<'a>(link: &'a Arc<Standalone>, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
    Box::pin(async move {
        let outcome = link.conn().req_packed_command(cmd).await;
        link.saw(&outcome);
        outcome
    })
}

/// A pipeline on the standalone connection.
pub(crate) fn request_many<'a>(
    link: &'a Arc<Standalone>,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> RedisFuture<'a, Vec<Value>> {
    Box::pin(async move {
        let outcome = link
            .conn()
            .req_packed_commands(pipeline, offset, count)
            .await;
        link.saw(&outcome);
        outcome
    })
}
