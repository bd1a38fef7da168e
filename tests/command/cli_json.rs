//! Issue 38's rough edges of the `lockwarden` command, each against a real
//! server: every subcommand takes `--json` and prints JSON; `run --semaphore`
//! needs `--permits` only to create a semaphore and says when it differs plainly;
//! `semaphore set` is idempotent; a semaphore's or latch's command on a lock
//! names what the key is (exit 2, nothing changed).
#![cfg(feature = "cli")]

use crate::support;

use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use support::{raw, RedisServer};

/// Upper bound for any one invocation: far above what each needs.
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `lockwarden --redis <server> args...` to its end.
async fn run(server: &RedisServer, args: &[&str]) -> Output {
    let out = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
        .args(args)
        .output();
    tokio::time::timeout(LIMIT, out)
        .await
        .expect("lockwarden exited in time")
        .expect("lockwarden ran")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// Each JSON line of stdout, parsed; panics on a line that is not JSON.
fn json_lines(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// Every subcommand once with `--json`: stdout parses as JSON, one object per
/// line, and names what it is about with `name` (`lock` too where it always was).
#[actix_rt::test]
async fn every_subcommand_takes_json() {
    let server = RedisServer::start();
    let runs: Vec<Vec<&str>> = vec![
        vec!["semaphore", "set", "j:sem", "2", "--json"],
        vec!["semaphore", "--json", "add", "j:sem", "1"],
        vec!["semaphore", "available", "j:sem", "--json"],
        vec!["latch", "set", "j:latch", "1", "--json"],
        vec!["latch", "count", "j:latch", "--json"],
        vec!["latch", "count-down", "j:latch", "--json"],
        vec!["latch", "wait", "j:latch", "--json"],
        vec!["run", "j:lock", "--json", "--", "true"],
        vec!["run", "j:sem", "--semaphore", "--json", "--", "true"],
        vec!["hold", "j:lock", "--for", "10ms", "--json"],
        vec!["status", "j:sem", "--json"],
        vec!["list", "--json"],
        vec!["top", "--iterations", "1", "--json"],
        vec!["unlock", "--force", "j:lock", "--yes", "--json"],
        vec!["semaphore", "drain", "j:sem", "--json"],
    ];
    for args in &runs {
        let out = run(&server, args).await;
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let lines = json_lines(&out);
        assert!(!lines.is_empty(), "{args:?}: no JSON");
        let named = |v: &Value| v["name"].is_string() || v["locks"].is_array();
        assert!(lines.iter().all(named), "{args:?}: {lines:?}");
    }
    // The semaphore's own JSON calls it a semaphore; `lock` stays as an alias.
    let out = run(&server, &["status", "j:sem", "--json"]).await;
    let v = &json_lines(&out)[0];
    assert_eq!(
        (v["name"].as_str(), v["kind"].as_str()),
        (Some("j:sem"), Some("semaphore"))
    );
    assert_eq!(v["lock"], v["name"]);
    assert!(v["waiters"].is_array() && v["key_missing"] == false, "{v}");
    let out = run(
        &server,
        &["run", "j:lock", "--json", "--", "sh", "-c", "exit 3"],
    )
    .await;
    assert_eq!(out.status.code(), Some(3));
    let v = &json_lines(&out)[0];
    assert_eq!(
        (v["event"].as_str(), v["exit_code"].as_i64()),
        (Some("finished"), Some(3))
    );
}

/// `run --semaphore` needs `--permits` only to create the semaphore: without it
/// an existing one is used, a missing one is refused (exit 2, no key made);
/// `--permits` below what is available is said on stderr, and changes nothing.
#[actix_rt::test]
async fn run_semaphore_needs_permits_only_to_create() {
    let server = RedisServer::start();
    let out = run(&server, &["run", "r:sem", "--semaphore", "--", "true"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--permits N to create it"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(raw::<i64>(&server, &["EXISTS", "r:sem"]), 0);

    let made = run(
        &server,
        &[
            "run",
            "r:sem",
            "--semaphore",
            "--permits",
            "3",
            "--",
            "true",
        ],
    )
    .await;
    assert!(made.status.success(), "{}", text(&made.stderr));
    let out = run(
        &server,
        &["run", "r:sem", "--semaphore", "--take", "2", "--", "true"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        support::without_confirmation_note(&text(&out.stderr)),
        "",
        "no complaint without --permits"
    );
    let out = run(
        &server,
        &[
            "run",
            "r:sem",
            "--semaphore",
            "--permits",
            "2",
            "--",
            "true",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("3 permits available, more than --permits 2"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(raw::<String>(&server, &["GET", "r:sem"]), "3");
}

/// `semaphore set` twice with the same number: both exit 0, the second says
/// unchanged; a smaller number than is available is exit 1 and changes nothing.
#[actix_rt::test]
async fn semaphore_set_is_idempotent() {
    let server = RedisServer::start();
    for _ in 0..2 {
        let out = run(&server, &["semaphore", "set", "s:api", "3"]).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = run(&server, &["semaphore", "set", "s:api", "3"]).await;
    assert!(
        text(&out.stdout).contains("unchanged"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&server, &["semaphore", "set", "s:api", "2"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("more than 2"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(raw::<String>(&server, &["GET", "s:api"]), "3");
}

/// A semaphore's or latch's command on a lock says it is a lock, not a
/// semaphore (it said "is not a lock"), exit 2, and the lock is untouched.
#[actix_rt::test]
async fn a_synchronizer_command_on_a_lock_names_the_lock() {
    let server = RedisServer::start();
    let m = support::manager(&server, |c| c).await;
    let _held = support::hold(&m, "w:lock", |a| a).await;
    let before: Vec<String> = raw(&server, &["HKEYS", "w:lock"]);
    for (args, kind) in [
        (&["semaphore", "add", "w:lock", "1"][..], "not a semaphore"),
        (&["semaphore", "set", "w:lock", "1"][..], "not a semaphore"),
        (
            &["latch", "count-down", "w:lock"][..],
            "not a count-down latch",
        ),
        (
            &["run", "w:lock", "--semaphore", "--", "true"][..],
            "not a semaphore",
        ),
    ] {
        let out = run(&server, args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(kind) && err.contains("an exclusive lock"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("is not a lock"), "{args:?}: {err}");
    }
    assert_eq!(raw::<Vec<String>>(&server, &["HKEYS", "w:lock"]), before);
}
