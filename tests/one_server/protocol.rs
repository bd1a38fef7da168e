//! The Redis layout is Redisson's, checked with raw commands: the hash at the bare
//! name, the owner field, the channel, the token counter. A client that writes the
//! same layout (as Redisson does) excludes and wakes lockwarden. Release and renew
//! keep working when Redis is out of memory.

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, LockError, Owner, ReleaseOutcome};
use support::{eventually, hold, manager, raw, RedisServer};

/// The lock is a hash at the bare name with field `<client id>:<owner>` -> count,
/// a TTL of the watchdog lease, and a token counter under the name's hash tag.
#[actix_rt::test]
async fn keys_match_the_redisson_layout() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let owner = Owner::new();
    let guard = hold(&m, "orders:42", |a| a.owner(owner)).await;

    let kind: String = raw(&server, &["TYPE", "orders:42"]);
    assert_eq!(kind, "hash");
    let fields: Vec<(String, String)> = raw(&server, &["HGETALL", "orders:42"]);
    assert_eq!(
        fields,
        vec![(guard.owner_field().to_string(), "1".to_string())]
    );
    let (client_id, number) = guard.owner_field().rsplit_once(':').expect("client:owner");
    assert!(
        uuid::Uuid::parse_str(client_id).is_ok(),
        "client id is a UUID: {client_id}"
    );
    assert_eq!(number, owner.id().to_string());
    let pttl: i64 = raw(&server, &["PTTL", "orders:42"]);
    assert!(
        pttl > 29_000 && pttl <= 30_000,
        "default watchdog lease is 30 s: {pttl}"
    );
    let token: u64 = raw(&server, &["GET", "redisson_lock_token:{orders:42}"]);
    assert_eq!(token, guard.fencing_token());

    // A release publishes "0" on redisson_lock__channel:{orders:42}.
    let client = redis::Client::open(server.url()).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("redisson_lock__channel:{orders:42}")
        .await
        .expect("subscribe");
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let msg = tokio::time::timeout(
        Duration::from_secs(2),
        futures::StreamExt::next(&mut pubsub.on_message()),
    )
    .await
    .expect("unlock message within 2 s")
    .expect("stream open");
    assert_eq!(msg.get_channel_name(), "redisson_lock__channel:{orders:42}");
    assert_eq!(msg.get_payload::<String>().expect("text"), "0");
    let exists: i64 = raw(&server, &["EXISTS", "orders:42"]);
    assert_eq!(exists, 0);
}

/// A name with its own hash tag keeps it: derived keys use `<prefix>:<name>`.
#[actix_rt::test]
async fn names_with_a_hash_tag_keep_it() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let guard = hold(&m, "{user:1}:cart", |a| a).await;
    let token: u64 = raw(&server, &["GET", "redisson_lock_token:{user:1}:cart"]);
    assert_eq!(token, guard.fencing_token());
}

/// A foreign client writing Redisson's layout (its own `<uuid>:<thread>` field)
/// excludes lockwarden, and its unlock message (DEL + PUBLISH "0") wakes our waiter
/// at once, not at our fallback poll (set to 30 s).
#[actix_rt::test]
async fn a_redisson_style_holder_excludes_and_wakes_us() {
    let server = RedisServer::start();
    let java_field = "6f1c2a3e-0000-4000-8000-000000000001:57";
    let _: i64 = raw(&server, &["HSET", "shared:job", java_field, "1"]);
    let _: i64 = raw(&server, &["PEXPIRE", "shared:job", "30000"]);

    let m = manager(&server, |c| c.max_retry_interval(Duration::from_secs(30))).await;
    let busy = m
        .send(Acquire::new("shared:job").wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(matches!(busy, Err(LockError::Timeout { .. })), "{busy:?}");
    let info = m
        .send(lockwarden::Inspect::new("shared:job"))
        .await
        .expect("running")
        .expect("inspect");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].owner_field, java_field);
    assert!(!info.holders[0].this_manager);
    assert!(info.ttl.is_some_and(|t| t > Duration::from_secs(29)));

    let waiting = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("shared:job").wait(Duration::from_secs(20)))
                .await
        }
    });
    let subscribed = eventually(Duration::from_secs(5), || {
        let n: Vec<(String, i64)> = raw(
            &server,
            &["PUBSUB", "NUMSUB", "redisson_lock__channel:{shared:job}"],
        );
        n.first().is_some_and(|(_, c)| *c == 1)
    })
    .await;
    assert!(subscribed);
    // The foreign holder unlocks the way Redisson does.
    let start = Instant::now();
    let _: i64 = raw(&server, &["DEL", "shared:job"]);
    let _: i64 = raw(
        &server,
        &["PUBLISH", "redisson_lock__channel:{shared:job}", "0"],
    );
    let guard = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("acquired");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "woke after {:?}",
        start.elapsed()
    );
    guard.release().await.expect("released");
}

/// Out of memory under `noeviction`, a holder can still renew and release (holds > 1
/// and the last one), while a new acquisition is refused with Redis's OOM error.
#[actix_rt::test]
async fn release_and_renew_work_when_redis_is_out_of_memory() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let m = manager(&server, |c| c.watchdog_lease(lease)).await;
    let owner = Owner::new();
    let a = hold(&m, "oom", |r| r.owner(owner)).await;
    let b = hold(&m, "oom", |r| r.owner(owner)).await;

    // Put 4 MB of data in, then set the limit below what is used: Redis is out of
    // memory for good (noeviction never frees anything), whatever buffers come and go.
    let mut conn = server.conn();
    let blob = "x".repeat(64 * 1024);
    for i in 0..64 {
        let _: () = redis::cmd("SET")
            .arg(format!("fill:{i}"))
            .arg(&blob)
            .query(&mut conn)
            .expect("fill");
    }
    let _: () = raw(
        &server,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    );
    let _: () = raw(&server, &["CONFIG", "SET", "maxmemory", "2mb"]);
    let res: redis::RedisResult<()> = redis::cmd("SET").arg("one:more").arg("x").query(&mut conn);
    assert!(
        res.is_err_and(|e| e.to_string().contains("OOM")),
        "Redis should refuse writes now"
    );

    // Renewal keeps the lock alive past several leases while Redis is full.
    actix_rt::time::sleep(lease * 2).await;
    assert!(a.is_lost().is_none(), "renewal failed under OOM");
    let exists: i64 = raw(&server, &["EXISTS", "oom"]);
    assert_eq!(exists, 1);

    let other = manager(&server, |c| c).await;
    let refused = other
        .send(Acquire::new("oom:new").wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(
        matches!(&refused, Err(LockError::Redis(e)) if e.to_string().contains("OOM")),
        "{refused:?}"
    );

    assert_eq!(
        a.release().await.expect("release under OOM"),
        ReleaseOutcome::StillHeld { holds: 1 }
    );
    assert_eq!(
        b.release().await.expect("last release under OOM"),
        ReleaseOutcome::Released
    );
    let exists: i64 = raw(&server, &["EXISTS", "oom"]);
    assert_eq!(exists, 0);
}

/// `release.lua` reads its latch only when told it is a retry: a retried release
/// (same request id, flag "1") answers the first outcome although the lock is gone,
/// while a first attempt (flag "0") does not look and finds nothing to release.
#[actix_rt::test]
async fn a_retried_release_answers_from_its_latch() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let g = hold(&m, "latched", |a| a).await;
    let release = redis::Script::new(include_str!("../../lua/release.lua"));
    let mut conn = server.conn();
    // The first outcome of a freeing release is {0, heard}; the rest are numbers.
    let run = |retry: &str, conn: &mut redis::Connection| -> i64 {
        let reply: redis::Value = release
            .key("latched")
            .key("redisson_lock__channel:{latched}")
            .key("redisson_unlock_latch:{latched}:r1")
            .arg("30000")
            .arg(g.owner_field())
            .arg("10000")
            .arg("0")
            .arg(retry)
            .invoke(conn)
            .expect("release script");
        match reply {
            redis::Value::Int(n) => n,
            redis::Value::Array(freed) if freed.first() == Some(&redis::Value::Int(0)) => 0,
            other => panic!("release answered {other:?}"),
        }
    };
    assert_eq!(run("0", &mut conn), 0, "the first attempt frees the lock");
    assert_eq!(run("1", &mut conn), 0, "a retry answers the first outcome");
    assert_eq!(
        run("0", &mut conn),
        -1,
        "a first attempt does not read the latch"
    );
    let latch: String = raw(&server, &["GET", "redisson_unlock_latch:{latched}:r1"]);
    assert_eq!(latch, "1");
}
