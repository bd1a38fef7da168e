//! Redis ACL users: the least-privilege ACL of docs/operations.md is enough for the
//! exclusive lock (acquire, re-enter, wait, watchdog renewal, release), and a user
//! with any single right of it less gets `LockError::NoPermission` naming the
//! command, with nothing changed in Redis. Before the scripts asked for their
//! rights first, a user without PEXPIRE left a lock hash with no TTL (locked for
//! everyone, forever) and one without PUBLISH had its lock deleted but was told
//! the release failed.

mod support;

use std::time::Duration;

use lockwarden::{Acquire, LockError, ReleaseOutcome};
use support::{eventually, raw, RedisServer};

/// Key and channel patterns for locks named `acl:*` (docs/operations.md).
const PATTERNS: &[&str] = &[
    "~acl:*",
    "~redisson_lock_token:{acl:*",
    "~redisson_unlock_latch:{acl:*",
    // The release script is handed the channel as a key (as Redisson's is).
    "~redisson_lock__channel:{acl:*",
    "&redisson_lock__channel:{acl:*",
];

/// Commands the exclusive lock needs, and the command a refusal names when each
/// is missing (scripts name what they ask for; Redis names EVALSHA and SCRIPT).
const COMMANDS: &[(&str, &str)] = &[
    ("evalsha", "EVALSHA"),
    ("script|load", "SCRIPT|LOAD"),
    ("exists", "EXISTS"),
    ("hexists", "HEXISTS"),
    ("hincrby", "HINCRBY"),
    ("pexpire", "PEXPIRE"),
    ("pttl", "PTTL"),
    ("time", "TIME"),
    ("set", "SET"),
    ("hget", "HGET"),
    ("get", "GET"),
    ("del", "DEL"),
    ("publish", "PUBLISH"),
];

/// Pub/sub rights: without them waiters fall back to polling, nothing fails.
const PUBSUB: &[&str] = &["+subscribe", "+unsubscribe"];

/// Creates user `lw` (password `pw`) with the patterns and these commands.
fn set_user(server: &RedisServer, commands: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", "lw", "reset", "on", ">pw", "-@all"];
    args.extend(PATTERNS);
    args.extend(PUBSUB);
    let plus: Vec<String> = commands.iter().map(|c| format!("+{c}")).collect();
    args.extend(plus.iter().map(String::as_str));
    let _: () = raw(server, &args);
}

async fn user_manager(server: &RedisServer) -> actix::Addr<lockwarden::LockManager> {
    let url = format!("redis://lw:pw@127.0.0.1:{}/", server.port());
    let config = lockwarden::Config::from_url(&url)
        .expect("url")
        .watchdog_lease(Duration::from_millis(900));
    lockwarden::LockManager::start(config)
        .await
        .unwrap_or_else(|e| panic!("manager as lw did not start: {e}"))
}

/// With exactly the documented rights, everything the exclusive lock does works.
#[actix_rt::test]
async fn the_documented_acl_is_enough() {
    let server = RedisServer::start();
    let all: Vec<&str> = COMMANDS.iter().map(|(c, _)| *c).collect();
    set_user(&server, &all);
    let a = user_manager(&server).await;
    let b = user_manager(&server).await;

    let g = a
        .send(Acquire::new("acl:1"))
        .await
        .expect("running")
        .expect("acquired");
    let again = a
        .send(Acquire::new("acl:1").owner(g.owner()))
        .await
        .expect("running")
        .expect("re-entered");
    // The watchdog renews: the TTL goes back up to the lease.
    let mut last: i64 = raw(&server, &["PTTL", "acl:1"]);
    let renewed = eventually(Duration::from_secs(5), || {
        let now: i64 = raw(&server, &["PTTL", "acl:1"]);
        let up = now > last + 100;
        last = now;
        up
    })
    .await;
    assert!(renewed, "no renewal seen");
    let waiting = actix_rt::spawn({
        let b = b.clone();
        async move {
            b.send(Acquire::new("acl:1").wait(Duration::from_secs(10)))
                .await
        }
    });
    let first = again.release().await;
    assert!(
        matches!(first, Ok(ReleaseOutcome::StillHeld { .. })),
        "{first:?}"
    );
    assert_eq!(
        g.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    let next = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("the waiter got the lock");
    assert!(next.fencing_token() > g.fencing_token());
    next.release().await.expect("released");
}

/// The state of Redis as a test can compare it: every key with its type and value.
fn snapshot(server: &RedisServer) -> Vec<(String, String)> {
    let mut keys: Vec<String> = raw(server, &["KEYS", "*"]);
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let value = match raw::<String>(server, &["TYPE", &k]).as_str() {
                "hash" => format!("{:?}", raw::<Vec<String>>(server, &["HGETALL", &k])),
                "string" => raw::<String>(server, &["GET", &k]),
                other => other.to_string(),
            };
            (k, value)
        })
        .collect()
}

/// Runs `step` and checks: either it succeeds, or it fails with `NoPermission`
/// naming `named` and Redis is as it was. Returns whether it failed.
async fn refused_cleanly<T: std::fmt::Debug>(
    server: &RedisServer,
    missing: &str,
    named: &str,
    step: &str,
    call: impl std::future::Future<Output = Result<T, LockError>>,
) -> Option<T> {
    let before = snapshot(server);
    match call.await {
        Ok(v) => Some(v),
        Err(LockError::NoPermission { command, detail }) => {
            assert_eq!(command, named, "without {missing}, {step}: {detail}");
            assert_eq!(
                snapshot(server),
                before,
                "without {missing}, the refused {step} changed Redis"
            );
            None
        }
        Err(e) => panic!("without {missing}, {step} failed with {e:?}"),
    }
}

/// Every right less, one at a time: the first call that needs it (a grant, an
/// attempt on a held lock, a release) fails with `NoPermission` naming the command,
/// and Redis is exactly as it was before that call.
#[actix_rt::test]
async fn any_single_right_less_is_a_typed_error_that_changes_nothing() {
    let server = RedisServer::start();
    for (missing, named) in COMMANDS {
        let _: () = raw(&server, &["FLUSHALL"]);
        let _: () = raw(&server, &["SCRIPT", "FLUSH"]);
        let rest: Vec<&str> = COMMANDS
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| c != missing)
            .collect();
        set_user(&server, &rest);
        let a = user_manager(&server).await;
        let b = user_manager(&server).await;
        let name = format!("acl:{missing}");
        let try_once = |m: &actix::Addr<lockwarden::LockManager>| {
            let m = m.clone();
            let name = name.clone();
            async move {
                m.send(Acquire::new(name.as_str()).wait(Duration::ZERO))
                    .await
                    .expect("running")
            }
        };
        let Some(guard) = refused_cleanly(&server, missing, named, "grant", try_once(&a)).await
        else {
            continue;
        };
        // Another owner's attempt on the held lock (reads its TTL).
        let busy = refused_cleanly(&server, missing, named, "busy attempt", async {
            match try_once(&b).await {
                Err(LockError::Timeout { .. }) => Ok(()),
                Err(e) => Err(e),
                Ok(g) => panic!("without {missing}: a held lock granted again: {g:?}"),
            }
        })
        .await;
        if busy.is_none() {
            continue;
        }
        let released = refused_cleanly(&server, missing, named, "release", guard.release()).await;
        assert!(
            released.is_none(),
            "without {missing}, everything worked: the right is not needed"
        );
    }
}
