//! Whether replicas confirm every lock change, and how many: on by default.
//!
//! Redis replicates asynchronously, so a grant or a release the master answered
//! may be missing from the replica a failover promotes. Redisson sends a `WAIT`
//! behind each lock script by default (for the replicas the master has, within
//! one second) and fails the call when none confirmed; lockwarden does the same
//! by default, with two differences the wire and node layers carry out
//! (`wire/replicas/`, `node/replicas/`): it counts only the replicas that can
//! answer now (a frozen or vanished replica stops counting after about one
//! confirmation timeout, and a master without replicas costs nothing), and a
//! release no replica confirmed is redone, not trusted. The setting here is
//! only the policy: how many replicas (at most those that can answer) and how
//! long the master waits for them.
//!
//! On a Redis Cluster each master's replicas are counted apart
//! (`node/replicas/cluster.rs`).

use std::time::Duration;

use super::Config;
use crate::error::LockError;

/// The most lanes [`Config::confirmation_lanes`] takes.
pub(crate) const MAX_LANES: usize = 64;

/// How much longer than its timeout a `WAIT` may block: Redis checks blocked
/// clients' timeouts at its timer tick (`hz` 10 by default, every 100 ms), so a
/// `WAIT 1 200` for a missing replica was measured answering after 220-310 ms.
pub(crate) const WAIT_SLACK: Duration = Duration::from_millis(100);

/// The default confirmation timeout: Redisson's (`slavesSyncTimeout`, 1 s).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1);

/// Command connections (lanes) a manager's confirmed lock changes spread
/// over, unless set ([`Config::confirmation_lanes`]).
pub(crate) const DEFAULT_LANES: usize = 3;

/// How many replicas confirm a lock change, and how long the master waits for
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplicaSync {
    /// Replicas that must acknowledge, or every replica that can answer when
    /// fewer can.
    pub(crate) min: u32,
    /// Longest the master waits for them (`WAIT`'s timeout).
    pub(crate) timeout: Duration,
}

/// The setting as the user left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncSetting {
    /// Not said: one replica within 1 s (shorter when the response timeout is).
    Default,
    /// [`Config::no_replica_sync`].
    Off,
    /// [`Config::sync_replicas`].
    Set(ReplicaSync),
}

impl Config {
    /// Makes every lock change wait, in the same round trip, until `min`
    /// replicas acknowledged it (Redis's `WAIT`, pipelined behind the script on
    /// the same connection; one `WAIT` covers a whole batch of lock changes), or
    /// every replica that can answer when fewer can: a replica whose last
    /// acknowledgement is over a second old, or that let a `WAIT` run out, does
    /// not count until it acknowledges again, so a frozen or vanished replica
    /// costs about one `timeout`, and a master without replicas no `WAIT` at all.
    /// Under Sentinel, a master whose replicas all left is asked about first: if
    /// the Sentinels name another master (this one was demoted), nothing it
    /// answers is trusted and the manager follows the new one. On a Redis
    /// Cluster each master's replicas are counted apart, and a master's count
    /// only goes down while the other masters name it a healthy master.
    ///
    /// A grant no replica confirmed within `timeout` is undone and retried until
    /// the caller's wait runs out, then answered [`LockError::NotReplicated`]; a
    /// renewal counts as failed (retried until the lease ends, then the holder is
    /// told the lock is lost); a release, a fenced write and a synchronizer's
    /// change are redone (owner-checked, on the master the deployment names then)
    /// until confirmed or the lease ends. A master with AOF and `appendfsync
    /// always` on Redis 7.2+ (or Valkey) is also asked `WAITAOF 1 0 timeout`. For
    /// a hard floor of replicas, use the server's own `min-replicas-to-write`.
    ///
    /// `min` is at least 1; `timeout` is at least 1 ms, and `timeout` + 100 ms
    /// (how late Redis may end a `WAIT`) is below the response timeout.
    /// Defaults to on: 1 replica within 1 s (or the response timeout less
    /// 200 ms, when that is shorter), as Redisson's `checkLockSyncedSlaves`.
    pub fn sync_replicas(mut self, min: u32, timeout: Duration) -> Config {
        self.sync = SyncSetting::Set(ReplicaSync { min, timeout });
        self
    }

    /// Turns replica confirmation off: lock changes are answered as soon as the
    /// master ran them, one replica round trip sooner, and the shared command
    /// connection is never held by a `WAIT`. What it gives up: a grant or a
    /// release the master answered just before it died may be missing from the
    /// replica promoted in its place, so a second holder can be let in while the
    /// first still holds the lock (the fencing token still rises), or a released
    /// lock stays taken on the new master until its lease ends. Defaults to on
    /// ([`Config::sync_replicas`]).
    pub fn no_replica_sync(mut self) -> Config {
        self.sync = SyncSetting::Off;
        self
    }

    /// Spreads the lock changes that replicas confirm over `lanes` command
    /// connections to the master instead of one. A `WAIT` blocks the whole
    /// connection it is sent on until the replicas acknowledge, so on one
    /// connection each confirmed change waits a replica round trip behind the
    /// one before it; on `lanes` connections as many `WAIT`s block side by
    /// side, and one acknowledgement of the replica answers them all (Redisson
    /// gets the same from its connection pool). Each lane has its own budget
    /// of `WAIT`s; the count of replicas and a master in doubt are shared.
    /// Calls that ask no replica (reads, or confirmation off) keep to the one
    /// connection, and with confirmation off no lane is opened. Each lane is
    /// one more client of the master, per manager: mind `maxclients` with many
    /// managers. Not used on a Redis Cluster (one connection per master there).
    ///
    /// `lanes` is 1 to 64; 1 is a single connection for everything. Defaults
    /// to 3.
    pub fn confirmation_lanes(mut self, lanes: usize) -> Config {
        self.confirmation_lanes = lanes;
        self
    }

    /// What to do with a grant when replica confirmation is on but no replica
    /// can answer now (none attached, every one frozen, cut off or lagging):
    /// with `false` the grant is kept, as the master ran it, and counted
    /// (`lockwarden_unconfirmed_changes_total{op="grant"}`), logged at most
    /// once a second and shown by [`LockGuard::confirmed`](crate::LockGuard::confirmed);
    /// with `true` it is refused as Redisson refuses it ("None of slaves were
    /// synced"): given back under its request id, retried until the caller's
    /// wait runs out, then answered [`LockError::NotReplicated`].
    /// What `true` costs: availability. While no replica is in sync (a replica
    /// restarting or resyncing, the first seconds after a failover, a master
    /// that has none) nobody gets any lock. Defaults to `false`.
    pub fn refuse_unconfirmed_grants(mut self, refuse: bool) -> Config {
        self.refuse_unconfirmed = refuse;
        self
    }

    /// The confirmation in force, if any.
    pub(crate) fn replica_sync(&self) -> Option<ReplicaSync> {
        match self.sync {
            SyncSetting::Off => None,
            SyncSetting::Set(sync) => Some(sync),
            SyncSetting::Default => {
                // A WAIT and the call behind it must fit in the response timeout.
                let timeout =
                    DEFAULT_TIMEOUT.min(self.response_timeout.saturating_sub(2 * WAIT_SLACK));
                (timeout >= Duration::from_millis(1)).then_some(ReplicaSync { min: 1, timeout })
            }
        }
    }

    /// Whether the setting was left at its default (start-up may then relax
    /// what it requires of the server instead of refusing to start).
    pub(crate) fn sync_is_default(&self) -> bool {
        self.sync == SyncSetting::Default
    }

    /// Checks an explicit setting (the default always fits).
    pub(super) fn validate_sync(&self) -> Result<(), LockError> {
        let bad = |why: String| Err(LockError::InvalidConfig(why));
        if !(1..=MAX_LANES).contains(&self.confirmation_lanes) {
            return bad(format!(
                "confirmation_lanes: {} lanes; at least 1 (one connection for everything) and at most {MAX_LANES}",
                self.confirmation_lanes
            ));
        }
        let SyncSetting::Set(ReplicaSync { min, timeout }) = self.sync else {
            return Ok(());
        };
        if min == 0 {
            return bad(
                "sync_replicas: at least 1 replica must confirm (no_replica_sync() turns it off)"
                    .into(),
            );
        }
        if timeout < Duration::from_millis(1) || timeout + WAIT_SLACK >= self.response_timeout {
            return bad(format!(
                "sync_replicas: timeout {timeout:?} must be at least 1 ms, and with the {WAIT_SLACK:?} a WAIT may last beyond it, below the response timeout {:?}",
                self.response_timeout
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_by_default_within_the_response_timeout_on_every_deployment() {
        let config = Config::from_url("redis://127.0.0.1:1").expect("url");
        assert_eq!(
            config.replica_sync(),
            Some(ReplicaSync {
                min: 1,
                timeout: DEFAULT_TIMEOUT
            })
        );
        let short = config.clone().response_timeout(Duration::from_millis(500));
        assert_eq!(
            short.replica_sync().map(|s| s.timeout),
            Some(Duration::from_millis(300))
        );
        assert!(short.validate().is_ok());
        assert_eq!(config.clone().no_replica_sync().replica_sync(), None);
        let cluster = Config::cluster(["redis://127.0.0.1:1"]).expect("url");
        assert_eq!(cluster.replica_sync(), config.replica_sync());
        assert!(cluster.validate().is_ok());
        let explicit = cluster.sync_replicas(1, Duration::from_millis(500));
        assert!(explicit.validate().is_ok());
    }
}
