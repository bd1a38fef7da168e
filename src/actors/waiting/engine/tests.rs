//! The engine's rules, tested with the real policies and nothing else: no
//! actor, no timer, no Redis. Events go in by hand, and each test reads the
//! effects that come out; each names the behaviour a caller relies on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::*;
use crate::actors::latch::Latch;
use crate::actors::semaphore::{Fair, Grant, Plain, Takes};
use crate::keys;
use crate::wire::SemTake;

mod lock_leavers;
mod lock_rules;
mod lock_runner;
mod picky;

type Answer<G> = oneshot::Receiver<Result<G, LockError>>;

/// A quick configuration (nothing connects).
fn engine<P: Policy>(policy: P) -> Engine<P> {
    let config = Config::from_url("redis://127.0.0.1:1")
        .expect("a valid URL")
        .max_retry_interval(Duration::from_secs(1));
    Engine::new(policy, Arc::new(config))
}

fn plain() -> Engine<Plain> {
    engine(Plain::new(Arc::from("sem")))
}

fn fair() -> Engine<Fair> {
    engine(Fair::new(Arc::from("sem"), "c".to_owned()))
}

/// A take of `permits` arrives; answers where its answer comes and the effects.
fn take<P: Takes>(
    e: &mut Engine<P>,
    permits: u32,
    wait: Option<Duration>,
) -> (Answer<Grant>, Vec<Effect<P>>) {
    let (reply, answer) = oneshot::channel();
    let want = e.policy().want(permits, None);
    (answer, e.handle(Event::Arrive { want, wait, reply }))
}

/// The attempts among `effects`: (waiter, op id).
fn asks<P: Policy>(effects: &[Effect<P>]) -> Vec<(u64, Option<Arc<str>>)> {
    let asks = effects.iter().filter_map(|e| match e {
        Effect::Ask(a) => Some((a.waiter, a.op.clone())),
        _ => None,
    });
    asks.collect()
}

/// The ops undone among `effects`.
fn undos<P: Policy>(effects: &[Effect<P>]) -> Vec<Arc<str>> {
    let undos = effects.iter().filter_map(|e| match e {
        Effect::Undo { op, .. } => Some(op.clone()),
        _ => None,
    });
    undos.collect()
}

/// The channels subscribed to among `effects`.
fn subscribes<P: Policy>(effects: &[Effect<P>]) -> Vec<String> {
    let subs = effects.iter().filter_map(|e| match e {
        Effect::Subscribe(name) => Some(name.clone()),
        _ => None,
    });
    subs.collect()
}

/// Redis's answer to the attempt of `waiter`.
fn answered<P: Policy>(waiter: u64, reply: redis::RedisResult<P::Reply>) -> Event<P> {
    Event::Answered {
        waiter,
        reply,
        sent: Instant::now(),
    }
}

fn short() -> redis::RedisResult<SemTake> {
    Ok(SemTake::Short {
        available: 0,
        missing: false,
    })
}

fn transient() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
}

/// A plain engine whose channel is live and whose first waiter asks: its
/// answer, its local id and op id.
fn asking_head(e: &mut Engine<Plain>, wait: Option<Duration>) -> (Answer<Grant>, u64, Arc<str>) {
    let (answer, fx) = take(e, 1, wait);
    let channel = subscribes(&fx).pop().expect("it listens before it asks");
    assert!(asks(&fx).is_empty(), "not before the subscription is made");
    let fx = e.handle(Event::Subscribed(channel));
    let (id, op) = asks(&fx).pop().expect("the head asks");
    (answer, id, op.expect("a take has an op id"))
}

/// Only the head asks, and one attempt at a time: a newcomer behind it and a
/// wake while the attempt is out send nothing.
#[test]
fn only_the_head_asks_one_attempt_at_a_time() {
    let mut e = plain();
    let (_a, head, _) = asking_head(&mut e, None);
    let (_b, fx) = take(&mut e, 1, None);
    assert!(asks(&fx).is_empty(), "a newcomer waits behind the head");
    let fx = e.handle(Event::Wake);
    assert!(asks(&fx).is_empty(), "one attempt at a time");
    let fx = e.handle(answered(head, short()));
    assert_eq!(asks(&fx).len(), 1, "the wake during the attempt asks again");
    assert_eq!(asks(&fx)[0].0, head, "and it is still the head that asks");
}

/// A short answer with no wake meanwhile waits for one (or the fallback).
#[test]
fn a_short_answer_without_a_wake_waits() {
    let mut e = plain();
    let (_a, head, _) = asking_head(&mut e, None);
    let fx = e.handle(answered(head, short()));
    assert!(asks(&fx).is_empty());
    assert!(fx.iter().any(|f| matches!(f, Effect::Arm(_))));
    let fx = e.handle(Event::Heard {
        channel: keys::semaphore_channel("sem"),
        wake_all: true,
    });
    assert_eq!(asks(&fx).len(), 1, "a release wakes the head");
}

/// Every attempt of a waiter carries its op id: one asked again after a lost
/// reply learns what the first copy did.
#[test]
fn attempts_reuse_the_op_id() {
    let mut e = plain();
    let (_a, head, op) = asking_head(&mut e, None);
    let fx = e.handle(answered(head, Err(transient())));
    assert!(asks(&fx).is_empty(), "a transient failure backs off");
    let fx = e.handle(Event::Timer);
    assert_eq!(asks(&fx), vec![(head, Some(op))]);
}

/// A waiter that leaves while its attempt is out has its take undone at once,
/// and the answer that comes later lets the next waiter ask.
#[test]
fn a_leaver_while_asking_is_undone() {
    let mut e = plain();
    let (a, head, op) = asking_head(&mut e, None);
    let (_b, _) = take(&mut e, 1, None);
    drop(a);
    let fx = e.handle(Event::Left);
    assert_eq!(undos(&fx), vec![op]);
    assert!(asks(&fx).is_empty(), "still one attempt at a time");
    let fx = e.handle(answered(head, Ok(SemTake::Taken { left: 0 })));
    assert!(
        !fx.iter().any(|f| matches!(f, Effect::Grant(_))),
        "nobody to grant"
    );
    assert_eq!(asks(&fx).len(), 1, "the next waiter asks for itself");
}

/// A semaphore's undo that failed is not checked (its op id is what the
/// undo's retries rely on): the queue just looks again.
#[test]
fn a_failed_semaphore_undo_looks_again() {
    let mut e = plain();
    let (a, head, _) = asking_head(&mut e, None);
    let (_b, _) = take(&mut e, 1, None);
    drop(a);
    let _ = e.handle(Event::Left);
    let fx = e.handle(answered(head, short()));
    let (next, _) = asks(&fx).pop().expect("the next waiter asks");
    let _ = e.handle(answered(next, short()));
    let want = e.policy().want(1, None);
    let fx = e.handle(Event::UndoFailed(want));
    assert!(!fx.iter().any(|f| matches!(f, Effect::Check { .. })));
}

/// A waiter whose attempt failed without an answer is unsure too: leaving
/// later undoes its take.
#[test]
fn a_leaver_after_a_lost_attempt_is_undone() {
    let mut e = plain();
    let (a, head, op) = asking_head(&mut e, None);
    let _ = e.handle(answered(head, Err(transient())));
    drop(a);
    let fx = e.handle(Event::Left);
    assert_eq!(undos(&fx), vec![op]);
}

/// A waiter that leaves between attempts, with every answer in, leaves
/// nothing to undo.
#[test]
fn a_sure_leaver_is_not_undone() {
    let mut e = plain();
    let (a, head, _) = asking_head(&mut e, None);
    let _ = e.handle(answered(head, short()));
    drop(a);
    let fx = e.handle(Event::Left);
    assert!(undos(&fx).is_empty());
}

/// A grant whose caller went away meanwhile is undone under its op id, and
/// comes back to the runner.
#[tokio::test]
async fn a_grant_for_a_gone_caller_is_undone() {
    let mut e = plain();
    let (a, head, op) = asking_head(&mut e, None);
    drop(a);
    let fx = e.handle(answered(head, Ok(SemTake::Taken { left: 3 })));
    let taken = fx.into_iter().find_map(|f| match f {
        Effect::Grant(t) => Some(t),
        _ => None,
    });
    let taken = taken.expect("the take is granted");
    assert!(e.deliver(*taken, Grant { permits: None }).is_err());
    assert_eq!(undos(&e.take_effects()), vec![op]);
}

/// A grant to a caller still there is its answer, with nothing undone.
#[tokio::test]
async fn a_grant_answers_its_caller() {
    let mut e = plain();
    let (a, head, _) = asking_head(&mut e, None);
    let fx = e.handle(answered(head, Ok(SemTake::Taken { left: 3 })));
    for f in fx {
        if let Effect::Grant(t) = f {
            assert!(e.deliver(*t, Grant { permits: None }).is_ok());
        }
    }
    assert!(undos(&e.take_effects()).is_empty());
    assert!(matches!(a.await, Ok(Ok(_))));
}

/// A deadline is answered on time while the attempt is out, and the take
/// that attempt may make is undone.
#[tokio::test]
async fn a_deadline_is_answered_while_the_attempt_is_out() {
    let mut e = plain();
    let (a, _head, op) = asking_head(&mut e, Some(Duration::from_millis(5)));
    std::thread::sleep(Duration::from_millis(10));
    let fx = e.handle(Event::Timer);
    assert_eq!(undos(&fx), vec![op]);
    assert!(matches!(a.await, Ok(Err(LockError::Timeout { .. }))));
}

/// A try-once call behind queued waiters answers "no" without asking.
#[tokio::test]
async fn a_try_behind_the_queue_is_refused_at_once() {
    let mut e = plain();
    let (_a, _, _) = asking_head(&mut e, None);
    let (b, fx) = take(&mut e, 1, Some(Duration::ZERO));
    assert!(fx.is_empty() || asks(&fx).is_empty());
    assert!(matches!(b.await, Ok(Err(LockError::Timeout { .. }))));
}

/// A refusal answers the waiter with it and undoes (a refusal may be a lost
/// confirmation); the next waiter asks.
#[tokio::test]
async fn a_refusal_answers_and_undoes() {
    let mut e = plain();
    let (a, head, op) = asking_head(&mut e, None);
    let (_b, _) = take(&mut e, 1, None);
    let refused = redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "shape"));
    let fx = e.handle(answered(head, Err(refused)));
    assert_eq!(undos(&fx), vec![op]);
    assert_eq!(asks(&fx).len(), 1);
    assert!(matches!(a.await, Ok(Err(_))));
}

/// A shutdown answers every waiter and undoes an asking one's take.
#[tokio::test]
async fn a_shutdown_answers_everyone() {
    let mut e = plain();
    let (a, _head, op) = asking_head(&mut e, None);
    let (b, _) = take(&mut e, 1, None);
    let fx = e.handle(Event::Shutdown);
    assert_eq!(undos(&fx), vec![op]);
    assert!(matches!(a.await, Ok(Err(LockError::ShuttingDown))));
    assert!(matches!(b.await, Ok(Err(LockError::ShuttingDown))));
}

/// The plain semaphore keeps its subscription for a while once nobody waits.
#[test]
fn an_idle_semaphore_lingers_then_unsubscribes() {
    let mut e = plain();
    let (a, head, _) = asking_head(&mut e, None);
    let _ = e.handle(answered(head, short()));
    drop(a);
    let fx = e.handle(Event::Left);
    assert!(fx.iter().any(|f| matches!(f, Effect::Linger)));
    let fx = e.handle(Event::IdleOver);
    assert_eq!(
        fx.iter()
            .filter(|f| matches!(f, Effect::Unsubscribe(_)))
            .count(),
        1
    );
}

/// A fair waiter takes its place, then asks again only when it is due: told
/// on its own channel, or made due by the fallback timer as the first placed.
#[test]
fn a_fair_waiter_asks_only_when_due() {
    let mut e = fair();
    let (_a, fx) = take(&mut e, 1, None);
    let a_channel = subscribes(&fx).pop().expect("its own channel");
    let fx = e.handle(Event::Subscribed(a_channel.clone()));
    let (a, a_op) = asks(&fx).pop().expect("it takes its place");
    assert_eq!(
        a_channel,
        keys::sem_waiter_channel("sem", &a_op.expect("op"))
    );
    let _ = e.handle(answered(a, short()));
    let (_b, fx) = take(&mut e, 1, None);
    let b_channel = subscribes(&fx).pop().expect("its own channel");
    let fx = e.handle(Event::Subscribed(b_channel.clone()));
    let (b, _) = asks(&fx).pop().expect("B takes its place");
    let fx = e.handle(answered(b, short()));
    assert!(asks(&fx).is_empty(), "nobody is due");
    let fx = e.handle(Event::Heard {
        channel: b_channel,
        wake_all: false,
    });
    assert_eq!(asks(&fx).iter().map(|x| x.0).collect::<Vec<_>>(), vec![b]);
    let _ = e.handle(answered(b, short()));
    let fx = e.handle(Event::Timer);
    let first_placed = asks(&fx).iter().map(|x| x.0).collect::<Vec<_>>();
    assert_eq!(first_placed, vec![a]);
}

/// A fair waiter that gives up with every answer in leaves its place and
/// drops its channel; one that gives up while asking is undone instead
/// (the undo leaves the queue too).
#[test]
fn a_fair_leaver_leaves_its_place_or_is_undone() {
    let mut e = fair();
    let (a_answer, fx) = take(&mut e, 1, None);
    let channel = subscribes(&fx).pop().expect("its own channel");
    let fx = e.handle(Event::Subscribed(channel));
    let (a, a_op) = asks(&fx).pop().expect("it asks");
    let _ = e.handle(answered(a, short()));
    drop(a_answer);
    let fx = e.handle(Event::Left);
    let left = fx.iter().find_map(|f| match f {
        Effect::Leave(ids) => Some(ids.clone()),
        _ => None,
    });
    assert_eq!(left, Some(vec![a_op.expect("op")]));
    assert!(fx.iter().any(|f| matches!(f, Effect::Unsubscribe(_))));
    assert!(undos(&fx).is_empty());

    let (b_answer, fx) = take(&mut e, 1, None);
    let channel = subscribes(&fx).pop().expect("its own channel");
    let fx = e.handle(Event::Subscribed(channel));
    let (_, b_op) = asks(&fx).pop().expect("it asks");
    drop(b_answer);
    let fx = e.handle(Event::Left);
    assert_eq!(undos(&fx), vec![b_op.expect("op")]);
    assert!(!fx.iter().any(|f| matches!(f, Effect::Leave(_))));
}

/// A latch: one read for everyone, the waiters opened together; a message
/// `0` opens them without a read, and nothing is ever undone.
#[test]
fn a_latch_reads_once_for_everyone() {
    let mut e = engine(Latch::new(Arc::from("l")));
    let mut answers = Vec::new();
    let mut arrive = |e: &mut Engine<Latch>| {
        let (reply, answer) = oneshot::channel();
        answers.push(answer);
        e.handle(Event::Arrive {
            want: (),
            wait: None,
            reply,
        })
    };
    let fx = arrive(&mut e);
    let channel = subscribes(&fx).pop().expect("it listens first");
    let fx = e.handle(Event::Subscribed(channel));
    let (reader, _) = asks(&fx).pop().expect("one read");
    let fx = arrive(&mut e);
    assert!(asks(&fx).is_empty(), "one read at a time");
    let fx = e.handle(answered(reader, Ok(0)));
    let grants = fx.iter().filter(|f| matches!(f, Effect::Grant(_))).count();
    assert_eq!(grants, 2, "everyone opens");
    assert!(undos(&fx).is_empty());

    let _ = arrive(&mut e);
    let fx = e.handle(Event::Heard {
        channel: keys::latch_channel("l"),
        wake_all: false,
    });
    assert_eq!(
        fx.iter().filter(|f| matches!(f, Effect::Grant(_))).count(),
        1
    );
}
