//! The `lockwarden` command, run as a real process against a real `redis-server`:
//! exclusion between `run`s, killing on a lost lock, the `hold --json` event lines,
//! `status` of a lock held by the library, wait timeouts, and refusing bad input.
#![cfg(feature = "cli")]

use crate::support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockwarden::{Acquire, Config, ForceUnlock, LockManager, Owner};
use serde_json::Value;
use support::{eventually, free_port, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Upper bound for any one invocation: far above what each needs.
const LIMIT: Duration = Duration::from_secs(20);

/// The command, pointed at `server`, with no input and its output captured.
fn lockwarden(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockwarden"));
    cmd.env("REDIS_URL", server.url())
        .env_remove("LOCKWARDEN_WATCHDOG_LEASE")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Starts the command with these arguments.
fn spawn(server: &RedisServer, args: &[&str]) -> Child {
    lockwarden(server)
        .args(args)
        .spawn()
        .expect("cannot start lockwarden")
}

/// Waits for a started command to exit (at most [`LIMIT`]).
async fn finish(child: Child) -> Output {
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("lockwarden did not exit in time")
        .expect("cannot wait for lockwarden")
}

/// Runs the command to its end.
async fn run(server: &RedisServer, args: &[&str]) -> Output {
    finish(spawn(server, args)).await
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    u64::try_from(since.expect("clock before 1970").as_millis()).expect("ms fit u64")
}

async fn manager(server: &RedisServer) -> actix::Addr<LockManager> {
    let config = Config::from_url(&server.url()).expect("test URL parses");
    LockManager::start(config).await.expect("manager starts")
}

fn dbsize(server: &RedisServer) -> u64 {
    redis::cmd("DBSIZE")
        .query(&mut server.conn())
        .expect("DBSIZE")
}

/// Two `run`s of the same lock never overlap: each child writes start and end
/// marks, and the marks never interleave; each child sees its lock and a fencing
/// token larger than the one before.
#[actix_rt::test]
async fn runs_of_one_lock_never_overlap() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let marks = dir.path().join("marks");
    let script = r#"echo "start $ID $LOCKWARDEN_TOKEN $LOCKWARDEN_LOCK" >> "$MARKS"; sleep 0.2; echo "end $ID" >> "$MARKS""#;
    let children: Vec<Child> = (0..3)
        .map(|id| {
            lockwarden(&server)
                .args([
                    "run",
                    "jobs:nightly",
                    "--wait",
                    "15s",
                    "--",
                    "sh",
                    "-c",
                    script,
                ])
                .env("ID", id.to_string())
                .env("MARKS", &marks)
                .spawn()
                .expect("cannot start lockwarden")
        })
        .collect();
    for child in children {
        let out = finish(child).await;
        assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    }
    let text = std::fs::read_to_string(&marks).expect("marks written");
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 6, "three runs, two marks each:\n{text}");
    let mut last_token = 0u64;
    for pair in lines.chunks(2) {
        let (start, end) = (&pair[0], &pair[1]);
        assert_eq!((start[0], end[0]), ("start", "end"), "interleaved:\n{text}");
        assert_eq!(
            start[1], end[1],
            "another run ended inside this one:\n{text}"
        );
        assert_eq!(start[3], "jobs:nightly", "LOCKWARDEN_LOCK");
        let token: u64 = start[2].parse().expect("LOCKWARDEN_TOKEN is a number");
        assert!(
            token > last_token,
            "tokens grow with each acquisition:\n{text}"
        );
        last_token = token;
    }
}

/// A `run` whose lock is force-unlocked while its command runs kills the command
/// (it never reaches its end) and exits with the lock-lost code 76.
#[actix_rt::test]
async fn a_run_whose_lock_is_force_unlocked_is_killed_and_exits_76() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let (started, finished) = (dir.path().join("started"), dir.path().join("finished"));
    let child = lockwarden(&server)
        .args(["run", "orders:42", "--watchdog-lease", "1500ms", "--"])
        .args([
            "sh",
            "-c",
            r#"touch "$STARTED"; sleep 30; touch "$FINISHED""#,
        ])
        .env("STARTED", &started)
        .env("FINISHED", &finished)
        .spawn()
        .expect("cannot start lockwarden");
    assert!(
        eventually(Duration::from_secs(10), || started.exists()).await,
        "the command did not start"
    );
    let unlock = run(&server, &["unlock", "--force", "orders:42", "--yes"]).await;
    assert_eq!(unlock.status.code(), Some(0), "stderr: {}", stderr(&unlock));
    assert!(stdout(&unlock).contains("unlocked"), "{}", stdout(&unlock));

    let since = Instant::now();
    let out = finish(child).await;
    assert_eq!(out.status.code(), Some(76), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("lost"), "{}", stderr(&out));
    assert!(
        since.elapsed() < Duration::from_secs(10),
        "killed long before its end"
    );
    assert!(!Path::new(&finished).exists(), "the command ran to its end");
}

/// `hold --json` prints exactly the documented lines: acquired then released (with
/// the right types and times), timeout when the wait runs out, lost when the lock
/// is force-unlocked while held.
#[actix_rt::test]
async fn hold_json_prints_the_documented_events() {
    let server = RedisServer::start();
    let before = unix_ms();
    let out = run(&server, &["hold", "a", "--for", "300ms", "--json"]).await;
    let after = unix_ms();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let events: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    let [acquired, released] = events.as_slice() else {
        panic!("two events expected: {}", stdout(&out));
    };
    assert_eq!(acquired["event"], "acquired");
    assert_eq!(acquired["lock"], "a");
    let owner = acquired["owner"].as_str().expect("owner is a string");
    assert!(owner.contains(':'), "owner field <client id>:<n>: {owner}");
    let token = acquired["token"].as_u64().expect("token is a number");
    assert!(
        acquired["waited_ms"].as_u64().is_some(),
        "waited_ms is a number"
    );
    let acquired_at = acquired["at_ms"].as_u64().expect("at_ms is a number");
    assert!(
        (before..=after).contains(&acquired_at),
        "at_ms is Unix ms now"
    );
    // `name` and `lock` (the same, `lock` kept for older scripts) and five more.
    assert_eq!(acquired["name"], "a");
    assert_eq!(acquired.as_object().map(|o| o.len()), Some(7));

    assert_eq!(released["event"], "released");
    assert_eq!(released["lock"], "a");
    assert_eq!(released["owner"], owner);
    assert_eq!(released["token"].as_u64(), Some(token));
    assert!(released["held_ms"].as_u64().expect("held_ms is a number") >= 300);
    let released_at = released["at_ms"].as_u64().expect("at_ms is a number");
    assert!(released_at >= acquired_at + 300 && released_at <= after);
    assert_eq!(released.as_object().map(|o| o.len()), Some(7));

    // Held elsewhere: a timeout event and exit code 75.
    let holder = manager(&server).await;
    let guard = holder
        .send(Acquire::new("a"))
        .await
        .expect("manager runs")
        .expect("acquired");
    let out = run(&server, &["hold", "a", "--wait", "200ms", "--json"]).await;
    assert_eq!(out.status.code(), Some(75), "stderr: {}", stderr(&out));
    let timeout: Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON line");
    assert_eq!(timeout["event"], "timeout");
    assert_eq!(timeout["lock"], "a");
    assert!(
        timeout["waited_ms"]
            .as_u64()
            .expect("waited_ms is a number")
            >= 200
    );
    assert!(timeout["at_ms"].as_u64().is_some());
    drop(guard);

    // Force-unlocked while held: a lost event and exit code 76.
    let mut child = spawn(
        &server,
        &["hold", "b", "--watchdog-lease", "1500ms", "--json"],
    );
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let first = tokio::time::timeout(LIMIT, lines.next_line()).await;
    let first = first
        .expect("no acquired line in time")
        .expect("read stdout");
    let acquired: Value = serde_json::from_str(&first.expect("a line")).expect("JSON");
    assert_eq!(acquired["event"], "acquired");
    let deleted = holder
        .send(ForceUnlock::new("b"))
        .await
        .expect("manager runs");
    assert!(deleted.expect("force unlock"), "the lock existed");
    let next = tokio::time::timeout(LIMIT, lines.next_line()).await;
    let lost: Value =
        serde_json::from_str(&next.expect("no lost line").expect("read").expect("a line"))
            .expect("JSON");
    assert_eq!(lost["event"], "lost");
    assert_eq!(lost["owner"], acquired["owner"]);
    assert_eq!(lost["token"], acquired["token"]);
    assert!(lost["reason"].as_str().is_some_and(|r| !r.is_empty()));
    assert!(lost["at_ms"].as_u64().is_some());
    assert_eq!(finish(child).await.status.code(), Some(76));
}

/// `status` shows the holder, hold count and TTL of a lock the library holds, and
/// `list` finds it (and not an application hash that matches the pattern).
#[actix_rt::test]
async fn status_shows_holder_hold_count_and_ttl_of_a_library_lock() {
    let server = RedisServer::start();
    let manager = manager(&server).await;
    let owner = Owner::new();
    let mut guards = Vec::new();
    for _ in 0..2 {
        let acquire = Acquire::new("orders:42").owner(owner);
        guards.push(
            manager
                .send(acquire)
                .await
                .expect("runs")
                .expect("acquired"),
        );
    }
    let field = guards[0].owner_field().to_string();

    let out = run(&server, &["status", "orders:42", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let status: Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    assert_eq!(status["lock"], "orders:42");
    assert_eq!(status["kind"], "exclusive");
    assert_eq!(status["held"], true);
    let ttl = status["ttl_ms"].as_u64().expect("ttl_ms is a number");
    assert!(ttl > 0 && ttl <= 30_000, "watchdog lease is 30 s: {ttl}");
    let holders = status["holders"].as_array().expect("holders is an array");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0]["owner"], field.as_str());
    assert_eq!(holders[0]["holds"], 2);
    assert_eq!(holders[0]["owner_format"], "redisson");

    let human = stdout(&run(&server, &["status", "orders:42"]).await);
    assert!(
        human.contains(&field) && human.contains("holds: 2"),
        "{human}"
    );
    assert!(human.contains("expires in"), "{human}");

    let _: () = redis::cmd("HSET")
        .arg("orders:meta")
        .arg("owner")
        .arg("alice")
        .query(&mut server.conn())
        .expect("HSET");
    let listed = stdout(&run(&server, &["list", "--pattern", "orders:*"]).await);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(
        listed.starts_with("orders:42\texclusive\tholders=1"),
        "{listed}"
    );

    let free = run(&server, &["status", "nothing", "--json"]).await;
    let free: Value = serde_json::from_str(stdout(&free).trim()).expect("JSON");
    assert_eq!(
        (free["kind"].as_str(), free["held"].as_bool()),
        (Some("none"), Some(false))
    );
}

/// A `run` whose `--wait` runs out exits 75 without running its command, and its
/// message names the current holder, with the host and pid of its process (this
/// test's own: the holder is a library manager here).
#[actix_rt::test]
async fn a_wait_timeout_exits_75_and_names_the_holder() {
    let server = RedisServer::start();
    let manager = manager(&server).await;
    let guard = manager
        .send(Acquire::new("reports"))
        .await
        .expect("runs")
        .expect("acquired");
    // The manager writes its registry entry in the background after it starts.
    let registered = eventually(Duration::from_secs(10), || {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("lockwarden:client:*")
            .query(&mut server.conn())
            .expect("KEYS");
        !keys.is_empty()
    })
    .await;
    assert!(registered, "the holder's manager never registered");
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let out = lockwarden(&server)
        .args([
            "run",
            "reports",
            "--wait",
            "300ms",
            "--",
            "sh",
            "-c",
            r#"touch "$RAN""#,
        ])
        .env("RAN", &ran)
        .output();
    let out = tokio::time::timeout(LIMIT, out)
        .await
        .expect("exits")
        .expect("runs");
    assert_eq!(out.status.code(), Some(75), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(guard.owner_field()), "{err}");
    assert!(
        err.contains(&format!("pid {}", std::process::id())),
        "the holder's process: {err}"
    );
    assert!(!ran.exists(), "the command ran without the lock");
}

/// `--read`, `--write`, `--fair` and `--spin` take the library's kinds of lock: a
/// `run --read` shares a read lock the library holds, a `run --write` waits for it
/// (and times out with 75), `status` shows a fair lock's queue with the time left
/// on each waiter's place, and a `run --spin` is kept out by the library's
/// exclusive lock of the same name (the same key) and runs once it is released.
#[actix_rt::test]
async fn kind_flags_take_read_write_and_fair_locks() {
    let server = RedisServer::start();
    let manager = manager(&server).await;
    let reader = manager
        .send(Acquire::new("doc").read())
        .await
        .expect("runs")
        .expect("read lock");
    let out = run(
        &server,
        &["run", "doc", "--read", "--wait", "2s", "--", "true"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "readers share: {}",
        stderr(&out)
    );
    let out = run(
        &server,
        &["run", "doc", "--write", "--wait", "300ms", "--", "true"],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(75),
        "a writer waits for the reader: {}",
        stderr(&out)
    );
    reader.release().await.expect("released");

    let holder = manager
        .send(Acquire::new("line").fair())
        .await
        .expect("runs")
        .expect("fair lock");
    let waiting = actix_rt::spawn({
        let manager = manager.clone();
        async move {
            manager
                .send(Acquire::new("line").fair().wait(Duration::from_secs(10)))
                .await
        }
    });
    let queued = eventually(Duration::from_secs(5), || {
        let n: i64 = redis::cmd("LLEN")
            .arg("redisson_lock_queue:{line}")
            .query(&mut server.conn())
            .expect("LLEN");
        n == 1
    })
    .await;
    assert!(queued, "the library's fair waiter never queued");
    let out = run(&server, &["status", "line", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    let queue = status["queue"].as_array().expect("a queue array");
    assert_eq!(queue.len(), 1, "{status}");
    assert!(
        queue[0]["expires_in_ms"].as_u64().is_some_and(|ms| ms > 0),
        "{status}"
    );
    let out = run(&server, &["status", "line"]).await;
    assert!(stdout(&out).contains("queued #1"), "{}", stdout(&out));
    let out = run(
        &server,
        &["run", "line", "--fair", "--wait", "300ms", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    holder.release().await.expect("released");
    let next = waiting
        .await
        .expect("task")
        .expect("runs")
        .expect("served next");
    next.release().await.expect("released");

    let plain = manager
        .send(Acquire::new("batch"))
        .await
        .expect("runs")
        .expect("exclusive lock");
    let spin = ["run", "batch", "--spin", "--wait", "300ms", "--", "true"];
    let out = run(&server, &spin).await;
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    plain.release().await.expect("released");
    let out = run(
        &server,
        &["run", "batch", "--spin", "--wait", "5s", "--", "true"],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Bad input (empty or unusable name, malformed duration, zero lease, missing
/// --force or --yes, a key that is not a lock, wrong URL
/// scheme, unreachable Redis) exits 2 with one line on stderr and leaves Redis as
/// it was.
#[actix_rt::test]
async fn bad_input_exits_2_and_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    // A lock as Redisson writes it, so that a wrongly accepted unlock would show.
    let field = "4f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11:1";
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("held")
        .arg(field)
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg("held")
        .arg(60_000)
        .ignore()
        .cmd("HSET")
        .arg("visits")
        .arg("home")
        .arg(3)
        .ignore()
        .query(&mut conn)
        .expect("lock and application hash written");
    let dead = format!("redis://127.0.0.1:{}/", free_port());
    let wrong_scheme = server.url().replace("redis://", "http://");
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "", "--", "true"],
        vec!["hold", "a{b"],
        vec!["run", "a", "--wait", "10x", "--", "true"],
        vec!["run", "a", "--spin", "--fair", "--", "true"],
        vec!["run", "a", "--lock-delay", "10x", "--", "true"],
        vec!["hold", "a", "--lock-delay", "200h"],
        vec!["hold", "a", "--for", "5"],
        vec!["hold", "a", "--lease", "0s"],
        vec!["unlock", "held"],
        vec!["unlock", "--force", "held"],
        vec!["unlock", "--force", "visits", "--yes"],
        vec!["status", "visits"],
        vec!["--redis", &wrong_scheme, "hold", "a"],
        vec!["--redis", &dead, "run", "a", "--", "true"],
        vec!["--redis", &dead, "status", "a"],
    ];
    for args in &cases {
        let out = run(&server, args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.starts_with("lockwarden: "), "{args:?}: {err}");
        assert!(stdout(&out).is_empty(), "{args:?}: {}", stdout(&out));
    }
    assert_eq!(dbsize(&server), 2, "only the two hashes written above");
    let holders: Vec<(String, u32)> = redis::cmd("HGETALL")
        .arg("held")
        .query(&mut conn)
        .expect("HGETALL");
    assert_eq!(holders, [(field.to_string(), 1)]);
    let visits: Vec<(String, u32)> = redis::cmd("HGETALL")
        .arg("visits")
        .query(&mut conn)
        .expect("HGETALL");
    assert_eq!(visits, [("home".to_string(), 3)]);
}
