//! Replica confirmation's lanes: several command connections to one master,
//! so that `WAIT`s run side by side instead of one behind the other.
//!
//! A `WAIT` blocks the client connection it was sent on until the replicas
//! acknowledge: Redis reads nothing more from that client meanwhile. With one
//! command connection per manager, every confirmed lock change therefore waits
//! a replica round trip behind the one before it, however many places the
//! budget has. On `k` connections ("lanes", `Config::confirmation_lanes`), `k`
//! `WAIT`s block `k` clients at once, and one acknowledgement round of the
//! replica answers all of them (Redis unblocks every `WAIT` an `ACK` covers).
//! Redisson gets the same from its pool of connections.
//!
//! A call picks its lane once ([`Confirmation::pick`]) and sends everything on
//! it: the script, its `WAIT`, and the fast path's `CLIENT ID` and second
//! `WAIT`, since a `WAIT` counts only what its own connection wrote. Each lane
//! has a budget of its own (whole `WAIT`s and short ones, sized as the module
//! documentation of `wire/replicas/` says: a `WAIT` holds only its own lane);
//! the count of replicas, being short and a master in doubt belong to the
//! master and stay shared. Calls that ask no replica keep to lane 0, the
//! manager's one connection.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::Confirmation;
use crate::config::WAIT_SLACK;

/// A connection that can hand out one of its lanes: a clone bound to lane
/// `lane` (taken modulo the lanes it has; a connection with one lane hands
/// out itself).
pub(crate) trait Lanes: Sized {
    /// The same connection, sending on lane `lane`.
    fn lane(&self, lane: usize) -> Self;
}

impl Confirmation {
    /// The same, for a connection of `lanes` lanes (at least one): each lane
    /// gets the budget the single connection had. Before
    /// [`Confirmation::fast`], which sizes each lane's fast places.
    pub(crate) fn lanes(mut self, lanes: usize) -> Confirmation {
        let each = self.places[0].available_permits();
        self.places = (0..lanes.max(1)).map(|_| Semaphore::new(each)).collect();
        self
    }

    /// The lane for the next call: the one with most free places (short ones
    /// while the fast path is open, whole ones otherwise), looked at from a
    /// point that moves at each call so that ties spread over every lane.
    pub(super) fn pick(&self) -> usize {
        let k = self.places.len();
        if k == 1 {
            return 0;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % k;
        let free = |lane: usize| match &self.fast {
            Some(fast) if !fast.is_closed() => fast.free(lane),
            _ => self.places[lane].available_permits(),
        };
        (0..k)
            .map(|i| (start + i) % k)
            .max_by_key(|&lane| (free(lane), std::cmp::Reverse((lane + k - start) % k)))
            .unwrap_or(0)
    }
}

/// How many `WAIT`s of `timeout` may block a connection at once so that a call
/// queued behind all of them still has a whole `WAIT` left of
/// `response_timeout`, counting the [`WAIT_SLACK`] Redis may take beyond each
/// timeout: at least one.
pub(super) fn budget(timeout: Duration, response_timeout: Duration) -> usize {
    let whole = response_timeout.as_nanos() / (timeout + WAIT_SLACK).as_nanos();
    usize::try_from(whole.saturating_sub(1))
        .unwrap_or(usize::MAX)
        .clamp(1, Semaphore::MAX_PERMITS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReplicaSync;
    use crate::wire::{Confirm, ReplicaCount};
    use futures::future::BoxFuture;
    use std::sync::Arc;

    /// One replica, counted once: the lanes do not look at the count.
    #[derive(Debug)]
    struct One;

    impl ReplicaCount for One {
        fn live(&self) -> u32 {
            1
        }
        fn had_replicas(&self) -> bool {
            true
        }
        fn master_doubted(&self) -> bool {
            false
        }
        fn doubts(&self) -> u64 {
            0
        }
        fn look_again(&self) {}
        fn looked(&self, _bound: Duration) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
    }

    #[test]
    fn the_budget_leaves_a_whole_wait_of_the_response_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(budget(ms(200), ms(400)), 1);
        assert_eq!(budget(ms(500), ms(2000)), 2);
        assert_eq!(budget(ms(10), ms(2000)), 17);
    }

    #[test]
    fn calls_spread_over_the_lanes_and_avoid_a_busy_one() {
        let sync = ReplicaSync {
            min: 1,
            timeout: Duration::from_millis(500),
        };
        let c =
            Confirmation::new(sync, Duration::from_secs(2), Confirm::Wait, Arc::new(One)).lanes(3);
        assert_eq!(c.places.len(), 3);
        assert!(c.places.iter().all(|p| p.available_permits() == 2));
        let picked: Vec<usize> = (0..6).map(|_| c.pick()).collect();
        assert_eq!(picked, [0, 1, 2, 0, 1, 2]);
        // Lane 1 has a WAIT out: calls go to the other two.
        let _held = c.places[1].try_acquire().expect("a place");
        let picked: Vec<usize> = (0..4).map(|_| c.pick()).collect();
        assert!(!picked.contains(&1), "{picked:?}");
        // One lane is today's single connection.
        let one = Confirmation::new(sync, Duration::from_secs(2), Confirm::Wait, Arc::new(One));
        assert_eq!((0..3).map(|_| one.pick()).collect::<Vec<_>>(), [0, 0, 0]);
    }
}
