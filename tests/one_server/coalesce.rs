//! Coalescing: the exclusive lock's acquisitions and releases that are ready
//! together share one script call. It must cut the calls under load, cost nothing
//! when idle, and change nothing about who holds what.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwarden::{Acquire, LockManager, ReleaseOutcome};
use support::{hold, manager, raw, RedisServer};

/// Script calls (EVALSHA) Redis has run so far.
fn script_calls(server: &RedisServer) -> u64 {
    server.commandstats().get("evalsha").copied().unwrap_or(0)
}

/// `holders` tasks of one manager, each on a key of its own, acquire and release
/// `rounds` times; returns every task's fencing tokens in order.
async fn loop_on_own_keys(
    m: &actix::Addr<LockManager>,
    holders: usize,
    rounds: usize,
) -> Vec<Vec<u64>> {
    let tasks: Vec<_> = (0..holders)
        .map(|i| {
            let m = m.clone();
            actix_rt::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..rounds {
                    let g = hold(&m, &format!("own:{i}"), |a| a).await;
                    tokens.push(g.fencing_token());
                    assert_eq!(
                        g.release().await.expect("released"),
                        ReleaseOutcome::Released
                    );
                }
                tokens
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.expect("task did not panic"));
    }
    all
}

/// Acquire then release on an idle lock is still exactly two script calls: with
/// nothing in flight, a call leaves at once as its own script.
#[actix_rt::test]
async fn idle_acquire_and_release_cost_two_script_calls() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    // Loads the scripts.
    hold(&m, "idle", |a| a)
        .await
        .release()
        .await
        .expect("released");
    for _ in 0..5 {
        let before = server.commandstats();
        let g = hold(&m, "idle", |a| a).await;
        g.release().await.expect("released");
        let after = server.commandstats();
        let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
        assert_eq!(delta("evalsha"), 2, "{after:?}");
        assert_eq!(delta("hincrby"), 1, "the acquisition ran once");
        assert_eq!(delta("del"), 1, "the release ran once");
    }
}

/// 64 holders of one manager looping on keys of their own: the calls coalesce
/// (far fewer script calls than two per pair), every token increases, and every
/// lock ends released.
#[actix_rt::test]
async fn concurrent_holders_share_script_calls() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    // Loads both the plain and the batch scripts and starts the lock actors.
    loop_on_own_keys(&m, 64, 1).await;

    let (holders, rounds) = (64, 20);
    let before = script_calls(&server);
    let tokens = loop_on_own_keys(&m, holders, rounds).await;
    let per_pair = (script_calls(&server) - before) as f64 / (holders * rounds) as f64;
    eprintln!("script calls per acquire+release pair: {per_pair:.3}");
    assert!(
        per_pair < 0.6,
        "{per_pair:.3} script calls per pair: the calls did not coalesce"
    );
    for t in &tokens {
        assert_eq!(t.len(), rounds);
        assert!(t.windows(2).all(|w| w[0] < w[1]), "{t:?}");
    }
    let names: Vec<String> = (0..holders).map(|i| format!("own:{i}")).collect();
    let mut cmd = vec!["EXISTS"];
    cmd.extend(names.iter().map(String::as_str));
    let left: i64 = raw(&server, &cmd);
    assert_eq!(left, 0, "a lock was left held");
}

/// Many holders in two managers contend for a few shared locks while batching is
/// busy: never two inside one lock at once (checked here and in Redis), each lock's
/// tokens strictly increase in the order it was held, and all end free.
#[actix_rt::test]
async fn shared_locks_exclude_and_fence_while_calls_coalesce() {
    let server = RedisServer::start();
    let managers = [manager(&server, |c| c).await, manager(&server, |c| c).await];
    let keys = 6;
    let inside: Arc<Vec<AtomicI64>> = Arc::new((0..keys).map(|_| AtomicI64::new(0)).collect());
    let tokens = Arc::new(Mutex::new(HashMap::<usize, Vec<u64>>::new()));
    let redis = redis::Client::open(server.url()).expect("url");
    let before = script_calls(&server);

    let mut tasks = Vec::new();
    for task in 0..48 {
        let m = managers[task % 2].clone();
        let key = task % keys;
        let (inside, tokens, redis) = (inside.clone(), tokens.clone(), redis.clone());
        tasks.push(actix_rt::spawn(async move {
            let mut conn = redis
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            for _ in 0..6 {
                let g = m
                    .send(Acquire::new(format!("shared:{key}")).wait(Duration::from_secs(30)))
                    .await
                    .expect("manager running")
                    .expect("acquired");
                assert_eq!(
                    inside[key].fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders inside"
                );
                let in_redis: i64 = redis::cmd("INCR")
                    .arg(format!("inside:{key}"))
                    .query_async(&mut conn)
                    .await
                    .expect("incr");
                assert_eq!(in_redis, 1, "two holders inside at once (seen in Redis)");
                tokens
                    .lock()
                    .expect("not poisoned")
                    .entry(key)
                    .or_default()
                    .push(g.fencing_token());
                let _: i64 = redis::cmd("DECR")
                    .arg(format!("inside:{key}"))
                    .query_async(&mut conn)
                    .await
                    .expect("decr");
                inside[key].fetch_sub(1, Ordering::SeqCst);
                assert_eq!(
                    g.release().await.expect("released"),
                    ReleaseOutcome::Released
                );
            }
        }));
    }
    for t in tasks {
        t.await.expect("task did not panic");
    }
    let tokens = tokens.lock().expect("not poisoned").clone();
    for (key, t) in &tokens {
        assert_eq!(t.len(), 48, "lock {key}");
        assert!(
            t.windows(2).all(|w| w[0] < w[1]),
            "lock {key}: tokens must strictly increase in the order held: {t:?}"
        );
    }
    for key in 0..keys {
        let exists: i64 = raw(&server, &["EXISTS", &format!("shared:{key}")]);
        assert_eq!(exists, 0, "lock {key} is free at the end");
    }
    let calls = script_calls(&server) - before;
    eprintln!("{calls} script calls for {} acquisitions", 48 * 6);
}
