//! `run` after a release no replica confirmed: the library keeps such a
//! release to redo it after a failover (`wire/replicas/kept.rs`), which needs
//! the process, so the command stays up to its release's window, says so on
//! stderr, and exits with its command's code.
#![cfg(feature = "cli")]

use crate::support;

use std::time::{Duration, Instant};

use support::{eventually, RedisServer};

/// The replica drops off while the command runs: its release goes without a
/// `WAIT`, and the command says it stays to redo it (its window is the 2 s
/// watchdog lease here), then exits 0 with the lock free.
#[tokio::test]
async fn a_release_no_replica_confirmed_keeps_the_command_a_while_and_says_so() {
    let _heavy = support::heavy();
    let master = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&master);
    let dir = tempfile::tempdir().expect("temp dir");
    let (held, go) = (dir.path().join("held"), dir.path().join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        go.display()
    );
    let mut cmd = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &master.url());
    cmd.args([
        "run",
        "kept:cli",
        "--watchdog-lease",
        "2s",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let child = cmd.spawn().expect("run lockwarden");
    assert!(
        eventually(Duration::from_secs(10), || held.exists()).await,
        "the command never ran"
    );
    replica.pause();
    let _: redis::Value = support::raw(&master, &["CLIENT", "KILL", "TYPE", "replica"]);
    // The command's manager counts replicas every second.
    let status = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .args(["--redis", &master.url(), "status", "kept:cli"])
            .output()
            .expect("status");
        String::from_utf8_lossy(&out.stdout).contains("replica confirmation reduced")
    };
    assert!(
        eventually(Duration::from_secs(10), status).await,
        "never reduced"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    std::fs::write(&go, "").expect("go");
    let began = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("exited in time")
        .expect("waited");
    let took = began.elapsed();
    replica.resume();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("exited {took:?} after its command, stderr: {stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("is not confirmed by any replica") && stderr.contains("staying up to"),
        "{stderr}"
    );
    assert!(took < Duration::from_secs(8), "stayed {took:?}");
    assert!(!support::exists(&master, "kept:cli"), "the lock is free");
}
