//! Leader election (issue 14, part 4) on a real Redis: leadership ends exactly
//! when the lock is lost and the message says why (force unlock: `OwnerGone`;
//! Redis frozen past the lease: `Unreachable`), the next candidate takes over
//! with a larger token, observers see who leads, a bad name is refused. The
//! handover after a crashed leader's system is `examples/leader.rs`, run by
//! tests/examples.rs.

mod support;

use std::time::Duration;

use actix::prelude::*;
use lockwarden::{
    Deposed, DeposedReason, Elected, ForceUnlock, Leader, LockError, LostReason, NameError, Resign,
    WhoLeads,
};
use support::{manager, raw, RedisServer};
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
