//! [`MultiLock`]: all of several locks, possibly on different managers (and so
//! different Redis servers), taken and released as one ([`MultiGuard`]).
//!
//! Built on the public API only: each member is an ordinary lock of its manager,
//! in Redisson's layout, renewed by that manager's renewer like any other. What this
//! file adds is the rule that makes several locks safe to take together: members
//! are taken one after another in one global order (by name, then by the order the
//! caller listed equal names), so two MultiLocks over the same locks, listed in any
//! order, can never each hold what the other waits for. It is all or nothing within
//! the wait budget: when a member cannot be had in time, the ones already taken are
//! released (and that release is awaited) before the caller gets the error.

use std::time::{Duration, Instant};

use actix::{Addr, Handler, Message, ResponseFuture};
use futures::future::{join_all, select_all};

use super::handle::{Handle, LockHandle};
use super::manager::LockManager;
use crate::error::{LockError, LostReason};
use crate::guard::LockGuard;
use crate::keys::Owner;

/// All of several locks, possibly on different managers, taken and released as one.
///
/// Members are taken one after another in one global order (by name, then by the
/// order the caller listed equal names), so two MultiLocks over the same locks never
/// each hold what the other waits for. All or nothing within the wait: when a member
/// cannot be had in time, those already taken are released before the error comes
/// back. Each member is an ordinary lock of its manager, renewed by it.
///
/// ```no_run
/// # async fn demo(orders: actix::Addr<lockwarden::LockManager>, stock: actix::Addr<lockwarden::LockManager>)
/// # -> Result<(), lockwarden::LockError> {
/// use std::time::Duration;
/// use lockwarden::MultiLock;
/// let both = MultiLock::new([(&orders, "orders:42"), (&stock, "stock:7")])
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// both.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    /// The members, as the caller listed them.
    members: Vec<(Addr<LockManager>, String)>,
    /// How long to wait for all of them; `None` waits until acquired.
    wait: Option<Duration>,
    /// Explicit lease of every member; `None` lets each manager's watchdog renew.
    lease: Option<Duration>,
    /// The owner of every member's hold; `None` makes a new one.
    owner: Option<Owner>,
}

impl MultiLock {
    /// All of these locks: each a (manager, lock name) pair.
    pub fn new<'a, N: Into<String>>(
        members: impl IntoIterator<Item = (&'a Addr<LockManager>, N)>,
    ) -> MultiLock {
        MultiLock {
            members: members
                .into_iter()
                .map(|(m, n)| (m.clone(), n.into()))
                .collect(),
            wait: None,
            lease: None,
            owner: None,
        }
    }

    /// Give up with [`LockError::Timeout`] (having released what was taken) after
    /// this long. Defaults to waiting until every member is acquired.
    pub fn wait(mut self, wait: Duration) -> MultiLock {
        self.wait = Some(wait);
        self
    }

    /// Hold every member for at most this long, without renewal. Defaults to
    /// watchdog mode: each member is renewed by its manager while held.
    pub fn lease(mut self, lease: Duration) -> MultiLock {
        self.lease = Some(lease);
        self
    }

    /// Hold every member as this owner, so that a MultiLock (or a plain lock) of
    /// the same owner re-enters them. Defaults to a new owner of its own.
    pub fn owner(mut self, owner: Owner) -> MultiLock {
        self.owner = Some(owner);
        self
    }

    /// Takes every member, in the global order, within the wait budget; on any
    /// failure releases what was taken and answers with that failure. Bad input (no
    /// member, the same lock twice, a name one manager refuses) is refused before
    /// anything reaches Redis.
    pub async fn acquire(&self) -> Result<MultiGuard, LockError> {
        let handles = ordered_handles(&self.members).await?;
        let owner = self.owner.unwrap_or_default();
        let deadline = self.wait.and_then(|w| Instant::now().checked_add(w));
        let mut taken = Vec::with_capacity(handles.len());
        for handle in &handles {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let got = handle
                .acquire_with(|a| {
                    let a = a.owner(owner);
                    let a = match left {
                        Some(left) => a.wait(left),
                        None => a,
                    };
                    match self.lease {
                        Some(lease) => a.lease(lease),
                        None => a,
                    }
                })
                .await;
            match got {
                Ok(guard) => taken.push(guard),
                Err(e) => {
                    release_all(taken).await;
                    return Err(e);
                }
            }
        }
        Ok(MultiGuard { guards: taken })
    }
}

/// A handle per member, checked by its manager (no Redis yet), in the global order.
async fn ordered_handles(
    members: &[(Addr<LockManager>, String)],
) -> Result<Vec<LockHandle>, LockError> {
    if members.is_empty() {
        return Err(LockError::InvalidConfig(
            "a MultiLock needs at least one lock".into(),
        ));
    }
    for (i, (m, name)) in members.iter().enumerate() {
        if members[..i].iter().any(|(m2, n2)| m2 == m && n2 == name) {
            return Err(LockError::InvalidConfig(format!(
                "the lock {name:?} is listed twice on one manager"
            )));
        }
    }
    let mut order: Vec<usize> = (0..members.len()).collect();
    // Stable: equal names (on different managers) keep the caller's order.
    order.sort_by(|&a, &b| members[a].1.cmp(&members[b].1));
    let mut handles = Vec::with_capacity(members.len());
    for i in order {
        let (manager, name) = &members[i];
        handles.push(manager.send(Handle::new(name.clone())).await??);
    }
    Ok(handles)
}

/// Releases every guard, all at once, and waits for the answers (errors are the
/// members' own business now: each was logged by its lock actor).
pub(super) async fn release_all(guards: Vec<LockGuard>) {
    let _ = join_all(guards.into_iter().map(LockGuard::release)).await;
}

/// Proof of holding every member of a [`MultiLock`].
///
/// Dropping it releases every member in the background, as dropping their guards
/// would.
#[derive(Debug)]
#[must_use = "a MultiGuard that is not kept releases its locks at once"]
pub struct MultiGuard {
    /// One guard per member, in the global order.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The members' guards, in the order they were taken (by name).
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Each member's fencing token, in the order of [`guards`](Self::guards). Tokens
    /// of different locks are not comparable; a resource guarded by one member
    /// checks that member's token.
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// Resolves when any member is lost while held, with its reason.
    pub async fn lost(&self) -> LostReason {
        let losses = self.guards.iter().map(|g| Box::pin(g.lost()));
        select_all(losses).await.0
    }

    /// Releases every member at once. Answers the first error among them (every
    /// member is released either way).
    pub async fn release(self) -> Result<(), LockError> {
        let outcomes = join_all(self.guards.into_iter().map(LockGuard::release)).await;
        outcomes.into_iter().try_for_each(|o| o.map(|_| ()))
    }
}

/// A MultiLock can also be sent as a message, to any manager (usually one of its
/// members'), as [`Acquire`](crate::Acquire) is:
/// `orders.send(MultiLock::new([(&orders, "orders:42"), (&stock, "stock:7")])).await??`.
/// The members are taken beside the manager's mailbox, never blocking it.
impl Message for MultiLock {
    type Result = Result<MultiGuard, LockError>;
}

impl Handler<MultiLock> for LockManager {
    type Result = ResponseFuture<Result<MultiGuard, LockError>>;

    fn handle(&mut self, msg: MultiLock, _ctx: &mut Self::Context) -> Self::Result {
        Box::pin(async move { msg.acquire().await })
    }
}
