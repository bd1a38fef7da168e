//! What `run` does after its release when no replica confirmed it.
//!
//! With replica confirmation on and no replica able to answer (all frozen, cut
//! off or gone), the library answers a release without a `WAIT` and keeps it,
//! sending it again until a replica confirms it, it is redone on the master
//! Sentinel names after a failover, or its window ends (the lease, at most
//! half the latch's lifetime: 5 s by default), so that a failover to a
//! replica that never saw it does not leave the lock held there for the rest
//! of its lease (`wire/replicas/kept.rs`). That needs the process. So the
//! command stays until its kept release is settled, at most [`STAY`], and says
//! so on stderr: a command's exit waits up to 5 s while the deployment has no
//! replica that can confirm.

use std::time::Duration;

use actix::Addr;
use lockwarden::{GetReplicaConfirmation, LockManager, Settle};

use crate::duration::human;
use crate::outcome::note;

/// The longest the command stays for a kept release: its longest window (half
/// the latch's default lifetime) and a margin.
pub const STAY: Duration = Duration::from_millis(5500);

/// How long a settled manager takes to say so: anything longer is a kept
/// release (or another change still on the wire) worth waiting for.
const GLANCE: Duration = Duration::from_millis(30);

/// After the release of `name`: stays while a release no replica confirmed is
/// kept, at most [`STAY`], and says so.
pub async fn stay(manager: &Addr<LockManager>, name: &str) {
    // Only while replicas fall short is a release kept; otherwise there is
    // nothing to stay for (and a slow answer is no reason to say anything).
    let confirmation = manager.send(GetReplicaConfirmation).await;
    if confirmation.is_ok_and(|c| c.is_full() || c.wanted == 0) {
        return;
    }
    if matches!(manager.send(Settle::within(GLANCE)).await, Ok(true)) {
        return;
    }
    note(format!(
        "the release of lock \"{name}\" is not confirmed by any replica (none can answer \
         now): staying up to {} to redo it on a new master if this one fails over",
        human(STAY)
    ));
    if !matches!(manager.send(Settle::within(STAY)).await, Ok(true)) {
        note(format!(
            "exiting with the release of lock \"{name}\" still unconfirmed: if the master \
             fails over now, its replica keeps the lock until the lease ends"
        ));
    }
}
