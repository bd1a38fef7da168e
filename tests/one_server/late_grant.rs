//! A grant whose request waited in Redis (`CLIENT PAUSE`), and leases too short to
//! work.
//!
//! The holder counts a lease from when it *sent* the request, so that it never
//! believes in a lock longer than Redis keeps it. When the request sat in Redis for
//! most of the lease, that count runs out soon after the grant while Redis still
//! keeps the lock for a whole lease. The watchdog used to declare such a lock lost
//! without asking Redis; it now tries a renewal first.

use crate::support;

use std::time::Duration;

use lockwarden::{Config, LockError, LockManager};
use support::{eventually, hold, manager, raw, RedisServer};

/// The grant waited 900 ms of a 1000 ms lease in a CLIENT PAUSE: the lock is
/// renewed, not declared lost.
#[actix_rt::test]
async fn a_grant_delayed_by_client_pause_is_renewed_not_lost() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c.watchdog_lease(Duration::from_millis(1000))).await;
    let _: () = raw(&server, &["CLIENT", "PAUSE", "900", "WRITE"]);
    let g = hold(&m, "late", |a| a).await;
    let pttl: i64 = raw(&server, &["PTTL", "late"]);
    assert!(pttl > 500, "Redis counts the lease from the grant: {pttl}");

    // A renewal shows as the TTL going back up.
    let mut last = pttl;
    let renewed = eventually(Duration::from_secs(3), || {
        let now: i64 = raw(&server, &["PTTL", "late"]);
        let up = now > last + 100;
        last = now;
        up || g.is_lost().is_some()
    })
    .await;
    assert!(renewed, "no renewal within 3 s");
    assert_eq!(g.is_lost(), None, "declared lost without asking Redis");
    g.release().await.expect("released");
}

/// A watchdog lease too short for any renewal to answer is refused at start, with
/// the reason, instead of losing every lock at once.
#[actix_rt::test]
async fn a_watchdog_lease_under_100ms_is_refused() {
    let server = RedisServer::start();
    for lease in [Duration::from_millis(1), Duration::from_millis(99)] {
        let config = Config::from_url(&server.url())
            .expect("url")
            .watchdog_lease(lease);
        match LockManager::start(config).await {
            Err(LockError::InvalidConfig(why)) => {
                assert!(why.contains("minimum"), "{why}")
            }
            other => panic!("lease {lease:?} accepted: {:?}", other.map(|_| ())),
        }
    }
    let _ok = manager(&server, |c| c.watchdog_lease(Duration::from_millis(100))).await;
}
