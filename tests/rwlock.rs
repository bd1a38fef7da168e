//! The read-write lock: readers share it and exclude writers; a writer may also read
//! (a downgrade) and keeps reading after it releases the write lock; a reader's
//! request for the write lock is refused at once; a crashed reader's holds lapse on
//! their own; and the Redis layout is Redisson's (`mode`, per-hold timeout keys,
//! the `redisson_rwlock` channel with `1` for a write release and `0` for a read).

#[path = "scenarios/rwlock.rs"]
mod scenarios;
mod support;

use std::time::Duration;

use lockwarden::{Acquire, LockError, Owner, ReleaseOutcome};
use scenarios::{hash, hold_key, sorted};
use support::{hold, Target};

/// Three readers in two managers hold the lock together while a writer in a third
/// waits; the writer gets it only after the last reader releases, woken by the
/// message (its fallback poll is 30 s).
#[actix_rt::test]
async fn readers_share_and_the_writer_gets_it_after_the_last_reader() {
    scenarios::readers_share_and_the_writer_gets_it_after_the_last_reader(&Target::standalone())
        .await;
}

/// Readers in two managers wait while a writer holds; its release (message `1`)
/// lets all of them in together, promptly, and they then hold at the same time.
#[actix_rt::test]
async fn waiting_readers_all_wake_when_the_writer_releases() {
    scenarios::waiting_readers_all_wake_when_the_writer_releases(&Target::standalone()).await;
}

/// A writer takes read holds of its own lock at once (a downgrade) while other
/// readers stay out; when it releases the write lock it keeps reading, in read
/// mode, and a waiting reader (fallback poll 30 s) is woken and joins.
#[actix_rt::test]
async fn a_writer_downgrades_and_keeps_reading() {
    scenarios::a_writer_downgrades_and_keeps_reading(&Target::standalone()).await;
}

/// A reader asking for the write lock is refused with `UpgradeRefused` at once,
/// even with a long wait, whether its read hold is known locally or only in Redis;
/// nothing changes.
#[actix_rt::test]
async fn an_upgrade_is_refused_at_once() {
    scenarios::an_upgrade_is_refused_at_once(&Target::standalone()).await;
}

/// A reader whose runtime dies stops renewing: its hold's timeout key lapses
/// within a lease even though a live reader keeps renewing the lock, and once the
/// live reader releases, the waiting writer gets the lock at once.
#[actix_rt::test]
async fn a_crashed_readers_holds_lapse_and_free_the_writer() {
    scenarios::a_crashed_readers_holds_lapse_and_free_the_writer(&Target::standalone()).await;
}

/// The layout is Redisson's: `mode`, reader fields with hold counts, one timeout
/// key per read hold (`{rw}:<field>:rwlock_timeout:<n>`) that the hash outlives,
/// `<field>:write` for the writer; a write release publishes `1` and the last read
/// release `0` on `redisson_rwlock:{rw}`; Inspect reports the kind and mode, the
/// readers and the writer; a foreign (Redisson-style) reader excludes our writer
/// and its unlock wakes it.
#[actix_rt::test]
async fn keys_channels_and_inspect_match_the_protocol() {
    scenarios::keys_channels_and_inspect_match_the_protocol(&Target::standalone()).await;
}

/// Two managers, eight tasks each mixing reads and writes (one write in four):
/// a writer is always alone inside and readers never meet a writer, checked in
/// this process and in Redis; readers do share (at least two inside at some point).
#[actix_rt::test]
async fn readers_and_writers_exclude_under_contention() {
    scenarios::readers_and_writers_exclude_under_contention(&Target::standalone()).await;
}

/// Out of memory under `noeviction`, read and write holds (a writer and its own
/// read hold) are still renewed past several leases and released, and the lock
/// ends up free; a new reader is refused with Redis's OOM error.
#[actix_rt::test]
async fn release_and_renew_work_when_redis_is_out_of_memory() {
    let t = Target::standalone();
    let Target::Server(server) = &t else {
        unreachable!("a standalone target")
    };
    let lease = Duration::from_millis(600);
    let m = t.manager(|c| c.watchdog_lease(lease)).await;
    let me = Owner::new();
    let write = hold(&m, "rw", |a| a.write().owner(me)).await;
    let read = hold(&m, "rw", |a| a.read().owner(me)).await;
    support::fill_until_oom(server);
    let other = t.manager(|c| c).await;
    let refused = other
        .send(Acquire::new("rw2").read().wait(Duration::ZERO))
        .await
        .expect("running");
    assert!(
        matches!(&refused, Err(LockError::Redis(e)) if e.to_string().contains("OOM")),
        "{refused:?}"
    );
    actix_rt::time::sleep(lease * 2).await;
    assert!(write.is_lost().is_none() && read.is_lost().is_none());
    assert!(t.exists(&hold_key(read.owner_field(), 1)));
    let released = write.release().await.expect("write release under OOM");
    assert_eq!(released, ReleaseOutcome::Released);
    assert_eq!(
        hash(&t),
        sorted(vec![("mode", "read"), (read.owner_field(), "1")])
    );
    let released = read.release().await.expect("read release under OOM");
    assert_eq!(released, ReleaseOutcome::Released);
    assert!(!t.exists("rw"));
}
