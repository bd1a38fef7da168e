//! Who holds a lock, from the command line: `status`, `list` and `top` name the
//! process that holds a lock (host, pid, label), in text and in `--json`, escape
//! a label's control characters, show a holder with no valid registry entry as an
//! unknown client, and lose the entry within a lease once the holder is killed.
#![cfg(feature = "cli")]

use crate::support;

use std::time::Duration;

use lockwarden::Locks;
use serde_json::Value;
use support::{eventually, exists, raw, RedisServer};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The `lockwarden` command pointed at `server`.
fn lockwarden(server: &RedisServer) -> tokio::process::Command {
    support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
}

/// Runs it with `args` and answers its stdout, checking it exits 0.
pub(crate) async fn output(server: &RedisServer, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        lockwarden(server).args(args).output(),
    )
    .await
    .expect("lockwarden within 20 s")
    .expect("run lockwarden");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `lockwarden hold` process with a label: `status`, `list` and `top` show its
/// host, pid and escaped label, `--json` carries the raw entry; a foreign holder
/// and a garbage entry read as unknown; after a SIGKILL the entry is gone within
/// one watchdog lease.
#[actix_rt::test]
async fn status_list_and_top_name_the_holding_process() {
    let server = RedisServer::start();
    let label = "cron\tjob\u{1b}[2J";
    let mut holder = lockwarden(&server)
        .args(["--label", label, "hold", "who:held", "--json"])
        .args(["--watchdog-lease", "1s"])
        .spawn()
        .expect("start lockwarden hold");
    let pid = holder.id().expect("a pid");
    let mut events = BufReader::new(holder.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), events.next_line())
        .await
        .expect("acquired within 20 s")
        .expect("read")
        .expect("a line");
    assert!(first.contains("\"acquired\""), "{first}");
    // A holder written by another client, and one whose entry is garbage.
    let foreign = "4f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11";
    let _: i64 = raw(
        &server,
        &["HSET", "who:foreign", &format!("{foreign}:1"), "1"],
    );
    let garbage = "5f1c7c2e-8d8e-4a53-9a3a-0c2d5c1b9e11";
    let _: i64 = raw(
        &server,
        &["HSET", "who:garbage", &format!("{garbage}:1"), "1"],
    );
    let _: i64 = raw(
        &server,
        &[
            "HSET",
            &format!("lockwarden:client:{{{garbage}}}"),
            "pid",
            "\u{1b}[2J",
        ],
    );

    let text = output(&server, &["status", "who:held"]).await;
    assert!(text.contains(&format!("pid {pid} ")), "{text}");
    assert!(text.contains(r#"label "cron\tjob\u{1b}[2J""#), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");
    let json: Value =
        serde_json::from_str(&output(&server, &["status", "who:held", "--json"]).await)
            .expect("JSON");
    let client = &json["holders"][0]["client"];
    assert_eq!(client["pid"], pid);
    assert_eq!(client["label"], label);
    assert_eq!(client["program"], "lockwarden");
    assert_eq!(client["version"], env!("CARGO_PKG_VERSION"));
    assert!(client["started_ms"].as_u64().is_some());
    for name in ["who:foreign", "who:garbage"] {
        let text = output(&server, &["status", name]).await;
        assert!(
            text.contains("unknown client (not lockwarden, or gone)"),
            "{text}"
        );
        let json: Value = serde_json::from_str(&output(&server, &["status", name, "--json"]).await)
            .expect("JSON");
        assert!(json["holders"][0]["client"].is_null(), "{json}");
    }

    let list = output(&server, &["list", "--pattern", "who:*"]).await;
    let line = |name: &str| {
        list.lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no line for {name}: {list}"))
            .to_string()
    };
    assert!(line("who:held").contains("\tby=host "), "{list}");
    assert!(line("who:held").contains(&format!("pid {pid} ")), "{list}");
    assert!(
        line("who:foreign").contains("\tby=unknown client"),
        "{list}"
    );
    assert_eq!(
        list.lines().count(),
        3,
        "the registry entries are not locks: {list}"
    );

    let top = output(&server, &["top", "--iterations", "1", "--pattern", "who:*"]).await;
    assert!(top.contains(&format!("pid {pid} ")), "{top}");
    assert!(!top.contains('\u{1b}'), "{top:?}");
    let frame: Value = serde_json::from_str(
        output(
            &server,
            &[
                "top",
                "--json",
                "--iterations",
                "1",
                "--pattern",
                "who:held",
            ],
        )
        .await
        .trim(),
    )
    .expect("JSON");
    assert_eq!(frame["locks"][0]["holders"][0]["client"]["pid"], pid);

    // Killed: nothing rewrites the entry, which had at most one lease to live.
    let key = {
        let owner = json["holders"][0]["owner"].as_str().expect("owner");
        let id = owner.split(':').next().expect("client id");
        format!("lockwarden:client:{{{id}}}")
    };
    let ttl: i64 = raw(&server, &["PTTL", &key]);
    assert!(ttl > 0 && ttl <= 1000, "PTTL {ttl}");
    holder.start_kill().expect("SIGKILL");
    holder.wait().await.expect("reaped");
    let gone = eventually(Duration::from_secs(5), || !exists(&server, &key)).await;
    assert!(gone, "the entry outlived its killed process");
}

/// `--label` over 256 bytes exits 2 with one line naming the label, before
/// anything connects.
#[test]
fn an_overlong_label_exits_2() {
    let long = "x".repeat(300);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
        .args([
            "--redis",
            "redis://127.0.0.1:1",
            "--label",
            &long,
            "hold",
            "a",
        ])
        .env_remove("REDIS_URL")
        .env_remove("LOCKWARDEN_LABEL")
        .output()
        .expect("run lockwarden");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("label"), "{err}");
}

/// Polls `look` (an async read) every 50 ms until it answers `Some`, for up to
/// `limit`; answers the value, or panics with `what`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    limit: Duration,
    what: &str,
    mut look: impl FnMut() -> F,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = look().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{what}");
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 38: Redis restarted empty under a semaphore waiter with no deadline.
/// The waiter's log says so at warn within a second of the restart, and `status`
/// (text and `--json`), `list` and `top` show the semaphore whose key is gone and
/// who waits on it (host, pid, label, since when); adding permits lets it in.
#[actix_rt::test]
async fn a_waiter_on_a_lost_semaphore_is_logged_and_shown() {
    let (log, _logging) = support::Captured::install();
    let mut server = RedisServer::start();
    let m = support::manager(&server, |c| c.label("partner-calls")).await;
    let sem = m.semaphore("who:partner").await.expect("handle");
    assert!(sem.try_set_permits(1).await.expect("set"));
    let held = sem.acquire(1).await.expect("the only permit");
    let waiter = actix_rt::spawn({
        let sem = sem.clone();
        async move { sem.acquire(1).await }
    });
    // Recorded once it has waited a second: status shows who waits.
    let json = until(Duration::from_secs(10), "no recorded waiter", || async {
        let v: Value =
            serde_json::from_str(&output(&server, &["status", "who:partner", "--json"]).await)
                .expect("JSON");
        (v["waiters"].as_array().map(Vec::len) == Some(1)).then_some(v)
    })
    .await;
    assert_eq!(json["name"], "who:partner");
    assert_eq!(json["key_missing"], false);
    assert_eq!(json["waiters"][0]["client"]["label"], "partner-calls");
    assert_eq!(json["waiters"][0]["client"]["pid"], std::process::id());

    // SIGKILL and restart empty: the key, the records and the registry are gone.
    const WARNING: &str = "waiting on a semaphore whose key does not exist";
    assert!(!log.text().contains(WARNING), "{}", log.text());
    server.restart();
    let restarted = std::time::Instant::now();
    until(Duration::from_secs(10), "no warning", || async {
        log.text().contains(WARNING).then_some(())
    })
    .await;
    let to_warn = restarted.elapsed();
    eprintln!("warned {to_warn:?} after the restart");
    assert!(
        to_warn < Duration::from_secs(1),
        "{to_warn:?}\n{}",
        log.text()
    );
    assert!(!exists(&server, "who:partner"));

    let text = until(
        Duration::from_secs(15),
        "status shows no lost key",
        || async {
            let t = output(&server, &["status", "who:partner"]).await;
            (t.contains("KEY DOES NOT EXIST") && t.contains("label \"partner-calls\"")).then_some(t)
        },
    )
    .await;
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains(" so far"), "{text}");
    let v: Value =
        serde_json::from_str(&output(&server, &["status", "who:partner", "--json"]).await)
            .expect("JSON");
    assert_eq!(v["key_missing"], true, "{v}");
    assert_eq!(v["kind"], "semaphore", "{v}");
    assert!(v["waiters"][0]["since_ms"].as_u64().is_some(), "{v}");
    let list = output(&server, &["list"]).await;
    assert!(
        list.lines()
            .any(|l| l.starts_with("who:partner\t") && l.ends_with("KEY-MISSING")),
        "{list}"
    );
    let top = output(&server, &["top", "--iterations", "1"]).await;
    let row = top
        .lines()
        .find(|l| l.starts_with("who:partner\t"))
        .unwrap_or_else(|| panic!("{top}"));
    assert!(
        row.contains("KEY-MISSING") && row.contains("partner-calls"),
        "{row}"
    );

    // Permits set again: the waiter gets one, and its record goes.
    output(&server, &["semaphore", "set", "who:partner", "1"]).await;
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is let in")
        .expect("task")
        .expect("a permit");
    until(Duration::from_secs(5), "the record stays", || async {
        let v: Value =
            serde_json::from_str(&output(&server, &["status", "who:partner", "--json"]).await)
                .expect("JSON");
        (v["waiters"].as_array().map(Vec::len) == Some(0)).then_some(())
    })
    .await;
    drop((got, held));
}

/// A lock's waiter that has waited a second is recorded with the owner field it
/// will hold the lock under: `status --json` and `top` name it (host, pid,
/// label), and its record goes once it has the lock.
#[actix_rt::test]
async fn a_locks_waiter_is_named_with_its_owner_field() {
    let server = RedisServer::start();
    let holder = support::manager(&server, |c| c).await;
    let waiting = support::manager(&server, |c| c.label("queue-b")).await;
    let held = support::hold(&holder, "who:job", |a| a).await;
    let waiter =
        actix_rt::spawn(async move { waiting.send(lockwarden::Acquire::new("who:job")).await });
    let v = until(
        Duration::from_secs(10),
        "no recorded lock waiter",
        || async {
            let out = output(&server, &["status", "who:job", "--json"]).await;
            let v: Value = serde_json::from_str(&out).expect("JSON");
            (v["waiters"].as_array().map(Vec::len) == Some(1)).then_some(v)
        },
    )
    .await;
    let w = &v["waiters"][0];
    assert_eq!(w["client"]["label"], "queue-b", "{v}");
    let owner = w["owner"].as_str().expect("owner").to_string();
    assert_ne!(
        owner,
        v["holders"][0]["owner"].as_str().unwrap_or(""),
        "{v}"
    );
    let top = output(&server, &["top", "--iterations", "1"]).await;
    let row = top
        .lines()
        .find(|l| l.starts_with("who:job\t"))
        .unwrap_or_else(|| panic!("{top}"));
    assert!(
        row.contains("waiters=host ") && row.contains("queue-b"),
        "{row}"
    );

    held.release().await.expect("released");
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter gets the lock")
        .expect("task")
        .expect("running")
        .expect("acquired");
    assert_eq!(
        got.owner_field(),
        owner,
        "the record named the owner field it holds under"
    );
    until(Duration::from_secs(5), "the record stays", || async {
        let out = output(&server, &["status", "who:job", "--json"]).await;
        let v: Value = serde_json::from_str(&out).expect("JSON");
        (v["waiters"].as_array().map(Vec::len) == Some(0)).then_some(())
    })
    .await;
    got.release().await.expect("released");
}

/// A `lockwarden run` that waited long enough to be recorded, then got the
/// lock and was SIGKILLed while its command ran, leaves no waiting record
/// behind: its wait ended at the grant, and the record went then, not at the
/// next tick of the records (a record left behind would show the killed
/// process waiting, its wait growing, until the record expires).
#[actix_rt::test]
async fn a_lock_waiter_killed_after_its_grant_leaves_no_record() {
    let server = RedisServer::start();
    let holder = support::manager(&server, |c| c).await;
    let held = support::hold(&holder, "who:exit", |a| a).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let script = format!("touch {}; sleep 60", ran.display());
    let mut waiter = lockwarden(&server)
        .args([
            "run", "who:exit", "--wait", "30s", "--", "sh", "-c", &script,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the waiting run");
    until(
        Duration::from_secs(10),
        "no recorded lock waiter",
        || async {
            let out = output(&server, &["status", "who:exit", "--json"]).await;
            let v: Value = serde_json::from_str(&out).expect("JSON");
            (v["waiters"].as_array().map(Vec::len) == Some(1)).then_some(())
        },
    )
    .await;
    held.release().await.expect("released");
    until(Duration::from_secs(10), "the command never ran", || async {
        ran.exists().then_some(())
    })
    .await;
    waiter.start_kill().expect("SIGKILL the run");
    let _ = waiter.wait().await;
    let out = output(&server, &["status", "who:exit", "--json"]).await;
    let v: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        v["waiters"].as_array().map(Vec::len),
        Some(0),
        "a killed process is shown waiting: {v}"
    );
}
