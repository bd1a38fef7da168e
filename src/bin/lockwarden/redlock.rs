//! `lockwarden run --redlock`: taking one lock name on a majority of independent
//! Redis servers, one `--redis` option each, with the library's [`RedLock`].
//!
//! One lock manager is started per server, all at once; once a majority has
//! answered, the others get `--node-wait` more, so a frozen server holds nobody
//! up for its connection timeout. A server that cannot be reached at start is
//! said on stderr and left out, but it still counts toward the majority
//! ([`RedLock::out_of`]): a RedLock of five servers needs three grants whether or
//! not two of them are down, or two clients that each reach a different part of
//! the servers could both win. It is started again in the background until it
//! answers, then takes part from the next round: without it a process that
//! started while one server of three was frozen needed both others in every
//! round, for its whole life, and starved under contention. Fewer servers
//! reachable than a majority is exit 2 before anything is asked. Waiting is the library's (rounds
//! bounded by `--node-wait` per server, a random pause between them, within
//! `--wait`); this module races it against the signals, as `acquire.rs` does for
//! a single lock. Dropping the pending round is how its waiters leave: each
//! server's lock actor sends an owner-checked give-back right behind an attempt
//! still in flight, on the same connection, so a grant that lands later (a
//! frozen server runs the queued attempts when it resumes) is undone even after
//! this process is gone; on the way out without the lock the managers get
//! `Settle` to put those on the wire.

use std::time::{Duration, Instant};

use actix::Addr;
use futures::future::{join_all, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use lockwarden::{Config, LockError, LockManager, RedGuard, RedLock, Settle};
use nix::sys::signal::Signal;
use tracing::debug;

use crate::acquire::Signals;
use crate::cli::RunArgs;
use crate::duration::human;
use crate::outcome::{note, Failure};
use crate::session::Session;

/// How waiting for a RedLock ended.
#[derive(Debug)]
pub enum RedWaited {
    /// Held on a majority.
    Acquired {
        /// The hold.
        guard: RedGuard,
        /// The managers of the servers that could be reached.
        managers: Vec<Addr<LockManager>>,
        /// For each of `managers`, its server's place among the `--redis` options.
        places: Vec<usize>,
    },
    /// `--wait` ran out (already said on stderr).
    TimedOut,
    /// A signal came first; every server's waiter left.
    Interrupted(Signal),
}

/// A manager per `--redis` place: `None` while its server has not answered.
type Places = Vec<Option<Addr<LockManager>>>;

/// One server's start: its place and how it went.
type Started = BoxFuture<'static, (usize, Result<Addr<LockManager>, LockError>)>;

/// A server being started again in the background until it answers.
type Late = BoxFuture<'static, (usize, Addr<LockManager>)>;

/// Pause between two background tries of a server that did not answer.
const RETRY: Duration = Duration::from_secs(1);

/// How long the servers that had not confirmed a release when a majority had
/// get before the process exits. A release answers once a majority released;
/// the others' releases go on in the background, which exiting would cut short,
/// leaving their holds to their lease. A live server answers well within this
/// even on a loaded machine; a frozen one holds the exit up no longer.
const STRAGGLERS: Duration = Duration::from_secs(1);

/// Starts a manager per server and takes the lock on a majority of them, until
/// acquired, timed out or interrupted.
pub async fn acquire(
    session: &Session,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<RedWaited, Failure> {
    let nodes = session.nodes();
    let quorum = nodes.len() / 2 + 1;
    let began = Instant::now();
    let started = session.connecting(start(nodes, quorum, args.node_wait));
    let (mut places, mut late) = started.await?;
    loop {
        let managers: Vec<Addr<LockManager>> = places.iter().flatten().cloned().collect();
        let mut lock = RedLock::new(&managers, args.name.clone())
            .out_of(nodes.len())
            .node_wait(args.node_wait);
        if let Some(wait) = args.acquire.wait {
            lock = lock.wait(wait.saturating_sub(began.elapsed()));
        }
        if let Some(lease) = args.acquire.lease {
            lock = lock.lease(lease);
        }
        let outcome = futures::select! {
            got = lock.acquire().fuse() => got,
            sig = signals.recv().fuse() => {
                note(format!("interrupted while waiting for lock \"{}\"; left the queue", args.name));
                settle_quietly(&places).await;
                return Ok(RedWaited::Interrupted(sig));
            }
            (place, manager) = late.select_next_some() => {
                // Dropping the round in flight makes its waiters leave; the next
                // one asks this server too.
                note(format!("Redis at {} answered; it takes part from now on", nodes[place].0));
                places[place] = Some(manager);
                continue;
            }
        };
        return match outcome {
            Ok(guard) => {
                let (places, managers) = places
                    .into_iter()
                    .enumerate()
                    .filter_map(|(place, m)| m.map(|m| (place, m)))
                    .unzip();
                Ok(RedWaited::Acquired {
                    guard,
                    managers,
                    places,
                })
            }
            // At the deadline the last round's failure comes back: a lock held
            // elsewhere, or a server's error; either way --wait ran out.
            Err(e) if args.acquire.wait.is_some_and(|w| began.elapsed() >= w) => {
                settle_quietly(&places).await;
                let why = match e {
                    LockError::Timeout { .. } => String::new(),
                    other => format!(" (last error: {other})"),
                };
                note(format!(
                    "lock \"{}\" not acquired on a majority ({quorum} of {}) after waiting {}{why}",
                    args.name,
                    nodes.len(),
                    human(began.elapsed())
                ));
                Ok(RedWaited::TimedOut)
            }
            Err(e) => {
                settle_quietly(&places).await;
                Err(Failure::from_lock(
                    &format!("acquiring \"{}\"", args.name),
                    e,
                ))
            }
        };
    }
}

/// Starts a manager per server, all at once, and returns as soon as a majority
/// answered and the others had `node_wait` more: a frozen server holds nobody up
/// for its connection timeout. The servers that did not answer (refused, failed,
/// or still silent) go on being started in the background, each until it
/// answers, so a server that was down or frozen at start takes part again once
/// it is back. Fewer answers than a majority, once every server has had its
/// say, is exit 2.
async fn start(
    nodes: &[(String, Config)],
    quorum: usize,
    node_wait: Duration,
) -> Result<(Places, FuturesUnordered<Late>), Failure> {
    let mut places: Places = vec![None; nodes.len()];
    let mut pending: FuturesUnordered<Started> = nodes
        .iter()
        .enumerate()
        .map(|(place, (_, config))| {
            let config = config.clone();
            async move { (place, LockManager::start(config).await) }.boxed()
        })
        .collect();
    let late: FuturesUnordered<Late> = FuturesUnordered::new();
    let mut failed = vec![false; nodes.len()];
    let mut grace = None;
    loop {
        let answered = places.iter().flatten().count();
        if answered >= quorum && grace.is_none() {
            grace = Some(tokio::time::sleep(node_wait).boxed().fuse());
        }
        let next = match grace.as_mut() {
            None => pending.next().await,
            Some(grace) => {
                let mut grace = grace;
                futures::select! {
                    next = pending.next() => next,
                    () = grace => None,
                }
            }
        };
        let Some((place, started)) = next else { break };
        match started {
            Ok(manager) => places[place] = Some(manager),
            Err(e) => {
                note(format!(
                    "cannot reach Redis at {}: {}; going on without it (trying it again \
                     in the background)",
                    nodes[place].0, e
                ));
                failed[place] = true;
                late.push(again(place, nodes[place].1.clone()).boxed());
            }
        }
        if places.iter().flatten().count() + pending.len() < quorum {
            break;
        }
    }
    let answered = places.iter().flatten().count();
    if answered < quorum {
        return Err(Failure::usage(format!(
            "cannot reach a majority of the --redlock servers: {answered} of {} answered, \
             {quorum} needed",
            nodes.len()
        )));
    }
    for (place, (shown, _)) in nodes.iter().enumerate() {
        if places[place].is_none() && !failed[place] {
            note(format!(
                "Redis at {shown} has not answered within --node-wait ({}) after a majority did; \
                 going on without it (trying it again in the background)",
                human(node_wait)
            ));
        }
    }
    // The silent ones keep their first try and are started again after it.
    let configs: Vec<Config> = nodes.iter().map(|(_, config)| config.clone()).collect();
    for silent in pending {
        let configs = configs.clone();
        late.push(
            async move {
                let (place, first) = silent.await;
                match first {
                    Ok(manager) => (place, manager),
                    Err(_) => again(place, configs[place].clone()).await,
                }
            }
            .boxed(),
        );
    }
    Ok((places, late))
}

/// Starts the manager of the server at `place` after a pause, again and again,
/// until it answers.
async fn again(place: usize, config: Config) -> (usize, Addr<LockManager>) {
    loop {
        tokio::time::sleep(RETRY).await;
        match LockManager::start(config.clone()).await {
            Ok(manager) => return (place, manager),
            Err(e) => debug!(place, error = %e, "a --redlock server still does not answer"),
        }
    }
}

/// After a release answered by a majority: gives every server's releases in
/// flight [`STRAGGLERS`] to finish before the process exits, and says on stderr
/// how many servers were left to their lease.
pub async fn settle(managers: &[Addr<LockManager>]) {
    let left = unsettled(managers).await;
    if left > 0 {
        note(format!(
            "released on a majority; {left} server(s) did not confirm within {}: \
             the hold there ends with its lease",
            human(STRAGGLERS)
        ));
    }
}

/// After the RedLock was lost: the library gave back the holds still left
/// ([`RedGuard::lost`]); this gives those releases [`STRAGGLERS`] to finish
/// before the process exits (cut short, a hold would last its lease and keep
/// every majority out), and says how many servers
/// did not confirm.
pub async fn settle_lost(managers: &[Addr<LockManager>]) {
    let left = unsettled(managers).await;
    if left > 0 {
        note(format!(
            "{left} server(s) did not confirm giving back the hold left there within {}: \
             it ends with its lease",
            human(STRAGGLERS)
        ));
    }
}

/// On the way out without the lock (timed out, interrupted): each server's lock
/// actor sent a give-back right behind an attempt whose waiter left, and this
/// gives them [`STRAGGLERS`] to go out on the wire, or answer, before the
/// process exits. A frozen server runs the attempt and its give-back together
/// when it resumes, so nothing is left there either way; a server that answers
/// settles at once.
async fn settle_quietly(places: &Places) {
    let managers: Vec<Addr<LockManager>> = places.iter().flatten().cloned().collect();
    let left = unsettled(&managers).await;
    if left > 0 {
        debug!(
            servers = left,
            "attempts still unanswered on the way out; given back behind them"
        );
    }
}

/// Asks every manager to settle within [`STRAGGLERS`]; answers how many did not.
async fn unsettled(managers: &[Addr<LockManager>]) -> usize {
    let asked = managers.iter().map(|m| m.send(Settle::within(STRAGGLERS)));
    let settled = join_all(asked).await;
    settled.iter().filter(|s| !matches!(s, Ok(true))).count()
}

/// Why the release found the RedLock gone, as far as the command knows: the
/// watchdog's renewals keep it from expiring and a force-unlock reaches one
/// server at a time, so what is known is that servers which had granted it no
/// longer held it; a server restarted without its data is the usual cause.
/// `fixed_lease`: `--lease` was given, so it may also have run out.
pub fn gone_at_release(fixed_lease: bool) -> &'static str {
    if fixed_lease {
        "a majority of the servers that granted it no longer held it: its --lease \
         ran out, or a server lost it (restarted without its data, say)"
    } else {
        "a majority of the servers that granted it no longer held it: a server lost \
         it (restarted without its data, say) or it was force-unlocked there"
    }
}
