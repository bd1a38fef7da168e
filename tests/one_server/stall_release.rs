//! How long a release keeps its caller while Redis is frozen (SIGSTOP through the
//! test kit), for a lock guard and for the guards of each kind of semaphore: the
//! call answers within its bound (`Config::release_wait`, 2.5 s by default) with
//! `ReleaseOutcome::Pending`, not when Redis comes back, and what it gives back
//! lands once after the resume: the lock is free, the semaphore holds exactly
//! the permits it was set to, and a second later still exactly those (a copy of
//! the give-back that waited at the frozen server counts nothing more). A
//! give-back still unanswered past its op id's window (half of
//! `Config::latch_ttl`, 5 s) is logged as in flight and lands all the same.
//! A count-down answers within the same bound (`InFlight`) and lands once.
//! The freezes are 4 s and 6.5 s rather than a production 14 s: any freeze
//! longer than the bound shows the bound, and one longer than the window shows
//! the late landing. The numbers are printed (`-- --nocapture`).

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{
    LockError, Locks, PermitGuard, PermitSemaphore, ReleaseOutcome, Semaphore, SemaphoreGuard,
};
use support::{eventually, manager, raw, Captured, RedisServer};

/// The semaphores' permits.
const PERMITS: i64 = 3;
/// A freeze longer than the default bound, shorter than the op id's window.
const FREEZE: Duration = Duration::from_secs(4);
/// A freeze longer than the op id's window (5 s with the default latch TTL).
const PAST_THE_WINDOW: Duration = Duration::from_millis(6500);
/// How late past its bound a release may answer (a busy test machine).
const SLACK: Duration = Duration::from_millis(500);
/// Longest the permits may take to be back after the resume: far above what
/// it takes (a copy queued at the server runs as soon as it resumes).
const BACK_WITHIN: Duration = Duration::from_secs(5);

/// A held lock released while Redis is frozen answers within the guard's bound
/// with `Pending`, not when Redis comes back; the release goes on in the
/// background and the lock is free on the server soon after the resume. A
/// release within the bound answers as before.
#[actix_rt::test]
async fn a_release_during_a_freeze_answers_within_its_bound() {
    let mut server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let held = support::hold(&m, "stall:release", |a| a).await;
    let quick = support::hold(&m, "stall:quick", |a| a).await;
    assert_eq!(
        quick.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    server.pause();
    let began = Instant::now();
    let outcome = held.release().await.expect("an answer, not an error");
    let took = began.elapsed();
    actix_rt::time::sleep(FREEZE.saturating_sub(took)).await;
    server.resume();
    let resumed = Instant::now();
    eprintln!("release during a freeze answered {outcome:?} after {took:?}");
    assert!(
        matches!(outcome, ReleaseOutcome::Pending { .. }),
        "{outcome:?}"
    );
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    let freed = eventually(Duration::from_secs(5), || {
        !support::exists(&server, "stall:release")
    })
    .await;
    eprintln!("lock free {:?} after the resume", resumed.elapsed());
    assert!(freed, "the lock was not freed after the resume");
    assert!(
        resumed.elapsed() < Duration::from_secs(2),
        "freed {:?} after the resume",
        resumed.elapsed()
    );
}

/// The three kinds of semaphore.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Fair,
    Expirable,
}

/// Permits held through a guard of either type.
enum Held {
    Plain(SemaphoreGuard),
    Expirable(PermitGuard),
}

impl Held {
    async fn release_within(self, bound: Option<Duration>) -> Result<ReleaseOutcome, LockError> {
        match (self, bound) {
            (Held::Plain(g), None) => g.release().await,
            (Held::Plain(g), Some(bound)) => g.release_within(bound).await,
            (Held::Expirable(g), None) => g.release().await,
            (Held::Expirable(g), Some(bound)) => g.release_within(bound).await,
        }
    }
}

/// The permits available (`GET name`, absent: 0) and taken (the
/// permit-expirable semaphore's `{name}:timeout`; 0 for the other kinds),
/// read on a plain connection (never while the server is frozen).
fn on_server(server: &RedisServer, name: &str) -> (i64, i64) {
    let available: Option<i64> = raw(server, &["GET", name]);
    let taken: i64 = raw(server, &["ZCARD", &format!("{{{name}}}:timeout")]);
    (available.unwrap_or(0), taken)
}

/// What one frozen release showed.
#[derive(Debug)]
struct Seen {
    /// What the release answered.
    outcome: ReleaseOutcome,
    /// How long it kept its caller.
    took: Duration,
    /// From the resume to every permit back, if they came back.
    back_after: Option<Duration>,
    /// (available, taken) once back, and a second later.
    settled: (i64, i64),
    later: (i64, i64),
}

/// A semaphore of `kind` set to [`PERMITS`]: one permit taken and released
/// before the freeze (answered `Released`), then two permits of one guard
/// released while the server is frozen for `freeze`, the call bounded by
/// `bound` (`None`: the configured one).
async fn release_frozen(kind: Kind, name: &str, freeze: Duration, bound: Option<Duration>) -> Seen {
    let mut server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let take = |permits: u32| {
        let m = m.clone();
        async move {
            match kind {
                Kind::Plain | Kind::Fair => {
                    let s = m
                        .send(Semaphore::new(name).fair(matches!(kind, Kind::Fair)))
                        .await
                        .expect("manager answers")
                        .expect("handle");
                    s.try_set_permits(PERMITS as u32).await.expect("set");
                    Held::Plain(s.acquire(permits).await.expect("taken"))
                }
                Kind::Expirable => {
                    let s = m
                        .send(PermitSemaphore::new(name))
                        .await
                        .expect("manager answers")
                        .expect("handle");
                    s.try_set_permits(PERMITS as u32).await.expect("set");
                    Held::Expirable(s.acquire(permits, None).await.expect("taken"))
                }
            }
        }
    };
    let quick = take(1).await;
    assert_eq!(
        quick.release_within(bound).await.expect("released"),
        ReleaseOutcome::Released,
        "a release Redis answers in time"
    );
    let held = take(2).await;
    assert_eq!(on_server(&server, name).0, PERMITS - 2);
    server.pause();
    let began = Instant::now();
    let outcome = held
        .release_within(bound)
        .await
        .expect("an answer, not an error");
    let took = began.elapsed();
    actix_rt::time::sleep(freeze.saturating_sub(took)).await;
    server.resume();
    let resumed = Instant::now();
    let back = eventually(BACK_WITHIN, || on_server(&server, name) == (PERMITS, 0)).await;
    let back_after = back.then(|| resumed.elapsed());
    let settled = on_server(&server, name);
    actix_rt::time::sleep(Duration::from_secs(1)).await;
    let later = on_server(&server, name);
    let seen = Seen {
        outcome,
        took,
        back_after,
        settled,
        later,
    };
    eprintln!("{kind:?} semaphore `{name}`, frozen {freeze:?}: {seen:?}");
    seen
}

/// Checks what every frozen release must show: `Pending` within `bound` (and
/// [`SLACK`]), then exactly [`PERMITS`] available and none taken, a second
/// later too.
fn check(seen: &Seen, bound: Duration) {
    let mut wrong = Vec::new();
    if !matches!(seen.outcome, ReleaseOutcome::Pending { .. }) {
        wrong.push(format!("answered {:?}, not Pending", seen.outcome));
    }
    if seen.took > bound + SLACK {
        wrong.push(format!("answered after {:?}, bound {bound:?}", seen.took));
    }
    if seen.back_after.is_none() || seen.settled != (PERMITS, 0) {
        wrong.push(format!(
            "(available, taken) after the resume: {:?}, not ({PERMITS}, 0)",
            seen.settled
        ));
    }
    if seen.later != (PERMITS, 0) {
        wrong.push(format!(
            "(available, taken) a second later: {:?}, not ({PERMITS}, 0): the give-back \
             counted twice",
            seen.later
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A plain semaphore's guard released while Redis is frozen 4 s answers
/// `Pending` within its bound (2.5 s by default); the permits are all back
/// soon after the resume, exactly once, and the late outcome is logged.
#[actix_rt::test]
async fn a_plain_semaphore_release_during_a_freeze_answers_within_its_bound() {
    let (log, _logging) = Captured::install();
    let seen = release_frozen(Kind::Plain, "stall:rel-plain", FREEZE, None).await;
    check(&seen, Duration::from_millis(2500));
    let done = "a change answered late is done";
    assert!(
        eventually(Duration::from_secs(2), || log.text().contains(done)).await,
        "the late outcome was not logged:\n{}",
        log.text()
    );
}

/// The same of a fair semaphore's guard.
#[actix_rt::test]
async fn a_fair_semaphore_release_during_a_freeze_answers_within_its_bound() {
    let seen = release_frozen(Kind::Fair, "stall:rel-fair", FREEZE, None).await;
    check(&seen, Duration::from_millis(2500));
}

/// The same of a permit-expirable semaphore's guard: the permits leave
/// `{name}:timeout` and are available again, once.
#[actix_rt::test]
async fn a_permit_release_during_a_freeze_answers_within_its_bound() {
    let seen = release_frozen(Kind::Expirable, "stall:rel-exp", FREEZE, None).await;
    check(&seen, Duration::from_millis(2500));
}

/// A give-back frozen past its op id's window (6.5 s against 5 s): the caller
/// had its answer at its own bound (`release_within`, 1 s); the give-back is
/// then logged as in flight, not sent again, and lands once when Redis
/// resumes (its copies waited in the server's input).
#[actix_rt::test]
async fn a_give_back_frozen_past_its_window_lands_once_after_the_resume() {
    let (log, _logging) = Captured::install();
    let bound = Duration::from_secs(1);
    let name = "stall:rel-late";
    let seen = release_frozen(Kind::Plain, name, PAST_THE_WINDOW, Some(bound)).await;
    check(&seen, bound);
    let text = log.text();
    assert!(
        text.contains("a change answered late failed") && text.contains("permit(s) of semaphore"),
        "the give-back past its window was not logged as in flight:\n{text}"
    );
}

/// A count-down sent while Redis is frozen 4 s answers `InFlight` within its
/// bound (2.5 s by default), not at the end of its op id's window (5 s) nor
/// when Redis comes back; it goes on behind the call and lands once after the
/// resume (the count is one less, and stays so), its late outcome logged.
#[actix_rt::test]
async fn a_count_down_during_a_freeze_answers_within_its_bound() {
    let (log, _logging) = Captured::install();
    let mut server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let latch = m.latch("stall:latch").await.expect("handle");
    assert!(latch.try_set_count(5).await.expect("set"));
    assert_eq!(latch.count_down().await.expect("counted down"), 4);
    server.pause();
    let began = Instant::now();
    let answer = latch.count_down().await;
    let took = began.elapsed();
    actix_rt::time::sleep(FREEZE.saturating_sub(took)).await;
    server.resume();
    let resumed = Instant::now();
    let count = |server: &RedisServer| raw::<Option<i64>>(server, &["GET", "stall:latch"]);
    let landed = eventually(BACK_WITHIN, || count(&server) == Some(3)).await;
    let landed_after = resumed.elapsed();
    actix_rt::time::sleep(Duration::from_secs(1)).await;
    let later = count(&server);
    eprintln!(
        "count-down during a freeze answered {answer:?} after {took:?}; landed {landed} \
         {landed_after:?} after the resume; count {later:?} a second later"
    );
    assert!(
        matches!(answer, Err(LockError::InFlight { .. })),
        "{answer:?}"
    );
    assert!(
        took <= Duration::from_millis(2500) + SLACK,
        "answered after {took:?}"
    );
    assert!(landed, "the count-down never landed: count {later:?}");
    assert_eq!(later, Some(3), "the count-down counted other than once");
    let done = "a change answered late is done";
    assert!(
        eventually(Duration::from_secs(2), || log.text().contains(done)).await,
        "the late outcome was not logged:\n{}",
        log.text()
    );
}
