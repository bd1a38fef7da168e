//! The engine's rules that the lock needs and no semaphore or latch uses,
//! about takes that may have run unseen and waits that run out: a lost
//! attempt checked before anyone asks again (a script with no op id to answer
//! a repeat from), the take of a waiter that left while it was out checked
//! when the answer says it took or never comes, a failed undo checked, a
//! grant whose dropping gives it back not undone besides, and a timeout that
//! names the holder or says Redis was silent. Tested with `Picky`
//! (`picky.rs`) and nothing else.

use super::picky::{arrive, checks, head_asking, left_places, Picky};
use super::*;

/// A policy that checks lost attempts, its head (`a`) asking as attempt `id`
/// and a second waiter (`b`) behind it.
fn two_waiting_head_asking() -> (Engine<Picky>, Answer<u64>, u64, Answer<u64>) {
    let mut e = engine(Picky {
        checks: true,
        ..Picky::default()
    });
    let (a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let (b, _) = arrive(&mut e, None);
    (e, a, id, b)
}

/// A lost answer is checked before anyone asks again, and the waiter is not
/// marked for an undo: the check gives back whatever the attempt took, once.
#[tokio::test]
async fn a_lost_answer_is_checked_before_anyone_asks_again() {
    let (mut e, a, id, _b) = two_waiting_head_asking();
    let fx = e.handle(answered(id, Err(transient())));
    assert!(asks(&fx).is_empty() && undos(&fx).is_empty());
    assert_eq!(
        checks(&fx),
        1,
        "the check goes out at once, before the retry"
    );
    let fx = e.handle(Event::Timer);
    assert!(asks(&fx).is_empty(), "and nobody asks meanwhile");
    drop(a);
    let fx = e.handle(Event::Left);
    assert!(undos(&fx).is_empty(), "the check covers a leaver");
    assert!(
        asks(&fx).is_empty() && checks(&fx) == 0,
        "one check at a time"
    );
    let fx = e.handle(Event::Checked(Err(transient())));
    assert!(
        asks(&fx).is_empty(),
        "a check that could not tell is not done"
    );
    let fx = e.handle(Event::Timer);
    assert_eq!(checks(&fx), 1, "so it goes out again");
    let fx = e.handle(Event::Checked(Ok(())));
    assert_eq!(asks(&fx).len(), 1, "once checked, the next waiter asks");
}

/// A connection refused before the call went out did nothing: no check.
#[test]
fn a_refused_connection_needs_no_check() {
    let mut e = engine(Picky {
        checks: true,
        ..Picky::default()
    });
    let (_a, fx) = arrive(&mut e, None);
    let (id, _) = asks(&fx).pop().expect("the head asks at once");
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let _ = e.handle(answered(id, Err(redis::RedisError::from(refused))));
    let fx = e.handle(Event::Timer);
    assert_eq!(checks(&fx), 0);
    assert_eq!(asks(&fx).len(), 1, "the same waiter asks again");
}

/// A waiter that leaves while its attempt is out has its take undone at once
/// (right behind the attempt); an answer that says it took is checked all the
/// same before anyone asks again, as the undo may have gone out first, and
/// nobody is granted it.
#[tokio::test]
async fn a_take_for_a_leaver_is_undone_then_checked() {
    let (mut e, a, id, _b) = two_waiting_head_asking();
    drop(a);
    let fx = e.handle(Event::Left);
    assert_eq!(undos(&fx).len(), 1, "undone at once, behind the attempt");
    let fx = e.handle(answered(id, Ok(Some(7))));
    assert!(!fx.iter().any(|f| matches!(f, Effect::Grant(_))));
    assert_eq!(checks(&fx), 1, "the take is checked");
    assert!(asks(&fx).is_empty(), "before anyone asks again");
    let fx = e.handle(Event::Checked(Ok(())));
    assert_eq!(asks(&fx).len(), 1, "then the next waiter asks");
}

/// A busy answer to a leaver's attempt took nothing: no check, and the next
/// waiter asks at once; an attempt of a leaver that got no answer is checked
/// first (a check that cannot tell yet backs off).
#[test]
fn a_leavers_busy_answer_needs_no_check_and_a_lost_one_does() {
    for (reply, checked) in [(Ok(None), false), (Err(transient()), true)] {
        let (mut e, a, id, _b) = two_waiting_head_asking();
        drop(a);
        let _ = e.handle(Event::Left);
        let fx = e.handle(answered(id, reply));
        assert_eq!(checks(&fx) == 1, checked);
        assert_eq!(asks(&fx).is_empty(), checked, "a check goes first");
    }
}

/// An undo that failed is not known to have run: what the take did is checked
/// before anyone asks again.
#[test]
fn a_failed_undo_is_checked() {
    let (mut e, a, id, _b) = two_waiting_head_asking();
    drop(a);
    let _ = e.handle(Event::Left);
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(asks(&fx).len(), 1, "the next waiter asks");
    let (next, _) = asks(&fx).pop().expect("asked");
    let _ = e.handle(answered(next, Ok(None)));
    let fx = e.handle(Event::UndoFailed(false));
    assert_eq!(checks(&fx), 1, "the failed undo's take is checked");
    assert!(asks(&fx).is_empty());
}

/// A grant that finds its caller gone comes back to the runner; when dropping
/// it gives the take back (a lock's guard releases its hold), nothing is
/// undone besides, so the take is not given back twice.
#[tokio::test]
async fn a_grant_that_gives_back_when_dropped_is_not_undone() {
    for drops in [false, true] {
        let mut e = engine(Picky {
            drops,
            ..Picky::default()
        });
        let (a, fx) = arrive(&mut e, None);
        let (id, _) = asks(&fx).pop().expect("the head asks at once");
        drop(a);
        let mut fx = e.handle(answered(id, Ok(Some(7))));
        let at = fx.iter().position(|f| matches!(f, Effect::Grant(_)));
        let Effect::Grant(mut taken) = fx.swap_remove(at.expect("granted")) else {
            unreachable!("found a grant");
        };
        let won = taken.won.take().expect("won");
        assert_eq!(e.deliver(*taken, won), Err(7), "the grant comes back");
        assert_eq!(undos(&e.take_effects()).len(), usize::from(!drops));
    }
}

/// A waiter whose deadline passes with nothing but a timeout to tell it is
/// handed to the runner unanswered, to name the holder in it, and leaves
/// (its place) at once; the others stay.
#[test]
fn a_timeout_goes_to_the_runner_to_name_the_holder() {
    let mut e = engine(Picky {
        names: true,
        places: true,
        ..Picky::default()
    });
    e.policy.pick = Some(Pick::Nobody);
    let (mut short, _) = arrive(&mut e, Some(Duration::from_millis(10)));
    let (_long, _) = arrive(&mut e, None);
    std::thread::sleep(Duration::from_millis(20));
    let fx = e.handle(Event::Timer);
    let timed_out: Vec<_> = fx
        .iter()
        .filter_map(|f| match f {
            Effect::TimedOut(ws) => Some(ws.iter().map(|(w, waited)| (w.id, *waited))),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(timed_out.len(), 1, "the one whose deadline passed");
    assert!(timed_out[0].1 >= Duration::from_millis(10));
    assert!(
        short.try_recv().is_err(),
        "unanswered: the runner answers it"
    );
    assert_eq!(left_places(&fx), vec![Arc::from("picky-place")]);
    assert_eq!(e.waiters().count(), 1, "the other one stays");
}

/// A deadline that passes while the attempt out has gone unanswered past the
/// policy's silence is told Redis did not answer, not that it waited in vain;
/// one that passes just after an attempt went out is a plain timeout.
#[tokio::test]
async fn a_deadline_in_a_silence_says_redis_did_not_answer() {
    for (silence, said) in [(Duration::ZERO, true), (Duration::from_secs(60), false)] {
        let mut e = engine(Picky {
            names: true,
            silence: Some(silence),
            ..Picky::default()
        });
        let (asker, fx) = arrive(&mut e, Some(Duration::from_millis(10)));
        assert_eq!(asks(&fx).len(), 1, "its attempt is out");
        std::thread::sleep(Duration::from_millis(20));
        let fx = e.handle(Event::Timer);
        let handed = fx.iter().any(|f| matches!(f, Effect::TimedOut(_)));
        assert_eq!(handed, !said, "a plain timeout goes to the runner");
        if said {
            let answer = asker.await.expect("answered");
            let e = answer.expect_err("not granted").to_string();
            assert!(e.contains("did not answer"), "{e}");
        }
    }
}

/// A waiter with a place that leaves while its attempt is out, answered busy
/// after (the attempt may have placed it again after its leave went out),
/// leaves its place again; a busy answer took nothing, so nothing is checked.
#[test]
fn a_leavers_busy_answer_leaves_its_place_again() {
    let (mut e, a, id) = head_asking(Picky {
        checks: true,
        places: true,
        ..Picky::default()
    });
    drop(a);
    let fx = e.handle(Event::Left);
    assert_eq!(undos(&fx).len(), 1, "its attempt is undone at once");
    let fx = e.handle(answered(id, Ok(None)));
    assert_eq!(left_places(&fx), vec![Arc::<str>::from("picky-place")]);
    assert_eq!(checks(&fx), 0);
}
