//! The read-write lock: readers share it and exclude writers; a writer may also read
//! (a downgrade) and keeps reading after it releases the write lock; a reader's
//! request for the write lock is refused at once; a crashed reader's holds lapse on
//! their own; and the Redis layout is Redisson's (`mode`, per-hold timeout keys,
//! the `redisson_rwlock` channel with `1` for a write release and `0` for a read).

#[path = "../scenarios/rwlock.rs"]
mod scenarios;
use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, LockError, Owner, ReleaseOutcome};
use scenarios::{hash, hold_key, sorted};
use support::{hold, Target};

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));

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
