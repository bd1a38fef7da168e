//! The semaphore (issue 14, part 1) on a real Redis: never more holders than
//! permits across managers, waiters woken by the release message and served in
//! order, local waiters asking Redis one at a time, guards giving permits back,
//! Redisson's layout, and bad input refused with nothing written.

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwarden::{Admin, LockError, Locks, NameError, SemaphoreHandle, SynchronizerKind};
use support::{eventually, manager, raw, RedisServer};

/// Subscribes a raw connection to `channel` on a thread of its own (a blocking
/// read must not stall the test's actors) and forwards each payload.
fn listen(server: &RedisServer, channel: &str) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let mut conn = server.conn();
    let channel = channel.to_string();
    std::thread::spawn(move || {
        let mut pubsub = conn.as_pubsub();
        pubsub.subscribe(&channel).expect("subscribe");
        while let Ok(msg) = pubsub.get_message() {
            let payload: String = msg.get_payload().unwrap_or_default();
            if tx.send(payload).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until `channel` has `n` subscribers.
async fn subscribers(server: &RedisServer, channel: &str, n: i64) -> bool {
    eventually(Duration::from_secs(10), || {
        let got: Vec<(String, i64)> = raw(server, &["PUBSUB", "NUMSUB", channel]);
        got.first().is_some_and(|(_, c)| *c == n)
    })
    .await
}

/// Three managers, eighteen tasks taking one or two permits of a 3-permit
/// semaphore again and again: at no moment are more than 3 permits held, every
/// task finishes, and all 3 are back at the end.
#[actix_rt::test]
async fn never_more_holders_than_permits_across_managers() {
    let server = RedisServer::start();
    let mut handles: Vec<SemaphoreHandle> = Vec::new();
    for _ in 0..3 {
        let m = manager(&server, |c| c).await;
        handles.push(m.semaphore("api").await.expect("handle"));
    }
    assert!(handles[0].try_set_permits(3).await.expect("set"));
    assert!(!handles[1]
        .try_set_permits(5)
        .await
        .expect("second set is refused"));
    let held = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..18 {
        let (h, held, peak) = (handles[i % 3].clone(), held.clone(), peak.clone());
        let want = if i % 4 == 0 { 2 } else { 1 };
        tasks.push(actix_rt::spawn(async move {
            for _ in 0..5 {
                let g = h
                    .acquire_within(want, Duration::from_secs(60))
                    .await
                    .expect("acquired");
                let now = held.fetch_add(u64::from(want), Ordering::SeqCst) + u64::from(want);
                peak.fetch_max(now, Ordering::SeqCst);
                actix_rt::time::sleep(Duration::from_millis(2)).await;
                held.fetch_sub(u64::from(want), Ordering::SeqCst);
                g.release().await.expect("released");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "{peak} permits held at once out of 3");
    assert!(peak >= 2, "never any contention (peak {peak})");
    assert_eq!(handles[0].available().await.expect("read"), 3);
}

/// A waiter in another manager gets the permit right after the release, long
/// before its fallback timer (30 s): the release message woke it.
#[actix_rt::test]
async fn a_waiter_is_woken_by_the_release_message() {
    let server = RedisServer::start();
    let a = manager(&server, |c| c).await;
    let b = manager(&server, |c| c.max_retry_interval(Duration::from_secs(30))).await;
    let sa = a.semaphore("one").await.expect("handle");
    let sb = b.semaphore("one").await.expect("handle");
    sa.try_set_permits(1).await.expect("set");
    let g = sa.acquire(1).await.expect("taken");
    let waiting = actix_rt::spawn(async move {
        let got = sb.acquire_within(1, Duration::from_secs(20)).await;
        (Instant::now(), got)
    });
    assert!(
        subscribers(&server, "redisson_sc:{one}", 1).await,
        "waiter never subscribed"
    );
    let released = Instant::now();
    g.release().await.expect("released");
    let (at, got) = waiting.await.expect("task");
    got.expect("acquired").release().await.expect("released");
    assert!(
        at - released < Duration::from_secs(5),
        "woke after {:?}",
        at - released
    );
}

/// In one process a waiter for two permits at the head is not overtaken by a
/// later waiter for one, nor by a try-once call: a single freed permit stays free
/// until the second one frees too, then the big waiter gets both.
#[actix_rt::test]
async fn a_big_waiter_is_not_overtaken_by_small_ones() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = m.semaphore("pool").await.expect("handle");
    s.try_set_permits(2).await.expect("set");
    let mut both = s.acquire(2).await.expect("taken");
    let big = {
        let s = s.clone();
        actix_rt::spawn(async move { s.acquire_within(2, Duration::from_secs(30)).await })
    };
    assert!(subscribers(&server, "redisson_sc:{pool}", 1).await);
    let small = {
        let s = s.clone();
        actix_rt::spawn(async move { s.acquire_within(1, Duration::from_secs(30)).await })
    };
    actix_rt::time::sleep(Duration::from_millis(50)).await;
    both.release_some(1).await.expect("one back");
    assert!(
        s.try_acquire(1).await.expect("asked").is_none(),
        "try-once jumped the queue"
    );
    actix_rt::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !small.is_finished(),
        "the small waiter overtook the big one"
    );
    assert_eq!(
        s.available().await.expect("read"),
        1,
        "the freed permit was taken"
    );
    both.release().await.expect("rest back");
    let big = big.await.expect("task").expect("big waiter served");
    assert_eq!(big.permits(), 2);
    assert!(!small.is_finished());
    big.release().await.expect("released");
    small
        .await
        .expect("task")
        .expect("small waiter served")
        .release()
        .await
        .expect("released");
}

/// Twenty local waiters behind one held permit cost about one script call per
/// acquisition, not one per waiter per release: only the head asks Redis.
#[actix_rt::test]
async fn local_waiters_do_not_stampede_redis() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c.max_retry_interval(Duration::from_secs(30))).await;
    let s = m.semaphore("narrow").await.expect("handle");
    s.try_set_permits(1).await.expect("set");
    let g = s.acquire(1).await.expect("taken");
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let s = s.clone();
        tasks.push(actix_rt::spawn(async move {
            let g = s
                .acquire_within(1, Duration::from_secs(60))
                .await
                .expect("taken");
            g.release().await.expect("released");
        }));
    }
    assert!(subscribers(&server, "redisson_sc:{narrow}", 1).await);
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    let before = server.commandstats();
    g.release().await.expect("released");
    for t in tasks {
        t.await.expect("task");
    }
    let after = server.commandstats();
    let calls = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
    let scripts = calls("evalsha") + calls("eval");
    // 20 takes and 21 gives; a wake racing an attempt may add one retry each.
    assert!(scripts <= 70, "{scripts} script calls for 20 acquisitions");
}

/// A guard dropped without release gives its permits back in the background.
#[actix_rt::test]
async fn a_dropped_guard_gives_its_permits_back() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = m.semaphore("drop").await.expect("handle");
    s.try_set_permits(4).await.expect("set");
    let g = s.acquire(3).await.expect("taken");
    assert_eq!(s.available().await.expect("read"), 1);
    drop(g);
    let back = eventually(Duration::from_secs(10), || {
        raw::<String>(&server, &["GET", "drop"]) == "4"
    })
    .await;
    assert!(back, "permits never came back");
}

/// Releases their caller gives up on after the first poll still give the
/// permits back, exactly once: actix drops, unhandled, a message whose sender
/// stopped waiting, so such a release gave nothing back (and the guard had
/// already counted the permits out).
#[actix_rt::test]
async fn a_release_given_up_after_its_first_poll_still_gives_back() {
    use futures::FutureExt;
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = m.semaphore("abandoned").await.expect("handle");
    s.try_set_permits(4).await.expect("set");
    let mut g = s.acquire(3).await.expect("taken");
    assert!(
        g.release_some(1).now_or_never().is_none(),
        "answered at once"
    );
    assert_eq!(g.permits(), 2, "the permit given back is counted out");
    assert!(g.release().now_or_never().is_none(), "answered at once");
    let back = eventually(Duration::from_secs(10), || {
        raw::<String>(&server, &["GET", "abandoned"]) == "4"
    })
    .await;
    assert!(
        back,
        "permits never all came back: {}",
        raw::<String>(&server, &["GET", "abandoned"])
    );
    // Nothing was given twice: a new guard takes all four, and no more.
    let all = s.acquire(4).await.expect("all four");
    assert!(s.try_acquire(1).await.expect("asked").is_none(), "a fifth");
    all.release().await.expect("released");
}

/// Redisson's layout: the permits in a string at the bare name, a release
/// publishes the new number on `redisson_sc:{name}`, drain zeroes the key; a
/// Java-style client that takes with DECRBY and gives back with INCRBY + PUBLISH
/// is seen and wakes lockwarden's waiter.
#[actix_rt::test]
async fn permits_follow_the_redisson_layout() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c.max_retry_interval(Duration::from_secs(30))).await;
    let s = m.semaphore("{t}:api").await.expect("handle");
    let messages = listen(&server, "redisson_sc:{t}:api");
    assert!(subscribers(&server, "redisson_sc:{t}:api", 1).await);
    assert!(s.try_set_permits(2).await.expect("set"));
    assert_eq!(raw::<String>(&server, &["TYPE", "{t}:api"]), "string");
    assert_eq!(raw::<String>(&server, &["GET", "{t}:api"]), "2");
    assert_eq!(
        messages
            .recv_timeout(Duration::from_secs(5))
            .expect("set message"),
        "2"
    );
    let g = s.acquire(2).await.expect("taken");
    assert_eq!(raw::<String>(&server, &["GET", "{t}:api"]), "0");
    g.release().await.expect("released");
    assert_eq!(
        messages
            .recv_timeout(Duration::from_secs(5))
            .expect("release message"),
        "2"
    );
    assert_eq!(s.drain().await.expect("drained"), 2);
    assert_eq!(raw::<String>(&server, &["GET", "{t}:api"]), "0");

    // A waiter here, a "Java" release there.
    let waiter = {
        let s = s.clone();
        actix_rt::spawn(async move { s.acquire_within(1, Duration::from_secs(20)).await })
    };
    assert!(subscribers(&server, "redisson_sc:{t}:api", 2).await);
    let _: i64 = raw(&server, &["INCRBY", "{t}:api", "1"]);
    let _: i64 = raw(&server, &["PUBLISH", "redisson_sc:{t}:api", "1"]);
    let started = Instant::now();
    waiter
        .await
        .expect("task")
        .expect("woken")
        .release()
        .await
        .expect("released");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Whether `r` is the bad-amount error.
fn amount<T>(r: Result<T, LockError>) -> bool {
    matches!(r, Err(LockError::InvalidAmount { .. }))
}

/// Bad amounts and names get typed errors and leave Redis empty; an addition
/// that would pass the most a semaphore holds changes nothing.
#[actix_rt::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let s = m.semaphore("bad").await.expect("handle");
    assert!(amount(s.try_set_permits(3_000_000_000).await));
    assert!(amount(s.add_permits(0).await));
    assert!(amount(s.release(0).await));
    assert!(amount(s.acquire(0).await.map(|_| ())));
    assert!(amount(s.try_acquire(0).await.map(|_| ())));
    assert!(matches!(
        m.semaphore("}x").await,
        Err(LockError::InvalidName(NameError::CrossSlot))
    ));
    // Every manager keeps its registry entry (who holds what); nothing else.
    assert_eq!(
        support::data_key_count(&server),
        0,
        "bad input wrote something"
    );

    s.try_set_permits(2).await.expect("set");
    let mut g = s.acquire(2).await.expect("taken");
    assert!(
        amount(g.release_some(3).await),
        "gave back more than it took"
    );
    assert!(amount(g.release_some(0).await));
    assert_eq!(g.permits(), 2);
    assert_eq!(s.available().await.expect("read"), 0);
    g.release().await.expect("released");

    s.add_permits(2_147_483_640).await.expect("near the top");
    assert!(amount(s.add_permits(100).await), "overflow accepted");
    assert_eq!(raw::<String>(&server, &["GET", "bad"]), "2147483642");
}

/// A semaphore lockwarden makes (by `try_set_permits`, or by `add_permits` to no
/// key) carries its kind label, `lockwarden_kind:{<name>}`, so operators can tell
/// it from a latch; one Redisson made gets none (lockwarden did not make it) and
/// reads as a counter until something waits on it, then as a semaphore.
#[actix_rt::test]
async fn a_semaphore_lockwarden_makes_is_labelled_with_its_kind() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let set = m.semaphore("made:set").await.expect("handle");
    assert!(set.try_set_permits(0).await.expect("set"));
    let added = m.semaphore("made:added").await.expect("handle");
    assert_eq!(added.add_permits(2).await.expect("added"), 2);
    let _: () = raw(&server, &["SET", "java", "1"]);
    let java = m.semaphore("java").await.expect("handle");
    assert_eq!(java.add_permits(1).await.expect("added"), 2);
    for (label, kind) in [
        ("lockwarden_kind:{made:set}", Some("semaphore")),
        ("lockwarden_kind:{made:added}", Some("semaphore")),
        ("lockwarden_kind:{java}", None),
    ] {
        assert_eq!(
            raw::<Option<String>>(&server, &["GET", label]).as_deref(),
            kind,
            "{label}"
        );
    }

    let admin = Admin::connect(&support::config(&server))
        .await
        .expect("admin");
    let kind_of = |name: &'static str| {
        let admin = admin.clone();
        async move {
            let s = admin
                .synchronizer(name)
                .await
                .expect("read")
                .expect("there");
            (s.kind, s.labelled, s.value, s.waiting)
        }
    };
    assert_eq!(
        kind_of("made:set").await,
        (SynchronizerKind::Semaphore, true, 0, 0)
    );
    assert_eq!(
        kind_of("java").await,
        (SynchronizerKind::Counter, false, 2, 0)
    );
    // A waiter for more than there is: its manager listens on the channel.
    let waiter =
        actix_rt::spawn(async move { java.acquire_within(3, Duration::from_secs(30)).await });
    let mut seen = (SynchronizerKind::Counter, false, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.0 != SynchronizerKind::Semaphore && Instant::now() < deadline {
        seen = kind_of("java").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, (SynchronizerKind::Semaphore, false, 2, 1));
    let listed: Vec<String> = admin
        .synchronizers("*")
        .await
        .expect("listed")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(listed, ["java", "made:added", "made:set"]);
    // A Java client gives a permit back: the waiter gets its three.
    let _: () = raw(&server, &["INCRBY", "java", "1"]);
    let _: i64 = raw(&server, &["PUBLISH", "redisson_sc:{java}", "3"]);
    waiter
        .await
        .expect("task")
        .expect("granted")
        .release()
        .await
        .expect("released");
}

/// Issue 38: a semaphore key deleted under a waiter (no release will ever come)
/// is logged at warn at the waiter's next retry (`max_retry_interval`, here
/// 300 ms); permits added let it in.
#[actix_rt::test]
async fn a_key_deleted_under_a_waiter_is_logged_at_its_next_retry() {
    let (log, _logging) = support::Captured::install();
    let server = RedisServer::start();
    let m = manager(&server, |c| {
        c.max_retry_interval(Duration::from_millis(300))
    })
    .await;
    let sem = m.semaphore("sem:deleted").await.expect("handle");
    assert!(sem.try_set_permits(1).await.expect("set"));
    let held = sem.acquire(1).await.expect("the only permit");
    let waiter = actix_rt::spawn({
        let sem = sem.clone();
        async move { sem.acquire(1).await }
    });
    assert!(subscribers(&server, "redisson_sc:{sem:deleted}", 1).await);
    const WARNING: &str = "waiting on a semaphore whose key does not exist";
    let _: i64 = raw(&server, &["DEL", "sem:deleted"]);
    let deleted = Instant::now();
    assert!(
        eventually(Duration::from_secs(5), || log.text().contains(WARNING)).await,
        "no warning; log:\n{}",
        log.text()
    );
    let to_warn = deleted.elapsed();
    eprintln!("warned {to_warn:?} after the DEL");
    assert!(to_warn < Duration::from_secs(1), "{to_warn:?}");
    assert_eq!(sem.add_permits(1).await.expect("added"), 1);
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("let in")
        .expect("task")
        .expect("a permit");
    drop((got, held));
}
