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
//!
//! With replica confirmation on, the manager holds several such connections,
//! its lanes (`wire/replicas/lanes.rs`: a `WAIT` blocks its whole connection,
//! so confirmed changes spread over them); each is replaced on its own after a
//! call on it timed out. Lane 0 is the one every other call uses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};
use tracing::{debug, warn};

use crate::config::MAX_LANES;

/// The command connections to a standalone server: one per lane (at most
/// [`MAX_LANES`]).
pub(crate) struct Standalone {
    /// The connection in use on each lane.
    current: Vec<RwLock<ConnectionManager>>,
    /// How to make a new one; `None`: never replaced (a test's connection).
    make: Option<(Client, ConnectionManagerConfig)>,
    /// The lanes whose replacement is being made, one bit each.
    replacing: AtomicU64,
}

/// The most lanes a connection has (`Config::confirmation_lanes` refuses
/// more): one bit each in [`Standalone::replacing`].
const _: () = assert!(MAX_LANES <= u64::BITS as usize);

impl std::fmt::Debug for Standalone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Standalone")
    }
}

impl Standalone {
    /// `conns`, one per lane (at least one), each replaced through `client`
    /// and `settings` after a timeout.
    pub(crate) fn new(
        conns: Vec<ConnectionManager>,
        client: Client,
        settings: ConnectionManagerConfig,
    ) -> Standalone {
        Standalone {
            current: conns.into_iter().take(MAX_LANES).map(RwLock::new).collect(),
            make: Some((client, settings)),
            replacing: AtomicU64::new(0),
        }
    }

    /// `conn`, never replaced.
    #[cfg(test)]
    pub(crate) fn fixed(conn: ConnectionManager) -> Standalone {
        Standalone {
            current: vec![RwLock::new(conn)],
            make: None,
            replacing: AtomicU64::new(0),
        }
    }

    /// How many lanes it has.
    pub(crate) fn lanes(&self) -> usize {
        self.current.len()
    }

    /// The connection in use on lane 0, the one of calls that ask no replica
    /// (a clone shares it).
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.conn_on(0)
    }

    /// The connection in use on `lane` (modulo the lanes there are).
    fn conn_on(&self, lane: usize) -> ConnectionManager {
        self.current[lane % self.current.len()]
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Looks at a call's outcome on `lane`: after a timeout, that lane's
    /// connection is replaced.
    fn saw<T>(self: &Arc<Self>, lane: usize, outcome: &RedisResult<T>) {
        if matches!(outcome, Err(e) if e.is_timeout()) {
            self.replace(lane % self.current.len());
        }
    }

    /// Makes a new connection for `lane` in the background and puts it in
    /// place (one replacement per lane at a time; a failed one is logged, and
    /// the next timeout tries again).
    fn replace(self: &Arc<Self>, lane: usize) {
        let Some((client, settings)) = self.make.clone() else {
            return;
        };
        let bit = 1u64 << lane;
        if self.replacing.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            match ConnectionManager::new_with_config(client, settings).await {
                Ok(conn) => {
                    *me.current[lane].write().unwrap_or_else(|e| e.into_inner()) = conn;
                    debug!(
                        lane,
                        "a call timed out: the command connection was replaced"
                    );
                }
                Err(e) => warn!(
                    error = %e,
                    "a call timed out and a new command connection could not be made; \
                     the next timeout tries again"
                ),
            }
            me.replacing.fetch_and(!bit, Ordering::AcqRel);
        });
    }
}

/// A command on the standalone connection's `lane`.
pub(crate) fn request<'a>(
    link: &'a Arc<Standalone>,
    lane: usize,
    cmd: &'a Cmd,
) -> RedisFuture<'a, Value> {
    Box::pin(async move {
        let outcome = link.conn_on(lane).req_packed_command(cmd).await;
        link.saw(lane, &outcome);
        outcome
    })
}

/// A pipeline on the standalone connection's `lane`.
pub(crate) fn request_many<'a>(
    link: &'a Arc<Standalone>,
    lane: usize,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> RedisFuture<'a, Vec<Value>> {
    Box::pin(async move {
        let outcome = link
            .conn_on(lane)
            .req_packed_commands(pipeline, offset, count)
            .await;
        link.saw(lane, &outcome);
        outcome
    })
}
