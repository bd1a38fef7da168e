//! The fair lock: waiters are served in the order they first queued, across
//! managers (as across processes); a waiter that dies stops holding up the queue
//! within the configured place lease; one that gives up leaves the queue; and the
//! Redis layout is Redisson's (queue list, deadline zset, one channel per waiter).

mod support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::Addr;
use lockwarden::{
    Acquire, AcquireKind, ForceUnlock, LockError, LockManager, Owner, ReleaseOutcome,
};
use support::{eventually, hold, manager, raw, RedisServer};

const QUEUE: &str = "redisson_lock_queue:{f}";
const TIMEOUTS: &str = "redisson_lock_timeout:{f}";

/// The owner fields in the fair queue of lock `f`, head first.
fn queue(server: &RedisServer) -> Vec<String> {
    raw(server, &["LRANGE", QUEUE, "0", "-1"])
}

/// The owner fields in the deadline zset of lock `f`.
fn deadlines(server: &RedisServer) -> Vec<(String, i64)> {
    raw(server, &["ZRANGE", TIMEOUTS, "0", "-1", "WITHSCORES"])
}

/// The Redis server's clock in milliseconds.
fn server_ms(server: &RedisServer) -> i64 {
    let (s, us): (i64, i64) = raw(server, &["TIME"]);
    s * 1000 + us / 1000
}

/// Starts a fair acquisition of `f` by `owner` in the background.
fn queue_up(
    m: &Addr<LockManager>,
    owner: Owner,
) -> actix_rt::task::JoinHandle<Result<lockwarden::LockGuard, LockError>> {
    let m = m.clone();
    actix_rt::spawn(async move {
        m.send(
            Acquire::new("f")
                .fair()
                .owner(owner)
                .wait(Duration::from_secs(20)),
        )
        .await
        .expect("manager running")
    })
}

/// Waits until the queue of `f` holds `n` waiters.
async fn wait_queued(server: &RedisServer, n: usize) {
    let ok = eventually(Duration::from_secs(5), || queue(server).len() == n).await;
    assert!(ok, "queue never reached {n}: {:?}", queue(server));
}

/// Six waiters over three managers, queued in a known interleaved order (two per
/// manager), acquire in exactly that order, one at a time.
#[actix_rt::test]
async fn waiters_from_three_managers_acquire_in_queue_order() {
    let server = RedisServer::start();
    let holder = manager(&server, |c| c).await;
    let ms = [
        manager(&server, |c| c).await,
        manager(&server, |c| c).await,
        manager(&server, |c| c).await,
    ];
    let first = hold(&holder, "f", |a| a.fair()).await;
    assert_eq!(first.kind(), AcquireKind::Fair);

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut owners = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let owner = Owner::new();
        owners.push(owner);
        let waiting = queue_up(&ms[i % 3], owner);
        wait_queued(&server, i + 1).await;
        let order = order.clone();
        tasks.push(actix_rt::spawn(async move {
            let guard = waiting.await.expect("task").expect("acquired");
            order.lock().expect("not poisoned").push(guard.owner());
            actix_rt::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("released");
        }));
    }
    let queued = queue(&server);
    for (field, owner) in queued.iter().zip(&owners) {
        assert!(
            field.ends_with(&format!(":{}", owner.id())),
            "queue out of order: {queued:?}"
        );
    }
    let info = holder
        .send(lockwarden::Inspect::new("f"))
        .await
        .expect("running")
        .expect("inspect");
    let fields: Vec<String> = info.queue.iter().map(|w| w.owner_field.clone()).collect();
    assert_eq!(fields, queued, "Inspect shows the queue, head first");
    for w in &info.queue {
        let left = w.expires_in.expect("every queued waiter has a deadline");
        assert!(
            left > Duration::ZERO,
            "a live waiter's place has lapsed: {w:?}"
        );
    }
    assert_eq!(info.kind, Some(lockwarden::LockKind::Exclusive));

    first.release().await.expect("released");
    for t in tasks {
        t.await.expect("task did not panic");
    }
    assert_eq!(*order.lock().expect("not poisoned"), owners);
    assert!(queue(&server).is_empty() && deadlines(&server).is_empty());
}

/// A queued waiter whose whole runtime dies (as a crashed process would) is
/// skipped once its place lapses (600 ms, refreshed every 200 ms while alive), not
/// after the holder's 30 s lease or Redisson's 5 minutes: the waiter behind it gets
/// the lock right after.
#[actix_rt::test]
async fn a_dead_waiter_is_skipped_within_the_place_lease() {
    let server = RedisServer::start();
    let place = Duration::from_millis(600);
    let holder = manager(&server, |c| c).await;
    let first = hold(&holder, "f", |a| a.fair()).await;

    let url = server.url();
    let (queued_tx, queued_rx) = std::sync::mpsc::channel();
    let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
    let dead = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let config = lockwarden::Config::from_url(&url)
                .expect("url")
                .fair_waiter_lease(place);
            let m = LockManager::start(config).await.expect("start");
            let _waiting = queue_up(&m, Owner::new());
            queued_tx.send(()).expect("test is listening");
            // No cancel, no leave: the runtime just goes away with it queued.
            let _ = crash_rx.await;
        });
    });
    queued_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("dead waiter started");
    wait_queued(&server, 1).await;
    // Kept while its runtime lives, across several place leases:
    actix_rt::time::sleep(place * 2).await;
    assert_eq!(
        queue(&server).len(),
        1,
        "a live waiter's place must be kept"
    );

    let live = manager(&server, |c| c.fair_waiter_lease(place)).await;
    let waiting = queue_up(&live, Owner::new());
    wait_queued(&server, 2).await;
    let dead_field = queue(&server)[0].clone();

    crash_tx.send(()).expect("dead waiter waiting");
    dead.join().expect("dead waiter thread");
    let died = Instant::now();
    first.release().await.expect("released");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("served long before the holder's lease")
        .expect("task")
        .expect("acquired");
    let took = died.elapsed();
    assert!(
        took <= place + Duration::from_millis(500),
        "dead waiter skipped after {took:?}"
    );
    assert!(!queue(&server).contains(&dead_field));
    assert!(deadlines(&server).iter().all(|(f, _)| *f != dead_field));
    guard.release().await.expect("released");
}

/// A waiter whose deadline passes, and one whose caller goes away, both leave the
/// queue and the deadline zset; the holder is untouched.
#[actix_rt::test]
async fn waiters_that_give_up_leave_the_queue() {
    let server = RedisServer::start();
    let holder = manager(&server, |c| c).await;
    let m = manager(&server, |c| c).await;
    let first = hold(&holder, "f", |a| a.fair()).await;

    let timing_out = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("f").fair().wait(Duration::from_millis(500)))
                .await
                .expect("running")
        }
    });
    wait_queued(&server, 1).await;
    let dropped = queue_up(&m, Owner::new());
    wait_queued(&server, 2).await;
    assert_eq!(deadlines(&server).len(), 2);

    dropped.abort();
    let left = eventually(Duration::from_secs(2), || queue(&server).len() == 1).await;
    assert!(
        left,
        "the dropped waiter is still queued: {:?}",
        queue(&server)
    );
    let res = timing_out.await.expect("task");
    assert!(matches!(res, Err(LockError::Timeout { .. })), "{res:?}");
    let left = eventually(Duration::from_secs(2), || {
        queue(&server).is_empty() && deadlines(&server).is_empty()
    })
    .await;
    assert!(
        left,
        "queue {:?}, deadlines {:?}",
        queue(&server),
        deadlines(&server)
    );
    let count: String = raw(&server, &["HGET", "f", first.owner_field()]);
    assert_eq!(count, "1");
}

/// The layout is Redisson's: the hash at the name, the queue and deadline keys
/// under the name's hash tag with deadlines on the server's clock, and a waiter's
/// own channel `redisson_lock__channel:{f}:<owner field>`, on which a foreign
/// holder's Redisson-style unlock (DEL + PUBLISH to the head) wakes it at once.
#[actix_rt::test]
async fn keys_and_channels_match_the_protocol() {
    let server = RedisServer::start();
    let place = Duration::from_secs(3);
    let java_field = "6f1c2a3e-0000-4000-8000-000000000001:57";
    let _: i64 = raw(&server, &["HSET", "f", java_field, "1"]);
    let _: i64 = raw(&server, &["PEXPIRE", "f", "30000"]);
    let m = manager(&server, |c| {
        c.fair_waiter_lease(place)
            .max_retry_interval(Duration::from_secs(30))
    })
    .await;
    let owner = Owner::new();
    let waiting = queue_up(&m, owner);
    wait_queued(&server, 1).await;

    let field = queue(&server)[0].clone();
    assert!(field.ends_with(&format!(":{}", owner.id())), "{field}");
    let (score, now) = (deadlines(&server)[0].1, server_ms(&server));
    assert!(
        score > now && score <= now + place.as_millis() as i64,
        "deadline {score} is not within one place lease of the server's {now}"
    );
    let channel = format!("redisson_lock__channel:{{f}}:{field}");
    let subscribed = eventually(Duration::from_secs(5), || {
        let n: Vec<(String, i64)> = raw(&server, &["PUBSUB", "NUMSUB", &channel]);
        n.first().is_some_and(|(_, c)| *c == 1)
    })
    .await;
    assert!(subscribed, "the waiter never subscribed to {channel}");

    let start = Instant::now();
    let _: i64 = raw(&server, &["DEL", "f"]);
    let _: i64 = raw(&server, &["PUBLISH", &channel, "0"]);
    let guard = waiting.await.expect("task").expect("acquired");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "woke after {:?}",
        start.elapsed()
    );
    assert_eq!(guard.owner_field(), field);
    let count: String = raw(&server, &["HGET", "f", &field]);
    assert_eq!(count, "1");
    let token: u64 = raw(&server, &["GET", "redisson_lock_token:{f}"]);
    assert_eq!(token, guard.fencing_token());
    assert!(queue(&server).is_empty() && deadlines(&server).is_empty());

    // Our release tells the new head on its own channel, and nobody else.
    let next = Owner::new();
    let other = manager(&server, |c| c).await;
    let behind = queue_up(&other, next);
    wait_queued(&server, 1).await;
    let next_field = queue(&server)[0].clone();
    let client = redis::Client::open(server.url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .psubscribe("redisson_lock__channel:{f}*")
        .await
        .expect("psubscribe");
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let msg = tokio::time::timeout(
        Duration::from_secs(2),
        futures::StreamExt::next(&mut pubsub.on_message()),
    )
    .await
    .expect("message within 2 s")
    .expect("stream open");
    assert_eq!(
        msg.get_channel_name(),
        format!("redisson_lock__channel:{{f}}:{next_field}")
    );
    assert_eq!(msg.get_payload::<String>().expect("text"), "0");
    behind
        .await
        .expect("task")
        .expect("acquired")
        .release()
        .await
        .expect("released");
}

/// A force unlock wakes the waiter at the head of the queue at once (its fallback
/// poll is 30 s); re-entry by the holder does not queue; a try-once waiter is
/// answered at once and takes no place.
#[actix_rt::test]
async fn force_unlock_wakes_the_head_and_reentry_and_try_once_do_not_queue() {
    let server = RedisServer::start();
    let holder = manager(&server, |c| c).await;
    let m = manager(&server, |c| c.max_retry_interval(Duration::from_secs(30))).await;
    let owner = Owner::new();
    let first = hold(&holder, "f", |a| a.fair().owner(owner)).await;
    let again = hold(&holder, "f", |a| a.fair().owner(owner)).await;
    let count: String = raw(&server, &["HGET", "f", first.owner_field()]);
    assert_eq!(count, "2");
    let handle = m
        .send(lockwarden::Handle::new("f").fair())
        .await
        .expect("running")
        .expect("valid name");
    assert_eq!(handle.kind(), AcquireKind::Fair);
    let once = handle.try_acquire().await.expect("no error");
    assert!(once.is_none(), "the lock is held");
    assert!(queue(&server).is_empty(), "a try-once waiter took a place");

    let waiting = queue_up(&m, Owner::new());
    wait_queued(&server, 1).await;
    let channel = format!("redisson_lock__channel:{{f}}:{}", queue(&server)[0]);
    let subscribed = eventually(Duration::from_secs(5), || {
        let n: Vec<(String, i64)> = raw(&server, &["PUBSUB", "NUMSUB", &channel]);
        n.first().is_some_and(|(_, c)| *c == 1)
    })
    .await;
    assert!(subscribed);
    let start = Instant::now();
    let deleted = m
        .send(ForceUnlock::new("f"))
        .await
        .expect("running")
        .expect("force unlock");
    assert!(deleted);
    let guard = waiting.await.expect("task").expect("acquired");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "woke after {:?}",
        start.elapsed()
    );
    guard.release().await.expect("released");
    drop((first, again));
}

/// Three managers with four tasks each, five rounds per task on the fair lock:
/// never two holders inside at once (checked in this process and in Redis), tokens
/// strictly increasing, and the queue empty at the end.
#[actix_rt::test]
async fn fair_lock_excludes_under_contention() {
    let server = RedisServer::start();
    let managers = [
        manager(&server, |c| c).await,
        manager(&server, |c| c).await,
        manager(&server, |c| c).await,
    ];
    let inside = Arc::new(AtomicI64::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let redis = redis::Client::open(server.url()).expect("url");
    let mut tasks = Vec::new();
    for m in &managers {
        for _ in 0..4 {
            let (m, inside, tokens, redis) =
                (m.clone(), inside.clone(), tokens.clone(), redis.clone());
            tasks.push(actix_rt::spawn(async move {
                let mut conn = redis
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                for _ in 0..5 {
                    let guard = m
                        .send(Acquire::new("f").fair().wait(Duration::from_secs(30)))
                        .await
                        .expect("running")
                        .expect("acquired");
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two inside");
                    let in_redis: i64 = redis::cmd("INCR")
                        .arg("inside")
                        .query_async(&mut conn)
                        .await
                        .expect("incr");
                    assert_eq!(in_redis, 1, "two holders inside at once (seen in Redis)");
                    tokens
                        .lock()
                        .expect("not poisoned")
                        .push(guard.fencing_token());
                    actix_rt::time::sleep(Duration::from_millis(1)).await;
                    let _: i64 = redis::cmd("DECR")
                        .arg("inside")
                        .query_async(&mut conn)
                        .await
                        .expect("decr");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.expect("released");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task did not panic");
    }
    let tokens = tokens.lock().expect("not poisoned").clone();
    assert_eq!(tokens.len(), 60);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    let clean = eventually(Duration::from_secs(2), || {
        queue(&server).is_empty() && raw::<i64>(&server, &["EXISTS", "f"]) == 0
    })
    .await;
    assert!(clean, "queue {:?}", queue(&server));
}

/// Out of memory under `noeviction`, the fair lock's holder still renews and
/// releases (holds > 1 and the last one) and a queued waiter keeps its place
/// (refreshes and retries) and is served at its turn; only a new place is refused,
/// with Redis's OOM error.
#[actix_rt::test]
async fn a_full_redis_refuses_new_places_only() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let m = manager(&server, |c| c.watchdog_lease(lease)).await;
    let other = manager(&server, |c| c.fair_waiter_lease(lease)).await;
    let owner = Owner::new();
    let a = hold(&m, "f", |r| r.fair().owner(owner)).await;
    let b = hold(&m, "f", |r| r.fair().owner(owner)).await;
    let waiting = queue_up(&other, Owner::new());
    wait_queued(&server, 1).await;

    support::fill_until_oom(&server);
    let late = manager(&server, |c| c).await;
    let refused = late
        .send(Acquire::new("f").fair().wait(Duration::from_secs(1)))
        .await
        .expect("running");
    assert!(
        matches!(&refused, Err(LockError::Redis(e)) if e.to_string().contains("OOM")),
        "{refused:?}"
    );
    actix_rt::time::sleep(lease * 2).await;
    assert!(a.is_lost().is_none(), "renewal failed under OOM");
    assert_eq!(
        queue(&server).len(),
        1,
        "the waiter lost its place under OOM"
    );

    assert_eq!(
        a.release().await.expect("release under OOM"),
        ReleaseOutcome::StillHeld { holds: 1 }
    );
    assert_eq!(
        b.release().await.expect("last release under OOM"),
        ReleaseOutcome::Released
    );
    let g = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("served")
        .expect("task")
        .expect("acquired");
    g.release().await.expect("release under OOM");
}
