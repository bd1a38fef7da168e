//! Lock-delay (`Config::lock_delay`, Consul's `lock-delay`): a lock whose lease ran
//! out unreleased stays taken for the delay. The behaviour scenarios live in
//! `tests/scenarios/lock_delay.rs` (and run on a cluster from
//! `tests/topologies/on_cluster.rs`); the renewal script's handling of the mark and the
//! configuration's checks are here.

#[path = "../scenarios/lock_delay.rs"]
mod scenarios;
use crate::support;

use std::time::Duration;

use lockwarden::{Config, LockError};
use support::{raw, RedisServer};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

/// The watchdog's renewal reads the mark: a hold whose lease end has passed is
/// answered lost and left as it is (the hash keeps others out for the rest of
/// the delay); a live one gets a TTL of the lease plus the delay and a new lease
/// end. Run on `lua/renew.lua` itself, with holds written by hand.
#[test]
fn a_renewal_after_the_lease_ended_finds_the_hold_lost() {
    let server = RedisServer::start();
    let now: (u64, u64) = raw(&server, &["TIME"]);
    let now_ms = now.0 * 1000 + now.1 / 1000;
    let ended = format!("{},5000", now_ms - 100);
    let live = format!("{},5000", now_ms + 10_000);
    for (key, mark) in [("lapsed", &ended), ("live", &live)] {
        let _: i64 = raw(
            &server,
            &["HSET", key, "me:1", "1", "lockwarden:delay", mark],
        );
        let _: i64 = raw(&server, &["PEXPIRE", key, "4900"]);
    }
    let renew = redis::Script::new(include_str!("../../lua/renew.lua"));
    let held: Vec<i64> = renew
        .key("lapsed")
        .key("live")
        .arg(30_000)
        .arg("me:1")
        .arg("me:1")
        .arg("1")
        .invoke(&mut server.conn())
        .expect("renew runs");
    assert_eq!(held, [0, 1]);
    let lapsed_ttl: i64 = raw(&server, &["PTTL", "lapsed"]);
    assert!(
        lapsed_ttl <= 4900,
        "the lapsed hold was renewed: {lapsed_ttl}"
    );
    let live_ttl: i64 = raw(&server, &["PTTL", "live"]);
    assert!(live_ttl > 30_000, "lease + delay: {live_ttl}");
    let mark: String = raw(&server, &["HGET", "live", "lockwarden:delay"]);
    let end: u64 = mark
        .split(',')
        .next()
        .unwrap_or("")
        .parse()
        .expect("a lease end");
    assert!(end >= now_ms + 30_000, "the lease end moved on: {mark}");
    assert!(mark.ends_with(",5000"), "{mark}");
    // Without the flag, the script renews as before (the mark is not read).
    let held: Vec<i64> = renew
        .key("lapsed")
        .arg(30_000)
        .arg("me:1")
        .invoke(&mut server.conn())
        .expect("renew runs");
    assert_eq!(held, [1]);
}

/// A lock-delay over the maximum lease is refused before anything connects.
#[test]
fn a_lock_delay_over_the_maximum_lease_is_refused() {
    let config = Config::from_url("redis://127.0.0.1:1").expect("url");
    match config
        .clone()
        .max_lease(Duration::from_secs(60))
        .lock_delay(Duration::from_secs(61))
        .validate()
    {
        Err(LockError::InvalidConfig(why)) => assert!(why.contains("lock-delay"), "{why}"),
        other => panic!("accepted: {other:?}"),
    }
    assert!(config
        .lock_delay(Duration::from_secs(15))
        .validate()
        .is_ok());
}
