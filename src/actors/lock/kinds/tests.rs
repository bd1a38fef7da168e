//! The kinds' decisions, tested with a queue and holdings and nothing else: no
//! actor, no timer, no Redis. Each test names the behaviour a user relies on
//! that the decision stands for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::decisions::Freed;
use super::exclusive::Exclusive;
use super::fair::Fair;
use super::rw::ReadWrite;
use super::spin::Spin;
use super::*;
use crate::actors::lock::holding::Holdings;
use crate::actors::lock::waiters::{self, Request, Waiter, WaiterQueue};
use crate::actors::waiting::engine::Pick;
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
    waiters::waiter(req, reply)
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

/// The busy answer to waiter `id`'s attempt.
fn busy(id: u64, field: &str, woken: bool) -> BusyAnswer<'_> {
    BusyAnswer {
        waiter: id,
        field,
        placed: true,
        ttl: Some(Duration::from_secs(30)),
        head: None,
        woken,
        name: "res",
    }
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
    let (a, b) = (Owner::new(), Owner::new());
    let mut rw = ReadWrite::default();
    let mut q = queue_of(vec![
        waiter(1, a, "a", None),
        waiter(2, a, "a", Some(Duration::ZERO)),
    ]);
    let free = Holdings::default();
    assert_eq!(rw.next(&mut q, &free, Instant::now()), Pick::Waiter(1));
    let mut held = Holdings::default();
    held.entry(
        AcquireKind::Exclusive,
        b,
        &Arc::from("b"),
        Duration::from_secs(1),
        Instant::now(),
    );
    assert_eq!(
        rw.next(&mut q, &held, Instant::now()),
        Pick::Blocked,
        "nobody can win now: the skeleton answers the try-once waiter at once"
    );
}

#[test]
fn an_exclusive_waiter_listens_after_a_busy_answer_and_retries_at_once_if_woken() {
    let mut ex = Exclusive::default();
    let config = config();
    let mut q = queue_of(vec![waiter(1, Owner::new(), "f", None)]);
    let on = ex.busy(busy(1, "f", false), &mut q, &config);
    assert_eq!(on.retry, Retry::Listen(keys::channel("res")));
    let on = ex.busy(busy(1, "f", true), &mut q, &config);
    assert_eq!(on.retry, Retry::Now);
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
    assert!(matches!(after, AfterRelease::Yield { .. }));
    let mut q = queue_of(vec![waiter(1, Owner::new(), "f", None)]);
    let next = ex.next(&mut q, &Holdings::default(), Instant::now());
    assert!(matches!(next, Pick::HoldBack(_)), "{next:?}");
    // Its own message comes back first and means nothing; another process's
    // release ends the yield.
    assert_eq!(ex.heard("c", "res", &mut q), Heard::Nothing);
    assert_ne!(ex.heard("c", "res", &mut q), Heard::Nothing);
    assert_eq!(
        ex.next(&mut q, &Holdings::default(), Instant::now()),
        Pick::Waiter(1)
    );
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
    let delays: Vec<Duration> = (0..4)
        .map(|_| match spin.busy(busy_no_ttl(), &mut q, &config).retry {
            Retry::After(d) => d,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(delays.windows(2).all(|d| d[0] <= d[1]), "{delays:?}");
    assert!(delays[3] > delays[0], "{delays:?}");
    let short = spin.busy(answer_with_ttl(Duration::from_micros(5)), &mut q, &config);
    assert_eq!(short.retry, Retry::After(Duration::from_micros(5)));
    spin.granted(0);
    let first = spin.busy(busy_no_ttl(), &mut q, &config);
    assert!(
        matches!(first.retry, Retry::After(d) if d <= config.spin_first),
        "a grant restarts the backoff: {first:?}"
    );
    assert_eq!(
        spin.busy(busy(1, "f", true), &mut q, &config).retry,
        Retry::Now
    );
}

/// A busy answer with no lease left to read.
fn busy_no_ttl() -> BusyAnswer<'static> {
    answer_with(None)
}

/// A busy answer whose holder's lease has `ttl` left.
fn answer_with_ttl(ttl: Duration) -> BusyAnswer<'static> {
    answer_with(Some(ttl))
}

fn answer_with(ttl: Option<Duration>) -> BusyAnswer<'static> {
    BusyAnswer {
        waiter: 1,
        field: "f",
        placed: false,
        ttl,
        head: None,
        woken: false,
        name: "res",
    }
}

#[test]
fn a_fair_waiter_takes_a_place_and_listens_on_its_own_channel() {
    let mut fair = Fair::default();
    let config = config();
    let mut q = queue_of(vec![
        waiter(1, Owner::new(), "f", None),
        waiter(2, Owner::new(), "g", None),
    ]);
    assert_eq!(
        fair.next(&mut q, &Holdings::default(), Instant::now()),
        Pick::Waiter(1)
    );
    let placed = fair.sending(q.find_mut(1).expect("queued"));
    assert!(placed);
    assert!(
        fair.tick_every(&q, &config).is_some(),
        "a place is refreshed"
    );
    // Not due until told: the next new waiter tries instead.
    assert_eq!(
        fair.next(&mut q, &Holdings::default(), Instant::now()),
        Pick::Waiter(2)
    );
    let on = fair.busy(busy(1, "f", true), &mut q, &config);
    assert_eq!(on.retry, Retry::Listen(keys::fair_channel("res", "f")));
    assert!(on.then_pump, "other waiters make their own attempts");
}

#[test]
fn a_fair_waiter_tries_when_its_channel_or_the_queue_head_names_it() {
    let mut fair = Fair::default();
    let config = config();
    let mut q = queue_of(vec![
        waiter(1, Owner::new(), "f", None),
        waiter(2, Owner::new(), "g", None),
    ]);
    fair.sending(q.find_mut(1).expect("queued"));
    fair.sending(q.find_mut(2).expect("queued"));
    assert_eq!(
        fair.next(&mut q, &Holdings::default(), Instant::now()),
        Pick::Nobody
    );
    let heard = fair.heard(&keys::fair_channel("res", "g"), "res", &mut q);
    assert_eq!(heard, Heard::Pump);
    assert_eq!(
        fair.next(&mut q, &Holdings::default(), Instant::now()),
        Pick::Waiter(2)
    );
    fair.sending(q.find_mut(2).expect("queued"));
    let mut answer = busy(2, "g", false);
    answer.head = Some("f".into());
    fair.busy(answer, &mut q, &config);
    assert_eq!(
        fair.next(&mut q, &Holdings::default(), Instant::now()),
        Pick::Waiter(1)
    );
}

#[test]
fn a_fair_waiter_that_leaves_gives_up_its_place_unless_its_owner_still_waits() {
    let mut fair = Fair::default();
    let owner = Owner::new();
    let mut q = queue_of(vec![
        waiter(1, owner, "f", None),
        waiter(2, owner, "f", None),
    ]);
    fair.sending(q.find_mut(1).expect("queued"));
    fair.sending(q.find_mut(2).expect("queued"));
    let one = q.take(1).expect("queued");
    fair.left(Gone::of(&one), &q);
    assert!(fair.leaving.is_empty(), "the same owner still waits");
    let two = q.take(2).expect("queued");
    fair.left(Gone::of(&two), &q);
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
