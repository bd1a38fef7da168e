//! The `lockwarden` command's rough edges from a new user's first hour, each against
//! a real process: a command typed without `--` gets the corrected line, `--lease
//! 0s` is refused in the words typed (`--sync-timeout 0ms` in its own words),
//! `--help` shows no dangling `[env: NAME=]`, `--watchdog-lease` is offered only
//! where it acts, and when Redis dies while `run`'s command runs, stderr says so at
//! once and the release at the end is tried until the lease is over, then the
//! command says the lock is free (`hold`'s too).
#![cfg(feature = "cli")]

use crate::support;

use std::process::Output;
use std::time::{Duration, Instant};

use support::{eventually, free_port, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Upper bound for any one invocation: far above what each needs.
const LIMIT: Duration = Duration::from_secs(20);

/// The command with `--redis url`, output captured, nothing from the environment.
fn lockwarden(url: &str) -> Command {
    support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), url)
}

/// Runs the command to its end against a port nobody listens on: for input that
/// is refused before anything connects.
async fn offline(args: &[&str]) -> Output {
    let url = format!("redis://127.0.0.1:{}/", free_port());
    let out = lockwarden(&url).args(args).output();
    tokio::time::timeout(LIMIT, out)
        .await
        .expect("lockwarden exited in time")
        .expect("lockwarden ran")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `run job ./x.sh -v` (no `--`): exit 2, one line that shows the line with `--`.
#[actix_rt::test]
async fn a_command_without_double_dash_is_shown_with_it() {
    let out = offline(&["run", "job", "./x.sh", "-v"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("lockwarden run job -- ./x.sh -v"), "{err}");

    let out = offline(&["run", "job"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("after `--`"), "{err}");
}

/// An unknown subcommand is answered with the list of the real ones, on one line
/// (exit 2), and `--master-tls` takes yes or no and says so when given neither.
#[actix_rt::test]
async fn an_unknown_subcommand_lists_them_and_yes_no_flags_say_so() {
    let out = offline(&["frobnicate", "a"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("the subcommands are run, hold, status"),
        "{err}"
    );
    assert!(err.contains("semaphore"), "{err}");

    let out = offline(&["--master-tls", "maybe", "status", "a"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("'maybe' is neither yes nor no"), "{err}");
    assert!(!err.contains("true, false"), "{err}");
}

/// `--lease 0s` is refused as `0s`, with the reason, not as `invalid lease 0ns`.
#[actix_rt::test]
async fn a_zero_lease_is_refused_in_the_words_typed() {
    for args in [
        &["hold", "a", "--lease", "0s"][..],
        &["run", "a", "--lease", "0ms", "--", "true"][..],
    ] {
        let out = offline(args).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(!err.contains("ns"), "{args:?}: {err}");
        let typed = args[args.iter().position(|a| *a == "--lease").expect("lease") + 1];
        assert!(err.contains(&format!("'{typed}'")), "{args:?}: {err}");
        assert!(err.contains("expire at once"), "{args:?}: {err}");
    }
}

/// `--sync-timeout 0ms` is refused in its own words, not with `--lease`'s.
#[actix_rt::test]
async fn a_zero_sync_timeout_is_refused_in_its_own_words() {
    let out = offline(&["--sync-timeout", "0ms", "run", "a", "--", "true"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("'0ms' leaves the replicas no time to confirm a lock change"),
        "{err}"
    );
    assert!(!err.contains("lease"), "{err}");
}

/// No help text shows an environment variable as `[env: NAME=]`,
/// `--watchdog-lease` is offered by `run` and `hold` only (and refused elsewhere,
/// with where it goes), and a subcommand's help puts its own options before the
/// connection options every subcommand takes.
#[actix_rt::test]
async fn help_shows_no_dangling_env_and_watchdog_lease_only_where_it_acts() {
    for (sub, offered) in [
        (None, false),
        (Some("run"), true),
        (Some("hold"), true),
        (Some("status"), false),
        (Some("list"), false),
        (Some("unlock"), false),
    ] {
        let mut args: Vec<&str> = sub.into_iter().collect();
        args.push("--help");
        let out = offline(&args).await;
        let help = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{sub:?}: {}", stderr(&out));
        assert!(!help.contains("=]"), "{sub:?}: dangling env text:\n{help}");
        let has = help.contains("--watchdog-lease <DURATION>");
        assert_eq!(has, offered, "{sub:?} --watchdog-lease:\n{help}");
    }
    // A subcommand's own options come first; the connection options every
    // subcommand takes come after, under a heading of their own.
    for (sub, own) in [("latch", "-h, --help"), ("run", "--wait <DURATION>")] {
        let help = stdout(&offline(&[sub, "--help"]).await);
        let own_at = help.find(own).expect("its own option");
        let heading = help
            .find("Connection and logging (every subcommand):")
            .unwrap_or_else(|| panic!("{sub}: no connection heading:\n{help}"));
        let redis_at = help.find("--redis <URL>").expect("--redis");
        assert!(own_at < heading && heading < redis_at, "{sub}:\n{help}");
    }
    for args in [
        &["status", "a", "--watchdog-lease", "5s"][..],
        &["--watchdog-lease", "5s", "list"][..],
    ] {
        let out = offline(args).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("run and hold"), "{args:?}: {err}");
    }
}

/// Redis dies while `run`'s command runs (its lease, 9 s, not over when the
/// command ends): a line on stderr says so within a few seconds, while the command
/// still runs, and once the command has finished the release is tried until the
/// lease is over (a Redis that came back in time would take it: issue 26), and the
/// process then exits 1 saying the lock is free now.
#[actix_rt::test]
async fn redis_dying_during_run_is_said_at_once_and_the_release_is_bounded() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let (started, finished) = (dir.path().join("started"), dir.path().join("finished"));
    let mut child = lockwarden(&server.url())
        .args(["run", "job", "--watchdog-lease", "9s", "--", "sh", "-c"])
        .arg(r#"touch "$STARTED"; sleep 4; touch "$FINISHED""#)
        .env("STARTED", &started)
        .env("FINISHED", &finished)
        .spawn()
        .expect("spawn");
    let mut err_lines = BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    assert!(
        eventually(Duration::from_secs(10), || started.exists()).await,
        "the command did not start"
    );
    server.kill();
    let killed = Instant::now();

    let first = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let line = err_lines.next_line().await.expect("read stderr");
            let line = line.expect("a line before stderr closed");
            // Printed at start: the test server has no replica.
            if !line.contains(": replica confirmation ") {
                return line;
            }
        }
    })
    .await
    .expect("nothing on stderr within 10 s of Redis dying");
    let said_after = killed.elapsed();
    assert!(first.contains("not answering"), "{first}");
    assert!(first.contains("\"job\""), "{first}");
    assert!(
        !finished.exists(),
        "said only after the command ended: {first}"
    );
    assert!(
        said_after < Duration::from_secs(3),
        "said {said_after:?} after"
    );

    assert!(
        eventually(Duration::from_secs(10), || finished.exists()).await,
        "the command did not finish"
    );
    let command_done = Instant::now();
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("exited")
        .expect("waited");
    let release_took = command_done.elapsed();
    let mut rest = Vec::new();
    while let Ok(Some(line)) = err_lines.next_line().await {
        rest.push(line);
    }
    assert_eq!(status.code(), Some(1), "release failed: {rest:?}");
    // The lease ends 6-9 s after Redis died (renewed every 3 s), the command at 4 s.
    assert!(
        release_took < Duration::from_secs(9),
        "exited {release_took:?} after the command finished: {rest:?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.contains("could not be released") && l.contains("free now")),
        "{rest:?}"
    );
}

/// `hold --for` whose Redis died while it held: the release is tried until the
/// lease (4 s) is over, then it exits 1 saying the lock is free now.
#[actix_rt::test]
async fn a_hold_whose_redis_died_gives_up_the_release_quickly() {
    let mut server = RedisServer::start();
    let mut child = lockwarden(&server.url())
        .args([
            "hold",
            "h",
            "--for",
            "1s",
            "--watchdog-lease",
            "4s",
            "--json",
        ])
        .spawn()
        .expect("spawn");
    let mut out_lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let acquired = tokio::time::timeout(LIMIT, out_lines.next_line())
        .await
        .expect("no acquired line in time")
        .expect("read stdout")
        .expect("a line");
    assert!(acquired.contains("\"acquired\""), "{acquired}");
    server.kill();
    let killed = Instant::now();
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("exited")
        .expect("waited");
    let took = killed.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("free now"), "{err}");
    // The lease ends at most 4 s after Redis died; one try may be under way then.
    assert!(
        took < Duration::from_secs(7),
        "exited {took:?} after Redis died: {err}"
    );
}

/// `--lease` over the maximum (7 days, 168h) is refused before anything connects: exit 2,
/// one line that names the maximum, and nothing written to Redis (not even the
/// client registry entry a running manager keeps).
#[actix_rt::test]
async fn a_lease_over_the_maximum_names_it_and_writes_nothing() {
    let server = RedisServer::start();
    let out = lockwarden(&server.url())
        .args(["run", "l", "--lease", "192h", "--", "true"])
        .output();
    let out = tokio::time::timeout(LIMIT, out)
        .await
        .expect("exited")
        .expect("ran");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("maximum") && err.contains("168h"), "{err}");
    let keys: i64 = support::raw(&server, &["DBSIZE"]);
    assert_eq!(keys, 0, "a refused run wrote something");
}

/// `status` escapes a tab in a lock name, as `list` does, so a name cannot fake a
/// column.
#[actix_rt::test]
async fn status_escapes_a_tab_in_a_name() {
    let server = RedisServer::start();
    let name = "tab\there";
    let _: i64 = support::raw(&server, &["HSET", name, "owner:1", "1"]);
    let out = lockwarden(&server.url()).args(["status", name]).output();
    let out = tokio::time::timeout(LIMIT, out)
        .await
        .expect("exited")
        .expect("ran");
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(text.starts_with("tab\\there:"), "{text:?}");
    assert!(!text.contains('\t'), "{text:?}");
}

/// Runs `args` against `url` to its end.
async fn finished(url: &str, args: &[&str]) -> Output {
    let out = lockwarden(url).args(args).output();
    tokio::time::timeout(LIMIT, out)
        .await
        .expect("exited")
        .expect("ran")
}

/// This machine's first IPv4 address that is not loopback: a connection to it
/// from here comes from a non-loopback address, as one from another host does.
fn outside_address() -> String {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .expect("`hostname -I` runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .find(|a| {
            a.parse::<std::net::Ipv4Addr>()
                .is_ok_and(|ip| !ip.is_loopback())
        })
        .unwrap_or_else(|| panic!("this test needs a non-loopback IPv4 address: {text:?}"))
        .to_string()
}

/// Redis in protected mode (no password, reached from outside loopback) says
/// "DENIED" and closes; the command says that in Redis's words with what to do,
/// where it said "Connection reset by peer (os error 104)".
#[actix_rt::test]
async fn protected_mode_is_named_not_a_reset_connection() {
    let server = RedisServer::start_with(&["--bind", "0.0.0.0", "--protected-mode", "yes"]);
    let url = format!("redis://{}:{}/", outside_address(), server.port());
    let out = finished(&url, &["run", "l", "--", "true"]).await;
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("DENIED") && err.contains("protected mode"),
        "{err}"
    );
    assert!(err.contains("--protected-mode no"), "{err}");
    assert!(!err.contains("reset by peer"), "{err}");
    let keys: i64 = support::raw(&server, &["DBSIZE"]);
    assert_eq!(keys, 0, "a refused run wrote something");
}

/// A password sent to a server without one is said to be that, in the server's
/// words; a wrong one is said to be wrong. Both were "Password authentication
/// failed".
#[actix_rt::test]
async fn a_password_the_server_does_not_have_is_named() {
    let open = RedisServer::start();
    let url = format!("redis://:secret@127.0.0.1:{}/", open.port());
    let out = finished(&url, &["run", "l", "--", "true"]).await;
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("has no password"), "{err}");
    assert!(err.contains("without any password configured"), "{err}");

    let guarded = RedisServer::start();
    let _: () = support::raw(&guarded, &["CONFIG", "SET", "requirepass", "right"]);
    let url = format!("redis://:wrong@127.0.0.1:{}/", guarded.port());
    let out = finished(&url, &["run", "l", "--", "true"]).await;
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("WRONGPASS") && err.contains("wrong"), "{err}");
}
