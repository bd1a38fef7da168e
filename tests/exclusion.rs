//! Mutual exclusion and fencing: many tasks in two managers (as two processes would
//! be) contend for one lock; never two inside at once, and every holder's fencing
//! token is larger than the one before.

#[path = "scenarios/exclusion.rs"]
mod scenarios;
mod support;

use support::{manager, RedisServer, Target};

/// Two managers with 8 tasks each, 10 rounds per task: the critical section is
/// entered 160 times, by one task at a time, with strictly increasing tokens. The
/// overlap check runs both in this process and in Redis (INCR inside, DECR after),
/// so it would catch two holders whether or not they share memory.
#[actix_rt::test]
async fn two_managers_never_hold_the_same_lock_at_once() {
    scenarios::two_managers_never_hold_the_same_lock_at_once(&Target::standalone()).await;
}

/// Tokens keep increasing after Redis restarts empty: the counter is re-seeded from
/// the server clock, not from zero.
#[actix_rt::test]
async fn fencing_tokens_survive_a_redis_restart_with_no_data() {
    let mut server = RedisServer::start();
    let before = {
        let m = manager(&server, |c| c).await;
        let g = support::hold(&m, "fenced", |a| a).await;
        let t = g.fencing_token();
        g.release().await.expect("released");
        t
    };
    server.restart();
    let m = manager(&server, |c| c).await;
    let g = support::hold(&m, "fenced", |a| a).await;
    assert!(
        g.fencing_token() > before,
        "token went backwards after restart: {} <= {before}",
        g.fencing_token()
    );
}
