//! Deadlocks across processes, in words: who waits for what, the wait-for graph
//! walk that finds a cycle through one wait, and which wait of a cycle gives up.
//!
//! A wait is an owner waiting for a lock; the owners it waits for are the lock's
//! holders that exclude what it wants (and, for a fair lock, the waiters queued
//! ahead of it). A wait that has lasted `Config::deadlock_timeout` follows those
//! edges ([`find_cycle`]): the holders, what each of them waits for, their
//! holders, and so on, and a path back to one of its own owners is a deadlock.
//! As in PostgreSQL, only cycles through the wait that looks are searched: every
//! member of a cycle looks for itself, so no cycle goes unseen.
//!
//! Every member of a cycle would find it, so all must agree on one victim
//! without talking: [`victim`] picks the wait that started last (then the
//! greatest owner field), from the start times the waits themselves recorded, so
//! every detector reads the same numbers and names the same wait. Only the
//! victim gives up; the others go on waiting and are granted once the victim's
//! caller releases what it holds.
//!
//! The graph is read through [`Graph`], so that the walk is the same over this
//! process's own waits (no Redis) and over the records in Redis (`wire/deadlock.rs`),
//! and is tested here over a plain map.

use std::collections::HashSet;
use std::fmt;

use crate::client::{escape, ClientInfo};
use crate::kind::AcquireKind;

/// How many reads (a lock or an owner) one walk may make before it gives up
/// without an answer: a cycle longer than that is not one a service makes, and
/// the bound keeps a check's cost known whatever the graph.
pub(crate) const WALK_LIMIT: usize = 64;

/// A deadlock that was broken by failing this wait: the cycle, as the
/// detector saw it. Each link is an owner waiting for a lock that the next
/// link's owner holds (or is queued ahead for, in a fair lock); the last
/// link's lock is held by the first link's owner. The first link is the wait
/// that got the error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deadlock {
    /// The cycle, starting with the wait that was failed.
    pub links: Vec<DeadlockLink>,
}

/// One wait of a [`Deadlock`]'s cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadlockLink {
    /// The waiting owner's field, `<client id>:<n>` (for a nested `lockwarden
    /// run`, the outer command's holder, on whose behalf the inner one waits).
    pub owner: String,
    /// Who that owner's client is (host, pid, label), from the client registry.
    pub client: Option<ClientInfo>,
    /// The lock it waits for.
    pub lock: String,
    /// What it wants of it.
    pub wants: AcquireKind,
    /// When the wait began, Unix ms, on the waiter's clock.
    pub since_ms: u64,
}

impl Deadlock {
    /// The locks of the cycle, in its order.
    pub fn locks(&self) -> impl Iterator<Item = &str> {
        self.links.iter().map(|l| l.lock.as_str())
    }
}

impl DeadlockLink {
    /// The owner in one phrase: its field and where it runs.
    fn who(&self) -> String {
        let owner = escape(&self.owner);
        match &self.client {
            Some(c) => format!("{owner} ({})", c.describe()),
            None => owner,
        }
    }
}

impl fmt::Display for Deadlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadlock: ")?;
        let n = self.links.len();
        for (i, link) in self.links.iter().enumerate() {
            let next = &self.links[(i + 1) % n];
            if i == 0 {
                write!(f, "{}", link.who())?;
            }
            write!(
                f,
                " waits for {} lock {}, held by ",
                link.wants,
                escape(&link.lock)
            )?;
            if i + 1 == n {
                write!(f, "{}", escape(&self.links[0].owner))?;
            } else {
                write!(f, "{}, which", next.who())?;
            }
        }
        f.write_str(
            "; this wait started last and was chosen to end the cycle: release what its \
             owner holds, then try again",
        )
    }
}

/// One wait, as a record or this process shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wait {
    /// The owner identities the wait counts for: its own owner field first,
    /// then those it waits on behalf of (a nested command's outer holders).
    pub(crate) owners: Vec<String>,
    /// The lock.
    pub(crate) lock: String,
    /// What it wants.
    pub(crate) wants: AcquireKind,
    /// The field it will hold (`:write` after it for a writer): how it shows
    /// in a fair lock's queue.
    pub(crate) field: String,
    /// When it began, Unix ms (the waiter's clock).
    pub(crate) since_ms: u64,
}

/// A lock as the walk needs it: its holders' fields and a fair lock's queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LockState {
    /// The holders' fields, as in the lock's hash (`:write` after a writer's).
    pub(crate) holders: Vec<String>,
    /// A fair lock's queue, head first (owner fields).
    pub(crate) queue: Vec<String>,
}

/// An owner as the walk needs it: who its client is, and what it waits for.
#[derive(Clone, Debug, Default)]
pub(crate) struct OwnerState {
    /// Its client's registry entry.
    pub(crate) client: Option<ClientInfo>,
    /// Its waits now (usually one).
    pub(crate) waits: Vec<Wait>,
}

/// Where the walk reads the graph.
pub(crate) trait Graph {
    /// What reading may fail with.
    type Error;
    /// The lock `name` now.
    async fn lock(&mut self, name: &str) -> Result<LockState, Self::Error>;
    /// The owner `owner` now; `None` for one that cannot answer (no registry
    /// entry: a Redisson client, an older lockwarden, a process that is gone),
    /// where the search ends.
    async fn owner(&mut self, owner: &str) -> Result<Option<OwnerState>, Self::Error>;
}

/// The owner a holder's or queued waiter's field stands for: the field
/// without a writer's `:write`.
pub(crate) fn owner_of(field: &str) -> &str {
    field.strip_suffix(":write").unwrap_or(field)
}

/// The owners `wait` waits for in `lock`: holders that exclude what it wants
/// (a reader waits only for a writer), and for a fair lock the waiters queued
/// ahead of it. Its own hold is left out (a re-entry does not wait); an owner
/// it waits on behalf of is not, which is how a nested command that wants a
/// lock its outer command holds is found waiting for itself.
pub(crate) fn blockers(wait: &Wait, lock: &LockState) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut add = |owner: &str| {
        if !found.iter().any(|o| o == owner) {
            found.push(owner.to_string());
        }
    };
    for h in &lock.holders {
        if *h == wait.field || owner_of(h) == owner_of(&wait.field) {
            continue;
        }
        if wait.wants.waits_for_holder(h) {
            add(owner_of(h));
        }
    }
    if wait.wants.waits_for_queue_ahead() {
        for q in lock.queue.iter().take_while(|q| **q != wait.field) {
            add(owner_of(q));
        }
    }
    found
}

/// A cycle through `start`, if the graph has one within [`WALK_LIMIT`] reads:
/// the waits in order, `start` first, each with its owner's registry entry. The
/// second part of the answer counts the reads made.
pub(crate) async fn find_cycle<G: Graph>(
    graph: &mut G,
    start: &Wait,
    start_client: Option<ClientInfo>,
) -> Result<(Option<Deadlock>, usize), G::Error> {
    // Depth first, keeping the path: each step is a wait on the path with the
    // owners it waits for that are still to try, and the other waits of the
    // same owner, tried in its place if it leads nowhere.
    struct Step {
        link: DeadlockLink,
        next: Vec<String>,
        siblings: Vec<(DeadlockLink, Vec<String>)>,
    }
    let mut reads = 1;
    let first = graph.lock(&start.lock).await?;
    let mut path = vec![Step {
        link: link_of(start, &start.owners[0], start_client),
        next: blockers(start, &first),
        siblings: Vec::new(),
    }];
    let mut seen: HashSet<String> = start.owners.iter().cloned().collect();
    while let Some(top) = path.last_mut() {
        let Some(owner) = top.next.pop() else {
            match top.siblings.pop() {
                Some((link, next)) => {
                    top.link = link;
                    top.next = next;
                }
                None => {
                    path.pop();
                }
            }
            continue;
        };
        if start.owners.contains(&owner) {
            // Back at the start: its link names the identity the cycle closes
            // on, with that identity's client (a nested wait closes on its
            // outer holder, which runs elsewhere).
            if owner != path[0].link.owner {
                reads += 1;
                path[0].link.client = graph.owner(&owner).await?.and_then(|o| o.client);
                path[0].link.owner = owner;
            }
            let links = path.into_iter().map(|s| s.link).collect();
            return Ok((Some(Deadlock { links }), reads));
        }
        if reads >= WALK_LIMIT || !seen.insert(owner.clone()) {
            continue;
        }
        reads += 1;
        let Some(state) = graph.owner(&owner).await? else {
            continue;
        };
        let mut waits = Vec::new();
        for wait in &state.waits {
            if reads >= WALK_LIMIT {
                break;
            }
            reads += 1;
            let next = blockers(wait, &graph.lock(&wait.lock).await?);
            if !next.is_empty() {
                waits.push((link_of(wait, &owner, state.client.clone()), next));
            }
        }
        if let Some((link, next)) = waits.pop() {
            path.push(Step {
                link,
                next,
                siblings: waits,
            });
        }
    }
    Ok((None, reads))
}

fn link_of(wait: &Wait, owner: &str, client: Option<ClientInfo>) -> DeadlockLink {
    DeadlockLink {
        owner: owner.to_string(),
        client,
        lock: wait.lock.clone(),
        wants: wait.wants,
        since_ms: wait.since_ms,
    }
}

/// The index of the link in `cycle` that gives up: the wait that started last,
/// then the greatest owner field (every member of the cycle computes the same).
pub(crate) fn victim(cycle: &Deadlock) -> usize {
    cycle
        .links
        .iter()
        .enumerate()
        .max_by(|(_, a), (_, b)| {
            (a.since_ms, a.owner.as_str(), a.lock.as_str()).cmp(&(
                b.since_ms,
                b.owner.as_str(),
                b.lock.as_str(),
            ))
        })
        .map_or(0, |(i, _)| i)
}

#[cfg(test)]
mod tests;
