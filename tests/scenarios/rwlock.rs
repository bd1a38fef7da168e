//! The bodies of `tests/one_server/rwlock.rs`'s tests that hold on any deployment, and their
//! helpers, written against [`Target`] so that `tests/topologies/on_cluster.rs` runs them on
//! a cluster too. Each scenario's doc is on its body here.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use lockwarden::{
    Acquire, AcquireKind, Inspect, LockError, LockGuard, LockKind, LockManager, Owner,
    ReleaseOutcome,
};

use crate::support::{eventually, hold, next_payload, Target};

pub const CHANNEL: &str = "redisson_rwlock:{rw}";

/// The lock hash of `rw`, sorted by field.
pub fn hash(t: &Target) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = t.raw(&["HGETALL", "rw"]);
    fields.sort();
    fields
}

/// Pairs as owned strings, sorted like [`hash`].
pub fn sorted(pairs: Vec<(&str, &str)>) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = pairs
        .into_iter()
        .map(|(f, v)| (f.to_string(), v.to_string()))
        .collect();
    pairs.sort();
    pairs
}

/// The timeout key of read hold `n` of the reader with this owner field.
pub fn hold_key(field: &str, n: u32) -> String {
    format!("{{rw}}:{field}:rwlock_timeout:{n}")
}

/// Starts an acquisition of `rw` in the background.
pub fn start(
    m: &Addr<LockManager>,
    tune: impl FnOnce(Acquire) -> Acquire + 'static,
) -> actix_rt::task::JoinHandle<Result<LockGuard, LockError>> {
    let m = m.clone();
    actix_rt::spawn(async move {
        m.send(tune(Acquire::new("rw").wait(Duration::from_secs(20))))
            .await
            .expect("manager running")
    })
}

/// What `Inspect` says of `rw`.
pub async fn inspect(m: &Addr<LockManager>) -> lockwarden::LockInfo {
    let info = m.send(Inspect::new("rw")).await.expect("running");
    info.expect("inspect")
}

/// Asserts that less than a second passed since `since`: only a message (the
/// fallback polls are 30 s) can have been that quick.
pub fn assert_prompt(since: Instant) {
    assert!(
        since.elapsed() < Duration::from_secs(1),
        "after {:?}",
        since.elapsed()
    );
}

/// Waits until someone is subscribed to the read-write channel `n` times.
pub async fn wait_subscribers(t: &Target, n: i64) {
    let ok = eventually(Duration::from_secs(5), || t.subscribers(CHANNEL) == n).await;
    assert!(ok, "never {n} subscribers on {CHANNEL}");
}

/// Three readers in two managers hold the lock together while a writer in a third
/// waits; the writer gets it only after the last reader releases, woken by the
/// message (its fallback poll is 30 s).
pub async fn readers_share_and_the_writer_gets_it_after_the_last_reader(t: &Target) {
    let m1 = t.manager(|c| c).await;
    let m2 = t.manager(|c| c).await;
    let w = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let quick = |a: Acquire| a.read().wait(Duration::from_secs(1));
    let r1 = hold(&m1, "rw", quick).await;
    let r2 = hold(&m2, "rw", quick).await;
    let r3 = hold(&m1, "rw", quick).await;
    assert_eq!(r1.kind(), AcquireKind::Read);
    let fields = hash(t);
    assert_eq!(fields.len(), 4, "mode and three readers: {fields:?}");
    assert!(fields.contains(&("mode".into(), "read".into())));

    let writer = start(&w, |a| a.write());
    wait_subscribers(t, 1).await;
    r1.release().await.expect("released");
    r2.release().await.expect("released");
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    assert!(!writer.is_finished(), "the writer got in beside a reader");

    let released = Instant::now();
    assert_eq!(
        r3.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    let g = writer.await.expect("task").expect("acquired");
    assert_prompt(released);
    assert_eq!(g.kind(), AcquireKind::Write);
    assert!(g.owner_field().ends_with(":write"));
    assert_eq!(
        hash(t),
        sorted(vec![("mode", "write"), (g.owner_field(), "1")])
    );
    g.release().await.expect("released");
    assert!(!t.exists("rw"));
}

/// Readers in two managers wait while a writer holds; its release (message `1`)
/// lets all of them in together, promptly, and they then hold at the same time.
pub async fn waiting_readers_all_wake_when_the_writer_releases(t: &Target) {
    let holder = t.manager(|c| c).await;
    let slow = |c: lockwarden::Config| c.max_retry_interval(Duration::from_secs(30));
    let ms = [t.manager(slow).await, t.manager(slow).await];
    let writer = hold(&holder, "rw", |a| a.write()).await;
    let readers: Vec<_> = (0..6).map(|i| start(&ms[i % 2], |a| a.read())).collect();
    wait_subscribers(t, 2).await;
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a reader got in beside the writer"
    );

    let released = Instant::now();
    writer.release().await.expect("released");
    let mut guards = Vec::new();
    for r in readers {
        guards.push(r.await.expect("task").expect("acquired"));
    }
    assert_prompt(released);
    let fields = hash(t);
    assert_eq!(fields.len(), 7, "mode and six readers at once: {fields:?}");
    assert!(fields.contains(&("mode".into(), "read".into())));
    for g in guards {
        g.release().await.expect("released");
    }
    assert!(!t.exists("rw"));
}

/// A writer takes read holds of its own lock at once (a downgrade) while other
/// readers stay out; when it releases the write lock it keeps reading, in read
/// mode, and a waiting reader (fallback poll 30 s) is woken and joins.
pub async fn a_writer_downgrades_and_keeps_reading(t: &Target) {
    let m = t.manager(|c| c).await;
    let other = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let me = Owner::new();
    let write = hold(&m, "rw", |a| a.write().owner(me)).await;
    let read = hold(&m, "rw", |a| a.read().owner(me).wait(Duration::ZERO)).await;
    assert_eq!(
        read.owner_field(),
        write.owner_field().trim_end_matches(":write")
    );
    let (w, r) = (write.owner_field(), read.owner_field());
    assert_eq!(hash(t), sorted(vec![("mode", "write"), (w, "1"), (r, "1")]));
    assert!(t.exists(&hold_key(r, 1)));

    let refused = other.send(Acquire::new("rw").read().wait(Duration::ZERO));
    let refused = refused.await.expect("running");
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    let waiting = start(&other, |a| a.read());
    wait_subscribers(t, 1).await;

    let released = Instant::now();
    assert_eq!(
        write.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    let joined = waiting.await.expect("task").expect("acquired");
    assert_prompt(released);
    let j = joined.owner_field();
    assert_eq!(hash(t), sorted(vec![("mode", "read"), (r, "1"), (j, "1")]));
    assert!(read.is_lost().is_none());
    joined.release().await.expect("released");
    assert_eq!(
        read.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    assert!(!t.exists("rw"));
}

/// A reader asking for the write lock is refused with `UpgradeRefused` at once,
/// even with a long wait, whether its read hold is known locally or only in Redis;
/// nothing changes.
pub async fn an_upgrade_is_refused_at_once(t: &Target) {
    let m = t.manager(|c| c).await;
    let me = Owner::new();
    let read = hold(&m, "rw", |a| a.read().owner(me)).await;
    let start_at = Instant::now();
    let res = m
        .send(
            Acquire::new("rw")
                .write()
                .owner(me)
                .wait(Duration::from_secs(10)),
        )
        .await
        .expect("running");
    assert!(matches!(res, Err(LockError::UpgradeRefused)), "{res:?}");
    assert!(start_at.elapsed() < Duration::from_millis(500));

    // A read hold this manager does not know of (as after a lost reply), once the
    // known one is gone: the write script itself refuses.
    let ghost = Owner::new();
    let (client_id, _) = read.owner_field().rsplit_once(':').expect("client:owner");
    let ghost_field = format!("{client_id}:{}", ghost.id());
    let _: i64 = t.raw(&["HSET", "rw", &ghost_field, "1"]);
    let _: () = t.raw(&["SET", &hold_key(&ghost_field, 1), "1", "PX", "30000"]);
    read.release().await.expect("released");
    let start_at = Instant::now();
    let res = m
        .send(
            Acquire::new("rw")
                .write()
                .owner(ghost)
                .wait(Duration::from_secs(10)),
        )
        .await
        .expect("running");
    assert!(matches!(res, Err(LockError::UpgradeRefused)), "{res:?}");
    assert!(start_at.elapsed() < Duration::from_millis(500));
    assert_eq!(
        hash(t),
        sorted(vec![("mode", "read"), (ghost_field.as_str(), "1")])
    );
    // The ghost would hold the lock for 30 s: gone for the next scenario.
    let _: i64 = t.raw(&["DEL", "rw", &hold_key(&ghost_field, 1)]);
}

/// A reader whose runtime dies stops renewing: its hold's timeout key lapses
/// within a lease even though a live reader keeps renewing the lock, and once the
/// live reader releases, the waiting writer gets the lock at once.
pub async fn a_crashed_readers_holds_lapse_and_free_the_writer(t: &Target) {
    let lease = Duration::from_millis(600);
    let live = t.manager(|c| c.watchdog_lease(lease)).await;
    let live_read = hold(&live, "rw", |a| a.read()).await;

    let config = t.config().watchdog_lease(lease);
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
    let dead = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let m = LockManager::start(config).await.expect("start");
            let guard = m
                .send(Acquire::new("rw").read())
                .await
                .expect("running")
                .expect("acquired");
            held_tx
                .send(guard.owner_field().to_string())
                .expect("test is listening");
            let _ = crash_rx.await;
            std::mem::forget(guard);
        });
    });
    let dead_field = held_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("dead reader acquired");
    let w = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let writer = start(&w, |a| a.write());
    wait_subscribers(t, 1).await;
    // Both readers' holds are renewed while they live:
    actix_rt::time::sleep(lease * 2).await;
    assert!(t.exists(&hold_key(&dead_field, 1)));

    crash_tx.send(()).expect("dead reader waiting");
    dead.join().expect("dead reader thread");
    let died = Instant::now();
    let lapsed = eventually(lease * 2, || !t.exists(&hold_key(&dead_field, 1))).await;
    assert!(lapsed, "the dead reader's hold is still there");
    assert!(
        died.elapsed() <= lease + Duration::from_millis(300),
        "lapsed after {:?}",
        died.elapsed()
    );
    assert!(t.exists(&hold_key(live_read.owner_field(), 1)));
    assert!(
        !writer.is_finished(),
        "the writer got in beside the live reader"
    );

    let released = Instant::now();
    live_read.release().await.expect("released");
    let g = writer.await.expect("task").expect("acquired");
    assert_prompt(released);
    g.release().await.expect("released");
}

/// The layout is Redisson's: `mode`, reader fields with hold counts, one timeout
/// key per read hold (`{rw}:<field>:rwlock_timeout:<n>`) that the hash outlives,
/// `<field>:write` for the writer; a write release publishes `1` and the last read
/// release `0` on `redisson_rwlock:{rw}`; Inspect reports the kind and mode, the
/// readers and the writer; a foreign (Redisson-style) reader excludes our writer
/// and its unlock wakes it.
pub async fn keys_channels_and_inspect_match_the_protocol(t: &Target) {
    let lease = Duration::from_millis(5_000);
    let m = t.manager(|c| c.watchdog_lease(lease)).await;
    let me = Owner::new();
    let a = hold(&m, "rw", |r| r.read().owner(me)).await;
    let b = hold(&m, "rw", |r| r.read().owner(me)).await;
    let field = a.owner_field().to_string();
    assert_eq!(
        hash(t),
        sorted(vec![("mode", "read"), (field.as_str(), "2")])
    );
    let hash_ttl: i64 = t.raw(&["PTTL", "rw"]);
    for n in [1, 2] {
        let ttl: i64 = t.raw(&["PTTL", &hold_key(&field, n)]);
        assert!(
            ttl > 0 && ttl <= hash_ttl,
            "hold {n}: {ttl} vs hash {hash_ttl}"
        );
    }
    let info = inspect(&m).await;
    let read_mode = LockKind::ReadWrite {
        mode: "read".into(),
    };
    assert_eq!(
        (info.kind.clone(), info.mode()),
        (Some(read_mode), Some("read"))
    );
    assert_eq!((info.holders.len(), info.holders[0].holds), (1, 2));
    assert!(info.writer().is_none() && info.holders[0].this_manager);

    let mut messages = t.listen(&[CHANNEL.to_string()]).await;
    assert_eq!(
        b.release().await.expect("release"),
        ReleaseOutcome::StillHeld { holds: 1 }
    );
    assert!(!t.exists(&hold_key(&field, 2)));
    assert_eq!(
        a.release().await.expect("release"),
        ReleaseOutcome::Released
    );
    assert_eq!(next_payload(&mut messages).await, "0");

    let w = hold(&m, "rw", |r| r.write()).await;
    let info = inspect(&m).await;
    assert_eq!(info.mode(), Some("write"));
    assert_eq!(
        info.writer().map(|h| h.owner_field.as_str()),
        Some(w.owner_field())
    );
    w.release().await.expect("release");
    assert_eq!(next_payload(&mut messages).await, "1");

    // A Redisson reader, written by hand.
    let java = "6f1c2a3e-0000-4000-8000-000000000001:57";
    let _: i64 = t.raw(&["HSET", "rw", "mode", "read", java, "1"]);
    let _: () = t.raw(&["SET", &hold_key(java, 1), "1", "PX", "30000"]);
    let _: i64 = t.raw(&["PEXPIRE", "rw", "30000"]);
    let slow = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let writer = start(&slow, |r| r.write());
    wait_subscribers(t, 2).await;
    let started = Instant::now();
    let _: i64 = t.raw(&["DEL", "rw"]);
    t.publish(CHANNEL, "0");
    let g = writer.await.expect("task").expect("acquired");
    assert_prompt(started);
    g.release().await.expect("released");
}

/// Who is inside the critical section, as seen in this process.
#[derive(Default)]
struct Inside {
    readers: AtomicI64,
    writers: AtomicI64,
    most_readers: AtomicI64,
}

/// Runs one command on a counter key and returns its value (0 for a missing key).
async fn count(conn: &mut redis::aio::MultiplexedConnection, cmd: &str, key: &str) -> i64 {
    let n: Option<i64> = redis::cmd(cmd)
        .arg(key)
        .query_async(conn)
        .await
        .expect("counter");
    n.unwrap_or(0)
}

/// Two managers, eight tasks each mixing reads and writes (one write in four):
/// a writer is always alone inside and readers never meet a writer, checked in
/// this process and in Redis; readers do share (at least two inside at some point).
pub async fn readers_and_writers_exclude_under_contention(t: &Target) {
    let managers = [t.manager(|c| c).await, t.manager(|c| c).await];
    let inside = Arc::new(Inside::default());
    let mut tasks = Vec::new();
    for (i, m) in managers.iter().cycle().take(16).enumerate() {
        let (m, inside) = (m.clone(), inside.clone());
        // Both counters under one hash tag: one connection serves both on a
        // cluster too.
        let mut conn = t.conn_for("{in}").await;
        tasks.push(actix_rt::spawn(async move {
            for round in 0..6 {
                let write = (i + round) % 4 == 0;
                let ask = Acquire::new("rw").wait(Duration::from_secs(30));
                let ask = if write { ask.write() } else { ask.read() };
                let guard = m.send(ask).await.expect("running").expect("acquired");
                // Each side counts itself in, then looks for the other: two that
                // overlap cannot both miss each other.
                let (mine, theirs) = if write {
                    ("{in}:w", "{in}:r")
                } else {
                    ("{in}:r", "{in}:w")
                };
                let n = count(&mut conn, "INCR", mine).await;
                let other = count(&mut conn, "GET", theirs).await;
                assert_eq!(other, 0, "a {mine} met a {theirs} (seen in Redis)");
                if write {
                    assert_eq!(n, 1, "two writers (seen in Redis)");
                    assert_eq!(inside.writers.fetch_add(1, Ordering::SeqCst), 0);
                    assert_eq!(inside.readers.load(Ordering::SeqCst), 0);
                } else {
                    let now = inside.readers.fetch_add(1, Ordering::SeqCst) + 1;
                    inside.most_readers.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(inside.writers.load(Ordering::SeqCst), 0);
                }
                actix_rt::time::sleep(Duration::from_millis(3)).await;
                let side = if write {
                    &inside.writers
                } else {
                    &inside.readers
                };
                side.fetch_sub(1, Ordering::SeqCst);
                count(&mut conn, "DECR", mine).await;
                guard.release().await.expect("released");
            }
        }));
    }
    for t in tasks {
        t.await.expect("task did not panic");
    }
    let most = inside.most_readers.load(Ordering::SeqCst);
    assert!(most >= 2, "readers never shared the lock");
    let free = eventually(Duration::from_secs(2), || !t.exists("rw")).await;
    assert!(free, "the lock is free at the end: {:?}", hash(t));
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/rwlock.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            readers_share_and_the_writer_gets_it_after_the_last_reader,
            waiting_readers_all_wake_when_the_writer_releases,
            a_writer_downgrades_and_keeps_reading,
            an_upgrade_is_refused_at_once,
            a_crashed_readers_holds_lapse_and_free_the_writer,
            keys_channels_and_inspect_match_the_protocol,
            readers_and_writers_exclude_under_contention,
        }
    };
}
pub(crate) use each;
