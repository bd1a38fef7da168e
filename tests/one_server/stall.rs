//! A Redis stall (issue 45) on a real server frozen with SIGSTOP: a change sent
//! to a frozen server is only queued there and runs when it resumes, after the
//! caller's response timeout (2 s, the default) has passed and the library may
//! have sent it again. Every change must count once all the same: a semaphore of
//! each kind (plain, fair, permit-expirable) used by six callers of two managers
//! through a 4 s and a 1.5 s freeze ends with exactly its permits, and never had
//! more holders than permits (read from the holders' own recorded intervals); a
//! count-down latch counted down through a 4 s freeze takes each count-down at
//! most once, and exactly once when it answered `Ok`. The server's log is
//! printed when a test fails (`RedisServer`'s drop); the numbers each test
//! measured are printed always (`-- --nocapture`). How long a release keeps its
//! caller through a freeze: `stall_release.rs`.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwarden::{
    LatchHandle, LockError, Locks, PermitGuard, PermitSemaphore, PermitSemaphoreHandle, Semaphore,
    SemaphoreGuard, SemaphoreHandle,
};
use support::{eventually, manager, raw, RedisServer};

/// The semaphores' permits.
const PERMITS: i64 = 2;
/// Callers, split over the two managers.
const CALLERS: usize = 6;
/// How long a caller holds its permit.
const HOLD: Duration = Duration::from_millis(100);
/// A caller's wait for a permit: shorter than the long freeze, so some waits
/// end while their attempt is stuck at the frozen server (a grant that then
/// finds nobody must go back, once).
const WAIT: Duration = Duration::from_secs(3);
/// The long freeze: two response timeouts, so a change is sent again while its
/// first copy still waits at the server.
const LONG_FREEZE: Duration = Duration::from_secs(4);
/// The short freeze: under one response timeout, plus the time to time out.
const SHORT_FREEZE: Duration = Duration::from_millis(1500);
/// How long the callers run before, between and after the freezes.
const RUNNING: Duration = Duration::from_millis(1500);
/// Upper bound for anything to settle: far above what it needs.
const LIMIT: Duration = Duration::from_secs(30);

/// The three kinds of semaphore.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Fair,
    Expirable,
}

/// One caller's handle on the semaphore.
#[derive(Clone)]
enum Taker {
    Plain(SemaphoreHandle),
    Expirable(PermitSemaphoreHandle),
}

/// A permit taken through a [`Taker`].
enum Held {
    Plain(SemaphoreGuard),
    Expirable(PermitGuard),
}

impl Taker {
    /// A handle of `kind` on semaphore `name` through a new manager.
    async fn start(server: &RedisServer, kind: Kind, name: &str) -> Taker {
        let m = manager(server, |c| c).await;
        match kind {
            Kind::Plain => Taker::Plain(m.semaphore(name).await.expect("handle")),
            Kind::Fair => Taker::Plain(
                m.send(Semaphore::new(name).fair(true))
                    .await
                    .expect("manager answers")
                    .expect("handle"),
            ),
            Kind::Expirable => Taker::Expirable(
                m.send(PermitSemaphore::new(name))
                    .await
                    .expect("manager answers")
                    .expect("handle"),
            ),
        }
    }

    async fn set(&self, permits: u32) -> bool {
        match self {
            Taker::Plain(s) => s.try_set_permits(permits).await,
            Taker::Expirable(s) => s.try_set_permits(permits).await,
        }
        .expect("set")
    }

    /// One permit, waiting at most [`WAIT`]; a permit-expirable one renewed
    /// by the watchdog (30 s lease: none lapses in these freezes).
    async fn take(&self) -> Result<Held, LockError> {
        match self {
            Taker::Plain(s) => s.acquire_within(1, WAIT).await.map(Held::Plain),
            Taker::Expirable(s) => s.acquire_within(1, WAIT, None).await.map(Held::Expirable),
        }
    }
}

impl Held {
    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Plain(g) => g.release().await.map(|_| ()),
            Held::Expirable(g) => g.release().await.map(|_| ()),
        }
    }
}

/// What one caller saw.
#[derive(Default, Debug)]
struct Tally {
    /// Each hold, from the moment its acquisition answered to the moment its
    /// release was asked: inside the permit's true hold in Redis.
    holds: Vec<(Instant, Instant)>,
    /// Waits that ran out.
    timeouts: usize,
    /// Acquisitions that failed otherwise.
    acquire_errors: Vec<String>,
    /// Releases that answered an error (allowed through a freeze).
    release_errors: Vec<String>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.holds.extend(other.holds);
        self.timeouts += other.timeouts;
        self.acquire_errors.extend(other.acquire_errors);
        self.release_errors.extend(other.release_errors);
    }
}

/// Takes a permit, holds it [`HOLD`], gives it back, again and again until
/// `stop`; records each hold and each error.
async fn caller(name: &str, n: usize, taker: Taker, stop: Arc<AtomicBool>) -> Tally {
    let mut tally = Tally::default();
    while !stop.load(Ordering::SeqCst) {
        match taker.take().await {
            Ok(held) => {
                let start = Instant::now();
                actix_rt::time::sleep(HOLD).await;
                let end = Instant::now();
                tally.holds.push((start, end));
                if let Err(e) = held.release().await {
                    eprintln!("{name} caller {n}: release failed: {e}");
                    tally.release_errors.push(e.to_string());
                }
            }
            Err(LockError::Timeout { .. }) => tally.timeouts += 1,
            Err(e) => {
                eprintln!("{name} caller {n}: acquire failed: {e}");
                tally.acquire_errors.push(e.to_string());
                // No hot loop on an error answered at once.
                actix_rt::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    tally
}

/// The most holds that overlap at any moment (an end and a start at the same
/// instant do not overlap).
fn max_overlap(holds: &[(Instant, Instant)]) -> usize {
    let mut events: Vec<(Instant, i8)> = holds
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    events.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, step) in events {
        now += i64::from(step);
        most = most.max(now);
    }
    most as usize
}

/// The permits available (`GET name`, absent: 0) and taken (the
/// permit-expirable semaphore's `{name}:timeout`; 0 for the other kinds),
/// read on a plain connection.
fn on_server(server: &RedisServer, name: &str) -> (i64, i64) {
    let available: Option<i64> = raw(server, &["GET", name]);
    let taken: i64 = raw(server, &["ZCARD", &format!("{{{name}}}:timeout")]);
    (available.unwrap_or(0), taken)
}

/// Freezes the server for `freeze`, then lets the callers run [`RUNNING`].
async fn stall(server: &mut RedisServer, name: &str, freeze: Duration) {
    eprintln!("{name}: freezing the server for {freeze:?}");
    server.pause();
    actix_rt::time::sleep(freeze).await;
    server.resume();
    actix_rt::time::sleep(RUNNING).await;
}

/// The scenario of the three semaphore tests: a semaphore of `kind` with
/// [`PERMITS`] permits, [`CALLERS`] callers over two managers, a 4 s and a
/// 1.5 s freeze while they run; then every permit is back and nothing more,
/// and at no moment did more callers hold a permit than there are.
async fn permits_survive_stalls(kind: Kind, name: &'static str) {
    let mut server = RedisServer::start();
    let takers = [
        Taker::start(&server, kind, name).await,
        Taker::start(&server, kind, name).await,
    ];
    assert!(takers[0].set(PERMITS as u32).await, "the semaphore was set");
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..CALLERS)
        .map(|n| actix_rt::spawn(caller(name, n, takers[n % 2].clone(), stop.clone())))
        .collect();
    actix_rt::time::sleep(RUNNING).await;
    stall(&mut server, name, LONG_FREEZE).await;
    stall(&mut server, name, SHORT_FREEZE).await;
    stop.store(true, Ordering::SeqCst);
    let mut tally = Tally::default();
    for c in callers {
        let ended = tokio::time::timeout(LIMIT, c).await;
        tally.add(ended.expect("a caller ended in time").expect("caller"));
    }
    // Every caller's release has answered; a grant that found its caller gone
    // goes back in the background: wait for every permit (more, with the bug).
    // A permit taken for nobody never comes back within LIMIT: the assertions
    // below then say how many are missing.
    let back = |(available, taken): (i64, i64)| available >= PERMITS && taken == 0;
    eventually(LIMIT, || back(on_server(&server, name))).await;
    let settled = on_server(&server, name);
    // A copy of a change that waited at the frozen server lands after it
    // resumed: look again a while later.
    actix_rt::time::sleep(Duration::from_secs(1)).await;
    let later = on_server(&server, name);
    let overlap = max_overlap(&tally.holds);
    eprintln!(
        "{kind:?} semaphore `{name}` after the stalls: {} available, {} taken by \
         nobody ({} and {} a second later); at most {overlap} holders at once; \
         {} acquisitions, {} waits ran out, {} acquire errors, {} release errors",
        settled.0,
        settled.1,
        later.0,
        later.1,
        tally.holds.len(),
        tally.timeouts,
        tally.acquire_errors.len(),
        tally.release_errors.len(),
    );
    assert!(
        tally.holds.len() >= CALLERS,
        "the callers hardly ran: {tally:?}"
    );
    // Each check is reported, not only the first that fails.
    let mut wrong = Vec::new();
    if settled != (PERMITS, 0) {
        wrong.push(format!(
            "(available, taken) once every release settled: {settled:?}, not \
             ({PERMITS}, 0): a give-back or a take counted other than once"
        ));
    }
    if later != (PERMITS, 0) {
        wrong.push(format!(
            "(available, taken) a second later: {later:?}, not ({PERMITS}, 0)"
        ));
    }
    if overlap as i64 > PERMITS {
        wrong.push(format!(
            "{overlap} callers held a permit at once out of {PERMITS}"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A plain semaphore of 2 permits, taken and given back by six callers of two
/// managers through a 4 s and a 1.5 s freeze of Redis, holds exactly 2 permits
/// once every release has settled (a give-back retried after its response
/// timeout, or an acquisition whose reply was lost, changes it once), and never
/// had more than 2 holders at once.
#[actix_rt::test]
async fn a_plain_semaphore_keeps_its_permits_through_stalls() {
    permits_survive_stalls(Kind::Plain, "stall-plain").await;
}

/// The same of a fair semaphore: exactly 2 permits once everything settled,
/// never more than 2 holders at once.
#[actix_rt::test]
async fn a_fair_semaphore_keeps_its_permits_through_stalls() {
    permits_survive_stalls(Kind::Fair, "stall-fair").await;
}

/// The same of a permit-expirable semaphore: with nothing held, 2 permits
/// available and none left taken in `{name}:timeout` (no permit taken for
/// nobody), never more than 2 holders at once.
#[actix_rt::test]
async fn a_permit_expirable_semaphore_keeps_its_permits_through_stalls() {
    permits_survive_stalls(Kind::Expirable, "stall-expirable").await;
}

/// The count of latch `name` (`GET name`; absent: 0), on a plain connection.
fn count_on_server(server: &RedisServer, name: &str) -> i64 {
    let count: Option<i64> = raw(server, &["GET", name]);
    count.unwrap_or(0)
}

/// A latch of 10 counted down 6 times from two managers, 4 of them sent while
/// Redis is frozen for 4 s: each count-down that answered `Ok` was applied
/// exactly once and each that answered an error at most once (whether the
/// library retries a count-down or not), so the count left is between 10 minus
/// all six and 10 minus those answered `Ok`, stays there, and the `Ok` answers
/// are all different.
#[actix_rt::test]
async fn a_count_down_counts_once_through_a_stall() {
    const SET: i64 = 10;
    let name = "stall-latch";
    let mut server = RedisServer::start();
    let mut latches: Vec<LatchHandle> = Vec::new();
    for _ in 0..2 {
        let m = manager(&server, |c| c).await;
        latches.push(m.latch(name).await.expect("handle"));
    }
    assert!(latches[0].try_set_count(SET as u64).await.expect("set"));
    let mut answers: Vec<Result<u64, LockError>> = Vec::new();
    for l in &latches {
        answers.push(l.count_down().await);
    }
    server.pause();
    let frozen: Vec<_> = (0..4)
        .map(|i| {
            let l = latches[i % 2].clone();
            actix_rt::spawn(async move { l.count_down().await })
        })
        .collect();
    actix_rt::time::sleep(LONG_FREEZE).await;
    server.resume();
    for c in frozen {
        let ended = tokio::time::timeout(LIMIT, c).await;
        answers.push(ended.expect("a count-down answered in time").expect("task"));
    }
    let ok: Vec<u64> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok().copied())
        .collect();
    for e in answers.iter().filter_map(|a| a.as_ref().err()) {
        eprintln!("count-down failed: {e}");
    }
    let failed = (answers.len() - ok.len()) as i64;
    let done = ok.len() as i64;
    // A count-down left queued at the frozen server runs once it resumes:
    // wait for every one that may still land.
    eventually(LIMIT, || {
        count_on_server(&server, name) <= SET - done - failed
    })
    .await;
    let settled = count_on_server(&server, name);
    actix_rt::time::sleep(Duration::from_secs(1)).await;
    let later = count_on_server(&server, name);
    eprintln!(
        "latch `{name}` set to {SET}: {done} count-downs answered Ok ({ok:?}), {failed} \
         an error; the count is {settled} once settled, {later} a second later"
    );
    let bounds = (SET - done - failed)..=(SET - done);
    assert!(
        bounds.contains(&settled),
        "count {settled} once settled, outside {bounds:?}: a count-down counted twice, \
         or one answered Ok did not count"
    );
    assert_eq!(later, settled, "a late copy of a count-down landed");
    let mut distinct = ok.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        ok.len(),
        "two count-downs answered the same count left: {ok:?}"
    );
}
