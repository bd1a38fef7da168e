//! The request to count a master's replicas again after a short `WAIT`, and
//! its answer, for the calls that must decide how to go out meanwhile.
//!
//! A `WAIT` that found too few replicas asks the counting task
//! (`node/replicas/`, `node/cluster_replicas.rs`) for a look at once, and the
//! connection turns short. A call that must be confirmed and took the next
//! free place for a whole `WAIT` right then, a few milliseconds before the
//! look found the replica frozen and lowered the count, would wait out a
//! second whole `WAIT` for the same frozen replica (a waiter whose grant's
//! `WAIT` ran out tries again at once), and the lock would be blind for two
//! timeouts instead of one (2.1 s with a 1 s timeout, measured). So such a call
//! first waits for the look asked before it (a few milliseconds, at most the
//! confirmation timeout it would have spent on the `WAIT`), and goes out by
//! the count that look left: without a `WAIT` when no replica can answer,
//! with one as before when the count stands.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

/// Looks at a master's replicas asked for and finished, shared by the
/// confirmations whose counts one task keeps (one, or a cluster's every
/// master's).
#[derive(Debug, Default)]
pub(crate) struct Look {
    /// Wakes the counting task.
    asked: Arc<Notify>,
    /// How many looks were asked for so far.
    asks: AtomicU64,
    /// How many asks the last finished look covers: those made before it
    /// started.
    answered: AtomicU64,
    /// Wakes the calls waiting for a look to finish.
    finished: Notify,
    /// Releases kept by the confirmations sharing it (one connection's:
    /// `kept.rs`), which a manager on its way out waits for (`Settle`).
    pub(super) kept: AtomicUsize,
}

impl Look {
    /// Asks the counting task for a look now.
    pub(super) fn ask(&self) {
        self.asks.fetch_add(1, Ordering::AcqRel);
        self.asked.notify_one();
    }

    /// Resolves when a look was asked for since the last call (or at once if
    /// one was and nobody looked yet); it does not keep the look alive.
    pub(crate) fn asked(&self) -> OwnedNotified {
        Arc::clone(&self.asked).notified_owned()
    }

    /// Where a look starts: what it will answer once finished
    /// ([`Look::finished`]). Taken before the look reads anything.
    pub(crate) fn starting(&self) -> u64 {
        self.asks.load(Ordering::Acquire)
    }

    /// The look that started at `covers` ([`Look::starting`]) is done, whatever
    /// it found (a count set, kept, or no answer).
    pub(crate) fn finished(&self, covers: u64) {
        self.answered.fetch_max(covers, Ordering::AcqRel);
        self.finished.notify_waiters();
    }

    /// Waits until a look that started after every ask made so far has
    /// finished, or `bound` passed.
    pub(super) async fn answered(&self, bound: Duration) {
        let wanted = self.asks.load(Ordering::Acquire);
        let done = async {
            loop {
                // Listen before looking, so that a look finishing in between
                // is heard.
                let mut finished = std::pin::pin!(self.finished.notified());
                finished.as_mut().enable();
                if self.answered.load(Ordering::Acquire) >= wanted {
                    return;
                }
                finished.await;
            }
        };
        let _ = tokio::time::timeout(bound, done).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReplicaSync;
    use crate::wire::replicas::{Confirm, Confirmation, Confirmed, Need, Way};

    /// What a `Need::Must` call on `c` would send now: `Some(n)`, a `WAIT`
    /// for n replicas; `None`, no `WAIT` (or not sent at all).
    async fn sends(c: &Confirmation) -> Option<u32> {
        let way = c.way(Need::Must, 0).await;
        match (way, c.required()) {
            (Way::Wait(_), n) if n > 0 => Some(n),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_call_that_must_be_confirmed_goes_by_the_count_its_shortfall_asked_for() {
        let sync = ReplicaSync {
            min: 1,
            timeout: Duration::from_secs(5),
        };
        let c = Arc::new(Confirmation::new(
            sync,
            Duration::from_secs(12),
            Confirm::Wait,
            1,
        ));
        let look = c.look();
        // A WAIT came back short: a look is asked for, the connection is short.
        c.record(&Confirmed::Short {
            acked: 0,
            wanted: 1,
        });
        let mut call = tokio::spawn({
            let c = Arc::clone(&c);
            async move { sends(&c).await }
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut call)
                .await
                .is_err(),
            "went out before the look"
        );
        // The look found the replica frozen: no WAIT for it.
        c.set_live(0);
        look.finished(look.starting());
        let sent = tokio::time::timeout(Duration::from_secs(1), call)
            .await
            .expect("went out once looked")
            .expect("joined");
        assert_eq!(sent, None);

        // Short again, and this time the look keeps the count: a WAIT as before.
        c.set_live(1);
        let covers = look.starting();
        c.record(&Confirmed::Short {
            acked: 0,
            wanted: 1,
        });
        let call = tokio::spawn({
            let c = Arc::clone(&c);
            async move { sends(&c).await }
        });
        tokio::task::yield_now().await;
        look.finished(covers + 1);
        let sent = tokio::time::timeout(Duration::from_secs(1), call)
            .await
            .expect("went out once looked")
            .expect("joined");
        assert_eq!(sent, Some(1));
    }

    #[tokio::test]
    async fn a_call_waits_for_the_look_asked_before_it() {
        let look = Arc::new(Look::default());
        // Nothing asked: no wait.
        tokio::time::timeout(
            Duration::from_millis(100),
            look.answered(Duration::from_secs(5)),
        )
        .await
        .expect("nothing to wait for");
        let before = look.starting();
        look.ask();
        // A look that started before the ask does not answer it.
        look.finished(before);
        let waiting = tokio::spawn({
            let look = Arc::clone(&look);
            async move { look.answered(Duration::from_secs(5)).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        look.finished(look.starting());
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("answered once the look after the ask finished")
            .expect("joined");
        // A look that never finishes costs at most the bound.
        look.ask();
        tokio::time::timeout(
            Duration::from_secs(1),
            look.answered(Duration::from_millis(20)),
        )
        .await
        .expect("bounded");
    }
}
