//! Releases no replica could confirm, kept by their sender and sent again
//! while a failover may still lose them.
//!
//! With replica confirmation on, a release sent while no replica can answer
//! (every one frozen, cut off or gone: the count in `node/replicas/` is 0) goes
//! without a `WAIT` and is answered at once. If the master then dies, the
//! replica promoted in its place never saw it and keeps the old hold for the
//! rest of its lease: every waiter is blind that long. redis-rs forgets a
//! command once it is answered, so the keeping is done here: such a release
//! is sent again, as a retry under its own request id, every [`EVERY`] until
//! a `WAIT` behind one of its sends counts a replica, or until the earlier of
//! its lease's end (the lock is free then anyway) and half the latch's
//! lifetime (while Redis surely remembers the first outcome). It goes on the
//! manager's own connection, which follows the deployment to its new master
//! (Sentinel's switch, a cluster's `MOVED`), so it is redone there within
//! [`EVERY`] of the connection getting there.
//!
//! A resend never counts twice: on the master that ran the release its latch
//! answers the first outcome and changes nothing; on a master that never saw
//! it the owner check frees only the hold this owner still has there. A later
//! grant to the same owner field cannot be taken by it: the latch, written by
//! the release before that grant, is replicated with it, and the window never
//! outlives the latch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::Confirmed;
use crate::wire::{Invocation, ScriptConn};

/// How often a kept release is sent again.
pub(crate) const EVERY: Duration = Duration::from_millis(250);

/// Kept releases still being sent again, in this process: a process on its
/// way out waits for them (`Settle`), since they end with it.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// How many kept releases are still being sent again in this process.
pub(crate) fn kept_pending() -> usize {
    PENDING.load(Ordering::Acquire)
}

/// One kept release counted in [`PENDING`] while its task runs.
struct Pending;

impl Pending {
    fn enter() -> Pending {
        PENDING.fetch_add(1, Ordering::AcqRel);
        Pending
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where an invocation's retry flag is and how long it may be resent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Redo {
    /// The index in ARGV of the "this is a retry" flag ("0" or "1").
    pub(crate) flag: usize,
    /// How long after it was sent it may be resent, in ms: the lease or half
    /// the latch's lifetime, whichever is shorter.
    pub(crate) for_ms: u64,
}

/// Whether a change with confirmation `confirmed` on a connection that asks
/// replicas (`wanted`) went out with nobody to confirm it and was answered as
/// done. A shortfall of a release is not: it is answered `NotReplicated`, and
/// the lock actor redoes it itself (`actors/lock/release.rs`).
pub(crate) fn unconfirmed(wanted: bool, confirmed: &Confirmed) -> bool {
    // `NoReplica`: confirmation is on and no replica could answer; `NotAsked`
    // on a connection that wants replicas: sent before any count was known.
    wanted && matches!(confirmed, Confirmed::NotAsked | Confirmed::NoReplica { .. })
}

/// Keeps `call` (sent at `sent`, answered with `confirmed`) when it is a
/// release that no replica confirmed: see the module documentation.
pub(crate) fn keep_if_unconfirmed<C: ScriptConn>(
    conn: &C,
    call: &Invocation,
    confirmed: &Confirmed,
    sent: Instant,
) {
    let Some(redo) = call.redo else {
        return;
    };
    let wanted = conn
        .confirmation(call.routing_key())
        .is_some_and(|c| c.wants_replicas());
    if !unconfirmed(wanted, confirmed) {
        return;
    }
    let until = sent + Duration::from_millis(redo.for_ms);
    let mut again = call.clone();
    again.redo = None;
    if let Some(arg) = again.args.get_mut(redo.flag) {
        *arg = "1".to_owned();
    }
    let conn = conn.clone();
    info!(
        lock = call.routing_key().unwrap_or("?"),
        "a release no replica confirmed is kept, to be redone after a failover"
    );
    let pending = Pending::enter();
    tokio::spawn(async move {
        let _pending = pending;
        resend(conn, again, until).await
    });
}

/// Sends `call` again every [`EVERY`] until a replica confirms it or `until`.
async fn resend<C: ScriptConn>(mut conn: C, call: Invocation, until: Instant) {
    let lock = call.routing_key().unwrap_or("?").to_owned();
    loop {
        tokio::time::sleep(EVERY).await;
        if Instant::now() >= until {
            debug!(%lock, "a kept release is past its window; the latch or the lease settles it");
            return;
        }
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, call.run_confirmed(&mut conn)).await {
            Ok(Ok((_, Confirmed::Enough))) => {
                debug!(%lock, "a kept release is now confirmed by a replica");
                return;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                debug!(%lock, error = %e, "a kept release could not be resent; trying again")
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_change_a_replica_confirmed_is_let_go() {
        assert!(!unconfirmed(true, &Confirmed::Enough));
        assert!(unconfirmed(true, &Confirmed::NotAsked));
        let none = Confirmed::NoReplica {
            refuse: false,
            wanted: 1,
        };
        assert!(unconfirmed(true, &none));
        assert!(!unconfirmed(
            true,
            &Confirmed::Short {
                acked: 0,
                wanted: 1
            }
        ));
        assert!(!unconfirmed(false, &Confirmed::NotAsked));
    }
}
