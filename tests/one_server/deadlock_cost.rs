//! What finding a deadlock costs Redis (issue 40): the commands of one check of
//! a wait (its record, then the walk's reads), counted by `INFO commandstats`
//! while a cycle of two and of three managers is found and broken, and nothing
//! else runs. docs/performance.md, "Deadlock detection", cites these numbers.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockwarden::{Acquire, Inspect, LockError, Owner};

use crate::support::{self, eventually, raw, RedisServer};

/// Long enough that the waits' own attempts are over well before the first
/// check, short enough that a second check (at twice this) comes before the
/// waits are recorded for operators (`RECORD_AFTER`, 1 s), so the counts hold
/// detection alone.
const TIMEOUT: Duration = Duration::from_millis(400);

/// The commands Redis ran in a cycle of `n` managers over `n` locks, from the
/// moment every wait was listening to the deadlock error (nothing released
/// yet, but the victim's wait has ended: its `UNSUBSCRIBE` and the `HDEL` of
/// its record may be in), by name, script-internal ones included. Without
/// detection (`detect` false), over as long as two checks take.
async fn cycle_of(server: &RedisServer, n: usize, detect: bool) -> HashMap<String, u64> {
    let mut managers = Vec::new();
    for _ in 0..n {
        let tune = |c: lockwarden::Config| match detect {
            true => c.deadlock_timeout(TIMEOUT),
            false => c.no_deadlock_detection(),
        };
        let manager = support::manager(server, tune).await;
        // The walk reads locks with the inspect script: loaded now, its first
        // call (`NOSCRIPT`, `SCRIPT LOAD`, again) is not counted as a check's.
        let _ = manager.send(Inspect::new("cost:warm-up")).await;
        managers.push(manager);
    }
    let names: Vec<String> = (0..n).map(|i| format!("cost{n}:{i}")).collect();
    let owners: Vec<Owner> = (0..n).map(|_| Owner::new()).collect();
    let mut held = Vec::new();
    for i in 0..n {
        held.push(support::hold(&managers[i], &names[i], |a| a.owner(owners[i])).await);
    }
    let began = Instant::now();
    let waits = (0..n).map(|i| {
        let ask = Acquire::new(&names[(i + 1) % n]).owner(owners[i]);
        Box::pin(managers[i].send(ask))
    });
    let waits: Vec<_> = waits.collect();
    // Every wait has subscribed, so its first attempt was made (its reply is
    // the next thing it waits for); the first check comes a timeout after it
    // began.
    let listening = eventually(TIMEOUT / 2, || {
        names.iter().all(|name| {
            let channel = format!("redisson_lock__channel:{{{name}}}");
            let counts: Vec<redis::Value> = raw(server, &["PUBSUB", "NUMSUB", &channel]);
            matches!(counts.get(1), Some(redis::Value::Int(1)))
        })
    })
    .await;
    assert!(listening, "the waits did not all subscribe");
    actix_rt::time::sleep(Duration::from_millis(50)).await;
    assert!(began.elapsed() < TIMEOUT, "too slow to count checks alone");
    let before = server.commandstats();
    let (after, rest) = if detect {
        let (answer, _, rest) = futures::future::select_all(waits).await;
        let after = server.commandstats();
        assert!(
            matches!(answer, Ok(Err(LockError::Deadlock(_)))),
            "{answer:?}"
        );
        (after, rest)
    } else {
        // As long as the slowest detection takes (two checks), for comparison.
        actix_rt::time::sleep_until((began + 2 * TIMEOUT + Duration::from_millis(50)).into()).await;
        (server.commandstats(), waits)
    };
    drop(held);
    for other in futures::future::join_all(rest).await {
        drop(
            other
                .expect("running")
                .expect("granted once the holds are let go"),
        );
    }
    after
        .into_iter()
        .filter_map(|(name, calls)| {
            let new = calls - before.get(&name).copied().unwrap_or(0);
            // The test's own reads, and a connection's handshake (Valkey
            // counts redis-rs's CLIENT SETINFO of a connection a manager
            // opens late, such as a confirmation lane): not a check's cost.
            let setup = ["client|setinfo", "hello", "select", "auth"].contains(&name.as_str());
            (new > 0 && name != "info" && !name.starts_with("pubsub") && !setup)
                .then_some((name, new))
        })
        .collect()
}

/// One check of a wait in a cycle of `n` owners writes its record (`HSET` and
/// `PEXPIRE`, one round trip) and reads each lock (one `EVALSHA` of the inspect
/// script) and each other owner (one `HGETALL`): at most `2 + n + (n - 1)`
/// commands sent, 5 for a cycle of two, 7 for three, whatever else Redis holds
/// (a check that finds no cycle stops where the records written so far end).
/// Each check writes one `HSET`, so the counts are per check. Besides, a round
/// of checks may be followed by one acquisition attempt of the wait (counted
/// apart: the acquire script's `HEXISTS`), and the victim's end removes its
/// record (`HDEL`). The same window without detection sends nothing.
#[actix_rt::test]
async fn a_check_sends_its_record_and_one_read_per_lock_and_owner() {
    let server = RedisServer::start();
    for n in [2u64, 3] {
        let without = cycle_of(&server, n as usize, false).await;
        assert!(without.is_empty(), "without detection: {without:?}");
        let counts = cycle_of(&server, n as usize, true).await;
        let get = |c: &str| counts.get(c).copied().unwrap_or(0);
        let checks = get("hset");
        // The acquire script calls HEXISTS once, the inspect script HGETALL
        // once on a lock that exists (every lock of the cycle is held).
        let attempts = get("hexists");
        let inspections = get("evalsha") - attempts;
        let owner_reads = get("hgetall") - inspections;
        let sent = checks + get("pexpire") + inspections + owner_reads;
        let all: u64 = counts.values().sum();
        eprintln!(
            "cycle of {n}: {checks} checks, {:.1} commands sent a check ({:.1} lock reads, \
             {:.1} owner reads) and {:.1} run in Redis; {attempts} acquisition attempts \
             beside them: {counts:?}",
            sent as f64 / checks as f64,
            inspections as f64 / checks as f64,
            owner_reads as f64 / checks as f64,
            all as f64 / checks as f64,
        );
        assert!(checks >= n, "each wait checks at least once: {counts:?}");
        assert_eq!(get("pexpire"), checks, "{counts:?}");
        let per_check = 2 + n + (n - 1);
        assert!(
            sent <= checks * per_check,
            "more than {per_check} commands a check: {counts:?}"
        );
        // The inspect script's reads; the victim's end.
        let known = [
            "hset",
            "pexpire",
            "evalsha",
            "hgetall",
            "type",
            "time",
            "pttl",
            "lrange",
            "zscore",
            "hexists",
            "unsubscribe",
            "hdel",
        ];
        let others: Vec<&String> = counts
            .keys()
            .filter(|c| !known.contains(&c.as_str()))
            .collect();
        assert!(others.is_empty(), "other commands ran: {counts:?}");
    }
}
