//! The least-privilege ACL lines of docs/operations.md work as written: a user
//! made from each line (read from the document itself, so the test follows the
//! text) runs `lockwarden run` and `status`, and its grant is confirmed by a
//! replica (a `WAIT` behind it, no "replica confirmation" note on stderr).
//! The lines once lacked `+ping`, so every command with them exited 2 ("may
//! not run PING"), and `+info +wait +client|id`, so confirmation went off
//! without a word.

use crate::support;

use std::time::Duration;

use support::{raw, RedisServer};

/// The `ACL SETUSER` lines of the "Least-privilege ACL user" section that make
/// a user (`on`), each as the arguments after `ACL SETUSER`, unquoted as a
/// shell would.
fn documented_lines() -> Vec<Vec<String>> {
    let doc = include_str!("../../docs/operations.md");
    let section = doc
        .split("### Least-privilege ACL user")
        .nth(1)
        .expect("the section");
    let mut lines = Vec::new();
    for block in section.split("```sh").skip(1) {
        let code = block.split("```").next().unwrap_or_default();
        let joined = code.replace("\\\n", " ");
        let Some(rest) = joined.trim().strip_prefix("redis-cli ACL SETUSER ") else {
            continue;
        };
        let args: Vec<String> = rest
            .split_whitespace()
            .map(|a| a.trim_matches('\'').replace("\\|", "|"))
            .collect();
        if args.get(1).map(String::as_str) == Some("on") {
            lines.push(args);
        }
    }
    lines
}

/// The rights the section adds to `user` for `status` (its last `ACL SETUSER
/// <user> +type ...` line), as arguments after the user name.
fn status_addition(user: &str) -> Vec<String> {
    let doc = include_str!("../../docs/operations.md").replace("\\\n", " ");
    let line = doc
        .split(&format!("redis-cli ACL SETUSER {user} +type"))
        .last()
        .and_then(|rest| rest.lines().next())
        .expect("the status addition");
    let mut args = vec!["+type".to_string()];
    args.extend(
        line.split_whitespace()
            .map(|a| a.trim_matches('\'').replace("\\|", "|")),
    );
    args
}

/// What `run` takes under each line's user: the lock name's prefix in the
/// document is `order:` (locks) or `pool:` (synchronizers).
fn run_args(line: &[String]) -> Vec<&'static str> {
    let rights = line.join(" ");
    if rights.contains("+decrby") {
        vec!["pool:acl", "--semaphore", "--permits", "2"]
    } else if rights.contains("rwlock") {
        vec!["order:acl", "--write"]
    } else if rights.contains("redisson_lock_queue") {
        vec!["order:acl", "--fair"]
    } else {
        vec!["order:acl"]
    }
}

/// Each documented line, as written, gives a user that runs `run` and `status`
/// with every grant confirmed by the replica.
#[cfg(feature = "cli")]
#[actix_rt::test]
async fn each_documented_acl_line_runs_run_and_status_with_confirmed_grants() {
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let lines = documented_lines();
    assert_eq!(
        lines.len(),
        4,
        "exclusive, fair, read-write, semaphore: {lines:?}"
    );
    for line in &lines {
        let user = line[0].clone();
        let _: i64 = raw(&master, &["ACL", "DELUSER", &user]);
        let mut args = vec!["ACL", "SETUSER"];
        args.extend(line.iter().map(String::as_str));
        let _: () = raw(&master, &args);
        let url = format!("redis://{user}:secret@127.0.0.1:{}/", master.port());
        let waits = || master.commandstats().get("wait").copied().unwrap_or(0);
        let before = waits();
        let taken = run_args(line);
        let out = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &url)
            .arg("run")
            .args(&taken)
            .args(["--wait", "10s", "--", "true"])
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("run ended")
            .expect("run ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{taken:?} as {line:?}: {stderr}");
        assert!(
            !stderr.contains("replica confirmation"),
            "{taken:?}: confirmation not full: {stderr}"
        );
        // The grant and the release, each with a WAIT behind it.
        assert!(
            waits() >= before + 2,
            "{taken:?}: no WAIT behind the changes"
        );
        let mut args = vec!["ACL", "SETUSER", &user];
        let addition = status_addition(&user);
        args.extend(addition.iter().map(String::as_str));
        let _: () = raw(&master, &args);
        let out = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &url)
            .args(["status", taken[0]])
            .output()
            .await
            .expect("status ran");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "status as {line:?}: {stderr}");
        assert!(
            stdout.contains("replica confirmation on (1 of 1 replicas can confirm)"),
            "{stdout}"
        );
        eprintln!("{taken:?}: {}", stdout.trim().replace('\n', " | "));
    }
}

/// Runs the command as `url` with `args`; answers its exit code, stdout and
/// stderr.
#[cfg(feature = "cli")]
async fn command(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), url)
        .args(args)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), out)
        .await
        .expect("ended")
        .expect("ran");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Confirmation reduced (no replica) or off (a user without `INFO`) is said on
/// stderr without `-v`, and `status` shows it in text and JSON; the command
/// still works.
#[cfg(feature = "cli")]
#[actix_rt::test]
async fn the_command_says_when_replica_confirmation_is_reduced_or_off() {
    let server = RedisServer::start();
    let (code, _, stderr) = command(&server.url(), &["run", "order:1", "--", "true"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("replica confirmation reduced (0 of 1 replicas can confirm): no replica"),
        "{stderr}"
    );
    let (_, stdout, _) = command(&server.url(), &["status", "order:1", "--json"]).await;
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    let c = &v["replica_confirmation"];
    assert_eq!(
        (c["state"].as_str(), c["wanted"].as_u64()),
        (Some("reduced"), Some(1))
    );
    assert_eq!(c["counted"].as_u64(), Some(0), "{v}");
    assert!(
        c["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no replica")),
        "{v}"
    );

    // The exclusive line without +info: confirmation is off, and said so.
    let line = documented_lines().remove(0);
    let mut args = vec!["ACL", "SETUSER"];
    args.extend(line.iter().map(String::as_str));
    args.push("-info");
    let _: () = raw(&server, &args);
    let url = format!("redis://locks:secret@127.0.0.1:{}/", server.port());
    let (code, _, stderr) = command(&url, &["run", "order:2", "--", "true"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("replica confirmation off: the server cannot count its replicas"),
        "{stderr}"
    );
    // Said once, whatever the lock changes.
    assert_eq!(
        stderr.matches("replica confirmation").count(),
        1,
        "{stderr}"
    );
    let (code, _, stderr) = command(
        &url,
        &["--sync-replicas", "0", "run", "order:3", "--", "true"],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.is_empty(),
        "turned off by the user, not said: {stderr}"
    );
}
