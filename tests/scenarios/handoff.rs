//! The bodies of `tests/one_server/handoff.rs`'s tests (the exclusive lock's direct
//! handoff across processes, `Config::direct_handoff`), written against [`Target`] so
//! that `tests/topologies/on_cluster.rs` runs them on a cluster too (where the handoff
//! channel is a sharded one). The release that frees the lock makes the first live
//! place of its handoff queue the holder and tells that waiter's process, which then
//! holds the lock with no acquisition of its own. Two managers stand for two
//! processes (each has its own connections, subscriber and client id). Each
//! scenario's doc is on its body here; `each!` at the end lists them once for both
//! runs.

use std::time::{Duration, Instant};

use actix::{Addr, MailboxError};
use futures::StreamExt;
use lockwarden::{Acquire, LockError, LockGuard, LockManager, ReleaseOutcome};

use crate::support::{eventually, hold, Target};

/// The handoff queue, places and channel prefix of the lock `name`.
fn keys(name: &str) -> (String, String, String) {
    (
        format!("lockwarden_handoff_queue:{{{name}}}"),
        format!("lockwarden_handoff_timeout:{{{name}}}"),
        format!("lockwarden_handoff__channel:{{{name}}}:"),
    )
}

/// The places in the handoff queue of the lock `name`.
fn places(t: &Target, name: &str) -> i64 {
    t.raw(&["ZCARD", &keys(name).1])
}

/// Waits (5 s at most) until the lock `name` has `n` places in its handoff queue.
async fn until_places(t: &Target, name: &str, n: i64) {
    let placed = eventually(Duration::from_secs(5), || places(t, name) == n).await;
    assert!(placed, "{} places, not {n}", places(t, name));
}

/// The handoff channels of the lock `name` someone listens on (sharded ones on
/// a cluster), once there is one (5 s at most).
async fn handoff_channels(t: &Target, name: &str) -> Vec<String> {
    let pattern = format!("{}*", keys(name).2.replace('{', "\\{").replace('}', "\\}"));
    let which = if t.is_cluster() {
        "SHARDCHANNELS"
    } else {
        "CHANNELS"
    };
    let mut channels: Vec<String> = Vec::new();
    let node = t.node_for(name);
    let listening = eventually(Duration::from_secs(5), || {
        channels = crate::support::raw(node, &["PUBSUB", which, &pattern]);
        !channels.is_empty()
    })
    .await;
    assert!(listening, "nobody listens on a handoff channel of {name}");
    channels
}

/// Puts a place for `field` at the front (`LPUSH`) of `name`'s handoff queue,
/// live for 10 s: a waiter that is gone but whose place is not (yet).
fn place_ahead(t: &Target, name: &str, field: &str) {
    let (queue, timeouts, _) = keys(name);
    let (secs, _): (u64, u64) = crate::support::raw(t.node_for(name), &["TIME"]);
    let lapses = (secs * 1000 + 10_000).to_string();
    let _: i64 = t.raw(&["LPUSH", &queue, field]);
    let _: i64 = t.raw(&["ZADD", &timeouts, &lapses, field]);
}

/// Two managers with the direct handoff: two processes.
async fn two_processes(t: &Target) -> (Addr<LockManager>, Addr<LockManager>) {
    let first = t.manager(|c| c.direct_handoff(true)).await;
    let second = t.manager(|c| c.direct_handoff(true)).await;
    (first, second)
}

/// A wait of `m` for the lock `name` (10 s at most), running.
type Waiting = actix_rt::task::JoinHandle<Result<Result<LockGuard, LockError>, MailboxError>>;

/// `m` waits for the lock `name`, 10 s at most.
fn wait_in(m: Addr<LockManager>, name: &'static str) -> Waiting {
    actix_rt::spawn(async move {
        m.send(Acquire::new(name).wait(Duration::from_secs(10)))
            .await
    })
}

/// The guard that `waiting` ends with; `what` says how it should come.
async fn granted(waiting: Waiting, what: &str) -> LockGuard {
    waiting
        .await
        .expect("task")
        .expect("running")
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Redisson's `tryLockInnerAsync`: take or re-enter, else answer the PTTL.
const REDISSON_TRY_LOCK: &str = "if ((redis.call('exists', KEYS[1]) == 0) or \
    (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; \
    return redis.call('pttl', KEYS[1]);";

/// A Java client's owner field, as Redisson makes them (`<uuid>:<thread id>`).
const JAVA_FIELD: &str = "6f1c2a3e-0000-4000-8000-000000000001:57";

/// Runs Redisson's acquisition for `JAVA_FIELD`: `None` taken, `Some(pttl)` held.
fn redisson_try_lock(t: &Target, name: &str) -> Option<i64> {
    crate::support::raw(
        t.node_for(name),
        &["EVAL", REDISSON_TRY_LOCK, "1", name, "30000", JAVA_FIELD],
    )
}

/// A waiter of another manager is handed the lock by the holder's release: it
/// runs no acquisition that grants (no HINCRBY: the handoff writes the hold with
/// HSET), its token is higher, its place is gone, and its lease is made the
/// watchdog's (30 s) beyond the handoff's short 800 ms.
pub async fn a_waiter_in_another_process_is_handed_the_lock(t: &Target) {
    let name = "ho:handed";
    let (first, second) = two_processes(t).await;
    let held = hold(&first, name, |a| a).await;
    let waiting = wait_in(second, name);
    until_places(t, name, 1).await;
    assert_eq!(handoff_channels(t, name).await.len(), 1);

    let before = t.commandstats();
    let old_token = held.fencing_token();
    assert_eq!(
        held.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    let guard = granted(waiting, "handed the lock").await;
    let after = t.commandstats();
    let delta = |name: &str| after.get(name).unwrap_or(&0) - before.get(name).unwrap_or(&0);
    assert_eq!(delta("hincrby"), 0, "no acquisition granted it: {after:?}");
    assert!(guard.fencing_token() > old_token);
    assert_eq!(places(t, name), 0, "the place was taken out");
    let extended = eventually(Duration::from_secs(2), || {
        t.raw::<i64>(&["PTTL", name]) > 10_000
    })
    .await;
    assert!(extended, "the handed lease is extended to the watchdog's");
    assert_eq!(
        guard.release().await.expect("released"),
        ReleaseOutcome::Released
    );
    assert!(!t.exists(name));
}

/// A waiter that died with a place (written here as a SIGKILLed process leaves
/// it: a live deadline, and no subscription, which went with its connection)
/// costs the lock nothing: the release finds nobody to tell, takes the hold
/// back and hands the lock to the live waiter behind it at once.
pub async fn a_dead_waiters_place_is_skipped(t: &Target) {
    let name = "ho:dead";
    let (first, second) = two_processes(t).await;
    let held = hold(&first, name, |a| a).await;
    let dead = "0000dead-0000-4000-8000-000000000000:1";
    place_ahead(t, name, dead);
    let waiting = wait_in(second, name);
    until_places(t, name, 2).await;

    let start = Instant::now();
    held.release().await.expect("released");
    let guard = granted(waiting, "handed the lock past the dead place").await;
    let delay = start.elapsed();
    assert!(
        delay < Duration::from_millis(300),
        "the dead waiter cost {delay:?}"
    );
    let fields: Vec<String> = t.raw(&["HKEYS", name]);
    assert!(!fields.iter().any(|f| f == dead), "{fields:?}");
    guard.release().await.expect("released");
}

/// A waiter whose process froze with a place (written here as a connection
/// that listens on that process's handoff channel and does nothing else: a
/// SIGSTOPped process keeps its connections) is handed the lock and costs it
/// the handoff's short lease: the live waiter behind it sees that lease at its
/// next refresh of its place, asks when it runs out, and holds the lock within
/// 1 s of the release.
pub async fn a_frozen_waiter_delays_the_next_by_less_than_a_second(t: &Target) {
    let name = "ho:frozen";
    let (first, second) = two_processes(t).await;
    let held = hold(&first, name, |a| a).await;
    let frozen = "0000f0ze-0000-4000-8000-000000000000";
    let _listening = t.listen(&[format!("{}{frozen}", keys(name).2)]).await;
    place_ahead(t, name, &format!("{frozen}:1"));
    let waiting = wait_in(second, name);
    until_places(t, name, 2).await;

    let start = Instant::now();
    held.release().await.expect("released");
    let guard = granted(waiting, "acquired after the frozen waiter's lease").await;
    let delay = start.elapsed();
    assert!(
        delay < Duration::from_secs(1),
        "the frozen waiter cost {delay:?}"
    );
    assert!(
        delay >= Duration::from_millis(500),
        "the frozen waiter was handed the lock first ({delay:?})"
    );
    guard.release().await.expect("released");
}

/// A waiter that timed out takes its place out of the handoff queue, so the
/// release that follows frees the lock rather than handing it to nobody.
pub async fn a_waiter_that_timed_out_leaves_no_place_behind(t: &Target) {
    let name = "ho:timed";
    let (first, second) = two_processes(t).await;
    let held = hold(&first, name, |a| a).await;
    let late = second
        .send(Acquire::new(name).wait(Duration::from_millis(300)))
        .await
        .expect("running");
    assert!(matches!(late, Err(LockError::Timeout { .. })), "{late:?}");
    until_places(t, name, 0).await;
    held.release().await.expect("released");
    assert!(!t.exists(name), "freed, handed to nobody");
}

/// A handoff to a waiter of a process that is gone (its place was taken out
/// too late) is given back at once by the process that hears it, well before
/// the handoff's short lease runs out, and goes to the next place.
pub async fn a_handoff_to_a_waiter_that_left_is_given_back(t: &Target) {
    let name = "ho:left";
    let (first, second) = two_processes(t).await;
    let held = hold(&first, name, |a| a).await;
    let waiting = wait_in(second, name);
    until_places(t, name, 1).await;
    let channels = handoff_channels(t, name).await;
    let client = channels[0].strip_prefix(&keys(name).2).expect("prefix");
    // A place of a waiter of the second manager that no longer waits, ahead
    // of the live one.
    let gone = format!("{client}:999999");
    place_ahead(t, name, &gone);

    let start = Instant::now();
    held.release().await.expect("released");
    let guard = granted(waiting, "handed the lock after the give-back").await;
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "given back, not left to lapse ({:?})",
        start.elapsed()
    );
    let fields: Vec<String> = t.raw(&["HKEYS", name]);
    assert!(!fields.contains(&gone), "{fields:?}");
    guard.release().await.expect("released");
}

/// A Redisson client on the same lock is excluded while lockwarden waiters are
/// handed the lock (no unlock message then: it would find the lock taken), and
/// woken by the release that frees the lock, after which it takes it.
pub async fn a_redisson_client_is_excluded_and_woken_when_the_lock_frees(t: &Target) {
    let name = "ho:java";
    let (first, second) = two_processes(t).await;
    let mut messages = t
        .listen(&[format!("redisson_lock__channel:{{{name}}}")])
        .await;

    let held = hold(&first, name, |a| a).await;
    assert!(redisson_try_lock(t, name).is_some(), "excluded");
    let waiting = wait_in(second, name);
    until_places(t, name, 1).await;
    held.release().await.expect("released");
    let guard = granted(waiting, "handed the lock").await;
    assert!(redisson_try_lock(t, name).is_some(), "still excluded");
    let quiet = tokio::time::timeout(Duration::from_millis(200), messages.next()).await;
    assert!(quiet.is_err(), "no unlock message for a handoff: {quiet:?}");

    guard.release().await.expect("released");
    let msg = tokio::time::timeout(Duration::from_secs(2), messages.next())
        .await
        .expect("woken within 2 s")
        .expect("stream open");
    assert_eq!(msg.get_payload::<String>().expect("text"), "0");
    assert_eq!(redisson_try_lock(t, name), None, "the Java client takes it");
}

/// Waiters of three processes on one lock (two each), each holding it five
/// times: nobody holds it beside another, every grant has its own token, the
/// lock passed between processes by handoffs (the release's HSET of the next
/// place's field), and nothing is left behind: no hold, no place.
pub async fn waiters_of_three_processes_take_turns_in_place_order(t: &Target) {
    let name = "ho:turns";
    let mut managers = Vec::new();
    for _ in 0..3 {
        managers.push(t.manager(|c| c.direct_handoff(true)).await);
    }
    let before = t.commandstats();
    let inside = std::rc::Rc::new(std::cell::Cell::new(0u32));
    let mut tasks = Vec::new();
    for (i, m) in managers.iter().enumerate() {
        for j in 0..2 {
            let (m, inside) = (m.clone(), inside.clone());
            tasks.push(actix_rt::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..5 {
                    let guard = m
                        .send(Acquire::new(name).wait(Duration::from_secs(20)))
                        .await
                        .expect("running")
                        .unwrap_or_else(|e| panic!("waiter {i}.{j}: {e}"));
                    inside.set(inside.get() + 1);
                    assert_eq!(inside.get(), 1, "two holders at once");
                    actix_rt::time::sleep(Duration::from_millis(2)).await;
                    inside.set(inside.get() - 1);
                    tokens.push(guard.fencing_token());
                    guard.release().await.expect("released");
                }
                tokens
            }));
        }
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("waiter"));
    }
    let mut sorted = all.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 30, "every grant has its own token");
    let after = t.commandstats();
    let hset = after.get("hset").unwrap_or(&0) - before.get("hset").unwrap_or(&0);
    assert!(hset >= 1, "no handoff between processes: {after:?}");
    assert!(!t.exists(name), "nothing left held");
    until_places(t, name, 0).await;
}

/// The scenarios of this file, in the order the cluster run takes them: the one
/// list both runs come from. `tests/one_server/handoff.rs` makes a standalone test
/// of each (`each!(standalone!(scenarios))`), and `tests/topologies/on_cluster.rs`
/// runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            a_waiter_in_another_process_is_handed_the_lock,
            a_dead_waiters_place_is_skipped,
            a_frozen_waiter_delays_the_next_by_less_than_a_second,
            a_waiter_that_timed_out_leaves_no_place_behind,
            a_handoff_to_a_waiter_that_left_is_given_back,
            a_redisson_client_is_excluded_and_woken_when_the_lock_frees,
            waiters_of_three_processes_take_turns_in_place_order,
        }
    };
}
pub(crate) use each;
