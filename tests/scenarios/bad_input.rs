//! The bodies of `tests/one_server/bad_input.rs`'s tests that hold on any deployment,
//! written against [`Target`] so that `tests/topologies/on_cluster.rs` runs them on a cluster
//! too. Each scenario's doc is on its body here. (On a
//! shared cluster other scenarios' keys are there already, so "nothing written"
//! compares key counts before and after.)

use std::time::Duration;

use lockwarden::{
    Acquire, Config, ForceUnlock, Handle, Inspect, LockError, LockManager, NameError,
};

use crate::support::Target;

/// Empty, over-long and cross-slot names are refused by every entry point, and
/// nothing is written.
pub async fn bad_names_are_refused_before_reaching_redis(t: &Target) {
    let m = t.manager(|c| c.max_name_len(64)).await;
    let long = "x".repeat(65);
    let cases: [(&str, NameError); 5] = [
        ("", NameError::Empty),
        (&long, NameError::TooLong { len: 65, max: 64 }),
        ("}x", NameError::CrossSlot),
        ("a{}b", NameError::CrossSlot),
        ("open{brace", NameError::CrossSlot),
    ];
    // The manager writes its client registry entry in the background after it
    // starts (a script too): a lock taken and given back first lets it land.
    let warm = m
        .send(Acquire::new("bad-input:warm"))
        .await
        .expect("running")
        .expect("acquired");
    warm.release().await.expect("released");
    let keys_before = t.dbsize();
    let scripts = || t.commandstats().get("evalsha").copied().unwrap_or(0);
    let scripts_before = scripts();
    for (name, want) in cases {
        let got = m.send(Acquire::new(name)).await.expect("running");
        assert_eq!(invalid_name(got, name), want.clone(), "{name:?}");
        let got = m.send(Handle::new(name)).await.expect("running");
        assert_eq!(invalid_name(got, name), want, "{name:?}");
        let got = m.send(ForceUnlock::new(name)).await.expect("running");
        invalid_name(got, name);
        let got = m.send(Inspect::new(name)).await.expect("running");
        invalid_name(got, name);
    }
    assert_eq!(t.dbsize(), keys_before);
    // Only our own INFO/DBSIZE calls reached Redis: no script ran.
    assert_eq!(scripts(), scripts_before, "a refused request reached Redis");
}

/// The name error a request was refused with; panics on any other answer.
fn invalid_name<T: std::fmt::Debug>(got: Result<T, LockError>, name: &str) -> NameError {
    match got {
        Err(LockError::InvalidName(e)) => e,
        other => panic!("{name:?}: {other:?}"),
    }
}

/// Zero, sub-millisecond and absurd leases are refused: `PEXPIRE 0` would delete the
/// lock, and a lease past the maximum is almost surely a unit mistake.
pub async fn bad_leases_are_refused(t: &Target) {
    let m = t.manager(|c| c.max_lease(Duration::from_secs(3600))).await;
    let keys_before = t.dbsize();
    for lease in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(3601),
        Duration::MAX,
    ] {
        let got = m
            .send(Acquire::new("l").lease(lease))
            .await
            .expect("running");
        assert!(
            matches!(got, Err(LockError::InvalidLease { lease: l, .. }) if l == lease),
            "{lease:?}: {got:?}"
        );
    }
    assert_eq!(t.dbsize(), keys_before);
}

/// Configurations that cannot work are refused at start, with the reason.
pub async fn bad_configs_are_refused_at_start(t: &Target) {
    let cases: Vec<(&str, Config)> = vec![
        (
            "zero watchdog lease",
            t.config().watchdog_lease(Duration::ZERO),
        ),
        (
            "renewal not shorter than the lease",
            t.config()
                .watchdog_lease(Duration::from_secs(1))
                .renew_interval(Duration::from_secs(2)),
        ),
        ("zero name length", t.config().max_name_len(0)),
        (
            "zero response timeout",
            t.config().response_timeout(Duration::ZERO),
        ),
        (
            "watchdog lease over the maximum",
            t.config()
                .max_lease(Duration::from_secs(1))
                .watchdog_lease(Duration::from_secs(2)),
        ),
        ("empty batches", t.config().batching(0, 2)),
        ("batches over 1024 ops", t.config().batching(1025, 2)),
        ("no batch in flight", t.config().batching(128, 0)),
    ];
    for (what, cfg) in cases {
        let got = LockManager::start(cfg).await.expect_err(what);
        assert!(
            matches!(got, LockError::InvalidConfig(_)),
            "{what}: {got:?}"
        );
    }
    let got = Config::from_url("http://example.com").expect_err("wrong scheme");
    // The message says what is accepted, not only that this was not.
    assert!(
        matches!(&got, LockError::InvalidConfig(why) if why.contains("rediss://") && why.contains("redis://[user:password@]host")),
        "{got:?}"
    );
}

/// A key that holds something other than a lock hash is neither taken, nor
/// deleted by a force-unlock, nor reported as a lock: each call gets a Redis error
/// naming the wrong type, and the key is untouched.
pub async fn keys_that_are_not_locks_are_left_alone(t: &Target) {
    let m = t.manager(|c| c).await;
    let _: () = t.raw(&["SET", "user:data", "precious"]);
    let got = m
        .send(Acquire::new("user:data").wait(Duration::from_secs(1)))
        .await
        .expect("running");
    assert!(
        matches!(&got, Err(e @ LockError::Redis(_)) if !e.is_retryable()),
        "{got:?}"
    );
    let got = m
        .send(ForceUnlock::new("user:data"))
        .await
        .expect("running");
    assert!(matches!(got, Err(LockError::Redis(_))), "{got:?}");
    let got = m.send(Inspect::new("user:data")).await.expect("running");
    assert!(matches!(got, Err(LockError::Redis(_))), "{got:?}");
    let value: String = t.raw(&["GET", "user:data"]);
    assert_eq!(value, "precious");
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from. `tests/one_server/bad_input.rs`
/// makes a standalone test of each (`each!(standalone!(scenarios))`), and
/// `tests/topologies/on_cluster.rs` runs them in turn on one cluster (`each!(run!(..))`).
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            bad_names_are_refused_before_reaching_redis,
            bad_leases_are_refused,
            bad_configs_are_refused_at_start,
            keys_that_are_not_locks_are_left_alone,
        }
    };
}
pub(crate) use each;
