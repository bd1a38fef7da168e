//! Bad input gets its own clear, typed error and changes nothing in Redis: names,
//! leases, configurations, and keys that are not locks.

#[path = "../scenarios/bad_input.rs"]
mod scenarios;
use crate::support;

use support::{hold, manager, raw, RedisServer};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

/// Keys written, leaving out the managers' client registry entries.
fn dbsize(server: &RedisServer) -> i64 {
    support::data_key_count(server)
}

/// The scripts check their arguments before their first write: called directly
/// with a lease that would delete or never expire the lock, they fail and leave no
/// key behind (a script is not a transaction, so this order is what protects us).
#[actix_rt::test]
async fn scripts_refuse_bad_arguments_before_writing() {
    let server = RedisServer::start();
    let (acquire, release) = support::exclusive_scripts();
    let (acquire, release) = (redis::Script::new(&acquire), redis::Script::new(&release));
    let mut conn = server.conn();
    // "1e3" is a number to Lua but not to PEXPIRE, which would refuse it only
    // after the hash was written.
    for lease in ["0", "-5", "abc", "1.5", "", "1e3", "1234567890123456"] {
        let res: redis::RedisResult<redis::Value> = acquire
            .key("raw")
            .key("redisson_lock_token:{raw}")
            .arg(lease)
            .arg("client:1")
            .invoke(&mut conn);
        assert!(res.is_err(), "acquire with lease {lease:?} must fail");
    }
    let res: redis::RedisResult<redis::Value> = acquire
        .key("raw")
        .key("redisson_lock_token:{raw}")
        .arg("1000")
        .arg("")
        .invoke(&mut conn);
    assert!(res.is_err(), "acquire with an empty owner must fail");
    for fresh in ["3", "yes", ""] {
        let res: redis::RedisResult<redis::Value> = acquire
            .key("raw")
            .key("redisson_lock_token:{raw}")
            .arg("1000")
            .arg("client:1")
            .arg("60000")
            .arg(fresh)
            .invoke(&mut conn);
        assert!(
            res.is_err(),
            "acquire with new-owner flag {fresh:?} must fail"
        );
    }
    assert_eq!(dbsize(&server), 0, "a refused acquire wrote something");

    // A held lock survives a release with a bad lease, latch lifetime or retry flag.
    let m = manager(&server, |c| c).await;
    let g = hold(&m, "raw", |a| a).await;
    for (lease, latch, retry) in [
        ("0", "1000", "0"),
        ("1000", "0", "0"),
        ("x", "1000", "0"),
        ("1000", "1000", "yes"),
    ] {
        let res: redis::RedisResult<i64> = release
            .key("raw")
            .key("redisson_lock__channel:{raw}")
            .key("redisson_unlock_latch:{raw}:r1")
            .arg(lease)
            .arg(g.owner_field())
            .arg(latch)
            .arg("0")
            .arg(retry)
            .invoke(&mut conn);
        assert!(
            res.is_err(),
            "release with lease {lease:?} latch {latch:?} retry {retry:?} must fail"
        );
        let count: String = raw(&server, &["HGET", "raw", g.owner_field()]);
        assert_eq!(count, "1");
        let pttl: i64 = raw(&server, &["PTTL", "raw"]);
        assert!(pttl > 0, "the lock lost its TTL");
    }
}

/// `transfer.lua` (a holder's last release and a local waiter's grant in one call)
/// checks the new owner's arguments before the release writes: a bad one leaves the
/// lock held by its holder, with no latch written; a good one moves it in one step.
#[actix_rt::test]
async fn a_handover_with_bad_arguments_changes_nothing() {
    let server = RedisServer::start();
    let (acquire_code, _) = support::exclusive_scripts();
    let acquire = redis::Script::new(&acquire_code);
    let transfer = redis::Script::new(&format!(
        "{}local function op_acquire(KEYS, ARGV)\n{}\nend\nlocal function op_release(KEYS, ARGV)\n{}\nend\n{}",
        include_str!("../../lua/token_prelude.lua"),
        include_str!("../../lua/acquire.lua"),
        include_str!("../../lua/release.lua"),
        include_str!("../../lua/transfer.lua"),
    ));
    let mut conn = server.conn();
    let _: redis::Value = acquire
        .key("moved")
        .key("redisson_lock_token:{moved}")
        .arg("30000")
        .arg("client:1")
        .arg("60000")
        .invoke(&mut conn)
        .expect("acquired");
    let before = dbsize(&server);
    let hand = |to: &str, lease: &str, keep: &str, conn: &mut redis::Connection| {
        transfer
            .key("moved")
            .key("redisson_lock__channel:{moved}")
            .key("redisson_unlock_latch:{moved}:t1")
            .key("redisson_lock_token:{moved}")
            .arg("30000")
            .arg("client:1")
            .arg("10000")
            .arg("0")
            .arg("0")
            .arg(to)
            .arg(lease)
            .arg(keep)
            .invoke::<redis::Value>(conn)
    };
    for (to, lease, keep) in [
        ("client:2", "0", "60000"),
        ("client:2", "1e3", "60000"),
        ("client:2", "30000", "abc"),
        ("client:1", "30000", "60000"),
        ("", "30000", "60000"),
    ] {
        let res = hand(to, lease, keep, &mut conn);
        assert!(
            res.is_err(),
            "handover to {to:?} lease {lease:?} keep {keep:?}: {res:?}"
        );
        let held: Vec<String> = redis::cmd("HGETALL")
            .arg("moved")
            .query(&mut conn)
            .expect("hgetall");
        assert_eq!(held, ["client:1", "1"], "the holder lost the lock");
        assert_eq!(
            dbsize(&server),
            before,
            "a refused handover wrote something"
        );
    }
    let moved = hand("client:2", "30000", "60000", &mut conn).expect("handed over");
    let redis::Value::Array(moved) = moved else {
        panic!("handover answered {moved:?}");
    };
    assert_eq!(moved.first(), Some(&redis::Value::Int(0)), "{moved:?}");
    let held: Vec<String> = redis::cmd("HGETALL")
        .arg("moved")
        .query(&mut conn)
        .expect("hgetall");
    assert_eq!(held, ["client:2", "1"]);
}
