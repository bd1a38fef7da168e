//! The metrics recorded through the `metrics` facade, read back with
//! `metrics-util`'s debugging recorder after a scripted scenario: acquisitions by
//! kind and outcome, wait and hold times, releases, renewals, a lost lock, a
//! reconnect, coalesced batch sizes. One test: the recorder is global to the
//! process, so a second test in this binary would add to the same numbers.

use lockwarden_testkit as support;

use std::collections::HashMap;
use std::time::Duration;

use lockwarden::{Acquire, GetStats, LockError, LostReason};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::{hold, manager, raw, RedisServer};

/// Everything recorded so far, summed over snapshots (a snapshot drains the
/// debugging recorder): `name{label=value,...}` -> counter total, or the
/// histogram's values.
#[derive(Default)]
struct Seen {
    counters: HashMap<String, u64>,
    histograms: HashMap<String, Vec<f64>>,
    gauges: HashMap<String, f64>,
}

impl Seen {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            match value {
                DebugValue::Counter(n) => *self.counters.entry(name).or_default() += n,
                DebugValue::Histogram(v) => self
                    .histograms
                    .entry(name)
                    .or_default()
                    .extend(v.into_iter().map(|x| x.into_inner())),
                DebugValue::Gauge(v) => {
                    self.gauges.insert(name, v.into_inner());
                }
            }
        }
    }

    fn counter(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    fn histogram(&self, name: &str) -> &[f64] {
        self.histograms.get(name).map_or(&[], Vec::as_slice)
    }
}

/// After 8 exclusive acquisitions (5 taken and released, one held while another
/// manager times out on it and then waits for it through a pub/sub reconnect, that
/// waiter's, one with a lease that runs out) and one read lock,
/// the counters and histograms say exactly that, agree with `GetStats`, and the
/// watchdog's renewals, a pub/sub reconnect and the coalescer's batches show; no
/// series names a lock unless the manager opts in (`Config::metric_lock_names`).
#[actix_rt::test]
async fn a_scripted_scenario_reads_back_through_the_facade() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    let mut seen = Seen::default();

    let server = RedisServer::start();
    let lease = Duration::from_millis(400);
    let a = manager(&server, |c| c.watchdog_lease(lease)).await;
    let b = manager(&server, |c| c.watchdog_lease(lease)).await;
    for i in 0..5 {
        let g = hold(&a, &format!("m:{i}"), |x| x).await;
        g.release().await.expect("released");
    }
    let busy = hold(&a, "m:busy", |x| x).await;
    let busy_since = std::time::Instant::now();
    let refused = b
        .send(Acquire::new("m:busy").wait(Duration::from_millis(100)))
        .await
        .expect("running");
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    let leased = hold(&a, "m:leased", |x| x.lease(Duration::from_millis(150))).await;
    assert_eq!(leased.lost().await, LostReason::LeaseExpired);
    let read = hold(&a, "m:rw", |x| x.read()).await;

    // B waits for the busy lock (subscribed to its channel) while the watchdog
    // renews it; B's subscriber (the one in pub/sub mode) comes back after a
    // kill and subscribes again.
    let waiter = {
        let b = b.clone();
        actix_rt::spawn(async move {
            b.send(Acquire::new("m:busy").wait(Duration::from_secs(60)))
                .await
                .expect("running")
        })
    };
    let subscribed = support::eventually(Duration::from_secs(10), || {
        let subs: Vec<(String, i64)> = raw(
            &server,
            &["PUBSUB", "NUMSUB", "redisson_lock__channel:{m:busy}"],
        );
        subs.first().is_some_and(|(_, n)| *n == 1)
    })
    .await;
    assert!(subscribed, "B did not start waiting");
    let _: i64 = raw(&server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        seen.take(&snapshotter);
        if seen.counter("lockwarden_renewals_total{outcome=renewed}") >= 2
            && seen.counter("lockwarden_reconnects_total{}") >= 1
            && seen.counter("lockwarden_resubscribes_total{}") >= 1
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no renewals or reconnects within 20 s: {:?}",
            seen.counters
        );
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
    // Granted before `hold` answered, forgotten after `release` was called.
    let busy_held = busy_since.elapsed().as_secs_f64();
    busy.release().await.expect("released");
    let handed = waiter.await.expect("joined").expect("B gets the lock");
    handed.release().await.expect("released");
    read.release().await.expect("released");
    seen.take(&snapshotter);

    let c = |name: &str| seen.counter(name);
    assert_eq!(
        c("lockwarden_acquisitions_total{kind=exclusive,outcome=acquired}"),
        8,
        "{:?}",
        seen.counters
    );
    assert_eq!(
        c("lockwarden_acquisitions_total{kind=exclusive,outcome=timeout}"),
        1
    );
    assert_eq!(
        c("lockwarden_acquisitions_total{kind=read,outcome=acquired}"),
        1
    );
    assert_eq!(c("lockwarden_locks_lost_total{reason=lease_expired}"), 1);
    assert_eq!(c("lockwarden_renewals_total{outcome=failed}"), 0);
    let sa = a.send(GetStats).await.expect("running");
    let sb = b.send(GetStats).await.expect("running");
    assert_eq!(c("lockwarden_releases_total{}"), sa.released + sb.released);
    assert_eq!(c("lockwarden_releases_total{}"), 8);
    assert_eq!(sa.acquired + sb.acquired, 9);
    // Confirmation is on by default and the server has no replica: each grant
    // and release went unconfirmed, and says so.
    assert!(
        c("lockwarden_unconfirmed_changes_total{op=grant}") >= 9,
        "{:?}",
        seen.counters
    );
    assert!(c("lockwarden_unconfirmed_changes_total{op=release}") >= 1);
    assert_eq!(seen.gauges.get("lockwarden_replicas_counted{}"), Some(&0.0));

    let waits = seen.histogram("lockwarden_acquire_wait_seconds{kind=exclusive}");
    assert_eq!(waits.len(), 8);
    assert!(waits.iter().all(|w| (0.0..60.0).contains(w)), "{waits:?}");
    let holds = seen.histogram("lockwarden_hold_seconds{kind=exclusive}");
    // 5 released, the lost one, the busy one, B's.
    assert_eq!(holds.len(), 8, "{holds:?}");
    assert!(
        holds.iter().any(|h| *h >= busy_held),
        "{busy_held} {holds:?}"
    );
    assert_eq!(
        seen.histogram("lockwarden_hold_seconds{kind=read}").len(),
        1
    );
    let batches = seen.histogram("lockwarden_batch_ops{}");
    assert!(batches.len() >= 12, "{batches:?}");
    assert!(batches.iter().all(|n| *n >= 1.0));
    let renewal_batches = seen.histogram("lockwarden_renewal_batch_locks{}");
    assert!(!renewal_batches.is_empty());
    // No series so far names a lock: only an opted-in manager's do.
    assert!(
        seen.counters
            .keys()
            .chain(seen.histograms.keys())
            .all(|k| !k.contains("lock=")),
        "{:?}",
        seen.counters
    );

    let named = manager(&server, |c| c.metric_lock_names(true)).await;
    hold(&named, "m:named", |x| x)
        .await
        .release()
        .await
        .expect("released");
    let mut after = Seen::default();
    after.take(&snapshotter);
    assert_eq!(
        after.counter("lockwarden_lock_acquisitions_total{kind=exclusive,lock=m:named}"),
        1,
        "{:?}",
        after.counters
    );
    assert_eq!(
        after.counter("lockwarden_acquisitions_total{kind=exclusive,outcome=acquired}"),
        1
    );
    assert_eq!(
        after
            .histogram("lockwarden_lock_hold_seconds{kind=exclusive,lock=m:named}")
            .len(),
        1
    );
}
