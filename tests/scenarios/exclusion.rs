//! The bodies of `tests/one_server/exclusion.rs`'s tests that hold on any deployment, written
//! against [`Target`] so that `tests/topologies/on_cluster.rs` runs them on a cluster too.
//! Each scenario's doc is on its body here.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockwarden::{Acquire, ReleaseOutcome};

use crate::support::Target;

/// Two managers with 8 tasks each, 10 rounds per task: the critical section is
/// entered 160 times, by one task at a time, with strictly increasing tokens. The
/// overlap check runs both in this process and in Redis (INCR inside, DECR after),
/// so it would catch two holders whether or not they share memory.
pub async fn two_managers_never_hold_the_same_lock_at_once(t: &Target) {
    let managers = [t.manager(|c| c).await, t.manager(|c| c).await];
    let inside = Arc::new(AtomicI64::new(0));
    let max_inside = Arc::new(AtomicI64::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for m in &managers {
        for _ in 0..8 {
            let manager = m.clone();
            let (inside, max_inside, tokens) = (inside.clone(), max_inside.clone(), tokens.clone());
            let mut conn = t.conn_for("inside").await;
            tasks.push(actix_rt::spawn(async move {
                for _ in 0..10 {
                    let guard = manager
                        .send(Acquire::new("shared").wait(Duration::from_secs(30)))
                        .await
                        .expect("manager running")
                        .expect("acquired");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_inside.fetch_max(now, Ordering::SeqCst);
                    let in_redis: i64 = redis::cmd("INCR")
                        .arg("inside")
                        .query_async(&mut conn)
                        .await
                        .expect("incr");
                    assert_eq!(in_redis, 1, "two holders inside at once (seen in Redis)");
                    tokens
                        .lock()
                        .expect("not poisoned")
                        .push(guard.fencing_token());
                    actix_rt::time::sleep(Duration::from_millis(1)).await;
                    let _: i64 = redis::cmd("DECR")
                        .arg("inside")
                        .query_async(&mut conn)
                        .await
                        .expect("decr");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(
                        guard.release().await.expect("released"),
                        ReleaseOutcome::Released
                    );
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task did not panic");
    }
    assert_eq!(
        max_inside.load(Ordering::SeqCst),
        1,
        "two holders inside at once"
    );
    let tokens = tokens.lock().expect("not poisoned").clone();
    assert_eq!(tokens.len(), 160);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens must strictly increase in acquisition order: {tokens:?}"
    );
    assert!(!t.exists("shared"), "the lock is free at the end");
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/exclusion.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            two_managers_never_hold_the_same_lock_at_once,
        }
    };
}
pub(crate) use each;
