//! Commands that end without what they asked for say what is known of why:
//! a wait that ran out while Redis refused every write (out of memory under
//! `noeviction`) exits 75 like any wait that ran out, naming the refusal, and a
//! RedLock whose servers lost it while the command ran (restarted without their
//! data) is told that, not that it expired.
//!
//! Real processes on real servers.

use crate::support;

use std::process::Output;
use std::time::Duration;

use support::{eventually, RedisServer};

/// Upper bound for any one invocation: far above what each needs.
const LIMIT: Duration = Duration::from_secs(30);

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command with `--redis` for each of `urls`.
fn lockwarden(urls: &[String]) -> tokio::process::Command {
    let mut cmd = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &urls[0]);
    for url in &urls[1..] {
        cmd.args(["--redis", url]);
    }
    cmd
}

async fn finish(child: tokio::process::Child) -> Output {
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("lockwarden exited in time")
        .expect("lockwarden ran")
}

/// Out of memory under `noeviction`, a free lock cannot be taken: a wait (and
/// a one-try `--wait 0s`, and a semaphore's wait) runs out with exit 75, and
/// stderr says Redis refused for lack of memory, with Redis's own words.
#[actix_rt::test]
async fn a_wait_run_out_under_oom_exits_75_and_names_it() {
    let server = RedisServer::start();
    let urls = [server.url()];
    // The semaphore exists before memory runs out (setting its permits is a
    // write of its own, refused at once).
    let made = lockwarden(&urls)
        .args([
            "run",
            "oom:s",
            "--semaphore",
            "--permits",
            "1",
            "--",
            "true",
        ])
        .output()
        .await
        .expect("run lockwarden");
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    support::fill_until_oom(&server);
    for args in [
        &["run", "oom:a", "--wait", "1s", "--", "true"][..],
        &["run", "oom:b", "--wait", "0s", "--", "true"][..],
        &[
            "run",
            "oom:s",
            "--semaphore",
            "--permits",
            "1",
            "--wait",
            "1s",
            "--",
            "true",
        ][..],
    ] {
        let out = lockwarden(&urls)
            .args(args)
            .output()
            .await
            .expect("run lockwarden");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(75), "{args:?}: {err}");
        assert!(
            err.contains("Redis refused the last attempt"),
            "{args:?}: {err}"
        );
        assert!(err.contains("out of memory"), "{args:?}: {err}");
        assert!(err.contains("OOM"), "Redis's words: {args:?}: {err}");
        assert!(!err.contains("redis error"), "{args:?}: {err}");
    }
}

/// Two of a RedLock's three servers restart without their data while the
/// command runs: the release (or a renewal before it) finds no majority
/// holding it, and the command exits 76 saying that servers which granted it
/// lost it, not that it "expired or force-unlocked while it ran".
#[actix_rt::test]
async fn a_redlock_its_servers_lost_says_so() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let script = r#"
        touch "$DIR/started"
        while [ ! -e "$DIR/go" ]; do sleep 0.01; done"#;
    let child = lockwarden(&urls)
        .args(["run", "red", "--redlock", "--", "sh", "-c", script])
        .env("DIR", dir.path())
        .spawn()
        .expect("start lockwarden");
    let started = eventually(LIMIT, || dir.path().join("started").exists()).await;
    assert!(started, "the command never started");
    servers[0].restart();
    servers[1].restart();
    std::fs::write(dir.path().join("go"), "").expect("write go");
    let out = finish(child).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(76), "{err}");
    // Found at the release, or earlier by a renewal while the command ran
    // (whichever comes first after the restarts): the same cause either way.
    assert!(
        err.contains(
            "(a majority of the servers that granted it no longer held it: a server lost \
             it (restarted without its data"
        ),
        "{err}"
    );
    assert!(!err.contains("expired"), "{err}");
}
