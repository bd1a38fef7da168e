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
