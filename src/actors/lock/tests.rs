//! The lock actor under its Supervisor, driven from inside the crate: a restart keeps
//! the waiters and the holding, and re-reads the holding from Redis. (The restart is
//! forced with a test-only message; in service it follows a Redis reply of a shape the
//! protocol does not allow.)

use lockwarden_testkit as server;

use std::time::Duration;

use actix::Addr;

use super::{Derail, LockActor, QueueLen};
use crate::front::manager::ActorOf;
use crate::kind::Kind;
use crate::{Acquire, Config, LockGuard, LockManager, LostReason, ReleaseOutcome};
use server::RedisServer;

/// The running actor of the exclusive lock `name`.
async fn actor_of(m: &Addr<LockManager>, name: &'static str) -> Addr<LockActor> {
    m.send(ActorOf(name, Kind::Exclusive))
        .await
        .expect("running")
        .expect("the lock has an actor")
}

/// A hold of `name`, taken at once.
async fn held(m: &Addr<LockManager>, name: &str) -> LockGuard {
    m.send(Acquire::new(name))
        .await
        .expect("running")
        .expect("acquired")
}

/// Whether the actor's queue holds `len` waiters within 2.5 s.
async fn queue_reaches(actor: &Addr<LockActor>, len: usize) -> bool {
    for _ in 0..500 {
        if actor.send(QueueLen).await.expect("delivered") == len {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

fn config(redis: &RedisServer, lease_ms: u64) -> Config {
    Config::from_url(&redis.url())
        .expect("test URL")
        .watchdog_lease(Duration::from_millis(lease_ms))
}

/// A restarted lock actor keeps its waiter and its holding: the watchdog resumes
/// (the lock outlives several leases), the guard releases normally, and the waiter
/// is then served.
#[actix_rt::test]
async fn a_restarted_lock_actor_keeps_its_waiters_and_holding() {
    let redis = RedisServer::start();
    let m = LockManager::start(config(&redis, 600))
        .await
        .expect("start");
    let guard = held(&m, "r").await;
    let waiting = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("r").wait(Duration::from_secs(10)))
                .await
        }
    });
    let actor = actor_of(&m, "r").await;
    assert!(queue_reaches(&actor, 1).await, "the waiter never queued");

    actor.send(Derail).await.expect("delivered");
    assert_eq!(
        actor.send(QueueLen).await.expect("delivered"),
        1,
        "the restart dropped the waiter"
    );
    actix_rt::time::sleep(Duration::from_millis(1500)).await; // 2.5 leases
    assert!(
        guard.is_lost().is_none(),
        "the holding did not survive the restart"
    );
    let held: i64 = redis::cmd("HEXISTS")
        .arg("r")
        .arg(guard.owner_field())
        .query(&mut redis.conn())
        .expect("HEXISTS");
    assert_eq!(held, 1, "renewal did not resume after the restart");

    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    let next = tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("waiter served after the release")
        .expect("task")
        .expect("running")
        .expect("acquired");
    next.release().await.expect("released");
}

/// After a restart the holding is checked in Redis at once: a lock deleted behind
/// the actor's back is reported lost right away, not at the next renewal (10 s).
#[actix_rt::test]
async fn a_restarted_lock_actor_rereads_its_holding_from_redis() {
    let redis = RedisServer::start();
    let m = LockManager::start(config(&redis, 30_000))
        .await
        .expect("start");
    let guard = held(&m, "gone").await;
    let _: i64 = redis::cmd("DEL")
        .arg("gone")
        .query(&mut redis.conn())
        .expect("DEL");
    actor_of(&m, "gone")
        .await
        .send(Derail)
        .await
        .expect("delivered");
    let reason = tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("noticed at the restart");
    assert_eq!(reason, LostReason::OwnerGone);
}

/// A waiter whose caller stops waiting (its `send` future dropped) leaves the
/// queue at once, while the lock is still held: the closing of the caller's
/// answer channel tells the lock actor, with nothing polling for it.
#[actix_rt::test]
async fn a_waiter_whose_caller_left_leaves_the_queue_at_once() {
    let redis = RedisServer::start();
    let m = LockManager::start(config(&redis, 30_000))
        .await
        .expect("start");
    let guard = held(&m, "q").await;
    let waiting = actix_rt::spawn({
        let m = m.clone();
        async move { m.send(Acquire::new("q")).await }
    });
    let actor = actor_of(&m, "q").await;
    assert!(queue_reaches(&actor, 1).await, "the waiter never queued");
    waiting.abort();
    assert!(
        queue_reaches(&actor, 0).await,
        "a waiter whose caller left stayed queued"
    );
    assert_eq!(
        guard.release().await.expect("release"),
        ReleaseOutcome::Released
    );
}

/// An idle lock actor stops `idle_timeout` after its last use, not after its
/// first quiet moment: a use inside the quiet period moves the end (the timer
/// left running from the earlier period looks again when it rings), and the
/// actor still stops once nothing happens.
#[actix_rt::test]
async fn an_idle_lock_actor_stops_a_full_idle_timeout_after_its_last_use() {
    let redis = RedisServer::start();
    let idle = Duration::from_millis(400);
    let m = LockManager::start(config(&redis, 30_000).idle_timeout(idle))
        .await
        .expect("start");
    let _ = held(&m, "i").await.release().await.expect("release");
    actix_rt::time::sleep(idle / 2).await;
    let _ = held(&m, "i").await.release().await.expect("release");
    let last_use = std::time::Instant::now();
    let mut stopped = None;
    for _ in 0..600 {
        if m.send(ActorOf("i", Kind::Exclusive))
            .await
            .expect("running")
            .is_none()
        {
            stopped = Some(last_use.elapsed());
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    let stopped = stopped.expect("the idle actor never stopped");
    assert!(
        stopped >= idle,
        "stopped {stopped:?} after its last use, before the idle timeout"
    );
}

/// Every event hands back a list of effects; an effect the size of a waiter
/// made that list a large allocation (glibc's slow path) on every acquire and
/// release, so the variants that carry a waiter or what it wants are boxed.
/// Four effects, the usual most, fit the allocator's fast sizes (1 KiB).
#[test]
fn an_effect_is_small_so_each_events_list_of_effects_is_a_small_allocation() {
    use crate::actors::waiting::engine::Effect;
    let size = std::mem::size_of::<Effect<super::waits::LockWaits>>();
    assert!(size <= 64, "an effect is {size} bytes");
    assert!(
        std::mem::size_of::<super::waiters::Want>() > 64,
        "the want it boxes is large"
    );
}
