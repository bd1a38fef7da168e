//! Fenced writes (`FencedWrite`): a write on a data key in Redis that a holder
//! whose lock was lost cannot make. The behaviour scenarios live in
//! `tests/scenarios/fenced.rs` (and run on a cluster from `tests/topologies/on_cluster.rs`);
//! the cost of the write path is here.

#[path = "../scenarios/fenced.rs"]
mod scenarios;
use crate::support;

use lockwarden::FencedWrite;

use support::{hold, manager, RedisServer};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

/// Script calls the server has run.
fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.commandstats();
    stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0)
}

/// A fenced write is one round trip, as the plain write it replaces: 20 writes
/// are 20 script calls (one more allowed for the manager's own registry write in
/// the background), and no other command reaches Redis for them.
#[actix_rt::test]
async fn a_fenced_write_is_one_round_trip() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let guard = hold(&m, "rt:lock", |r| r).await;
    // The first call loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA again).
    m.send(FencedWrite::new(&guard, "rt:data", "INCR"))
        .await
        .expect("running")
        .expect("written");
    let before = script_calls(&server);
    for _ in 0..20 {
        m.send(FencedWrite::new(&guard, "rt:data", "INCR"))
            .await
            .expect("running")
            .expect("written");
    }
    let calls = script_calls(&server) - before;
    assert!(
        (20..=21).contains(&calls),
        "20 fenced writes took {calls} script calls"
    );
    let n: i64 = support::raw(&server, &["GET", "rt:data"]);
    assert_eq!(n, 21);
    guard.release().await.expect("released");
}
