//! A service on plain tokio (`#[tokio::main]`, no actix system) can start a lock
//! manager and use it: the manager runs its actors on an actix system of its own.

use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, LockError, LockManager, ReleaseOutcome};
use support::{config, RedisServer};

/// Acquire, contend and release through a manager started from a tokio runtime.
async fn locks_work(redis: &RedisServer) {
    let m = LockManager::start(config(redis))
        .await
        .unwrap_or_else(|e| panic!("start from tokio: {e}\n{}", redis.log()));
    let first = m
        .send(Acquire::new("t").wait(Duration::from_secs(5)))
        .await
        .expect("manager running")
        .expect("acquired");
    let busy = m
        .send(Acquire::new("t").wait(Duration::ZERO))
        .await
        .expect("manager running");
    assert!(matches!(busy, Err(LockError::Timeout { .. })), "{busy:?}");
    // A waiter on another task is woken by the release.
    let waiter = tokio::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("t").wait(Duration::from_secs(10)))
                .await
        }
    });
    let first_token = first.fencing_token();
    assert_eq!(
        first.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let second = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken within the bound")
        .expect("task")
        .expect("manager running")
        .expect("acquired after the release");
    assert!(second.fencing_token() > first_token);
    assert_eq!(
        second.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// `#[tokio::main]`'s default: one thread.
#[tokio::test]
async fn a_manager_started_on_a_current_thread_tokio_runtime_works() {
    let redis = RedisServer::start();
    locks_work(&redis).await;
}

/// A multi-threaded tokio runtime: guards and addresses move between threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_started_on_a_multi_thread_tokio_runtime_works() {
    let redis = RedisServer::start();
    locks_work(&redis).await;
}

/// Bad configuration is still refused with its typed error, not a panic.
#[tokio::test]
async fn a_bad_config_is_refused_from_tokio_too() {
    let redis = RedisServer::start();
    let bad = config(&redis).max_name_len(0);
    let err = LockManager::start(bad).await.expect_err("refused");
    assert!(matches!(err, LockError::InvalidConfig(_)), "{err:?}");
}
