//! Releases no replica could confirm, kept by their sender and sent again
//! while a failover may still lose them.
//!
//! With replica confirmation on, a release sent while no replica can answer
//! (every one frozen, cut off or gone: the count in `node/replicas/` is 0) goes
//! without a `WAIT` and is answered at once. If the master then dies, the
//! replica promoted in its place never saw it and keeps the old hold for the
//! rest of its lease: every waiter is blind that long. redis-rs forgets a
//! command once it is answered, so the keeping is done here, for every lock
//! kind: the exclusive, fair and read-write locks' releases, and a hand-over's
//! release half (`Invocation::kept`; the grant of a hand-over is not redone).
//!
//! Each master's [`Confirmation`] has one [`Keeper`], shared by every clone of
//! the connection. It holds the kept releases and sends them again, as
//! retries under their own request ids, all in one pipeline with one `WAIT`
//! behind (one per hash slot on a cluster, where a pipeline cannot cross
//! slots): at once when the deployment names a new master
//! ([`Confirmation::new_master`]: Sentinel's switch, a cluster's slot owner
//! changing), and otherwise every [`EVERY`]. A release stays kept until a
//! `WAIT` behind one of its resends counts a replica; or until a master the
//! connection followed to after it was kept (Sentinel's, whose Follower moves
//! before it tells) answered a resend: the failover it was kept for has
//! happened and the release is on the master the deployment names (a
//! cluster's connection may still route to the old master for a moment, so
//! there only a replica settles it); or until the earlier of its lease's end
//! (the lock is free then anyway) and half the latch's lifetime (while Redis
//! surely remembers the first outcome). So `lockwarden run`, which stays while
//! its release is kept, exits right after the redo on a new master. One task per
//! keeper, running only while it keeps something, so a replica outage costs
//! one round trip a second for all of a connection's releases, not one task
//! and four calls a second for each.
//!
//! A resend never counts twice: on the master that ran the release its latch
//! answers the first outcome and changes nothing (every release script reads
//! its latch first on a retry, the fair and read-write ones on every call); on
//! a master that never saw it the owner check frees only the hold this owner
//! still has there. A later grant to the same owner field cannot be taken by
//! it: the latch, written by the release before that grant, is replicated
//! with it, and the window never outlives the latch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::{join_all, select, Either};
use redis::{RedisResult, ServerErrorKind, Value};
use tokio::sync::Notify;
use tracing::{debug, info};

use super::{confirmed, push_waits, Confirmation, Confirmed};
use crate::config::ReplicaSync;
use crate::wire::{Arg, Invocation, ScriptConn};

/// How often kept releases are sent again when no new master is named.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// What is sent again when a release goes unconfirmed, and for how long.
#[derive(Debug, Clone)]
pub(crate) struct Redo {
    /// What the resend is, made only when the release is kept ([`Redo::again`]):
    /// almost every release is confirmed or goes where no replica ever was, and
    /// a copy of every call made up front cost each release a dozen allocations.
    pub(crate) again: Again,
    /// How long after it was sent it may be resent, in ms: the lease or half
    /// the latch's lifetime, whichever is shorter.
    pub(crate) for_ms: u64,
}

/// The resend of a kept release.
#[derive(Debug, Clone)]
pub(crate) enum Again {
    /// The call itself, with the argument at `flag` (its retry flag) set to "1" so that
    /// it reads the latch; `None` for a script that always reads it.
    Itself { flag: Option<usize> },
    /// Another call: a hand-over resends only its release half.
    Other(Arc<Invocation>),
}

impl Redo {
    /// The release `call` (whose redo this is) as a retry under its request id.
    pub(crate) fn again(&self, call: &Invocation) -> Arc<Invocation> {
        match &self.again {
            Again::Other(other) => Arc::clone(other),
            Again::Itself { flag } => {
                let mut again = call.clone();
                again.redo = None;
                if let Some(arg) = flag.and_then(|i| again.args.get_mut(i)) {
                    *arg = Arg::Word("1");
                }
                Arc::new(again)
            }
        }
    }
}

/// One kept release.
#[derive(Debug)]
struct Kept {
    /// The call to send again.
    call: Arc<Invocation>,
    /// When it stops being sent.
    until: Instant,
    /// [`State::followed`] when it was kept.
    followed: u64,
    /// Counts it while it is kept, for the connection's [`Settle`]
    /// (`Confirmation::kept_pending`).
    ///
    /// [`Settle`]: crate::Settle
    counted: Arc<AtomicUsize>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.counted.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A kept release as one resend sees it.
#[derive(Debug, Clone)]
struct Resend {
    /// The call to send again.
    call: Arc<Invocation>,
    /// The connection followed a new master since it was kept: an answer
    /// there settles it.
    moved: bool,
}

/// The kept releases of one master's connection, and the signal that sends
/// them at once (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Keeper {
    /// The releases, and whether a task sends them. A std `Mutex`: nothing
    /// awaits while it is held.
    state: Mutex<State>,
    /// Told when the deployment names a new master.
    new_master: Notify,
}

/// What a [`Keeper`] holds.
#[derive(Debug, Default)]
struct State {
    /// The releases kept, oldest first.
    kept: Vec<Kept>,
    /// A task is sending them; it ends when none is left.
    running: bool,
    /// How many times the connection moved to a new master and said so
    /// ([`Keeper::new_master`] with `followed`).
    followed: u64,
}

impl Keeper {
    /// The deployment named a new master: what is kept goes out now (or right
    /// after a resend under way). `followed`: the connection sends there
    /// already ([`Confirmation::new_master`]).
    pub(super) fn new_master(&self, followed: bool) {
        if followed {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.followed += 1;
        }
        self.new_master.notify_one();
    }

    /// Keeps `call` until `until`, starting the task on `conn` if none runs.
    fn keep<C: ScriptConn>(
        self: &Arc<Self>,
        conn: &C,
        (call, until): (Arc<Invocation>, Instant),
        counted: Arc<AtomicUsize>,
    ) {
        if self.push(call, until, counted) {
            tokio::spawn(run(Arc::clone(self), conn.clone()));
        }
    }

    /// Adds `call`, kept until `until`; answers whether a task must start.
    fn push(&self, call: Arc<Invocation>, until: Instant, counted: Arc<AtomicUsize>) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let followed = state.followed;
        counted.fetch_add(1, Ordering::AcqRel);
        state.kept.push(Kept {
            call,
            until,
            followed,
            counted,
        });
        !std::mem::replace(&mut state.running, true)
    }

    /// Drops what is past its window (or, with `settled`, those calls) and
    /// answers what is left to send, and the earliest and latest ends among
    /// them; `None`, and the task marked ended, when nothing is left.
    fn left(&self, settled: &[Arc<Invocation>]) -> Option<(Vec<Resend>, Instant, Instant)> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        state
            .kept
            .retain(|k| k.until > now && !settled.iter().any(|c| Arc::ptr_eq(c, &k.call)));
        let ends = state.kept.iter().map(|k| k.until);
        let (Some(first), Some(until)) = (ends.clone().min(), ends.max()) else {
            state.running = false;
            return None;
        };
        let calls = state.kept.iter().map(|k| Resend {
            call: Arc::clone(&k.call),
            moved: k.followed < state.followed,
        });
        Some((calls.collect(), first, until))
    }
}

impl Confirmation {
    /// How many releases this connection keeps (every master's, on a
    /// cluster): a manager on its way out waits for them (`Settle`), since
    /// they end with its process.
    pub(crate) fn kept_pending(&self) -> usize {
        self.kept.load(Ordering::Acquire)
    }

    /// The deployment named a new master for this connection (Sentinel's
    /// switch, or a cluster's slots of this master served by another): the
    /// releases it kept unconfirmed go out there now (this file). `followed`:
    /// the connection already sends there (Sentinel's Follower moved before
    /// telling), so a release it answers is redone where the deployment
    /// points and need not be kept any longer; not so on a cluster, whose
    /// connection may still route to the old master for a moment.
    pub(crate) fn new_master(&self, followed: bool) {
        self.keeper.new_master(followed);
    }
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
    let Some(redo) = &call.redo else {
        return;
    };
    let Some(confirmation) = conn.confirmation(call.routing_key()) else {
        return;
    };
    if !unconfirmed(confirmation.wants_replicas(), confirmed) {
        return;
    }
    info!(
        lock = call.routing_key().unwrap_or("?"),
        "a release no replica confirmed is kept, to be redone after a failover"
    );
    let until = sent + Duration::from_millis(redo.for_ms);
    let counted = Arc::clone(&confirmation.kept);
    confirmation
        .keeper
        .keep(conn, (redo.again(call), until), counted);
}

/// The keeper's task: sends what is kept every [`EVERY`], or at once when a
/// new master is named, until nothing is left.
async fn run<C: ScriptConn>(keeper: Arc<Keeper>, mut conn: C) {
    let mut done: Vec<Arc<Invocation>> = Vec::new();
    loop {
        // What a resend settled, and what ends, stops counting at once: a
        // process on its way out waits for them (`Settle`).
        let Some((_, first, _)) = keeper.left(&std::mem::take(&mut done)) else {
            return;
        };
        {
            let next = EVERY.min(first.saturating_duration_since(Instant::now()));
            let tick = std::pin::pin!(tokio::time::sleep(next));
            let named = std::pin::pin!(keeper.new_master.notified());
            select(tick, named).await;
        }
        let Some((calls, _, until)) = keeper.left(&[]) else {
            return;
        };
        // A new master named while a resend waits on the old one (frozen, or
        // dead and not yet known so) starts the resend over on the new one.
        let left = until.saturating_duration_since(Instant::now());
        let resent = std::pin::pin!(tokio::time::timeout(left, resend(&mut conn, &calls)));
        let named = std::pin::pin!(keeper.new_master.notified());
        match select(resent, named).await {
            Either::Left((Ok(settled), _)) => done = settled,
            Either::Left((Err(_), _)) => {}
            Either::Right(_) => {
                debug!("a new master was named while kept releases were resent; again there");
                keeper.new_master.notify_one();
            }
        }
    }
}

/// Sends `calls` again, one pipeline per group the connection may pipeline
/// together; answers those now settled: confirmed by a replica, or answered
/// by a master the connection followed to since they were kept.
async fn resend<C: ScriptConn>(conn: &mut C, calls: &[Resend]) -> Vec<Arc<Invocation>> {
    let mut groups: Vec<(Option<u16>, Vec<Resend>)> = Vec::new();
    for r in calls {
        let group = r.call.routing_key().and_then(|k| conn.slot_of(k));
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(r.clone()),
            None => groups.push((group, vec![r.clone()])),
        }
    }
    let sends = groups.into_iter().map(|(_, members)| {
        let mut conn = conn.clone();
        async move {
            let lock = members[0].call.routing_key().unwrap_or("?").to_owned();
            let calls: Vec<Arc<Invocation>> = members.iter().map(|r| Arc::clone(&r.call)).collect();
            match resend_group(&mut conn, &calls).await {
                Ok((_, Confirmed::Enough)) => {
                    debug!(%lock, count = calls.len(), "kept releases are now confirmed by a replica");
                    calls
                }
                Ok((replies, _)) => {
                    let redone: Vec<Arc<Invocation>> = members
                        .iter()
                        .zip(&replies)
                        .filter(|(r, reply)| r.moved && !matches!(reply, Value::ServerError(_)))
                        .map(|(r, _)| Arc::clone(&r.call))
                        .collect();
                    if !redone.is_empty() {
                        info!(%lock, count = redone.len(), "kept releases redone on the new master");
                    }
                    redone
                }
                Err(e) => {
                    debug!(%lock, error = %e, "kept releases could not be resent; trying again");
                    Vec::new()
                }
            }
        }
    });
    join_all(sends).await.into_iter().flatten().collect()
}

/// Sends `calls` (of one group) in one pipeline with a `WAIT` behind when a
/// replica can answer, loading the scripts a new master lacks and sending the
/// pipeline again then (every call in it is a retry: sending it twice is
/// sending it once).
async fn resend_group<C: ScriptConn>(
    conn: &mut C,
    calls: &[Arc<Invocation>],
) -> RedisResult<(Vec<Value>, Confirmed)> {
    let publish = conn.publish();
    let cmds: Vec<redis::Cmd> = calls.iter().map(|c| c.command(publish)).collect();
    let confirmation = conn.confirmation(calls[0].routing_key());
    let (replies, confirmed) = pipelined(conn, confirmation.as_deref(), &cmds).await?;
    let missing: Vec<&Invocation> = calls
        .iter()
        .zip(&replies)
        .filter(|(_, r)| matches!(r, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript)))
        .map(|(c, _)| &**c)
        .collect();
    if missing.is_empty() {
        return Ok((replies, confirmed));
    }
    for call in missing {
        call.script.get(publish).load_async(conn).await?;
    }
    let confirmation = conn.confirmation(calls[0].routing_key());
    pipelined(conn, confirmation.as_deref(), &cmds).await
}

/// `cmds` in one pipeline on `conn`, with a `WAIT` (and `WAITAOF`) behind
/// when `confirmation` has a replica that can answer and a place for it: a
/// resend only hopes, so it is never refused and never waits for a place.
async fn pipelined<C: ScriptConn>(
    conn: &mut C,
    confirmation: Option<&Confirmation>,
    cmds: &[redis::Cmd],
) -> RedisResult<(Vec<Value>, Confirmed)> {
    let mut pipe = redis::pipe();
    for cmd in cmds {
        pipe.add_command(cmd.clone());
    }
    let alone = |c: &Confirmation| c.master_doubted() || (c.required() == 0 && !c.aof);
    let Some(confirmation) = confirmation.filter(|c| !alone(c)) else {
        let replies = conn.req_packed_commands(&pipe, 0, cmds.len()).await?;
        let confirmed = confirmation.map_or(Confirmed::NotAsked, Confirmation::no_replica);
        return Ok((replies, confirmed));
    };
    // While replicas fall short, or with every place taken, no WAIT: the
    // resend stands alone and stays kept.
    let lane = confirmation.pick();
    let conn = &mut conn.lane(lane);
    let place = match confirmation.is_short() {
        true => None,
        false => confirmation.places[lane].try_acquire().ok(),
    };
    let Some(_place) = place else {
        let replies = conn.req_packed_commands(&pipe, 0, cmds.len()).await?;
        return Ok((replies, Confirmed::NotAsked));
    };
    let sync = ReplicaSync {
        min: confirmation.required(),
        ..confirmation.sync
    };
    let count = cmds.len() + push_waits(&mut pipe, sync, confirmation.aof);
    let mut replies = match conn.req_packed_commands(&pipe, 0, count).await {
        Ok(replies) => replies,
        Err(e) => {
            confirmation.record(&Confirmed::Failed(e.clone()));
            return Err(e);
        }
    };
    let waits = replies.split_off(cmds.len().min(replies.len()));
    let mut waits = waits.into_iter();
    let Some(wait) = waits.next() else {
        return Err(crate::wire::unexpected(
            "kept releases and their WAIT gave too few replies",
        ));
    };
    let confirmed = confirmed(wait, waits.next(), sync);
    confirmation.record(&confirmed);
    Ok((replies, confirmed))
}

#[cfg(test)]
mod tests;
