//! The exclusive lock's direct handoff across processes (`Config::direct_handoff`).
//! The behaviour scenarios live in `tests/scenarios/handoff.rs` (and run on a
//! cluster from `tests/topologies/on_cluster.rs`); the scripts' own checks are
//! here.

#[path = "../scenarios/handoff.rs"]
mod scenarios;
use crate::support;

use support::{raw, RedisServer};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

/// `lua/release.lua` skips the releasing field's own place (one a local
/// hand-over granted without looking at places), places that lapsed and
/// places whose process nobody hears for (its hold taken back), and hands the
/// lock to the first live one with a listener, with the short lease; with no
/// such place left it frees the lock and publishes the unlock message.
#[test]
fn a_release_skips_its_own_and_lapsed_places() {
    let server = RedisServer::start();
    let (secs, _): (u64, u64) = raw(&server, &["TIME"]);
    let live = (secs * 1000 + 10_000).to_string();
    let lapsed = (secs * 1000 - 1_000).to_string();
    let (queue, timeouts) = (
        "lockwarden_handoff_queue:{s}",
        "lockwarden_handoff_timeout:{s}",
    );
    let _: i64 = raw(&server, &["HSET", "s", "c0:1", "1"]);
    let places = [
        ("c0:1", &live),
        ("c1:1", &lapsed),
        ("c3:1", &live),
        ("c2:1", &live),
    ];
    for (field, lapses) in places {
        let _: i64 = raw(&server, &["RPUSH", queue, field]);
        let _: i64 = raw(&server, &["ZADD", timeouts, lapses, field]);
    }
    // c2's process listens; nobody does for c3's.
    let mut listener = server.conn();
    let mut listening = listener.as_pubsub();
    listening
        .subscribe("lockwarden_handoff__channel:{s}:c2")
        .expect("subscribed");
    let (_, script) = support::exclusive_scripts();
    let release = |field: &str| -> redis::Value {
        raw(
            &server,
            &[
                "EVAL",
                &script,
                "6",
                "s",
                "redisson_lock__channel:{s}",
                &format!("redisson_unlock_latch:{{s}}:{field}"),
                "redisson_lock_token:{s}",
                queue,
                timeouts,
                "30000",
                field,
                "10000",
                "0",
                "0",
                "0",
                "800",
                "60000",
            ],
        )
    };
    assert_eq!(
        release("c0:1"),
        redis::Value::Array(vec![
            redis::Value::Int(0),
            redis::Value::Int(1),
            redis::Value::Int(1)
        ]),
        "handed over, one waiting (the receiver), no place left"
    );
    let fields: Vec<String> = raw(&server, &["HKEYS", "s"]);
    assert_eq!(
        fields,
        ["c2:1"],
        "the first live, heard place that is not its own"
    );
    let told = listening.get_message().expect("a message");
    assert_eq!(
        told.get_payload::<String>().expect("text"),
        format!(
            "g{},c2:1",
            raw::<String>(&server, &["GET", "redisson_lock_token:{s}"])
        )
    );
    let pttl: i64 = raw(&server, &["PTTL", "s"]);
    assert!((1..=800).contains(&pttl), "the short lease: {pttl}");
    assert_eq!(raw::<i64>(&server, &["EXISTS", queue, timeouts]), 0);
    let freed = release("c2:1");
    assert_eq!(
        freed,
        redis::Value::Array(vec![redis::Value::Int(0), redis::Value::Int(0)]),
        "freed and published, heard by nobody"
    );
    assert_eq!(raw::<i64>(&server, &["EXISTS", "s"]), 0);
}
