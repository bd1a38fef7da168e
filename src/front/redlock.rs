//! [`RedLock`]: one lock name held on a majority of independent Redis servers, one
//! lock manager per server (the RedLock algorithm, as Redisson and rslock run it).
//!
//! In a round every node is asked at once, each answer bounded by a short per-node
//! wait, so a node that is down, frozen or slow never holds up the others for
//! longer than that; and a round ends as soon as its outcome is known (a majority
//! out of reach, or won with every node that answered its last try heard), so a
//! node that stopped answering costs one per-node wait, not one per round. The
//! tries a round leaves unanswered are dropped, and each node's lock actor sends a
//! give-back right behind such a try, so a frozen node that runs them when it
//! resumes is left holding nothing. The lock is granted when a majority (N/2 + 1)
//! said yes **and** the time the round took leaves the lease most of its length
//! (validity = lease - elapsed - a drift allowance); otherwise every node that said
//! yes is released at once (waited for at most the per-node wait). Before the next
//! round the client waits on one node only, the *anchor*: the first node, in the
//! order given, that answered. There it queues like any waiter and is woken by the
//! node's unlock message (at most a second, then a new round asks everyone again);
//! once it holds the anchor, the next round asks the others. Waiting on every node
//! at once would split the votes under contention (each client holding one node
//! while waiting for one that another client holds, until the per-node waits run
//! out); with every client queued on the same anchor, whoever wins it finds the
//! others free. Clients should therefore list the nodes in the same order; another
//! order is still safe, only slower under contention. With no node answering, the
//! round is tried again after a short random pause, until the wait budget runs out.
//!
//! In watchdog mode every node's hold is renewed by its own manager, as any lock
//! is; [`RedGuard::lost`] resolves once fewer than a majority of the holds are
//! left, which is when the lock stops being a RedLock; the holds still left then
//! are given back at once.
//!
//! Fencing: the nodes' counters are independent, so their tokens are not
//! comparable and there is no one token for the whole lock. The guard offers each
//! node's token ([`RedGuard::fencing_tokens`]); a resource that wants fencing must
//! keep, per node, the highest token it accepted and refuse a request that is not
//! above it on a majority of the nodes it was given.

use std::time::{Duration, Instant};

use actix::{Addr, Handler, Message, ResponseFuture};
use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use tracing::{debug, info, warn};

use super::handle::{Handle, LockHandle};
use super::manager::LockManager;
use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::keys::Owner;

/// Longest one wait on the anchor node lasts before a new round asks every node
/// again, so that a node that came back, or a holder that is gone without a
/// release, is noticed.
const ANCHOR_WAIT: Duration = Duration::from_secs(1);

/// One lock name on a majority of independent nodes, one manager per node (the
/// RedLock algorithm).
///
/// In a round every node is asked at once, each answer bounded by
/// [`node_wait`](Self::node_wait), so a node that is down or frozen never holds up the
/// others. The lock is granted when a majority (N/2 + 1) said yes and the round left
/// the lease most of its length (lease - elapsed - 1% - 2 ms); otherwise every node
/// that said yes is released at once, and the client waits for the first node (in
/// the order given) that answered, woken by its unlock message, before the next
/// round; list the nodes in the same order in every client. In
/// watchdog mode each node's manager renews its hold; [`RedGuard::lost`] resolves
/// once fewer than a majority still hold it. The nodes' fencing tokens are not
/// comparable: see [`RedGuard::fencing_tokens`].
///
/// ```no_run
/// # async fn demo(m1: actix::Addr<lockwarden::LockManager>, m2: actix::Addr<lockwarden::LockManager>,
/// #     m3: actix::Addr<lockwarden::LockManager>) -> Result<(), lockwarden::LockError> {
/// use std::time::Duration;
/// use lockwarden::RedLock;
/// let nodes = [m1, m2, m3];
/// let g = RedLock::new(&nodes, "payments:run").wait(Duration::from_secs(5)).acquire().await?;
/// // ... g.lost() resolves if fewer than a majority still hold it
/// g.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    /// One manager per independent Redis server.
    nodes: Vec<Addr<LockManager>>,
    /// The lock name, the same on every node.
    name: String,
    /// How long to keep trying; `None` until acquired.
    wait: Option<Duration>,
    /// Explicit lease; `None` for watchdog mode.
    lease: Option<Duration>,
    /// How long one node may take to answer one round.
    node_wait: Duration,
    /// How many nodes the majority is counted over; `None` for `nodes.len()`.
    out_of: Option<usize>,
}

impl RedLock {
    /// The lock `name` on these nodes (one manager per independent server).
    pub fn new(nodes: &[Addr<LockManager>], name: impl Into<String>) -> RedLock {
        RedLock {
            nodes: nodes.to_vec(),
            name: name.into(),
            wait: None,
            lease: None,
            node_wait: Duration::from_millis(50),
            out_of: None,
        }
    }

    /// Give up after this long, with the last round's failure. Defaults to trying
    /// until acquired.
    pub fn wait(mut self, wait: Duration) -> RedLock {
        self.wait = Some(wait);
        self
    }

    /// Hold it for at most this long on each node, without renewal. Defaults to
    /// watchdog mode (each node's manager renews its hold; the managers' watchdog
    /// lease is the lease the validity is measured against).
    pub fn lease(mut self, lease: Duration) -> RedLock {
        self.lease = Some(lease);
        self
    }

    /// How long one node may take to answer in one round; a node slower than
    /// that counts as a no for the round. Defaults to 50 milliseconds.
    pub fn node_wait(mut self, wait: Duration) -> RedLock {
        self.node_wait = wait;
        self
    }

    /// Counts the majority over `total` nodes, of which only those given to
    /// [`new`](Self::new) can be asked: the others could not be reached when the
    /// managers were started (a command-line tool that starts one manager per
    /// server, say, and goes on without the dead ones). A node that is down still
    /// counts toward N; leaving it out would shrink the majority and let two
    /// clients that each reach a different half both win. A total below the
    /// number of nodes given is refused at [`acquire`](Self::acquire). Defaults
    /// to the number of nodes given.
    pub fn out_of(mut self, total: usize) -> RedLock {
        self.out_of = Some(total);
        self
    }

    /// The number of nodes that must hold it.
    fn quorum(&self) -> usize {
        self.out_of.unwrap_or(self.nodes.len()) / 2 + 1
    }

    /// Takes the lock on a majority of the nodes, as described on [`RedLock`].
    /// Bad input (no node, the same node twice, a name a node refuses) is refused
    /// before anything reaches Redis.
    pub async fn acquire(&self) -> Result<RedGuard, LockError> {
        let handles = self.handles().await?;
        let owner = Owner::new();
        let deadline = self.wait.and_then(|w| Instant::now().checked_add(w));
        // The lease the validity is measured against: the explicit one, or a
        // conservative stand-in for the managers' watchdog lease, which renewal
        // keeps extending while the guard lives.
        let lease = self.lease.unwrap_or(Duration::from_secs(30));
        let drift = lease / 100 + Duration::from_millis(2);
        let quorum = self.quorum();
        // A grant won on the anchor node between rounds, kept for the next round,
        // with the moment its lease may have started.
        let mut carried: Option<(usize, LockGuard, Instant)> = None;
        let mut last_error = None;
        // Per node: its last try went unanswered (frozen, or slower than the
        // others); a round does not wait for it once the others decided.
        let mut silent = vec![false; handles.len()];
        loop {
            let began = carried.as_ref().map_or_else(Instant::now, |c| c.2);
            let carried_node = carried.as_ref().map(|c| c.0);
            let asked: Vec<usize> = (0..handles.len())
                .filter(|&i| Some(i) != carried_node)
                .collect();
            let won: Vec<(usize, LockGuard)> =
                carried.take().map(|(i, g, _)| (i, g)).into_iter().collect();
            let (mut won, mut answered) = self
                .round(&handles, owner, &asked, won, &mut silent, &mut last_error)
                .await;
            let valid = lease
                .checked_sub(began.elapsed() + drift)
                .is_some_and(|v| !v.is_zero());
            if won.len() >= quorum && valid {
                won.sort_by_key(|(i, _)| *i);
                let (nodes, guards) = won.into_iter().unzip();
                return Ok(RedGuard {
                    guards,
                    nodes,
                    quorum,
                });
            }
            self.give_back(won).await;
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(last_error.unwrap_or(LockError::Timeout {
                    waited: self.wait.unwrap_or_default(),
                    holder: None,
                }));
            }
            let left = deadline.map(|d| d.saturating_duration_since(now));
            // Wait where every client waits: on the first node, in list order,
            // that answered. Asking every node at once and waiting on each (the
            // algorithm as first written) splits the votes under contention: each
            // client holds one node while it waits for another that a second
            // client holds. Queued on one node, the clients are woken one by one
            // by its unlock messages, and the winner asks the others at once.
            answered.sort_unstable();
            match answered.first() {
                Some(&anchor) => {
                    let wait = left.map_or(ANCHOR_WAIT, |l| l.min(ANCHOR_WAIT));
                    let attempt = handles[anchor].acquire_with(|a| {
                        let a = a.owner(owner).wait(wait);
                        match self.lease {
                            Some(l) => a.lease(l),
                            None => a,
                        }
                    });
                    let waited = tokio::time::timeout(wait + self.node_wait, attempt).await;
                    silent[anchor] = waited.is_err();
                    match waited {
                        Ok(Ok(guard)) => {
                            // Its lease started at most one answer ago.
                            let at = Instant::now();
                            let from = at.checked_sub(self.node_wait).unwrap_or(at);
                            carried = Some((anchor, guard, from));
                        }
                        // Still held elsewhere: a new round asks every node again.
                        Ok(Err(LockError::Timeout { .. })) => {}
                        Ok(Err(e)) => last_error = Some(e),
                        Err(_) => last_error = Some(self.unanswered()),
                    }
                }
                None => {
                    // No node answered: a short random pause before asking again.
                    let pause = self
                        .node_wait
                        .mul_f64(0.5 + crate::random::below(1000) as f64 / 1000.0);
                    tokio::time::sleep(left.map_or(pause, |l| pause.min(l))).await;
                }
            }
        }
    }

    /// One round: asks the nodes `asked` at once (`won` holds what the round
    /// starts with, a grant carried from the anchor) and reads their answers
    /// until the outcome is known: a majority won and every node that answered
    /// its last try has answered this one too, or a majority is out of reach
    /// even if every node still silent said yes, or every node answered or ran
    /// out of its per-node wait. A node silent in an earlier round (frozen, say)
    /// is still asked and counts if it answers in time, but nobody waits for it:
    /// waiting for it on every round would hold the nodes already won (keeping
    /// out the others, who then keep missing a majority) and make whoever needs
    /// it lose every race to processes that do not. The tries left
    /// unanswered are dropped, which makes each lock actor give back whatever it
    /// may yet be granted. Answers the grants, sorted later, and the nodes that
    /// answered (granted or held elsewhere), in list order of answering.
    async fn round(
        &self,
        handles: &[LockHandle],
        owner: Owner,
        asked: &[usize],
        mut won: Vec<(usize, LockGuard)>,
        silent: &mut [bool],
        last_error: &mut Option<LockError>,
    ) -> (Vec<(usize, LockGuard)>, Vec<usize>) {
        let quorum = self.quorum();
        let mut answered: Vec<usize> = won.iter().map(|(i, _)| *i).collect();
        let mut waiting: Vec<usize> = asked.to_vec();
        let mut tries: FuturesUnordered<_> = asked
            .iter()
            .map(|&i| async move { (i, self.try_node(&handles[i], owner).await) })
            .collect();
        while let Some((node, answer)) = tries.next().await {
            waiting.retain(|&i| i != node);
            silent[node] = matches!(answer, Answer::Silent);
            match answer {
                Answer::Granted(guard) => {
                    won.push((node, guard));
                    answered.push(node);
                }
                Answer::Held => answered.push(node),
                Answer::Failed(e) => *last_error = Some(e),
                Answer::Silent => *last_error = Some(self.unanswered()),
            }
            let loud = waiting.iter().filter(|&&i| !silent[i]).count();
            if won.len() + waiting.len() < quorum || (won.len() >= quorum && loud == 0) {
                break;
            }
        }
        // Left before they answered: silent until they answer a later try.
        for i in waiting {
            silent[i] = true;
        }
        (won, answered)
    }

    /// Gives back the grants of a round that did not win, waiting for the
    /// answers at most the per-node wait: the other clients should find them
    /// free by the next round, but a node that froze meanwhile must not hold
    /// this client up (awaited in full, such a release would hold the next
    /// round back until its retries give up with the lease). What is not
    /// answered by then goes on in the node's lock actor.
    async fn give_back(&self, won: Vec<(usize, LockGuard)>) {
        let releases: Vec<_> = won.iter().filter_map(|(_, g)| g.give_back()).collect();
        // Marked given back: dropping them sends nothing more.
        drop(won);
        let _ = tokio::time::timeout(self.node_wait, join_all(releases)).await;
    }

    /// One node's answer for one round, within the per-node wait.
    async fn try_node(&self, handle: &LockHandle, owner: Owner) -> Answer {
        let attempt = handle.acquire_with(|a| {
            let a = a.owner(owner).wait(Duration::ZERO);
            match self.lease {
                Some(l) => a.lease(l),
                None => a,
            }
        });
        match tokio::time::timeout(self.node_wait, attempt).await {
            Ok(Ok(guard)) => Answer::Granted(guard),
            Ok(Err(LockError::Timeout { .. })) => Answer::Held,
            Ok(Err(e)) => Answer::Failed(e),
            Err(_) => Answer::Silent,
        }
    }

    /// The error of a node that did not answer within the per-node wait.
    fn unanswered(&self) -> LockError {
        LockError::Timeout {
            waited: self.node_wait,
            holder: None,
        }
    }

    /// A handle per node, checked by its manager (no Redis yet).
    async fn handles(&self) -> Result<Vec<LockHandle>, LockError> {
        if self.nodes.is_empty() {
            return Err(LockError::InvalidConfig(
                "a RedLock needs at least one node".into(),
            ));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if self.nodes[..i].contains(node) {
                return Err(LockError::InvalidConfig(
                    "a RedLock lists the same manager twice: its nodes must be independent".into(),
                ));
            }
        }
        if self.out_of.is_some_and(|total| total < self.nodes.len()) {
            return Err(LockError::InvalidConfig(format!(
                "a RedLock over {} nodes cannot count its majority out of fewer",
                self.nodes.len()
            )));
        }
        if self.node_wait.is_zero() {
            return Err(LockError::InvalidConfig(
                "a RedLock's node wait is zero".into(),
            ));
        }
        let mut handles = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            handles.push(node.send(Handle::new(self.name.clone())).await??);
        }
        Ok(handles)
    }
}

/// One node's answer to one try of a round.
#[derive(Debug)]
enum Answer {
    /// It granted the lock.
    Granted(LockGuard),
    /// It is held elsewhere.
    Held,
    /// It answered with an error.
    Failed(LockError),
    /// No answer within the per-node wait.
    Silent,
}

/// Proof of holding a [`RedLock`] on a majority of its nodes. Dropping it releases
/// every node's hold in the background.
#[derive(Debug)]
#[must_use = "a RedGuard that is not kept releases its lock at once"]
pub struct RedGuard {
    /// The holds, one per node that granted.
    guards: Vec<LockGuard>,
    /// Which node (its index in the list given to [`RedLock::new`]) each hold is on.
    nodes: Vec<usize>,
    /// How many must stay held.
    quorum: usize,
}

impl RedGuard {
    /// How many nodes hold it now (granted and not lost since, nor given back
    /// after the RedLock was lost).
    pub fn holding(&self) -> usize {
        self.guards
            .iter()
            .filter(|g| g.is_lost().is_none() && !g.is_released())
            .count()
    }

    /// Each granting node's fencing token. They are not comparable with each other
    /// (the nodes' counters are independent), so there is no one token for the
    /// lock: a resource that wants fencing keeps, per node, the highest token it
    /// accepted, and refuses a request that is not above it on a majority of the
    /// nodes it was given.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// Each granting node's fencing token with the node it came from (its index in
    /// the list given to [`RedLock::new`]): what a resource that keeps a highest
    /// token per node needs to check a request.
    pub fn node_tokens(&self) -> Vec<(usize, u64)> {
        self.nodes
            .iter()
            .copied()
            .zip(self.guards.iter().map(LockGuard::fencing_token))
            .collect()
    }

    /// Resolves when fewer than a majority of the nodes still hold the lock, with
    /// the reason of the loss that tipped it. The holds still left then are
    /// worth nothing but keep others out (no majority is possible while they
    /// last), so they are given back at that moment, each owner-checked, in the
    /// background; a failure is logged, and that hold ends with its lease. A
    /// process about to exit sends each node's manager
    /// [`Settle`](crate::Settle) to let them finish.
    pub async fn lost(&self) -> LostReason {
        let mut left = self.guards.len();
        let mut losses: FuturesUnordered<_> = self.guards.iter().map(|g| g.lost()).collect();
        while let Some(reason) = losses.next().await {
            left -= 1;
            if left < self.quorum {
                self.give_back_held(&reason);
                return reason;
            }
        }
        // Every hold ended without being lost: only after a release.
        std::future::pending().await
    }

    /// Gives back every hold not lost yet (the RedLock is lost, `reason` tipped
    /// it): the releases are queued now, and their answers logged in the
    /// background. A hold given back already is left alone.
    fn give_back_held(&self, reason: &LostReason) {
        let releases: Vec<_> = self
            .nodes
            .iter()
            .zip(&self.guards)
            .filter(|(_, g)| g.is_lost().is_none())
            .filter_map(|(&node, g)| Some((node, g.name().to_owned(), g.give_back()?)))
            .collect();
        if releases.is_empty() {
            return;
        }
        warn!(
            lock = %releases[0].1,
            %reason,
            giving_back = releases.len(),
            "RedLock lost: fewer than a majority of its nodes still hold it; giving back the \
             holds that are left"
        );
        tokio::spawn(join_all(releases.into_iter().map(
            |(node, lock, release)| async move {
                match release.await {
                    Ok(_) => debug!(%lock, node, "gave back a lost RedLock's hold"),
                    Err(e) => warn!(
                        %lock,
                        node,
                        error = %e,
                        "could not give back a lost RedLock's hold; it ends with its lease"
                    ),
                }
            },
        )));
    }

    /// Releases every node's hold at once. Answers `Ok` as soon as a majority of
    /// the nodes released theirs: a hold lost on a minority of nodes while the lock
    /// was held (a node that died, say) did not make the RedLock lost, so it is no
    /// error of the RedLock's, and a node that does not answer (frozen) does not
    /// hold the answer up: its release goes on in the background until its lease
    /// would have ended, as any release does (said at info). Otherwise answers the
    /// first error among them ([`LockError::Lost`] once fewer than a majority held
    /// it).
    pub async fn release(self) -> Result<(), LockError> {
        let quorum = self.quorum;
        // Holds given back when the RedLock was lost are not sent again; the
        // lost ones answer why.
        let mut pending: FuturesUnordered<_> = self
            .guards
            .into_iter()
            .filter(|g| !g.is_released())
            .map(LockGuard::release)
            .collect();
        let (mut released, mut first_error) = (0, None);
        while let Some(outcome) = pending.next().await {
            match outcome {
                Ok(_) => released += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            if released >= quorum {
                if !pending.is_empty() {
                    info!(
                        released,
                        unanswered = pending.len(),
                        "RedLock released on a majority; the other nodes' holds are released \
                         when they answer, or end with their lease"
                    );
                    tokio::spawn(async move { while pending.next().await.is_some() {} });
                }
                return Ok(());
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// A RedLock can also be sent as a message, to any manager (usually one of its
/// nodes'), as [`Acquire`](crate::Acquire) is: `m1.send(RedLock::new(&nodes, "x")).await??`.
/// The round runs beside the manager's mailbox, never blocking it.
impl Message for RedLock {
    type Result = Result<RedGuard, LockError>;
}

impl Handler<RedLock> for LockManager {
    type Result = ResponseFuture<Result<RedGuard, LockError>>;

    fn handle(&mut self, msg: RedLock, _ctx: &mut Self::Context) -> Self::Result {
        Box::pin(async move { msg.acquire().await })
    }
}
