//! The bodies of `tests/one_server/spin.rs`'s tests (the spin lock, Redisson's `getSpinLock`),
//! written against [`Target`] so that `tests/topologies/on_cluster.rs` runs them on a cluster
//! too. Each scenario's doc is on its body here; `each!` at the end lists them once
//! for both runs.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwarden::{Acquire, LockError, LockGuard};

use crate::support::Target;

/// A Redisson client's owner field (`<client uuid>:<thread id>`), for holds
/// written by hand in Redisson's layout.
const JAVA: &str = "8b0d6c3e-2f41-4c55-9a77-5c1e0f3a9d21:57";

/// Calls of the subscribe commands so far (classic and sharded), summed over
/// the masters.
fn subscribe_calls(t: &Target) -> u64 {
    let stats = t.commandstats();
    ["subscribe", "ssubscribe", "psubscribe"]
        .iter()
        .map(|c| stats.get(*c).copied().unwrap_or(0))
        .sum()
}

/// Acquisition attempts so far, summed over the masters: each runs PTTL once,
/// first (`lua/acquire.lua`). Script calls would count the managers' registry
/// writes too.
fn attempts(t: &Target) -> u64 {
    t.commandstats().get("pttl").copied().unwrap_or(0)
}

/// A spin waiter behind a Redisson holder (its hash written by hand) asks Redis
/// again and again without ever subscribing, and takes the lock soon after the
/// holder deletes it without publishing anything (as Redisson's spin lock
/// releases). Its own hold is Redisson's layout: its owner field with a count of 1.
pub async fn a_spin_waiter_polls_without_subscribing(t: &Target) {
    let name = "spin:quiet";
    let _: i64 = t.raw(&["HSET", name, JAVA, "1"]);
    let _: i64 = t.raw(&["PEXPIRE", name, "30000"]);
    // A long fallback poll: only the spin backoff can make it ask again soon.
    let m = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let subscribes = subscribe_calls(t);
    let tried = attempts(t);
    let waiting = actix_rt::spawn(async move {
        let got = m
            .send(Acquire::new(name).spin().wait(Duration::from_secs(20)))
            .await
            .expect("running");
        (Instant::now(), got, m)
    });
    // It asks again and again while the Java client holds the lock.
    let mut polled = false;
    let limit = Instant::now() + Duration::from_secs(10);
    while Instant::now() < limit {
        if attempts(t) >= tried + 5 {
            polled = true;
            break;
        }
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(polled, "the spin waiter did not ask Redis again");
    assert_eq!(
        t.subscribers(&format!("redisson_lock__channel:{{{name}}}")),
        0
    );

    // Redisson's spin unlock: DEL, no message.
    let deleted_at = Instant::now();
    let _: i64 = t.raw(&["DEL", name]);
    let (acquired_at, got, _m) = waiting.await.expect("task");
    let guard = got.expect("acquired after the Java client let go");
    let took = acquired_at - deleted_at;
    eprintln!("spin waiter took the lock {took:?} after the DEL");
    // The backoff tops out at 128 ms; a loaded machine gets a wide margin.
    assert!(
        took < Duration::from_secs(3),
        "took {took:?} after the release"
    );
    assert_eq!(
        subscribe_calls(t),
        subscribes,
        "a spin waiter must never subscribe"
    );
    let count: String = t.raw(&["HGET", name, guard.owner_field()]);
    assert_eq!(count, "1", "Redisson's layout: owner field -> hold count");
    guard.release().await.expect("released");
    assert!(!t.exists(name));
}

/// A spin waiter never waits past the moment the holder's lease ends, whatever
/// its backoff: with a constant 10 s backoff it takes a lock whose holder's lease
/// ran out after 400 ms well before the backoff's 10 s.
pub async fn a_spin_waiter_asks_again_when_the_lease_ends(t: &Target) {
    let name = "spin:lapsing";
    let _: i64 = t.raw(&["HSET", name, JAVA, "1"]);
    let _: i64 = t.raw(&["PEXPIRE", name, "400"]);
    let m = t
        .manager(|c| c.spin_backoff(Duration::from_secs(10), Duration::from_secs(10)))
        .await;
    let began = Instant::now();
    let guard = m
        .send(Acquire::new(name).spin().wait(Duration::from_secs(8)))
        .await
        .expect("running")
        .expect("acquired when the lease ended");
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: the backoff, not the lease, decided"
    );
    guard.release().await.expect("released");
}

/// Spin lockers and pub/sub lockers of one name, in two managers, exclude each
/// other: no two inside at once, and the fencing tokens go up in grant order.
/// The pub/sub manager's fallback poll is 30 s, so its waiters finish in time only
/// because the spin lock's release publishes the unlock message.
pub async fn spin_and_pubsub_lockers_exclude_each_other(t: &Target) {
    let name = "spin:mixed";
    let spinning = t.manager(|c| c).await;
    let listening = t
        .manager(|c| c.max_retry_interval(Duration::from_secs(30)))
        .await;
    let inside = Arc::new(AtomicU32::new(0));
    let overlaps = Arc::new(AtomicU32::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let spin = i % 2 == 0;
        let m = if spin {
            spinning.clone()
        } else {
            listening.clone()
        };
        let (inside, overlaps, tokens) = (inside.clone(), overlaps.clone(), tokens.clone());
        tasks.push(actix_rt::spawn(async move {
            for _ in 0..8 {
                let ask = Acquire::new(name).wait(Duration::from_secs(20));
                let ask = if spin { ask.spin() } else { ask };
                let g: LockGuard = m.send(ask).await.expect("running")?;
                if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokens.lock().expect("tokens").push(g.fencing_token());
                actix_rt::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await?;
            }
            Ok::<(), LockError>(())
        }));
    }
    for task in tasks {
        task.await
            .expect("task")
            .expect("every round acquired and released");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let tokens = tokens.lock().expect("tokens").clone();
    assert_eq!(tokens.len(), 48);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens out of grant order: {tokens:?}"
    );
    assert!(!t.exists(name));
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/spin.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            a_spin_waiter_polls_without_subscribing,
            a_spin_waiter_asks_again_when_the_lease_ends,
            spin_and_pubsub_lockers_exclude_each_other,
        }
    };
}
pub(crate) use each;
