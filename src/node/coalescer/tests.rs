//! The coalescer driven directly, so that a batch can be forced: calls issued in one
//! poll of the test task are all queued before the driver runs, and go as one
//! script call.

use futures::future::join_all;
use lockwarden_testkit::RedisServer;
use redis::aio::ConnectionManager;

use super::Coalescer;
use crate::node::{Conn, Topology};
use crate::wire::{self, AcquireReply, ReleaseReply, ScriptCall};

const LEASE_MS: u64 = 30_000;
const LATCH_MS: u64 = 10_000;

async fn coalescer(redis: &RedisServer) -> Coalescer {
    let client = redis::Client::open(redis.url()).expect("test URL");
    let conn = ConnectionManager::new(client).await.expect("connect");
    Coalescer::start(Conn::standalone(conn), Topology::Standalone, 128, 1)
}

fn script_calls(redis: &RedisServer) -> u64 {
    redis.commandstats().get("evalsha").copied().unwrap_or(0)
}

/// Acquires `name` for `field` through the coalescer.
async fn acquire(via: &Coalescer, name: &str, field: &str) -> redis::RedisResult<AcquireReply> {
    via.call(&wire::Acquire {
        name,
        field,
        lease_ms: LEASE_MS,
        token_ttl_ms: 60_000,
        new_owner: false,
        reentrant: true,
        delay_ms: 0,
        place_ms: 0,
    })
    .await
}

/// Releases one hold of `name` for `field` through the coalescer.
async fn release(
    via: &Coalescer,
    name: &str,
    field: &str,
    request_id: &str,
    retry: bool,
) -> redis::RedisResult<ReleaseReply> {
    via.call(&wire::Release {
        name,
        field,
        lease_ms: LEASE_MS,
        request_id,
        latch_ttl_ms: LATCH_MS,
        retry,
        hand_lease_ms: 0,
        token_ttl_ms: 60_000,
    })
    .await
}

/// Loads the scripts, so that the calls counted afterwards are the test's own.
async fn warm_up(via: &Coalescer) {
    acquire(via, "warm", "w:1").await.expect("acquire");
    release(via, "warm", "w:1", "warm", false)
        .await
        .expect("release");
    let batch = vec![acquire(via, "warm", "w:1"), acquire(via, "warm2", "w:1")];
    for res in join_all(batch).await {
        res.expect("acquire in a batch");
    }
}

/// In one batch, an acquisition of a key that is not a lock hash gets Redis's
/// WRONGTYPE error, while the acquisitions and releases around it are served as if
/// alone, in order; the batch is one script call.
#[actix_rt::test]
async fn an_op_that_fails_leaves_the_rest_of_its_batch_alone() {
    let redis = RedisServer::start();
    let via = coalescer(&redis).await;
    warm_up(&via).await;
    let _: () = redis::cmd("SET")
        .arg("not-a-lock")
        .arg("x")
        .query(&mut redis.conn())
        .expect("SET");
    let before = script_calls(&redis);

    let names: Vec<String> = (0..8).map(|i| format!("lock:{i}")).collect();
    let acquisitions = names
        .iter()
        .take(4)
        .map(|n| acquire(&via, n, "c:1"))
        .chain([acquire(&via, "not-a-lock", "c:1")])
        .chain(names.iter().skip(4).map(|n| acquire(&via, n, "c:1")));
    let replies = join_all(acquisitions).await;
    assert_eq!(script_calls(&redis) - before, 1, "one batch, one call");

    for (i, reply) in replies.iter().enumerate() {
        if i == 4 {
            let e = reply.as_ref().expect_err("a string is not a lock");
            assert_eq!(e.code(), Some("WRONGTYPE"), "{e}");
        } else {
            assert!(
                matches!(reply, Ok(AcquireReply::Acquired { holds: 1, .. })),
                "op {i}: {reply:?}"
            );
        }
    }
    // The releases, and one of a lock nobody holds, also in one batch.
    let before = script_calls(&redis);
    let releases = names
        .iter()
        .map(|n| release(&via, n, "c:1", n, false))
        .chain([release(&via, "lock:none", "c:1", "x", false)]);
    let replies = join_all(releases).await;
    assert_eq!(script_calls(&redis) - before, 1, "one batch, one call");
    let (last, freed) = replies.split_last().expect("replies");
    assert!(matches!(last, Ok(ReleaseReply::NotHeld)), "{last:?}");
    for reply in freed {
        assert!(
            matches!(reply, Ok(ReleaseReply::Released { .. })),
            "{reply:?}"
        );
    }
    let left: i64 = redis::cmd("EXISTS")
        .arg(&names)
        .query(&mut redis.conn())
        .expect("EXISTS");
    assert_eq!(left, 0, "a lock was left held");
}

/// Fencing tokens handed out within one batch keep increasing per lock: two
/// owners taking turns on one lock inside the same batches get ever larger tokens.
#[actix_rt::test]
async fn tokens_increase_across_and_within_batches() {
    let redis = RedisServer::start();
    let via = coalescer(&redis).await;
    warm_up(&via).await;
    let mut last = 0;
    for round in 0..5 {
        // Acquire, release and acquire again by another owner, all in one batch.
        let id = format!("r{round}");
        let (first, released, second) = futures::join!(
            acquire(&via, "shared", "a:1"),
            release(&via, "shared", "a:1", &id, false),
            acquire(&via, "shared", "b:1"),
        );
        let (
            Ok(AcquireReply::Acquired { token: t1, .. }),
            Ok(AcquireReply::Acquired { token: t2, .. }),
        ) = (first, second)
        else {
            panic!("both acquisitions must succeed in order");
        };
        assert!(matches!(released, Ok(ReleaseReply::Released { .. })));
        assert!(last < t1 && t1 < t2, "{last} {t1} {t2}");
        last = t2;
        let id = format!("b{round}");
        release(&via, "shared", "b:1", &id, false)
            .await
            .expect("release");
    }
}

/// Through the coalescer, a release retried with its request id answers the first
/// outcome from the latch; the same id sent as a first attempt does not read it.
#[actix_rt::test]
async fn a_retried_release_is_answered_from_the_latch() {
    let redis = RedisServer::start();
    let via = coalescer(&redis).await;
    acquire(&via, "l", "c:1").await.expect("acquire");
    let first = release(&via, "l", "c:1", "req", false).await;
    assert!(
        matches!(first, Ok(ReleaseReply::Released { .. })),
        "{first:?}"
    );
    let retry = release(&via, "l", "c:1", "req", true).await;
    assert!(
        matches!(retry, Ok(ReleaseReply::Released { .. })),
        "{retry:?}"
    );
    let fresh = release(&via, "l", "c:1", "req", false).await;
    assert!(matches!(fresh, Ok(ReleaseReply::NotHeld)), "{fresh:?}");
}

/// When the round trip fails, every op of the batch gets the error.
#[actix_rt::test]
async fn a_failed_round_trip_fails_every_op_of_its_batch() {
    let mut redis = RedisServer::start();
    let via = coalescer(&redis).await;
    warm_up(&via).await;
    redis.kill();
    let names: Vec<String> = (0..4).map(|i| format!("k{i}")).collect();
    let replies = join_all(names.iter().map(|n| acquire(&via, n, "c:1"))).await;
    for reply in replies {
        assert!(reply.is_err(), "{reply:?}");
    }
}

/// A call that finds nothing in flight goes alone as its plain script: the batch
/// script is never even loaded, so a lone call keeps the plain script's behaviour
/// (out of memory, for one).
#[actix_rt::test]
async fn a_lone_call_runs_the_plain_script() {
    let redis = RedisServer::start();
    let via = coalescer(&redis).await;
    for round in 0..3 {
        acquire(&via, "alone", "c:1").await.expect("acquire");
        let id = format!("r{round}");
        release(&via, "alone", "c:1", &id, false)
            .await
            .expect("release");
    }
    let mut acquire = wire::Acquire {
        name: "x",
        field: "x",
        lease_ms: 1,
        token_ttl_ms: 1,
        new_owner: false,
        reentrant: true,
        delay_ms: 0,
        place_ms: 0,
    }
    .invocation();
    let mut release = wire::Release {
        name: "x",
        field: "x",
        lease_ms: 1,
        request_id: "x",
        latch_ttl_ms: 1,
        retry: false,
        hand_lease_ms: 0,
        token_ttl_ms: 1,
    }
    .invocation();
    let (batch, _) = wire::batch_invocation([&mut acquire, &mut release].into_iter());
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(batch.script.get(wire::Publish::Plain).get_hash())
        .arg(acquire.script.get(wire::Publish::Plain).get_hash())
        .arg(release.script.get(wire::Publish::Plain).get_hash())
        .query(&mut redis.conn())
        .expect("SCRIPT EXISTS");
    assert_eq!(loaded, [false, true, true]);
    assert_eq!(
        script_calls(&redis),
        6 + 2,
        "two loads (NOSCRIPT), six calls"
    );
}
