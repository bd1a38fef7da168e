//! Mutual exclusion and fencing: many tasks in two managers (as two processes would
//! be) contend for one lock; never two inside at once, and every holder's fencing
//! token is larger than the one before.

mod support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwarden::{Acquire, ReleaseOutcome};
use support::{manager, raw, RedisServer};

/// Two managers with 8 tasks each, 10 rounds per task: the critical section is
/// entered 160 times, by one task at a time, with strictly increasing tokens. The
/// overlap check runs both in this process and in Redis (INCR inside, DECR after),
/// so it would catch two holders whether or not they share memory.
#[actix_rt::test]
async fn two_managers_never_hold_the_same_lock_at_once() {
    let server = RedisServer::start();
    let managers = [manager(&server, |c| c).await, manager(&server, |c| c).await];
    let inside = Arc::new(AtomicI64::new(0));
    let max_inside = Arc::new(AtomicI64::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let redis = redis::Client::open(server.url()).expect("url");

    let mut tasks = Vec::new();
    for m in &managers {
        for _ in 0..8 {
            let manager = m.clone();
            let (inside, max_inside, tokens) = (inside.clone(), max_inside.clone(), tokens.clone());
            let redis = redis.clone();
            tasks.push(actix_rt::spawn(async move {
                let mut conn = redis
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                for _ in 0..10 {
                    let guard = manager
                        .send(Acquire::new("shared").wait(Duration::from_secs(30)))
                        .await
                        .expect("manager running")
                        .expect("acquired");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
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
                    assert_eq!(
                        guard.release().await.expect("released"),
                        ReleaseOutcome::Released
                    );
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("task did not panic");
    }
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two holders inside at once"
    );
    let tokens = tokens.lock().expect("not poisoned").clone();
    assert_eq!(tokens.len(), 160);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase in acquisition order: {tokens:?}"
    );
    let exists: i64 = raw(&server, &["EXISTS", "shared"]);
    assert_eq!(exists, 0, "the lock is free at the end");
}

/// Tokens keep increasing after Redis restarts empty: the counter is re-seeded from
/// the server clock, not from zero.
#[actix_rt::test]
async fn fencing_tokens_survive_a_redis_restart_with_no_data() {
    let mut server = RedisServer::start();
    let before = {
        let m = manager(&server, |c| c).await;
        let g = support::hold(&m, "fenced", |a| a).await;
        let t = g.fencing_token();
        g.release().await.expect("released");
        t
    };
    server.restart();
    let m = manager(&server, |c| c).await;
    let g = support::hold(&m, "fenced", |a| a).await;
    assert!(
        g.fencing_token() > before,
        "token went backwards after restart: {} <= {before}",
        g.fencing_token()
    );
}
