//! Mutual exclusion and fencing: many tasks in two managers (as two processes would
//! be) contend for one lock; never two inside at once, and every holder's fencing
//! token is larger than the one before.

#[path = "../scenarios/exclusion.rs"]
mod scenarios;
use crate::support;

use support::{manager, RedisServer};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

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
