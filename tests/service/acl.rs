//! Redis ACL users: the least-privilege ACL of docs/operations.md is enough for the
//! exclusive, fair and read-write locks (acquire, re-enter, wait, watchdog renewal,
//! release), and a user with any single right of it less gets
//! `LockError::NoPermission` naming the command, with nothing changed in Redis. Before the scripts asked for their
//! rights first, a user without PEXPIRE left a lock hash with no TTL (locked for
//! everyone, forever) and one without PUBLISH had its lock deleted but was told
//! the release failed.

use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, AcquireKind, LockError, LockGuard, Locks, ReleaseOutcome};
use support::{eventually, raw, Captured, RedisServer};

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

/// The right a holder needs to hand the lock to a waiter of its own process in
/// one call (`lua/transfer.lua` counts who listens); without it the holder
/// releases plainly and the waiter asks, nothing fails.
const HANDOVER: &str = "pubsub|numsub";

/// What the fair lock needs besides `PATTERNS` (docs/operations.md).
const FAIR_PATTERNS: &[&str] = &[
    "~redisson_lock_queue:{acl:*",
    "~redisson_lock_timeout:{acl:*",
];

/// Commands the fair lock needs.
const FAIR_COMMANDS: &[(&str, &str)] = &[
    ("evalsha", "EVALSHA"),
    ("script|load", "SCRIPT|LOAD"),
    ("type", "TYPE"),
    ("time", "TIME"),
    ("exists", "EXISTS"),
    ("hexists", "HEXISTS"),
    ("hget", "HGET"),
    ("hincrby", "HINCRBY"),
    ("pexpire", "PEXPIRE"),
    ("pttl", "PTTL"),
    ("incr", "INCR"),
    ("set", "SET"),
    ("get", "GET"),
    ("del", "DEL"),
    ("publish", "PUBLISH"),
    ("lindex", "LINDEX"),
    ("lpop", "LPOP"),
    ("lrem", "LREM"),
    ("rpush", "RPUSH"),
    ("zadd", "ZADD"),
    ("zrem", "ZREM"),
    ("zrange", "ZRANGE"),
    ("zscore", "ZSCORE"),
];

/// What the read-write lock needs besides `PATTERNS`: the read holds' timeout
/// keys (`{<name>}:<owner>:rwlock_timeout:<n>`) and its channel, which the scripts
/// are handed as a key too.
const RW_PATTERNS: &[&str] = &[
    "~{acl:*",
    "~redisson_rwlock:{acl:*",
    "&redisson_rwlock:{acl:*",
];

/// Commands the read-write lock needs.
const RW_COMMANDS: &[(&str, &str)] = &[
    ("evalsha", "EVALSHA"),
    ("script|load", "SCRIPT|LOAD"),
    ("type", "TYPE"),
    ("time", "TIME"),
    ("hexists", "HEXISTS"),
    ("hget", "HGET"),
    ("hset", "HSET"),
    ("hdel", "HDEL"),
    ("hlen", "HLEN"),
    ("hkeys", "HKEYS"),
    ("hincrby", "HINCRBY"),
    ("pexpire", "PEXPIRE"),
    ("pttl", "PTTL"),
    ("incr", "INCR"),
    ("set", "SET"),
    ("get", "GET"),
    ("del", "DEL"),
    ("publish", "PUBLISH"),
];

/// Pub/sub rights: without them waiters fall back to polling, nothing fails.
const PUBSUB: &[&str] = &["+subscribe", "+unsubscribe"];

/// Creates user `lw` (password `pw`) with the patterns and these commands.
fn set_user(server: &RedisServer, commands: &[&str]) {
    set_user_with(server, &[], commands);
}

/// Creates user `lw` with `PATTERNS`, `extra` patterns and these commands.
fn set_user_with(server: &RedisServer, extra: &[&str], commands: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", "lw", "reset", "on", ">pw", "-@all"];
    args.extend(PATTERNS);
    args.extend(extra);
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
    let g_token = g.fencing_token();
    assert_eq!(
        g.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    let next = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("the waiter got the lock");
    assert!(next.fencing_token() > g_token);
    next.release().await.expect("released");
}

/// Four times in a row, a holder of `m` releases while another owner of the same
/// manager waits: each waiter gets the lock, with a larger token. Answers how many
/// unlock messages (PUBLISH) and listener counts (PUBSUB NUMSUB) Redis ran
/// meanwhile. A handover publishes nothing; the third of a run counts who
/// listens, since its count decides whether the run goes on.
async fn local_handovers(
    server: &RedisServer,
    m: &actix::Addr<lockwarden::LockManager>,
) -> (u64, u64) {
    let stat = |name: &str| server.commandstats().get(name).copied().unwrap_or(0);
    let mut g = m
        .send(Acquire::new("acl:h"))
        .await
        .expect("running")
        .expect("acquired");
    let before = (stat("publish"), stat("pubsub|numsub"));
    for _ in 0..4 {
        let waiting = actix_rt::spawn({
            let m = m.clone();
            async move {
                m.send(Acquire::new("acl:h").wait(Duration::from_secs(10)))
                    .await
            }
        });
        // A try behind it in the same manager comes back refused (a local holder
        // holds) only once the waiter, queued before it, waits too.
        let tried = m
            .send(Acquire::new("acl:h").wait(Duration::ZERO))
            .await
            .expect("running");
        assert!(matches!(tried, Err(LockError::Timeout { .. })), "{tried:?}");
        let token = g.fencing_token();
        assert_eq!(
            g.release().await.expect("released"),
            ReleaseOutcome::Released
        );
        g = waiting
            .await
            .expect("task")
            .expect("running")
            .expect("the local waiter got the lock");
        assert!(g.fencing_token() > token);
    }
    let after = (stat("publish"), stat("pubsub|numsub"));
    g.release().await.expect("released");
    (after.0 - before.0, after.1 - before.1)
}

/// With the handover's right (PUBSUB NUMSUB) the lock goes to each local waiter
/// in one call, with no unlock message; without it, the first handover that
/// must count listeners is refused, and from then on the lock goes by plain
/// releases (which publish), and every waiter still gets it.
#[actix_rt::test]
async fn a_local_handover_with_and_without_its_right() {
    let server = RedisServer::start();
    let all: Vec<&str> = COMMANDS.iter().map(|(c, _)| *c).collect();
    let mut with: Vec<&str> = all.clone();
    with.push(HANDOVER);
    set_user(&server, &with);
    let m = user_manager(&server).await;
    let (published, counted) = local_handovers(&server, &m).await;
    assert_eq!(published, 0, "handed over in one call each time");
    assert_eq!(counted, 1, "the run's listeners counted once");
    set_user(&server, &all);
    let m = user_manager(&server).await;
    let (published, counted) = local_handovers(&server, &m).await;
    assert_eq!(counted, 0, "no count without the right");
    assert!(published >= 1, "released plainly once refused");
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
                "list" => format!(
                    "{:?}",
                    raw::<Vec<String>>(server, &["LRANGE", &k, "0", "-1"])
                ),
                "zset" => format!(
                    "{:?}",
                    raw::<Vec<String>>(server, &["ZRANGE", &k, "0", "-1", "WITHSCORES"])
                ),
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

/// One call of `kind` on `name` by `m`: a try when `wait` is zero.
async fn take(
    m: &actix::Addr<lockwarden::LockManager>,
    name: &str,
    kind: AcquireKind,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    m.send(Acquire::new(name).kind(kind).wait(wait))
        .await
        .expect("running")
}

/// A call that should find the lock held by another owner: `Timeout` is success.
async fn contended(
    m: &actix::Addr<lockwarden::LockManager>,
    name: &str,
    kind: AcquireKind,
    wait: Duration,
) -> Result<(), LockError> {
    match take(m, name, kind, wait).await {
        Err(LockError::Timeout { .. }) => Ok(()),
        Err(e) => Err(e),
        Ok(g) => panic!("a held lock granted again: {g:?}"),
    }
}

/// Whether the PTTL of `key` goes back up (a watchdog renewal) within 5 s.
async fn renewed(server: &RedisServer, key: &str) -> bool {
    let mut last: i64 = raw(server, &["PTTL", key]);
    eventually(Duration::from_secs(5), || {
        let now: i64 = raw(server, &["PTTL", key]);
        let up = now > last + 100;
        last = now;
        up
    })
    .await
}

/// With exactly the documented rights, the fair lock works: grant, re-entry,
/// renewal, a queued waiter that gets it on release, an attempt that times out
/// and leaves the queue, and a waiter whose place lapsed dropped from the head.
#[actix_rt::test]
async fn the_documented_acl_is_enough_for_the_fair_lock() {
    let server = RedisServer::start();
    let all: Vec<&str> = FAIR_COMMANDS.iter().map(|(c, _)| *c).collect();
    set_user_with(&server, FAIR_PATTERNS, &all);
    let a = user_manager(&server).await;
    let b = user_manager(&server).await;
    let fair = AcquireKind::Fair;

    // A waiter that died at the head of the queue: dropped by the next attempt.
    let _: () = raw(&server, &["RPUSH", "redisson_lock_queue:{acl:f}", "dead:1"]);
    let _: () = raw(
        &server,
        &["ZADD", "redisson_lock_timeout:{acl:f}", "1", "dead:1"],
    );
    let g = take(&a, "acl:f", fair, Duration::ZERO)
        .await
        .expect("acquired");
    let again = a
        .send(Acquire::new("acl:f").fair().owner(g.owner()))
        .await
        .expect("running")
        .expect("re-entered");
    assert!(renewed(&server, "acl:f").await, "no renewal seen");
    contended(&b, "acl:f", fair, Duration::from_millis(300))
        .await
        .expect("a timed-out attempt");
    let waiting = actix_rt::spawn({
        let b = b.clone();
        async move { take(&b, "acl:f", fair, Duration::from_secs(10)).await }
    });
    let queued = eventually(Duration::from_secs(5), || {
        raw::<i64>(&server, &["LLEN", "redisson_lock_queue:{acl:f}"]) == 1
    })
    .await;
    assert!(queued, "the waiter never queued");
    again.release().await.expect("released once");
    let g_token = g.fencing_token();
    g.release().await.expect("released");
    let next = waiting
        .await
        .expect("task")
        .expect("the waiter got the lock");
    assert!(next.fencing_token() > g_token);
    next.release().await.expect("released");
}

/// With exactly the documented rights, the read-write lock works: two readers,
/// renewal, a writer that waits for them, a reader that waits for the writer.
#[actix_rt::test]
async fn the_documented_acl_is_enough_for_the_read_write_lock() {
    let server = RedisServer::start();
    let all: Vec<&str> = RW_COMMANDS.iter().map(|(c, _)| *c).collect();
    set_user_with(&server, RW_PATTERNS, &all);
    let a = user_manager(&server).await;
    let b = user_manager(&server).await;
    let (read, write) = (AcquireKind::Read, AcquireKind::Write);

    let r1 = take(&a, "acl:rw", read, Duration::ZERO)
        .await
        .expect("read");
    let r2 = take(&b, "acl:rw", read, Duration::ZERO)
        .await
        .expect("read");
    assert!(
        renewed(&server, "acl:rw").await,
        "no renewal of the readers"
    );
    contended(&b, "acl:rw", write, Duration::from_millis(200))
        .await
        .expect("a timed-out write attempt");
    let writer = actix_rt::spawn({
        let b = b.clone();
        async move { take(&b, "acl:rw", write, Duration::from_secs(10)).await }
    });
    r1.release().await.expect("released");
    assert!(!writer.is_finished(), "the writer got in beside a reader");
    r2.release().await.expect("released");
    let w = writer
        .await
        .expect("task")
        .expect("the writer got the lock");
    assert!(renewed(&server, "acl:rw").await, "no renewal of the writer");
    let reader = actix_rt::spawn({
        let a = a.clone();
        async move { take(&a, "acl:rw", read, Duration::from_secs(10)).await }
    });
    let w_token = w.fencing_token();
    w.release().await.expect("released");
    let r = reader
        .await
        .expect("task")
        .expect("the reader got the lock");
    assert!(r.fencing_token() > w_token);
    r.release().await.expect("released");
}

/// The steps of one run of the fair lock with a right missing; `lapsed` puts a
/// dead waiter at the head of the queue first, so that the grant drops it (the
/// path where the first write comes before every read). Returns whether a step
/// was refused.
async fn fair_steps(server: &RedisServer, missing: &str, named: &str, lapsed: bool) -> bool {
    let _: () = raw(server, &["FLUSHALL"]);
    let _: () = raw(server, &["SCRIPT", "FLUSH"]);
    let a = user_manager(server).await;
    let b = user_manager(server).await;
    let name = format!("acl:{missing}");
    let fair = AcquireKind::Fair;
    if lapsed {
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let deadlines = format!("redisson_lock_timeout:{{{name}}}");
        let _: () = raw(server, &["RPUSH", &queue, "dead:1"]);
        let _: () = raw(server, &["ZADD", &deadlines, "1", "dead:1"]);
    }
    let step =
        |what: &'static str| format!("fair {what}{}", if lapsed { " (lapsed head)" } else { "" });
    let grant = take(&a, &name, fair, Duration::ZERO);
    let Some(g) = refused_cleanly(server, missing, named, &step("grant"), grant).await else {
        return true;
    };
    // Queues, times out, leaves the queue.
    let busy = contended(&b, &name, fair, Duration::from_millis(200));
    if refused_cleanly(server, missing, named, &step("queued attempt"), busy)
        .await
        .is_none()
    {
        return true;
    }
    // The waiter leaves the queue after its wait has ended: wait for that.
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let left = eventually(Duration::from_secs(5), || {
        raw::<i64>(server, &["EXISTS", &queue]) == 0
    })
    .await;
    assert!(
        left,
        "without {missing}, the timed-out waiter stayed in the queue"
    );
    refused_cleanly(server, missing, named, &step("release"), g.release())
        .await
        .is_none()
}

/// The steps of one run of the read-write lock with a right missing: a reader,
/// a writer that finds it held, the last reader's release, a writer, a reader
/// that finds it held, the writer's release. Returns whether a step was refused.
async fn rw_steps(server: &RedisServer, missing: &str, named: &str) -> bool {
    let _: () = raw(server, &["FLUSHALL"]);
    let _: () = raw(server, &["SCRIPT", "FLUSH"]);
    let a = user_manager(server).await;
    let b = user_manager(server).await;
    let name = format!("acl:{missing}");
    let (read, write) = (AcquireKind::Read, AcquireKind::Write);
    let zero = Duration::ZERO;
    let Some(r) = refused_cleanly(
        server,
        missing,
        named,
        "read grant",
        take(&a, &name, read, zero),
    )
    .await
    else {
        return true;
    };
    let busy = contended(&b, &name, write, zero);
    if refused_cleanly(server, missing, named, "write attempt on a read lock", busy)
        .await
        .is_none()
    {
        return true;
    }
    if refused_cleanly(server, missing, named, "read release", r.release())
        .await
        .is_none()
    {
        return true;
    }
    let Some(w) = refused_cleanly(
        server,
        missing,
        named,
        "write grant",
        take(&b, &name, write, zero),
    )
    .await
    else {
        return true;
    };
    let busy = contended(&a, &name, read, zero);
    if refused_cleanly(server, missing, named, "read attempt on a write lock", busy)
        .await
        .is_none()
    {
        return true;
    }
    refused_cleanly(server, missing, named, "write release", w.release())
        .await
        .is_none()
}

/// The fair lock with every right less, one at a time: some call (a grant, with
/// or without a lapsed waiter to drop first, a queued attempt, a release) fails
/// with `NoPermission` naming the command, and Redis is exactly as it was before
/// that call.
#[actix_rt::test]
async fn fair_lock_any_single_right_less_is_a_typed_error_that_changes_nothing() {
    let server = RedisServer::start();
    for (missing, named) in FAIR_COMMANDS {
        let rest: Vec<&str> = FAIR_COMMANDS
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| c != missing)
            .collect();
        set_user_with(&server, FAIR_PATTERNS, &rest);
        let plain = fair_steps(&server, missing, named, false).await;
        let lapsed = fair_steps(&server, missing, named, true).await;
        assert!(
            plain || lapsed,
            "without {missing}, everything worked: the right is not needed"
        );
    }
}

/// The read-write lock with every right less, one at a time (see `rw_steps`).
#[actix_rt::test]
async fn read_write_lock_any_single_right_less_is_a_typed_error_that_changes_nothing() {
    let server = RedisServer::start();
    for (missing, named) in RW_COMMANDS {
        let rest: Vec<&str> = RW_COMMANDS
            .iter()
            .map(|(c, _)| *c)
            .filter(|c| c != missing)
            .collect();
        set_user_with(&server, RW_PATTERNS, &rest);
        assert!(
            rw_steps(&server, missing, named).await,
            "without {missing}, everything worked: the right is not needed"
        );
    }
}

/// What `ForceUnlock` (`lockwarden unlock --force`) needs, besides `PATTERNS` and
/// `FAIR_PATTERNS` (docs/operations.md).
const FORCE_PATTERNS: &[&str] = &[
    "~redisson_lock_queue:{acl:*",
    "~redisson_rwlock:{acl:*",
    "&redisson_rwlock:{acl:*",
];

/// Commands `ForceUnlock` needs.
const FORCE_COMMANDS: &[(&str, &str)] = &[
    ("evalsha", "EVALSHA"),
    ("script|load", "SCRIPT|LOAD"),
    ("type", "TYPE"),
    ("hexists", "HEXISTS"),
    ("lindex", "LINDEX"),
    ("del", "DEL"),
    ("publish", "PUBLISH"),
];

/// A force unlock of a fair lock with a waiter queued, and of a read-write lock:
/// with every right it deletes both; with any one less it is `NoPermission`
/// naming the command and Redis is as it was. (Before, a user without LINDEX or
/// PUBLISH deleted the lock, left the waiters asleep and was told it failed.)
#[actix_rt::test]
async fn force_unlock_asks_before_it_deletes() {
    let server = RedisServer::start();
    let lock = |server: &RedisServer| {
        let _: () = raw(server, &["FLUSHALL"]);
        let _: () = raw(server, &["HSET", "acl:fair", "x:1", "1"]);
        let _: () = raw(server, &["RPUSH", "redisson_lock_queue:{acl:fair}", "y:2"]);
        let _: () = raw(server, &["HSET", "acl:rw", "mode", "read", "x:1", "1"]);
    };
    let all: Vec<&str> = FORCE_COMMANDS.iter().map(|(c, _)| *c).collect();
    for (missing, named) in FORCE_COMMANDS {
        lock(&server);
        let rest: Vec<&str> = all.iter().copied().filter(|c| c != missing).collect();
        set_user_with(&server, FORCE_PATTERNS, &rest);
        let m = user_manager(&server).await;
        let mut refused = false;
        for name in ["acl:fair", "acl:rw"] {
            let call = m.send(lockwarden::ForceUnlock::new(name));
            let step = format!("force unlock of {name}");
            let call = async { call.await.expect("running") };
            refused |= refused_cleanly(&server, missing, named, &step, call)
                .await
                .is_none();
        }
        assert!(
            refused,
            "without {missing}, everything worked: the right is not needed"
        );
    }
    lock(&server);
    set_user_with(&server, FORCE_PATTERNS, &all);
    let m = user_manager(&server).await;
    for name in ["acl:fair", "acl:rw"] {
        let deleted = m
            .send(lockwarden::ForceUnlock::new(name))
            .await
            .expect("running")
            .expect("force unlocked");
        assert!(deleted, "{name} was not there");
        assert_eq!(raw::<i64>(&server, &["EXISTS", name]), 0);
    }
}

/// Key and channel patterns of the semaphores and latches named `acl:*`
/// (docs/operations.md): the permit-expirable semaphore's permits live at
/// `{<name>}:timeout`, the scripts are handed each channel as a key, and the
/// kind labels live at `lockwarden_kind:{<name>}`.
const SYNC_PATTERNS: &[&str] = &[
    "~{acl:*",
    "~lockwarden_kind:{acl:*",
    "~lockwarden_waiters:{acl:*",
    "~redisson_sc:{acl:*",
    "&redisson_sc:{acl:*",
    "~redisson_countdownlatch__channel__{acl:*",
    "&redisson_countdownlatch__channel__{acl:*",
];

/// Commands the semaphores and the latch need.
const SYNC_COMMANDS: &[&str] = &[
    "evalsha",
    "script|load",
    "get",
    "set",
    "exists",
    "decr",
    "decrby",
    "incrby",
    "del",
    "time",
    "pttl",
    "pexpire",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zscore",
    "publish",
];

/// A user without PUBLISH takes nothing it could not give back: every grant (the
/// exclusive, fair and read-write locks, a semaphore's permits, an expirable
/// permit) and every change that wakes waiters (permits added, a latch set or
/// counted down) is `NoPermission` naming PUBLISH, with Redis as it was. Before,
/// the lock was granted and its release refused, so it stayed held for its whole
/// lease; permits were taken for good; and the synchronizers' scripts wrote, then
/// failed on the PUBLISH after the write. With PUBLISH given, the same calls work.
#[actix_rt::test]
async fn without_publish_nothing_is_taken_that_could_not_be_given_back() {
    let server = RedisServer::start();
    let mut commands: Vec<&str> = COMMANDS.iter().map(|(c, _)| *c).collect();
    commands.extend(FAIR_COMMANDS.iter().map(|(c, _)| *c));
    commands.extend(RW_COMMANDS.iter().map(|(c, _)| *c));
    commands.extend(SYNC_COMMANDS);
    commands.sort_unstable();
    commands.dedup();
    let mut patterns: Vec<&str> = FAIR_PATTERNS.to_vec();
    patterns.extend(RW_PATTERNS);
    patterns.extend(SYNC_PATTERNS);
    let without: Vec<&str> = commands
        .iter()
        .copied()
        .filter(|c| *c != "publish")
        .collect();
    set_user_with(&server, &patterns, &without);
    let _: () = raw(&server, &["SET", "acl:sem", "3"]);
    let _: () = raw(&server, &["SET", "acl:xsem", "2"]);
    let _: () = raw(&server, &["SET", "acl:latch", "2"]);
    let m = user_manager(&server).await;

    // Nothing may be written by any step: each is compared with the start.
    let before = snapshot(&server);
    let no_publish = |step: &'static str, got: Result<(), LockError>| {
        match got {
            Err(LockError::NoPermission { command, .. }) => {
                assert_eq!(command, "PUBLISH", "{step}")
            }
            other => panic!("without PUBLISH, {step}: {other:?}"),
        }
        assert_eq!(snapshot(&server), before, "{step} changed Redis");
    };
    for kind in [
        AcquireKind::Exclusive,
        AcquireKind::Fair,
        AcquireKind::Read,
        AcquireKind::Write,
    ] {
        let got = take(&m, &format!("acl:{kind:?}"), kind, Duration::ZERO).await;
        no_publish("a lock's grant", got.map(drop));
    }
    let sem = m.semaphore("acl:sem").await.expect("handle");
    no_publish("a semaphore's take", sem.try_acquire(1).await.map(drop));
    no_publish("permits added", sem.add_permits(1).await.map(drop));
    let xsem = m
        .send(lockwarden::PermitSemaphore::new("acl:xsem"))
        .await
        .expect("running")
        .expect("handle");
    no_publish(
        "an expirable permit's take",
        xsem.try_acquire(1, Some(Duration::from_secs(5)))
            .await
            .map(drop),
    );
    let latch = m.latch("acl:latch").await.expect("handle");
    no_publish("a latch's count-down", latch.count_down().await.map(drop));
    let fresh = m.latch("acl:latch2").await.expect("handle");
    no_publish("a latch's count", fresh.try_set_count(2).await.map(drop));

    // The same user with PUBLISH: each of them works.
    set_user_with(&server, &patterns, &commands);
    let m = user_manager(&server).await;
    for kind in [
        AcquireKind::Exclusive,
        AcquireKind::Fair,
        AcquireKind::Read,
        AcquireKind::Write,
    ] {
        let g = take(&m, &format!("acl:{kind:?}"), kind, Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("{kind:?} with PUBLISH: {e}"));
        g.release().await.expect("released");
    }
    let sem = m.semaphore("acl:sem").await.expect("handle");
    let permit = sem.try_acquire(1).await.expect("take").expect("a permit");
    permit.release().await.expect("given back");
    assert_eq!(sem.add_permits(1).await.expect("added"), 4);
    let xsem = m
        .send(lockwarden::PermitSemaphore::new("acl:xsem"))
        .await
        .expect("running")
        .expect("handle");
    let permit = xsem
        .try_acquire(1, Some(Duration::from_secs(5)))
        .await
        .expect("take")
        .expect("a permit");
    permit.release().await.expect("given back");
    let latch = m.latch("acl:latch").await.expect("handle");
    assert_eq!(latch.count_down().await.expect("counted"), 1);
    let fresh = m.latch("acl:latch2").await.expect("handle");
    assert!(fresh.try_set_count(2).await.expect("set"));
    assert_eq!(
        raw::<String>(&server, &["GET", "lockwarden_kind:{acl:latch2}"]),
        "latch",
        "the documented ACL lets the kind be labelled"
    );

    // Without the labels' pattern (an ACL written before them) the synchronizers
    // work the same, unlabelled.
    patterns.retain(|p| !p.starts_with("~lockwarden_kind"));
    set_user_with(&server, &patterns, &commands);
    let m = user_manager(&server).await;
    let sem = m.semaphore("acl:sem3").await.expect("handle");
    assert!(sem.try_set_permits(2).await.expect("set without the label"));
    let latch = m.latch("acl:latch3").await.expect("handle");
    assert!(latch.try_set_count(1).await.expect("set without the label"));
    assert_eq!(latch.count_down().await.expect("counted"), 0);
    assert_eq!(
        raw::<i64>(
            &server,
            &["EXISTS", "lockwarden_kind:{acl:sem3}", "acl:latch3"]
        ),
        0
    );
}

/// A user without SUBSCRIBE still gets its locks, by polling every
/// `max_retry_interval`, and the log says why, once per manager at warn (two
/// waiters on two locks, one warning), naming the rights to give. The refused
/// channels are left out of a resubscription: after the pub/sub connection is
/// killed it reconnects at once, where one refused channel in the batch failed
/// every reconnect, over and over, and no lock actor was resynced.
#[actix_rt::test]
async fn without_subscribe_waiters_poll_and_the_log_says_so_once() {
    let (log, _logging) = Captured::install();
    let server = RedisServer::start();
    let mut args = vec!["ACL", "SETUSER", "lw", "reset", "on", ">pw", "-@all"];
    args.extend(PATTERNS);
    let plus: Vec<String> = COMMANDS.iter().map(|(c, _)| format!("+{c}")).collect();
    args.extend(plus.iter().map(String::as_str));
    let _: () = raw(&server, &args);

    let holder = support::manager(&server, |c| c).await;
    let url = format!("redis://lw:pw@127.0.0.1:{}/", server.port());
    let config = lockwarden::Config::from_url(&url)
        .expect("url")
        .max_retry_interval(Duration::from_millis(300));
    let waiter = lockwarden::LockManager::start(config)
        .await
        .expect("manager as lw");
    let held = [
        support::hold(&holder, "acl:s1", |a| a).await,
        support::hold(&holder, "acl:s2", |a| a).await,
    ];
    let waits = ["acl:s1", "acl:s2"].map(|name| {
        let waiter = waiter.clone();
        actix_rt::spawn(async move {
            waiter
                .send(Acquire::new(name).wait(Duration::from_secs(20)))
                .await
        })
    });
    const WARNING: &str = "Redis refused SUBSCRIBE for want of rights";
    assert!(
        eventually(Duration::from_secs(10), || log.text().contains(WARNING)).await,
        "no warning; log:\n{}",
        log.text()
    );
    assert!(log.text().contains("+subscribe"), "{}", log.text());

    // Killing the pub/sub connection: it comes back and resyncs, once.
    let resyncs = || log.text().matches("resyncing lock actors").count();
    let before = resyncs();
    let _: i64 = raw(&server, &["CLIENT", "KILL", "USER", "lw", "SKIPME", "no"]);
    assert!(
        eventually(Duration::from_secs(10), || resyncs() > before).await,
        "the pub/sub connection did not come back; log:\n{}",
        log.text()
    );

    for guard in held {
        guard.release().await.expect("released");
    }
    for wait in waits {
        let got = wait
            .await
            .expect("task")
            .expect("running")
            .expect("the polling waiter got the lock");
        got.release().await.expect("released");
    }
    // Both waiters subscribed (each one refused) and were told once.
    assert_eq!(log.text().matches(WARNING).count(), 1, "{}", log.text());
    assert!(
        !log.text().contains("pub/sub connection failed"),
        "a reconnect failed; log:\n{}",
        log.text()
    );
}

/// The commands an operator's user needs for `status`, `list` and `top`
/// (docs/operations.md), locks and synchronizers.
const OPERATOR_COMMANDS: &[&str] = &[
    "evalsha",
    "script|load",
    "ping",
    "scan",
    "type",
    "hgetall",
    "lrange",
    "zscore",
    "pttl",
    "time",
    "get",
    "zcount",
    "pubsub|numsub",
];

/// An operator's user with the documented rights sees semaphores by their kind.
/// Without the label pattern (an operator's ACL written before the labels) the
/// synchronizers are a `NoPermission` (the CLI says so and shows the locks), and
/// the locks and a lock's status read as before: reading a lock never asks for a
/// synchronizer's keys.
#[actix_rt::test]
async fn an_operator_sees_synchronizers_with_the_label_pattern_and_locks_without_it() {
    let server = RedisServer::start();
    let m = support::manager(&server, |c| c).await;
    let held = m
        .send(Acquire::new("acl:lock"))
        .await
        .expect("running")
        .expect("held");
    let sem = m.semaphore("acl:sem").await.expect("handle");
    assert!(sem.try_set_permits(2).await.expect("set"));
    let operator = |label: bool| {
        let mut args = vec!["ACL", "SETUSER", "op", "reset", "on", ">pw", "-@all"];
        args.extend(["~acl:*", "~{acl:*", "~redisson_lock_queue:{acl:*"]);
        args.push("~redisson_lock_timeout:{acl:*");
        if label {
            args.push("~lockwarden_kind:{acl:*");
        }
        let plus: Vec<String> = OPERATOR_COMMANDS.iter().map(|c| format!("+{c}")).collect();
        args.extend(plus.iter().map(String::as_str));
        let _: () = raw(&server, &args);
    };
    let url = format!("redis://op:pw@127.0.0.1:{}/", server.port());
    let config = lockwarden::Config::from_url(&url).expect("url");

    operator(false);
    let admin = lockwarden::Admin::connect(&config).await.expect("admin");
    let locks: Vec<String> = admin
        .list("acl:*")
        .await
        .expect("locks listed")
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(locks, ["acl:lock"]);
    assert!(admin
        .describe("acl:lock")
        .await
        .expect("described")
        .is_some());
    assert_eq!(
        admin.synchronizer("acl:lock").await.expect("not a string"),
        None
    );
    match admin.synchronizers("acl:*").await {
        Err(LockError::NoPermission { .. }) => {}
        other => panic!("without the label pattern: {other:?}"),
    }
    // The command shows the locks and says why no synchronizer is shown.
    #[cfg(feature = "cli")]
    {
        let out = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &url)
            .args(["list", "--pattern", "acl:*"])
            .output()
            .await
            .expect("list ran");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stderr}");
        assert!(stdout.starts_with("acl:lock\texclusive\t"), "{stdout}");
        assert!(
            stderr.contains("semaphores and latches not shown: the Redis user may not read"),
            "{stderr}"
        );
    }

    operator(true);
    let found: Vec<(String, lockwarden::SynchronizerKind)> = admin
        .synchronizers("acl:*")
        .await
        .expect("synchronizers listed")
        .into_iter()
        .map(|s| (s.name, s.kind))
        .collect();
    assert_eq!(
        found,
        [(
            "acl:sem".to_string(),
            lockwarden::SynchronizerKind::Semaphore
        )]
    );
    held.release().await.expect("released");
}
