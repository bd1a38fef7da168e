//! Leader election (issue 14, part 4) on a real Redis: leadership ends exactly
//! when the lock is lost and the message says why (force unlock: `OwnerGone`;
//! Redis frozen past the lease: `Unreachable`), the next candidate takes over
//! with a larger token, observers see who leads, a bad name is refused, a
//! manager's shutdown hands its lock and its leadership over at once (issue 38).
//! The handover after a crashed leader's system is `examples/leader.rs`, run by
//! tests/service/examples.rs.

use crate::support;

use std::time::Duration;

use actix::prelude::*;
use lockwarden::{
    Acquire, Deposed, DeposedReason, Elected, ForceUnlock, Leader, LockError, Locks, LostReason,
    NameError, Resign, Shutdown, WhoLeads,
};
use support::{hold, manager, raw, RedisServer};
use tokio::sync::mpsc;

/// What a candidate's application actor heard.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    Elected(u64),
    Deposed(DeposedReason),
}

/// A candidate's application actor: forwards what it hears, tagged with its id.
struct App {
    id: usize,
    tx: mpsc::UnboundedSender<(usize, Heard)>,
}

impl Actor for App {
    type Context = Context<Self>;
}

impl Handler<Elected> for App {
    type Result = ();
    fn handle(&mut self, msg: Elected, _: &mut Context<Self>) {
        let _ = self.tx.send((self.id, Heard::Elected(msg.fencing_token)));
    }
}

impl Handler<Deposed> for App {
    type Result = ();
    fn handle(&mut self, msg: Deposed, _: &mut Context<Self>) {
        let _ = self.tx.send((self.id, Heard::Deposed(msg.reason)));
    }
}

/// Starts `n` candidates for `name`, one manager each, with a 1.5 s lease.
async fn candidates(
    server: &RedisServer,
    name: &str,
    n: usize,
) -> (
    Vec<Addr<lockwarden::LockManager>>,
    Vec<Addr<Leader>>,
    mpsc::UnboundedReceiver<(usize, Heard)>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let (mut managers, mut leaders) = (Vec::new(), Vec::new());
    for id in 0..n {
        let m = manager(server, |c| {
            c.watchdog_lease(Duration::from_millis(1500))
                .response_timeout(Duration::from_millis(300))
        })
        .await;
        let app = App { id, tx: tx.clone() }.start();
        let leader = Leader::campaign(m.clone(), name, app.clone().recipient(), app.recipient())
            .await
            .expect("campaign");
        managers.push(m);
        leaders.push(leader);
    }
    (managers, leaders, rx)
}

/// The next thing heard, within 10 s.
async fn next(rx: &mut mpsc::UnboundedReceiver<(usize, Heard)>) -> (usize, Heard) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("heard within 10 s")
        .expect("channel open")
}

/// A force unlock frees the lock: the other candidate is elected with a larger
/// token, and the old leader is told `Lost(OwnerGone)` at its next renewal.
#[actix_rt::test]
async fn a_force_unlock_deposes_the_leader_with_owner_gone() {
    let server = RedisServer::start();
    let (managers, _leaders, mut heard) = candidates(&server, "sched", 2).await;
    let (first, Heard::Elected(t1)) = next(&mut heard).await else {
        panic!("expected an election first")
    };
    managers[0]
        .send(ForceUnlock::new("sched"))
        .await
        .expect("running")
        .expect("unlocked");
    let mut deposed = None;
    let mut successor = None;
    while deposed.is_none() || successor.is_none() {
        match next(&mut heard).await {
            (id, Heard::Deposed(reason)) => {
                assert_eq!(id, first);
                deposed = Some(reason);
            }
            (id, Heard::Elected(t2)) => {
                assert_ne!(id, first, "the old leader was elected again first");
                assert!(t2 > t1, "token {t2} not above {t1}");
                successor = Some(id);
            }
        }
    }
    assert_eq!(deposed, Some(DeposedReason::Lost(LostReason::OwnerGone)));
}

/// Redis frozen for longer than the lease: the leader is told `Unreachable`
/// before Redis comes back, and after it does a leader (a new term, a larger
/// token) is elected.
#[actix_rt::test]
async fn a_frozen_redis_deposes_the_leader_as_unreachable() {
    let mut server = RedisServer::start();
    let (_managers, _leaders, mut heard) = candidates(&server, "frozen", 2).await;
    let (first, Heard::Elected(t1)) = next(&mut heard).await else {
        panic!("expected an election first")
    };
    server.pause();
    let told = tokio::time::timeout(Duration::from_secs(8), heard.recv()).await;
    server.resume();
    let told = told.expect("told while Redis was frozen").expect("open");
    assert_eq!(
        told,
        (
            first,
            Heard::Deposed(DeposedReason::Lost(LostReason::Unreachable))
        )
    );
    match next(&mut heard).await {
        (_, Heard::Elected(t2)) => assert!(t2 > t1, "token {t2} not above {t1}"),
        (_, Heard::Deposed(reason)) => panic!("a second deposition: {reason:?}"),
    }
}

/// An observer in any manager sees the leader's owner field and token; after
/// the leader resigns (told `Resigned`), the other candidate leads at once.
#[actix_rt::test]
async fn observers_see_who_leads_and_a_resignation_hands_over() {
    let server = RedisServer::start();
    let (managers, leaders, mut heard) = candidates(&server, "obs", 2).await;
    let (first, Heard::Elected(t1)) = next(&mut heard).await else {
        panic!("expected an election first")
    };
    let seen = managers[1 - first]
        .send(WhoLeads::new("obs"))
        .await
        .expect("running")
        .expect("read")
        .expect("somebody leads");
    assert_eq!(seen.fencing_token, t1);
    assert!(!seen.this_manager);
    let own = managers[first]
        .send(WhoLeads::new("obs"))
        .await
        .expect("running")
        .expect("read")
        .expect("somebody leads");
    assert!(own.this_manager);
    assert_eq!(own.owner_field, seen.owner_field);

    leaders[first]
        .send(Resign)
        .await
        .expect("running")
        .expect("resigned");
    assert_eq!(
        next(&mut heard).await,
        (first, Heard::Deposed(DeposedReason::Resigned))
    );
    let (second, Heard::Elected(t2)) = next(&mut heard).await else {
        panic!("expected an election")
    };
    assert_eq!(second, 1 - first);
    assert!(t2 > t1);
    let now = managers[first]
        .send(WhoLeads::new("obs"))
        .await
        .expect("running")
        .expect("read")
        .expect("somebody leads");
    assert_ne!(now.owner_field, own.owner_field);
    assert_eq!(raw::<i64>(&server, &["EXISTS", "obs"]), 1);
}

/// A name with unbalanced braces is refused before anything reaches Redis.
#[actix_rt::test]
async fn a_bad_name_is_refused() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let (tx, _rx) = mpsc::unbounded_channel();
    let app = App { id: 0, tx }.start();
    let refused = Leader::campaign(m, "a}b{", app.clone().recipient(), app.recipient()).await;
    assert!(matches!(
        refused,
        Err(LockError::InvalidName(NameError::CrossSlot))
    ));
    // Every manager keeps its registry entry (who holds what); nothing else.
    assert_eq!(support::data_key_count(&server), 0);
}

/// A manager that holds a lock and leads shuts down (issue 38): its leader is
/// deposed with `Lost(ShutDown)`, the other manager gets the lock and leads
/// within 1 s (not a lease later), a waiter of the shut-down manager gets
/// `ShuttingDown` (a semaphore waiter too), its guard learns the lock is gone
/// and releasing it touches nothing, and it refuses new waiters.
#[actix_rt::test]
async fn a_shutdown_hands_the_lock_and_the_leadership_over_at_once() {
    let server = RedisServer::start();
    let (managers, _leaders, mut heard) = candidates(&server, "deploy", 2).await;
    let (first, Heard::Elected(t1)) = next(&mut heard).await else {
        panic!("expected an election first")
    };
    let (old, other) = (&managers[first], &managers[1 - first]);
    let job = hold(old, "job", |a| a).await;
    let blocker = hold(other, "busy", |a| a).await;
    // A waiter in the manager that shuts down, and one in the other, for the job.
    let waiting = actix_rt::spawn(old.send(Acquire::new("busy").wait(Duration::from_secs(30))));
    let next_holder =
        actix_rt::spawn(other.send(Acquire::new("job").wait(Duration::from_secs(30))));
    // And a semaphore waiter: one permit, taken.
    let slots = old.semaphore("slots").await.expect("handle");
    slots.try_set_permits(1).await.expect("sized");
    let slot = slots.acquire(1).await.expect("the one permit");
    let queued = actix_rt::spawn({
        let slots = slots.clone();
        async move { slots.acquire_within(1, Duration::from_secs(30)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;

    let started = std::time::Instant::now();
    assert!(
        old.send(Shutdown::new()).await.expect("running"),
        "handed over within the budget"
    );
    let shut = started.elapsed();
    let refused = waiting.await.expect("task").expect("running");
    assert!(
        matches!(refused, Err(LockError::ShuttingDown)),
        "{refused:?}"
    );
    let refused = queued.await.expect("task");
    assert!(
        matches!(refused, Err(LockError::ShuttingDown)),
        "{:?}",
        refused.err()
    );
    assert_eq!(job.lost().await, LostReason::ShutDown);
    let taken = tokio::time::timeout(Duration::from_secs(1), next_holder)
        .await
        .expect("the other manager got the lock within 1 s")
        .expect("task")
        .expect("running")
        .expect("acquired");
    let mut deposed = false;
    while !deposed {
        match tokio::time::timeout(Duration::from_secs(1), heard.recv()).await {
            Ok(Some((id, Heard::Deposed(reason)))) => {
                assert_eq!(id, first);
                assert_eq!(reason, DeposedReason::Lost(LostReason::ShutDown));
                deposed = true;
            }
            Ok(Some(other)) => panic!("elected before the old leader was deposed: {other:?}"),
            _ => panic!("the old leader was not deposed within 1 s"),
        }
    }
    match tokio::time::timeout(Duration::from_secs(1), heard.recv()).await {
        Ok(Some((id, Heard::Elected(t2)))) => {
            assert_eq!(id, 1 - first);
            assert!(t2 > t1, "token {t2} not above {t1}");
        }
        other => panic!("the other candidate did not lead within 1 s: {other:?}"),
    }
    eprintln!("shutdown answered in {shut:?}; the other manager leads");
    // The old guard no longer holds anything: its release changes nothing.
    assert!(matches!(
        job.release().await,
        Err(LockError::Lost(LostReason::ShutDown))
    ));
    let again = old.acquire(Acquire::new("later")).await;
    assert!(matches!(again, Err(LockError::ShuttingDown)), "{again:?}");
    assert!(other
        .send(Shutdown::within(Duration::from_secs(1)))
        .await
        .expect("running"));
    // A permit held by code is its guard's to give back, as usual.
    slot.release().await.expect("permit given back");
    drop((taken, blocker));
}

/// A shutdown while Redis does not answer (frozen) answers `false` at its budget,
/// not later, and the lock is not left for long: the release goes on trying, so
/// another manager holds it soon after Redis resumes (within the lease).
#[actix_rt::test]
async fn a_shutdown_against_a_frozen_redis_answers_at_its_budget() {
    let mut server = RedisServer::start();
    let quick = |c: lockwarden::Config| c.watchdog_lease(Duration::from_millis(1500));
    let old = manager(&server, quick).await;
    let other = manager(&server, quick).await;
    let _held = hold(&old, "frozen-deploy", |a| a).await;
    server.pause();
    let asked = std::time::Instant::now();
    let done = old
        .send(Shutdown::within(Duration::from_millis(300)))
        .await
        .expect("running");
    let took = asked.elapsed();
    server.resume();
    assert!(!done, "nothing can be given back to a frozen Redis");
    assert!(took < Duration::from_millis(800), "answered after {took:?}");
    let taken = other
        .acquire(Acquire::new("frozen-deploy").wait(Duration::from_secs(5)))
        .await
        .expect("the lock frees once Redis answers again");
    drop(taken);
}
