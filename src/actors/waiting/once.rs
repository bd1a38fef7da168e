//! The once part of the waiting kit: how every synchronizer sends a change that
//! a retry or a late copy could apply twice (permits given back, a waiter's take
//! undone, a count-down, a drain), so that it counts exactly once.
//!
//! Each such change carries an op id ([`op_id`]) that its script records under
//! a marker key for `Config::latch_ttl` (`lua/once_prelude.lua`); a copy that
//! finds the marker answers from it and changes nothing. [`send_once`] sends
//! the change and retries transient errors under the same id, but only for half
//! of the marker's life after the first send: a copy that Redis runs late (it
//! sat in a frozen server's input, or in a connection that broke) finds the
//! marker of one that ran at most that long before it. Past that point nothing
//! more is sent, and the caller hears [`LockError::InFlight`]: the change may
//! still apply, once, and must not be redone by hand.
//!
//! The same id serves a waiter's attempts to take permits: every attempt of one
//! waiter carries its id, so an attempt whose reply was lost is asked again
//! and learns what its first copy did, and a waiter that leaves undoes the id
//! (permits back if a copy took them; none taken by a later copy).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::config::Config;
use crate::durations::{backoff, millis};
use crate::error::{redis_is_transient, LockError};
use crate::wire::Once;

/// The longest pause between two tries: a change that found Redis gone should
/// land soon after it is back, well inside its window.
const RETRY_MAX: Duration = Duration::from_millis(500);

/// The changes that count once a manager has decided on and not yet seen
/// answered (give-backs, undos), so that a process on its way out can wait
/// until they are on the wire (`Settle`): an undo that never left the process
/// would leave permits taken by a late copy of a take for good.
#[derive(Debug, Default)]
pub(crate) struct Unsettled(AtomicUsize);

impl Unsettled {
    /// Counts one change from now until the [`Ticket`] is dropped (with the
    /// future that sends it).
    pub(crate) fn enter(self: &Arc<Self>) -> Ticket {
        self.0.fetch_add(1, Ordering::AcqRel);
        Ticket(self.clone())
    }

    /// Whether no counted change is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }
}

/// One change counted in [`Unsettled`] while this lives.
#[derive(Debug)]
pub(crate) struct Ticket(Arc<Unsettled>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A fresh op id.
pub(crate) fn op_id() -> Arc<str> {
    Arc::from(crate::random::request_id())
}

/// The wire's view of op `id` under `config`: the id and how long Redis keeps
/// its marker.
pub(crate) fn once<'a>(config: &Config, id: &'a str) -> Once<'a> {
    Once {
        id,
        ttl_ms: millis(config.latch_ttl),
    }
}

/// How long after its first send a change with an op id may still be sent:
/// half the marker's life, so that any two copies that run are less than the
/// marker's life apart (see the module documentation).
pub(crate) fn window(config: &Config) -> Duration {
    config.latch_ttl / 2
}

/// Sends a change with an op id through `attempt` (which sends it under the
/// same id each time), retrying transient errors within [`window`]. `what`
/// names the change in the log and in [`LockError::InFlight`].
pub(crate) async fn send_once<T, F, Fut>(
    config: &Config,
    what: impl FnOnce() -> String,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let first = Instant::now();
    let until = first + window(config);
    let mut tries = 0u32;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let err = match tokio::time::timeout(left, attempt()).await {
            Ok(Ok(done)) => return Ok(done),
            Ok(Err(e)) if redis_is_transient(&e) => e,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => break,
        };
        let delay = backoff(
            config.reconnect_min,
            config.reconnect_max.min(RETRY_MAX),
            tries,
        );
        if Instant::now() + delay >= until {
            break;
        }
        if tries == 0 {
            warn!(error = %err, retry_in = ?delay, "a change that counts once failed; sending it again under the same op id");
        } else {
            debug!(error = %err, retry_in = ?delay, "a change that counts once failed again");
        }
        tries += 1;
        tokio::time::sleep(delay).await;
    }
    let err = LockError::InFlight {
        what: what(),
        waited: first.elapsed(),
    };
    warn!(error = %err, "a change that counts once is still unanswered");
    Err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn transient() -> redis::RedisError {
        redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    }

    fn quick() -> Config {
        Config::from_url("redis://127.0.0.1:1")
            .expect("a valid URL")
            .latch_ttl(Duration::from_millis(400))
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(20))
    }

    /// A transient failure is sent again (the same closure, so the same id)
    /// until it is answered.
    #[tokio::test]
    async fn a_transient_failure_is_sent_again_until_answered() {
        let tries = Cell::new(0);
        let got = send_once(
            &quick(),
            || "x".to_owned(),
            || {
                tries.set(tries.get() + 1);
                let n = tries.get();
                async move {
                    if n < 3 {
                        Err(transient())
                    } else {
                        Ok(n)
                    }
                }
            },
        )
        .await;
        assert_eq!(got.expect("answered"), 3);
    }

    /// A refusal (not transient) is answered at once, never sent again.
    #[tokio::test]
    async fn a_refusal_is_not_sent_again() {
        let tries = Cell::new(0);
        let got: Result<(), _> = send_once(
            &quick(),
            || "x".to_owned(),
            || {
                tries.set(tries.get() + 1);
                async {
                    Err(redis::RedisError::from((
                        redis::ErrorKind::UnexpectedReturnType,
                        "shape",
                    )))
                }
            },
        )
        .await;
        assert!(matches!(got, Err(LockError::Redis(_))));
        assert_eq!(tries.get(), 1);
    }

    /// Past the window nothing more is sent, and the caller hears that the
    /// change is in flight, naming it.
    #[tokio::test]
    async fn past_the_window_it_is_in_flight() {
        let config = quick();
        let started = Instant::now();
        let got: Result<(), _> = send_once(
            &config,
            || "giving back 1 permit".to_owned(),
            || async { Err(transient()) },
        )
        .await;
        let took = started.elapsed();
        match got {
            Err(e @ LockError::InFlight { .. }) => {
                let said = e.to_string();
                assert!(said.starts_with("giving back 1 permit: "), "{said}");
                // One line, said once: a caller logs it as it is.
                assert!(!said.contains("  ") && !said.contains('\n'), "{said}");
            }
            other => panic!("expected InFlight, got {other:?}"),
        }
        assert!(
            took <= window(&config) + Duration::from_millis(100),
            "{took:?}"
        );
    }

    /// A try that hangs (a frozen server) is cut at the window's end.
    #[tokio::test]
    async fn a_hanging_try_ends_at_the_window() {
        let config = quick();
        let started = Instant::now();
        let got: Result<(), _> = send_once(
            &config,
            || "x".to_owned(),
            futures::future::pending::<redis::RedisResult<()>>,
        )
        .await;
        assert!(matches!(got, Err(LockError::InFlight { .. })));
        assert!(started.elapsed() < window(&config) + Duration::from_millis(100));
    }
}
