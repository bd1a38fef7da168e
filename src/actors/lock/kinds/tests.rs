//! The kinds' decisions, tested with a queue and nothing else: no actor, no
//! timer, no Redis. Each test names the behaviour a user relies on that the
//! decision stands for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::decisions::Freed;
use super::exclusive::Exclusive;
use super::fair::Fair;
use super::rw::ReadWrite;
use super::spin::Spin;
use super::*;
use crate::actors::lock::waiters::{self, Request, Waiter, WaiterQueue};
use crate::actors::waiting::engine::{Heard, Pick, Then};
use crate::keys::{self, Owner};

/// A waiter of `owner` with field `field`; `wait` as `Acquire::wait` says
/// (`Some(ZERO)`: one try).
fn waiter(id: u64, owner: Owner, field: &str, wait: Option<Duration>) -> Waiter {
    let (reply, _) = oneshot::channel();
    let req = Request {
        owner,
        wait,
        ..waiters::test_request(id, field)
    };
    waiters::test_waiter(req, reply)
}

/// A queue of the given waiters, in order.
fn queue_of(waiters: Vec<Waiter>) -> WaiterQueue {
    let mut q = WaiterQueue::default();
    for w in waiters {
        q.push(w, false);
    }
    q
}

/// The default configuration (nothing connects).
fn config() -> Config {
    Config::from_url("redis://127.0.0.1:1").expect("a valid URL")
}

/// A release that freed the lock and published.
fn freed(others: u32, listening: bool, nobody_waits: bool) -> Freed {
    Freed {
        published: true,
        others,
        listening,
        nobody_waits,
        now: Instant::now(),
    }
}

/// The want of waiter `id` in `q`, to mark.
fn want_of(q: &mut WaiterQueue, id: u64) -> &mut Want {
    &mut q.get_mut(id).expect("queued").want
}

#[test]
fn every_kind_is_made_from_its_public_kind() {
    for kind in [Kind::Exclusive, Kind::Fair, Kind::ReadWrite, Kind::Spin] {
        assert_eq!(KindState::new(kind).kind(), kind);
    }
}

#[test]
fn a_kind_costs_a_held_lock_fewer_bytes_inline_than_boxed() {
    // Inline, the enum is the size of its largest kind plus its tag; a
    // `Box<dyn Policy>` is a 16-byte pointer plus a heap block per actor
    // (the state, rounded up by the allocator) and a pointer chase per hook.
    let inline = std::mem::size_of::<KindState>();
    let boxed = std::mem::size_of::<Box<dyn Policy>>() + std::mem::size_of::<Exclusive>();
    eprintln!("KindState {inline} bytes; Box<dyn Policy> + Exclusive {boxed} bytes");
    assert!(inline <= 48, "KindState is {inline} bytes");
    assert!(inline < boxed, "inline {inline} vs boxed {boxed}");
}

#[test]
fn the_head_waiter_tries_unless_a_local_holder_keeps_it_out() {
    let a = Owner::new();
    let mut rw = ReadWrite::default();
    let mut q = queue_of(vec![
        waiter(1, a, "a", None),
        waiter(2, a, "a", Some(Duration::ZERO)),
    ]);
    assert_eq!(rw.next(&mut q, Instant::now()), Pick::Waiter(1));
    // The actor marks the waiters a local holding of another owner keeps out.
    q.iter_mut().for_each(|w| w.want.blocked = true);
    assert_eq!(
        rw.next(&mut q, Instant::now()),
        Pick::Blocked,
        "nobody can win now: the engine answers the try-once waiter at once"
    );
}

#[test]
fn an_exclusive_waiter_listens_on_the_lock_channel_once_refused() {
    let mut ex = Exclusive::default();
    let config = config();
    let mut q = queue_of(vec![waiter(1, Owner::new(), "f", None)]);
    assert_eq!(ex.channel_of(want_of(&mut q, 1), "res"), None, "not before");
    let ttl = Some(Duration::from_secs(30));
    let then = ex.short(want_of(&mut q, 1), ttl, &config);
    assert_eq!(
        then,
        Then::Held(ttl),
        "try-once waiters would find it held too"
    );
    let channel = ex.channel_of(want_of(&mut q, 1), "res");
    assert_eq!(channel, Some(keys::channel("res")));
}

#[test]
fn an_exclusive_lock_hands_over_inside_its_run_then_yields_to_other_processes() {
    let mut ex = Exclusive::default();
    assert_eq!(ex.last_release(), LastRelease::Plain, "no run yet");
    ex.granted(1);
    assert!(matches!(ex.last_release(), LastRelease::HandOver { .. }));
    ex.handed(Handed::Over(Some(2)));
    for _ in 0..8 {
        ex.granted(1);
    }
    assert_eq!(
        ex.last_release(),
        LastRelease::Plain,
        "the run's budget is spent"
    );
    let after = ex.released(freed(2, true, false));
    assert_eq!(after, AfterRelease::Yield);
    let mut q = queue_of(vec![waiter(1, Owner::new(), "f", None)]);
    assert_eq!(
        ex.kept_channel("res"),
        Some(keys::channel("res")),
        "listens while it yields"
    );
    let next = ex.next(&mut q, Instant::now());
    assert!(matches!(next, Pick::HoldBack(_)), "{next:?}");
    // Its own message comes back first and means nothing; another process's
    // release ends the yield.
    assert_eq!(ex.heard("c", "res", &mut q), Heard::Nothing);
    assert_ne!(ex.heard("c", "res", &mut q), Heard::Nothing);
    assert_eq!(ex.next(&mut q, Instant::now()), Pick::Waiter(1));
}

#[test]
fn a_refused_hand_over_makes_every_later_release_plain() {
    let mut ex = Exclusive::default();
    ex.granted(1);
    ex.handed(Handed::Refused);
    ex.granted(1);
    assert_eq!(ex.last_release(), LastRelease::Plain);
}

#[test]
fn a_release_with_nobody_waiting_here_does_not_yield() {
    let mut ex = Exclusive::default();
    ex.granted(0);
    assert_eq!(ex.released(freed(3, false, true)), AfterRelease::Nothing);
}

#[test]
fn a_spin_waiter_asks_again_after_a_doubling_delay_capped_by_the_lease() {
    let mut spin = Spin::default();
    let config = config();
    let mut q = queue_of(vec![waiter(1, Owner::new(), "f", None)]);
    let mut delay = |spin: &mut Spin, ttl| match spin.short(want_of(&mut q, 1), ttl, &config) {
        Then::Held(Some(d)) => d,
        other => panic!("{other:?}"),
    };
    let delays: Vec<Duration> = (0..4).map(|_| delay(&mut spin, None)).collect();
    assert!(delays.windows(2).all(|d| d[0] <= d[1]), "{delays:?}");
    assert!(delays[3] > delays[0], "{delays:?}");
    let short = Duration::from_micros(5);
    assert_eq!(delay(&mut spin, Some(short)), short);
    spin.granted(0);
    let first = delay(&mut spin, None);
    assert!(
        first <= config.spin_first,
        "a grant restarts the backoff: {first:?}"
    );
    assert_eq!(
        spin.channel_of(want_of(&mut q, 1), "res"),
        None,
        "it never listens"
    );
}

#[test]
fn a_fair_waiter_takes_a_place_and_listens_on_its_own_channel() {
    let mut fair = Fair::default();
    let config = config();
    let mut q = queue_of(vec![
        waiter(1, Owner::new(), "f", None),
        waiter(2, Owner::new(), "g", None),
    ]);
    assert_eq!(fair.next(&mut q, Instant::now()), Pick::Waiter(1));
    assert!(
        fair.sending(want_of(&mut q, 1), false, &config),
        "its attempt takes a place"
    );
    assert_eq!(
        fair.place(want_of(&mut q, 1)),
        Some(Arc::from("f")),
        "left when it leaves"
    );
    assert!(
        fair.tick_every(&q, &config).is_some(),
        "a place is refreshed"
    );
    // Not due until told: the next new waiter tries instead.
    assert_eq!(fair.next(&mut q, Instant::now()), Pick::Waiter(2));
    let ttl = Some(Duration::from_secs(3));
    let then = fair.short(want_of(&mut q, 1), ttl, &config);
    assert_eq!(then, Then::Pump, "other waiters make their own attempts");
    let own = fair.own_channel(want_of(&mut q, 1), "res");
    assert_eq!(own, Some(keys::fair_channel("res", "f")));
    fair.sending(want_of(&mut q, 2), false, &config);
    let next = fair.next(&mut q, Instant::now());
    assert!(
        matches!(next, Pick::HoldBack(d) if d > Duration::from_secs(2) && d <= Duration::from_secs(3)),
        "nobody due: asks again when the holder's lease may end: {next:?}"
    );
}

#[test]
fn a_fair_waiter_tries_when_its_channel_or_the_queue_head_names_it() {
    let mut fair = Fair::default();
    let mut q = queue_of(vec![
        waiter(1, Owner::new(), "f", None),
        waiter(2, Owner::new(), "g", None),
    ]);
    fair.sending(want_of(&mut q, 1), false, &config());
    fair.sending(want_of(&mut q, 2), false, &config());
    assert_eq!(fair.next(&mut q, Instant::now()), Pick::Nobody);
    let heard = fair.heard(&keys::fair_channel("res", "g"), "res", &mut q);
    assert_eq!(heard, Heard::Wake);
    assert_eq!(fair.next(&mut q, Instant::now()), Pick::Waiter(2));
    fair.sending(want_of(&mut q, 2), false, &config());
    fair.placed(
        vec![(Arc::from("f"), crate::wire::Place::Head)],
        &mut q,
        "res",
    );
    assert_eq!(fair.next(&mut q, Instant::now()), Pick::Waiter(1));
}

#[test]
fn a_fair_waiter_that_leaves_gives_up_its_place_unless_its_owner_still_waits() {
    let mut fair = Fair::default();
    let owner = Owner::new();
    let mut q = queue_of(vec![
        waiter(1, owner, "f", None),
        waiter(2, owner, "f", None),
    ]);
    fair.sending(want_of(&mut q, 1), false, &config());
    fair.sending(want_of(&mut q, 2), false, &config());
    let one = q.remove(1).expect("queued");
    let place = fair.place(&one.want).into_iter().collect();
    fair.left(place, &q);
    assert!(fair.leaving.is_empty(), "the same owner still waits");
    let two = q.remove(2).expect("queued");
    let place = fair.place(&two.want).into_iter().collect();
    fair.left(place, &q);
    assert_eq!(&*std::mem::take(&mut fair.leaving), [Arc::<str>::from("f")]);
    assert!(fair.tick_every(&q, &config()).is_none());
}

#[test]
fn a_read_write_lock_skips_its_own_unlock_message_once() {
    let mut rw = ReadWrite::default();
    let mut q = WaiterQueue::default();
    assert_eq!(rw.released(freed(0, true, true)), AfterRelease::Nothing);
    assert_eq!(rw.heard("c", "res", &mut q), Heard::Nothing);
    assert_eq!(rw.heard("c", "res", &mut q), Heard::Wake);
}
