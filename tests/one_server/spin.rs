//! The spin lock (Redisson's `getSpinLock`): waiters that ask Redis again after a
//! growing delay instead of listening for the unlock message, on the exclusive
//! lock's key. The behaviour scenarios live in `tests/scenarios/spin.rs` (and run
//! on a cluster from `tests/topologies/on_cluster.rs`); the backoff's pacing and its checks
//! are here.

#[path = "../scenarios/spin.rs"]
mod scenarios;
use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockError};

use support::{raw, RedisServer};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

/// Acquisition attempts the server has run so far: each runs PTTL once, first
/// (`lua/acquire.lua`), and nothing else in these tests does (the manager's
/// registry writes are scripts too, so script calls would overcount).
fn attempts(server: &RedisServer) -> u64 {
    server.commandstats().get("pttl").copied().unwrap_or(0)
}

/// With a constant 200 ms backoff, a spin waiter's attempts are at least that far
/// apart (less the backoff's jitter of up to a quarter): five attempts take at
/// least four delays. A lower bound only, so a slow machine cannot fail it.
#[actix_rt::test]
async fn the_backoff_paces_the_attempts() {
    let server = RedisServer::start();
    let _: i64 = raw(&server, &["HSET", "paced", "java-client:1", "1"]);
    let _: i64 = raw(&server, &["PEXPIRE", "paced", "60000"]);
    let delay = Duration::from_millis(200);
    let m = support::manager(&server, |c| c.spin_backoff(delay, delay)).await;
    let before = attempts(&server);
    let began = Instant::now();
    let waiting = actix_rt::spawn(async move {
        m.send(Acquire::new("paced").spin().wait(Duration::from_secs(30)))
            .await
            .expect("running")
    });
    let fifth =
        support::eventually(Duration::from_secs(20), || attempts(&server) >= before + 5).await;
    let took = began.elapsed();
    assert!(fifth, "five attempts never happened");
    assert!(
        took >= delay.mul_f64(0.75) * 4,
        "five attempts in {took:?}: under four backoff delays"
    );
    let _: i64 = raw(&server, &["DEL", "paced"]);
    let guard = waiting.await.expect("task").expect("acquired");
    guard.release().await.expect("released");
}

/// A spin backoff that cannot work is refused before anything connects, with
/// the reason: a first delay under 1 ms, or a longest one under the first.
#[test]
fn a_bad_spin_backoff_is_refused() {
    let config = Config::from_url("redis://127.0.0.1:1").expect("url");
    let cases = [
        (
            Duration::ZERO,
            Duration::from_millis(10),
            "first spin delay",
        ),
        (
            Duration::from_millis(50),
            Duration::from_millis(10),
            "longest spin delay",
        ),
    ];
    for (first, longest, says) in cases {
        match config.clone().spin_backoff(first, longest).validate() {
            Err(LockError::InvalidConfig(why)) => {
                assert!(why.contains(says), "{first:?}..{longest:?}: {why}")
            }
            other => panic!("{first:?}..{longest:?} accepted: {other:?}"),
        }
    }
    assert!(config
        .spin_backoff(Duration::from_millis(64), Duration::from_millis(64))
        .validate()
        .is_ok());
}
