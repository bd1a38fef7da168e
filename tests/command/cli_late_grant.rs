//! A grant that Redis makes after the waiting `lockwarden run` is gone: the
//! command's attempt sits in a frozen server (SIGSTOP) while its `--wait` runs
//! out, the command leaves and is then SIGKILLed, and the server resumes and
//! runs the attempt, granting the lock to nobody. The give-back the command sent
//! right behind that attempt, on the same connection, must run next and leave no
//! hold, for every kind of lock.
#![cfg(feature = "cli")]

use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, Config, LockManager};
use support::{eventually, raw, RedisServer};

/// The holder's lease: the waiter's retry comes when Redis says it ends, and
/// the lock is free by then on the server's clock. Half a second short of the
/// 3 s wait: the retry must still be unanswered when the wait ends, so its 2 s
/// response timeout must not pass first, which a shorter lease allowed when the
/// command took long to start on a loaded machine (the retry then timed out
/// before the deadline, and the process was killed before it could check what
/// the lost retry did).
const LEASE: Duration = Duration::from_millis(2500);

/// The holder's kind of acquisition, and the command's own.
type Kinds = (fn(Acquire) -> Acquire, fn(Acquire) -> Acquire);

/// [`one_try`] until its scenario happens (at most three times): on a loaded
/// machine the command may start so late that its retry times out before its
/// wait ends, a lost reply rather than an attempt in flight, which a process
/// killed before Redis answers cannot check (the lease frees that hold; a
/// known gap, CHANGELOG.md).
async fn no_hold_after_the_process_is_gone(
    name: &str,
    kinds: Kinds,
    waiter: &[&str],
    hash_key: &str,
) {
    for _ in 0..3 {
        if one_try(name, kinds, waiter, hash_key).await {
            return;
        }
        eprintln!("{name}: the retry timed out before the wait ended; trying again");
    }
    panic!("{name}: in three tries the retry never stayed in flight until the wait ended");
}

/// Holds `name` with `holder`'s kind for [`LEASE`], starts `lockwarden run
/// name <waiter> --wait 3s`, freezes Redis once the command waits, lets its
/// wait run out while its retry sits in the frozen server, SIGKILLs it, and
/// resumes Redis: the lock must be free soon after. Answers `false`, checking
/// nothing, when the retry timed out before the wait ended (the command's own
/// log says so), which is not this scenario.
async fn one_try(name: &str, (holder, own): Kinds, waiter: &[&str], hash_key: &str) -> bool {
    let mut server = RedisServer::start();
    let config = Config::from_url(&server.url()).expect("url");
    let other = LockManager::start(config).await.expect("started");
    // The command's own script is loaded first (a lock of that kind taken and
    // given back elsewhere), so that its first try is one EVALSHA, not a
    // NOSCRIPT and a second one, and the count below sees its tries.
    let warm = other
        .send(own(Acquire::new(format!("{name}:warm"))))
        .await
        .expect("running")
        .expect("acquired");
    warm.release().await.expect("released");
    let held = other
        .send(holder(Acquire::new(name)).lease(LEASE))
        .await
        .expect("running")
        .expect("acquired");
    let tried = server.commandstats().get("evalsha").copied().unwrap_or(0);
    let mut lw = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url());
    // `-v`: its log says whether an attempt timed out.
    lw.args(["-v", "run", name]).args(waiter);
    lw.args(["--wait", "3s", "--", "true"]);
    let child = lw.spawn().expect("run lockwarden");
    let tries = || server.commandstats().get("evalsha").copied().unwrap_or(0);
    // Waiting: its first try and the one after it subscribed were refused.
    let waiting = eventually(Duration::from_secs(5), || tries() >= tried + 2).await;
    assert!(waiting, "the command never waited on {name}");
    server.pause();
    // Its retry goes out when the holder's lease ends (about 2.5 s) and sits in
    // the frozen server; its wait ends at 3 s with that retry unanswered, and it
    // sends the give-back right behind it before it settles and exits.
    tokio::time::sleep(Duration::from_millis(3800)).await;
    let mut child = child;
    let _ = child.start_kill();
    let out = child.wait_with_output().await.expect("the command ended");
    server.resume();
    let log = String::from_utf8_lossy(&out.stderr);
    if log.contains("lock attempt failed") {
        drop(held);
        return false;
    }
    // The held guard's lease ran out meanwhile: nobody holds the lock now but
    // what the late grant left.
    drop(held);
    let free = eventually(Duration::from_secs(3), || {
        raw::<i64>(&server, &["EXISTS", hash_key]) == 0
    })
    .await;
    let left: Vec<(String, String)> = raw(&server, &["HGETALL", hash_key]);
    assert!(
        free,
        "{name}: the late grant left a hold after the command was gone: {left:?}\n{log}\n{}",
        server.log()
    );
    true
}

/// A fair lock's late grant is given back by the release sent behind it.
#[actix_rt::test]
async fn a_fair_grant_that_lands_after_the_command_is_gone_leaves_no_hold() {
    no_hold_after_the_process_is_gone(
        "late-fair",
        (Acquire::fair, Acquire::fair),
        &["--fair"],
        "late-fair",
    )
    .await;
}

/// A write lock's late grant is given back by the release sent behind it.
#[actix_rt::test]
async fn a_write_grant_that_lands_after_the_command_is_gone_leaves_no_hold() {
    no_hold_after_the_process_is_gone(
        "late-write",
        (Acquire::write, Acquire::write),
        &["--write"],
        "late-write",
    )
    .await;
}

/// A read hold's late grant is given back by the release sent behind it.
#[actix_rt::test]
async fn a_read_grant_that_lands_after_the_command_is_gone_leaves_no_hold() {
    no_hold_after_the_process_is_gone(
        "late-read",
        (Acquire::write, Acquire::read),
        &["--read"],
        "late-read",
    )
    .await;
}

/// An exclusive lock's late grant is given back by the release sent behind it.
#[actix_rt::test]
async fn an_exclusive_grant_that_lands_after_the_command_is_gone_leaves_no_hold() {
    no_hold_after_the_process_is_gone("late-x", (|a| a, |a| a), &[], "late-x").await;
}
