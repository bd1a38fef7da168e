//! `lockwarden run --redlock`: taking one lock name on a majority of independent
//! Redis servers, one `--redis` option each, with the library's [`RedLock`].
//!
//! One lock manager is started per server, all at once. A server that cannot be
//! reached at start is said on stderr and left out, but it still counts toward
//! the majority ([`RedLock::out_of`]): a RedLock of five servers needs three
//! grants whether or not two of them are down, or two clients that each reach a
//! different part of the servers could both win. Fewer servers reachable than a
//! majority is exit 2 before anything is asked. Waiting is the library's (rounds
//! bounded by `--node-wait` per server, a random pause between them, within
//! `--wait`); this module races it against the signals, as `acquire.rs` does for
//! a single lock. Dropping the pending round is how its waiters leave: each
//! server's lock actor gives back a grant that raced the drop.

use std::time::Instant;

use actix::Addr;
use futures::future::join_all;
use futures::FutureExt;
use lockwarden::{LockError, LockManager, RedGuard, RedLock};
use nix::sys::signal::Signal;

use crate::acquire::Signals;
use crate::cli::RunArgs;
use crate::duration::human;
use crate::outcome::{connect_error, note, Failure};
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

/// Starts a manager per server and takes the lock on a majority of them, until
/// acquired, timed out or interrupted.
pub async fn acquire(
    session: &Session,
    args: &RunArgs,
    signals: &mut Signals,
) -> Result<RedWaited, Failure> {
    let nodes = session.nodes();
    let quorum = nodes.len() / 2 + 1;
    let started = join_all(
        nodes
            .iter()
            .map(|(_, config)| LockManager::start(config.clone())),
    )
    .await;
    let mut managers = Vec::with_capacity(nodes.len());
    let mut places = Vec::with_capacity(nodes.len());
    for (place, ((shown, _), started)) in nodes.iter().zip(started).enumerate() {
        match started {
            Ok(manager) => {
                managers.push(manager);
                places.push(place);
            }
            Err(e) => note(format!(
                "cannot reach Redis at {shown}: {}; going on without it",
                connect_error(&e)
            )),
        }
    }
    if managers.len() < quorum {
        return Err(Failure::usage(format!(
            "cannot reach a majority of the --redlock servers: {} of {} answered, {quorum} needed",
            managers.len(),
            nodes.len()
        )));
    }
    let mut lock = RedLock::new(&managers, args.name.clone())
        .out_of(nodes.len())
        .node_wait(args.node_wait);
    if let Some(wait) = args.acquire.wait {
        lock = lock.wait(wait);
    }
    if let Some(lease) = args.acquire.lease {
        lock = lock.lease(lease);
    }
    let began = Instant::now();
    let outcome = futures::select! {
        got = lock.acquire().fuse() => got,
        sig = signals.recv().fuse() => {
            note(format!("interrupted while waiting for lock \"{}\"; left the queue", args.name));
            return Ok(RedWaited::Interrupted(sig));
        }
    };
    match outcome {
        Ok(guard) => Ok(RedWaited::Acquired {
            guard,
            managers,
            places,
        }),
        // At the deadline the last round's failure comes back: a lock held
        // elsewhere, or a server's error; either way --wait ran out.
        Err(e) if args.acquire.wait.is_some_and(|w| began.elapsed() >= w) => {
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
        Err(e) => Err(Failure::from_lock(
            &format!("acquiring \"{}\"", args.name),
            e,
        )),
    }
}
