//! Fencing tokens when Redis loses recent writes, and the token counter's lifetime.
//!
//! A resource that refuses writes carrying a token no larger than the last one it
//! saw is only safe if no two grants ever carry the same token. These tests make
//! Redis forget its latest writes for real (a restart from an older snapshot, a
//! failover to a replica that missed them) and check that the next grant's token
//! is still above every token handed out before. They also check that the counter
//! behind the tokens does not stay in Redis forever: a service that locks one name
//! per request must not grow Redis without bound.

use crate::support;

use std::time::Duration;

use lockwarden::Acquire;
use support::{eventually, hold, manager, raw, RedisServer};

/// Acquires and releases `name` `n` times; returns the tokens handed out.
async fn grants(m: &actix::Addr<lockwarden::LockManager>, name: &str, n: usize) -> Vec<u64> {
    let mut tokens = Vec::new();
    for _ in 0..n {
        let g = hold(m, name, |a| a).await;
        tokens.push(g.fencing_token());
        g.release().await.expect("released");
    }
    tokens
}

/// Redis snapshots with SAVE and has no AOF: 3 grants, a snapshot, 5 more grants,
/// a crash (SIGKILL) and a restart that loads the snapshot. The counter comes back
/// as it was 5 grants ago, yet the next token is above all 8 earlier ones.
#[actix_rt::test]
async fn tokens_keep_increasing_after_a_restart_from_an_older_snapshot() {
    let mut server = RedisServer::start();
    let m = manager(&server, |c| {
        c.response_timeout(Duration::from_millis(300))
            .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
    })
    .await;
    let mut before = grants(&m, "fence", 3).await;
    let _: () = raw(&server, &["SAVE"]);
    before.extend(grants(&m, "fence", 5).await);
    server.restart();
    let counter: u64 = raw(&server, &["GET", "redisson_lock_token:{fence}"]);
    assert_eq!(
        counter, before[2],
        "the snapshot holds the counter of 5 grants ago"
    );

    let g = m
        .send(Acquire::new("fence").wait(Duration::from_secs(20)))
        .await
        .expect("running")
        .expect("acquired after the restart");
    let last = *before.iter().max().expect("tokens");
    eprintln!(
        "restart: tokens before {before:?}, counter after {counter}, next token {}",
        g.fencing_token()
    );
    assert!(
        g.fencing_token() > last,
        "token {} after the restart repeats one of {before:?}",
        g.fencing_token()
    );
}

/// A master with one replica. The replica is frozen (SIGSTOP), the lock is taken
/// on the master, the master dies before the replica saw that write, and the
/// replica is promoted (REPLICAOF NO ONE). The next holder, on the promoted
/// replica, gets a token above the previous holder's, not the same one.
#[actix_rt::test]
async fn tokens_keep_increasing_after_a_failover_that_lost_the_last_grant() {
    let mut master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let before_master = manager(&master, |c| c).await;
    let mut before = grants(&before_master, "fence", 3).await;
    // Wait until the replica has those grants: only the next one may be lost.
    // WAIT counts what its own connection wrote, so it goes behind a write on
    // the same connection (the replication stream is in order).
    let (acked,): (i64,) = redis::pipe()
        .cmd("INCR")
        .arg("fence:probe")
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut master.conn())
        .expect("WAIT");
    assert_eq!(acked, 1, "the replica did not acknowledge the first grants");

    // Frozen, the replica cannot reconnect; its link closed, the master's next
    // writes stay in the master's backlog: the grant below is never replicated.
    replica.pause();
    let _: i64 = raw(&master, &["CLIENT", "KILL", "TYPE", "replica"]);
    let held = hold(&before_master, "fence", |a| a).await;
    before.push(held.fencing_token());
    master.kill();
    replica.resume();
    let _: () = raw(&replica, &["REPLICAOF", "NO", "ONE"]);
    assert!(
        !support::exists(&replica, "fence"),
        "the replica must have missed the grant for this test to mean anything"
    );

    let after = manager(&replica, |c| c).await;
    let g = hold(&after, "fence", |a| a).await;
    let last = *before.iter().max().expect("tokens");
    eprintln!(
        "failover: tokens before {before:?}, next token {}",
        g.fencing_token()
    );
    assert!(
        g.fencing_token() > last,
        "token {} on the promoted replica repeats one of {before:?}",
        g.fencing_token()
    );
    drop(held);
}

/// Locking many distinct names (one per request, say) leaves no key without a TTL,
/// and once the counters' lifetime has passed, nothing at all.
#[actix_rt::test]
async fn distinct_names_leave_no_permanent_keys() {
    const NAMES: usize = 3000;
    let server = RedisServer::start();
    // The counters live 5 s: long enough that none has lapsed when the 3,000
    // grants are done (1-2 s; with a 1 s lifetime the first ones lapsed before
    // the last were made on a slow run), short enough to wait out below.
    let m = manager(&server, |c| {
        c.token_ttl(Duration::from_secs(5))
            .latch_ttl(Duration::from_millis(500))
    })
    .await;
    let tasks: Vec<_> = (0..64)
        .map(|worker| {
            let m = m.clone();
            actix_rt::spawn(async move {
                for i in (worker..NAMES).step_by(64) {
                    let g = hold(&m, &format!("order:{i}"), |a| a).await;
                    g.release().await.expect("released");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("worker");
    }
    let keys: Vec<String> = raw(&server, &["KEYS", "*"]);
    assert!(
        keys.len() >= NAMES,
        "expected the token counters, saw {}",
        keys.len()
    );
    let mut conn = server.conn();
    for key in &keys {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut conn).expect("PTTL");
        // -2: expired between KEYS and PTTL; -1: no TTL.
        assert!(pttl != -1, "{key} has no TTL");
    }
    // The managers' registry entries stay while they run.
    let empty = eventually(Duration::from_secs(20), || {
        support::data_keys(&server).is_empty()
    })
    .await;
    assert!(empty, "keys left behind: {:?}", support::data_keys(&server));
}

/// The token counter is Redisson's fenced lock's (`RFencedLock`): the key
/// `redisson_lock_token:{<name>}`, whose value is the last token handed out (what
/// Redisson's `getToken()` reads). A Redisson client that takes a token with
/// INCR between two lockwarden grants gets one above the first, and the next
/// lockwarden grant is above it: one sequence for both.
#[actix_rt::test]
async fn tokens_are_redissons_fenced_lock_counter() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let first = grants(&m, "fenced", 1).await[0];
    let counter: u64 = raw(&server, &["GET", "redisson_lock_token:{fenced}"]);
    assert_eq!(counter, first, "the counter holds the last token");
    // Redisson's fenced lock takes its token with INCR on the same key.
    let java: u64 = raw(&server, &["INCR", "redisson_lock_token:{fenced}"]);
    assert!(java > first);
    let next = grants(&m, "fenced", 1).await[0];
    assert!(next > java, "{next} after Redisson's {java}");
}
