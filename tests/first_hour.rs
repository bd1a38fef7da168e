//! What a new user meets in their first hour: the documented settings are the
//! bounds they say they are.

mod support;

use std::time::{Duration, Instant};

use lockwarden::{Config, LockError, LockManager};
use support::free_port;

/// Starting against a port where nothing listens fails within the configured
/// connection timeout (plus scheduling slack), not after a round of reconnects.
#[actix_rt::test]
async fn start_against_a_closed_port_fails_within_the_connection_timeout() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let timeout = Duration::from_millis(300);
    let config = Config::from_url(&url)
        .expect("URL")
        .connection_timeout(timeout);
    let began = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("nothing listens there");
    let took = began.elapsed();
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    assert!(
        took < timeout + Duration::from_millis(700),
        "start took {took:?} with a connection timeout of {timeout:?}"
    );
}

/// With Redis frozen (no answer at all), a waiter whose deadline passes is told
/// that Redis did not answer, not that someone holds the lock (nobody does).
#[actix_rt::test]
async fn a_wait_that_ends_while_redis_does_not_answer_says_so() {
    let mut redis = support::RedisServer::start();
    let m = support::manager(&redis, |c| c).await;
    // Warm the connection and the scripts, then freeze the server.
    support::hold(&m, "warm", |a| a)
        .await
        .release()
        .await
        .expect("release");
    redis.pause();
    let wait = Duration::from_millis(500);
    let began = Instant::now();
    let res = m
        .send(lockwarden::Acquire::new("nobody-holds-this").wait(wait))
        .await
        .expect("manager running");
    let took = began.elapsed();
    redis.resume();
    let err = res.expect_err("Redis is frozen");
    assert!(
        !matches!(err, LockError::Timeout { .. }),
        "told the lock is held elsewhere: {err}"
    );
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("did not answer"), "{err}");
    assert!(
        took < wait + Duration::from_millis(500),
        "answered after {took:?}"
    );
}
