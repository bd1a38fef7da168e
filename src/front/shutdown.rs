//! [`Shutdown`]: a process on its way out hands its locks and its leadership over
//! at once, instead of leaving them to expire a lease later.
//!
//! Without it a stopping process keeps its locks in Redis until their lease runs
//! out (a watchdog lease is 30 s): an actix-web instance stopped by SIGTERM
//! returns from `HttpServer::run()`, the process exits, and the other instance
//! is elected leader some 27 s later. `Shutdown` is what the process sends
//! after `run().await`: from then on the manager refuses new waiters
//! ([`LockError::ShuttingDown`](crate::LockError::ShuttingDown)), answers every waiter it has with that error,
//! tells each held lock's guards and [`Leader`](crate::Leader)s that the lock is
//! gone ([`LostReason::ShutDown`](crate::LostReason::ShutDown)), gives every hold back with the usual release
//! scripts (owner-checked, confirmed by replicas as configured), and waits until
//! nothing it sent to Redis is unsettled ([`Settle`]), all within
//! one budget ([`Config::shutdown_timeout`](crate::Config::shutdown_timeout)).
//!
//! Why an explicit, awaited message rather than a hook on the system's stop: an
//! actor's `stopping`/`stopped` hooks cannot await, and a stopping actix system
//! drops its actors without running futures, so a release started there would
//! never reach Redis; actix-web's `run()` returns after its graceful shutdown
//! while the system still runs, which is exactly where one `await` fits. A
//! process that exits without it loses nothing but time: its locks free within
//! their lease, as after a crash.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::join_all;
use tracing::{info, warn};

use super::manager::LockManager;
use super::settle::Settle;
use crate::actors::shared::ShutDown;

/// Shut the manager down, handing over what it holds: answers whether every held
/// lock was given back and everything in flight settled within the budget
/// ([`Config::shutdown_timeout`](crate::Config::shutdown_timeout) unless
/// [`Shutdown::within`] says otherwise).
///
/// From the moment it arrives, the manager refuses new acquisitions, semaphore
/// takes and latch waits with [`LockError::ShuttingDown`](crate::LockError::ShuttingDown),
/// and answers every waiter it had with that error. Every held lock is then
/// given back in Redis, so the next waiter anywhere gets it at once, and every
/// [`Leader`](crate::Leader) of the manager is told
/// [`Deposed`](crate::Deposed) with
/// `Lost(`[`LostReason::ShutDown`](crate::LostReason::ShutDown)`)` and stops
/// campaigning. A guard still held by code afterwards no longer holds its lock:
/// its [`lost`](crate::LockGuard::lost) signal fires, its release answers
/// `Lost(ShutDown)` without touching Redis, and dropping it does nothing. So
/// nothing run under a lock may outlive the shutdown: stop that work first
/// (actix-web's graceful shutdown lets in-flight requests finish before `run()`
/// returns).
///
/// What was not given back within the budget (Redis unreachable) frees when its
/// lease runs out, as after a crash; the releases go on trying meanwhile for as
/// long as the process runs. Sending it again waits again; it is never undone.
/// Semaphore permits held by guards are given back by those guards as usual.
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> std::io::Result<()> {
/// # let server = async { Ok::<(), std::io::Error>(()) };
/// use lockwarden::Locks;
/// server.await?; // HttpServer::run().await: returns after SIGTERM's graceful shutdown
/// manager.shutdown().await; // hands locks and leadership over, within 3 s by default
/// # Ok(()) }
/// ```
#[derive(Message, Debug, Clone, Copy, Default)]
#[rtype(result = "bool")]
pub struct Shutdown {
    /// The budget, if not the configured one.
    within: Option<Duration>,
}

impl Shutdown {
    /// Shut down within the configured budget
    /// ([`Config::shutdown_timeout`](crate::Config::shutdown_timeout)).
    pub fn new() -> Shutdown {
        Shutdown { within: None }
    }

    /// Shut down within `budget` instead of the configured one (zero: send the
    /// releases and answer at once).
    pub fn within(budget: Duration) -> Shutdown {
        Shutdown {
            within: Some(budget),
        }
    }
}

impl Handler<Shutdown> for LockManager {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: Shutdown, ctx: &mut Context<Self>) -> Self::Result {
        let started = Instant::now();
        let first = !self.shared().shutting_down.swap(true, Ordering::AcqRel);
        let budget = msg.within.unwrap_or(self.shared().config.shutdown_timeout);
        let deadline = started + budget;
        let locks: Vec<_> = self.lock_actors().collect();
        let synchronizers = self.synchronizers().0.running();
        let manager = ctx.address();
        if first {
            info!(
                lock_actors = locks.len(),
                ?budget,
                "lock manager shutting down: answering waiters, giving locks back"
            );
        }
        Box::pin(async move {
            for s in &synchronizers {
                s.do_send(ShutDown);
            }
            let given_back = join_all(locks.iter().map(|a| a.send(ShutDown)));
            let until = tokio::time::Instant::from_std(deadline);
            let Ok(counts) = tokio::time::timeout_at(until, given_back).await else {
                warn!(
                    ?budget,
                    "lock manager shutdown: some locks were not given back in time; \
                     they free when their lease runs out"
                );
                return false;
            };
            let released: usize = counts.into_iter().map(|c| c.unwrap_or(0)).sum();
            // Attempts abandoned by the waiters just answered, and releases that
            // were already in flight, settle within what is left of the budget.
            let left = deadline.saturating_duration_since(Instant::now());
            let settled = manager.send(Settle::within(left)).await.unwrap_or(false);
            info!(
                released,
                settled,
                took = ?started.elapsed(),
                "lock manager shut down: its locks were given back"
            );
            settled
        })
    }
}
