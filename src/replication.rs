//! [`ReplicaConfirmation`]: how replica confirmation stands, for a manager
//! ([`GetReplicaConfirmation`](crate::GetReplicaConfirmation)) or for a server
//! an operator looks at ([`Admin::replica_confirmation`](crate::Admin::replica_confirmation)).
//!
//! Confirmation is on by default, but it can be off or reduced without any
//! error: the configuration turned it off, the user may not run `INFO` (which
//! counts the replicas), the server is not a master, or no replica can answer
//! now (none attached, every one frozen, cut off or lagging). Lock changes then
//! go on unconfirmed, which keeps locks available but lets a failover forget
//! them. This value says which, so that a command can print it and a service
//! can export it; `lockwarden_replicas_counted` is the same count as a gauge.

use std::fmt;

/// How replica confirmation stands (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaConfirmation {
    /// Replicas asked to confirm each lock change; 0 when confirmation is off.
    pub wanted: u32,
    /// Replicas that can confirm now, as last counted; `None` when they
    /// cannot be counted (confirmation off, or a cluster, whose masters are
    /// counted each apart).
    pub counted: Option<u32>,
    /// Why confirmation is off or reduced, in words; `None` when it is full.
    pub reason: Option<String>,
}

impl ReplicaConfirmation {
    /// Off, for `reason`.
    pub(crate) fn off(reason: impl Into<String>) -> ReplicaConfirmation {
        ReplicaConfirmation {
            wanted: 0,
            counted: None,
            reason: Some(reason.into()),
        }
    }

    /// On, asking `wanted` replicas, `counted` of which can answer now.
    pub(crate) fn counted(wanted: u32, counted: u32) -> ReplicaConfirmation {
        let reason = match counted {
            c if c >= wanted => None,
            0 => Some(
                "no replica can confirm lock changes now (none attached, or every one frozen, \
                 cut off or lagging): they are made unconfirmed"
                    .to_string(),
            ),
            c => Some(format!(
                "only {c} of the {wanted} replicas asked for can confirm lock changes now"
            )),
        };
        ReplicaConfirmation {
            wanted,
            counted: Some(counted),
            reason,
        }
    }

    /// Whether every lock change is confirmed by as many replicas as asked.
    pub fn is_full(&self) -> bool {
        self.reason.is_none()
    }

    /// One word for it: `on`, `reduced` or `off`.
    pub fn state(&self) -> &'static str {
        match (self.wanted, &self.reason) {
            (0, _) => "off",
            (_, None) => "on",
            (_, Some(_)) => "reduced",
        }
    }
}

impl fmt::Display for ReplicaConfirmation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "replica confirmation {}", self.state())?;
        if let Some(counted) = self.counted {
            write!(f, " ({counted} of {} replicas can confirm)", self.wanted)?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}
