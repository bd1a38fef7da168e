//! The synchronizers from the command line (issue 14, part 5), as real processes
//! on a real `redis-server`: `run --semaphore` keeps at most N commands running
//! across processes, `latch` sets, counts down and wakes every waiting process,
//! `status` shows a semaphore's permits, and bad input exits 2 writing nothing.
#![cfg(feature = "cli")]

use crate::support;

use std::process::Output;
use std::time::Duration;

use support::{lockwarden_at, raw, RedisServer};
use tokio::process::Child;

/// Upper bound for any one invocation: far above what each needs.
const LIMIT: Duration = Duration::from_secs(60);

fn spawn(server: &RedisServer, args: &[&str]) -> Child {
    lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
        .args(args)
        .spawn()
        .expect("cannot start lockwarden")
}

async fn finish(child: Child) -> Output {
    tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .expect("lockwarden did not exit in time")
        .expect("cannot wait for lockwarden")
}

async fn run(server: &RedisServer, args: &[&str]) -> Output {
    finish(spawn(server, args)).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// Six `lockwarden run --semaphore --permits 2` processes at once: each command
/// appends `s` when it starts and `e` before it ends to one file (appends are
/// atomic), and no prefix of that file ever has more than two commands running.
#[tokio::test]
async fn run_semaphore_keeps_at_most_n_commands_running() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("log");
    let script = format!("echo s >> {0}; sleep 0.3; echo e >> {0}", log.display());
    let children: Vec<Child> = (0..6)
        .map(|_| {
            spawn(
                &server,
                &[
                    "run",
                    "api",
                    "--semaphore",
                    "--permits",
                    "2",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ],
            )
        })
        .collect();
    for child in children {
        let out = finish(child).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let lines = std::fs::read_to_string(&log).expect("log written");
    let (mut running, mut peak, mut starts) = (0i32, 0, 0);
    for line in lines.lines() {
        match line {
            "s" => {
                running += 1;
                starts += 1;
            }
            _ => running -= 1,
        }
        peak = peak.max(running);
    }
    assert_eq!(starts, 6, "every command ran:\n{lines}");
    assert!(peak <= 2, "{peak} commands ran at once:\n{lines}");
    assert_eq!(
        raw::<String>(&server, &["GET", "api"]),
        "2",
        "permits all back"
    );
}

/// `latch set` once (the same set again exits 0, one below the count 1), two processes wait, two
/// `count-down`s print 1 then 0 and both waiters exit 0; a wait on a closed
/// latch exits 75 when `--wait` runs out; `count` prints the count.
#[tokio::test]
async fn latch_commands_wake_every_waiting_process() {
    let server = RedisServer::start();
    assert!(run(&server, &["latch", "set", "batch", "2"])
        .await
        .status
        .success());
    let again = run(&server, &["latch", "set", "batch", "2"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    let other = run(&server, &["latch", "set", "batch", "1"]).await;
    assert_eq!(other.status.code(), Some(1), "{}", text(&other.stderr));
    assert_eq!(
        raw::<i64>(&server, &["GET", "batch"]),
        2,
        "a set on a latch with a count changes nothing"
    );
    let waiters: Vec<Child> = (0..2)
        .map(|_| spawn(&server, &["latch", "wait", "batch", "--wait", "50s"]))
        .collect();
    let subscribed = support::eventually(Duration::from_secs(20), || {
        let n: Vec<(String, i64)> = raw(
            &server,
            &[
                "PUBSUB",
                "NUMSUB",
                "redisson_countdownlatch__channel__{batch}",
            ],
        );
        n.first().is_some_and(|(_, c)| *c == 2)
    })
    .await;
    assert!(subscribed, "the waiting processes never subscribed");
    let one = run(&server, &["latch", "count-down", "batch"]).await;
    assert_eq!(text(&one.stdout), "1");
    assert_eq!(
        text(&run(&server, &["latch", "count", "batch"]).await.stdout),
        "1"
    );
    let zero = run(&server, &["latch", "count-down", "batch"]).await;
    assert_eq!(text(&zero.stdout), "0");
    for w in waiters {
        let out = finish(w).await;
        assert!(out.status.success(), "waiter: {}", text(&out.stderr));
    }
    assert!(run(&server, &["latch", "set", "closed", "1"])
        .await
        .status
        .success());
    let timed_out = run(&server, &["latch", "wait", "closed", "--wait", "300ms"]).await;
    assert_eq!(
        timed_out.status.code(),
        Some(75),
        "{}",
        text(&timed_out.stderr)
    );
}

/// `status` shows a semaphore by its kind with its available permits, in text
/// and JSON; `semaphore add` and `drain` print the permits.
#[tokio::test]
async fn status_shows_a_semaphores_permits() {
    let server = RedisServer::start();
    assert!(run(&server, &["semaphore", "set", "api", "3"])
        .await
        .status
        .success());
    let out = run(&server, &["status", "api"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("api: semaphore, 3 permits available, 0 waiting"),
        "{}",
        text(&out.stdout)
    );
    let json = run(&server, &["status", "api", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(
        (
            v["kind"].as_str(),
            v["value"].as_i64(),
            v["labelled"].as_bool()
        ),
        (Some("semaphore"), Some(3), Some(true))
    );
    // `run --permits` on a semaphore that exists changes nothing, and says so
    // (more are available than --permits asks: plainly set up with another number).
    let out = run(
        &server,
        &[
            "-v",
            "run",
            "api",
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
    assert_eq!(
        text(&run(&server, &["semaphore", "add", "api", "2"]).await.stdout),
        "5"
    );
    assert_eq!(
        text(&run(&server, &["semaphore", "drain", "api"]).await.stdout),
        "5"
    );
}

/// `latch wait` on a latch with no count (a mistyped name, say) returns at once, as
/// Redisson reads it, but says so on stderr; with `--must-exist` it exits 1.
/// `semaphore available` prints the permits available (0 for one never set).
/// Nothing is written by any of them.
#[tokio::test]
async fn a_latch_with_no_count_is_said_and_available_permits_are_printed() {
    let server = RedisServer::start();
    let out = run(&server, &["latch", "wait", "batch2", "--wait", "5s"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("latch \"batch2\" has no count"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&server, &["latch", "wait", "batch2", "--must-exist"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("never set"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(support::data_key_count(&server), 0, "nothing written");

    let out = run(&server, &["semaphore", "available", "api"]).await;
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "0".into())
    );
    assert!(run(&server, &["semaphore", "set", "api", "3"])
        .await
        .status
        .success());
    let out = run(&server, &["semaphore", "available", "api"]).await;
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "3".into())
    );
}

/// Zero, negative or too large amounts and a name with unbalanced braces exit
/// 2 with one line on stderr, and nothing is written.
#[tokio::test]
async fn bad_input_exits_2_and_writes_nothing() {
    let server = RedisServer::start();
    for args in [
        &["semaphore", "add", "api", "0"][..],
        &["semaphore", "set", "api", "-1"],
        &["semaphore", "set", "api", "3000000000"],
        &["latch", "set", "batch", "0"],
        &["latch", "set", "batch", "9223372036854775808"],
        &["latch", "set", "}x", "3"],
        &["run", "api", "--semaphore", "--permits", "0", "--", "true"],
        &["run", "a{b", "--semaphore", "--permits", "1", "--", "true"],
    ] {
        let out = run(&server, args).await;
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            support::without_confirmation_note(&text(&out.stderr))
                .lines()
                .count(),
            1,
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // Every manager keeps its registry entry (who holds what); nothing else.
    assert_eq!(support::data_key_count(&server), 0);
}

/// A value that is not a number at a semaphore's or a latch's key (issue 27): each
/// command that reads it ends at once with exit 2 and a line that names the key
/// and what it holds, and the value is left as it was (before, `run --semaphore`
/// and `latch wait` waited their whole wait on it, as if it were 0, and `semaphore
/// drain` overwrote it with 0 before failing).
#[tokio::test]
async fn a_key_that_holds_no_number_is_refused_at_once_and_kept() {
    let server = RedisServer::start();
    let _: () = raw(&server, &["SET", "garbled", "abc"]);
    for args in [
        &[
            "run",
            "garbled",
            "--semaphore",
            "--permits",
            "1",
            "--wait",
            "20s",
            "--",
            "true",
        ][..],
        &["semaphore", "drain", "garbled"][..],
        &["latch", "wait", "garbled", "--wait", "20s"][..],
        &["latch", "count-down", "garbled"][..],
    ] {
        let began = std::time::Instant::now();
        let out = run(&server, args).await;
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("\"garbled\"") && err.contains("\"abc\""),
            "{args:?}: {err}"
        );
        assert!(err.contains("not a number"), "{args:?}: {err}");
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{args:?} waited: {err}"
        );
        let kept: String = raw(&server, &["GET", "garbled"]);
        assert_eq!(kept, "abc", "{args:?} changed the value");
    }
}

/// `run --semaphore --expirable` (issue 27) takes a permit-expirable semaphore's
/// permits (Redisson's RPermitExpirableSemaphore layout): the command sees the
/// permit's id; the permits of a `lockwarden` killed with SIGKILL come back by
/// themselves within one watchdog lease, so the next process gets them (a plain
/// permit stays taken); and permits reclaimed while the command runs are lost
/// like a lock: SIGTERM to the command, exit 76.
#[tokio::test]
async fn expirable_permits_die_with_the_process_and_can_be_lost() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let ids = dir.path().join("ids");
    let pid_file = dir.path().join("pid");
    let script = format!(
        "echo $$ > {}; echo $LOCKWARDEN_PERMIT_IDS > {}; exec sleep 60",
        pid_file.display(),
        ids.display()
    );
    let expirable = |name: &'static str, script: &str| {
        [
            "run",
            name,
            "--semaphore",
            "--expirable",
            "--permits",
            "1",
            "--watchdog-lease",
            "2s",
            "--wait",
            "20s",
            "--",
            "sh",
            "-c",
            script,
        ]
        .map(String::from)
        .to_vec()
    };
    let mut first = spawn(&server, &args_of(&expirable("crawl", &script)));
    assert!(
        support::eventually(Duration::from_secs(20), || std::fs::read_to_string(&ids)
            .is_ok_and(|t| t.trim().len() == 32))
        .await,
        "the command never saw its permit id"
    );
    let id = std::fs::read_to_string(&ids)
        .expect("ids")
        .trim()
        .to_string();
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    let available: String = raw(&server, &["GET", "crawl"]);
    assert_eq!(available, "0");
    // SIGKILL: nothing gives the permit back but its expiry. The command's own
    // process group is ended too, as a supervisor would.
    let pid = first.id().expect("pid") as i32;
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let _ = first.wait().await;
    let command = std::fs::read_to_string(&pid_file).expect("pid");
    let _ = std::process::Command::new("kill")
        .args(["-KILL", command.trim()])
        .status();

    let out = run(&server, &args_of(&expirable("crawl", "true"))).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Lost while the command runs: the taken permits are reclaimed by hand.
    let started = dir.path().join("started");
    let script = format!("touch {}; exec sleep 60", started.display());
    let lost = spawn(&server, &args_of(&expirable("pool", &script)));
    assert!(
        support::eventually(Duration::from_secs(20), || started.exists()).await,
        "the command never started"
    );
    let _: i64 = raw(&server, &["DEL", "{pool}:timeout"]);
    let out = finish(lost).await;
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(76), "{err}");
    assert!(
        err.contains("the hold on semaphore \"pool\" was lost"),
        "{err}"
    );
}

/// Borrows owned arguments for `spawn` and `run`.
fn args_of(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// A connection subscribed to `channel`, as a Redisson client waiting on a
/// synchronizer is; it listens until dropped.
fn subscribed(server: &RedisServer, channel: &str) -> redis::Connection {
    let mut conn = server.conn();
    redis::cmd("SUBSCRIBE")
        .arg(channel)
        .exec(&mut conn)
        .expect("subscribe");
    conn
}

/// The `list` line of `name`, if it has one.
fn line_of<'a>(listed: &'a str, name: &str) -> Option<&'a str> {
    listed.lines().find(|l| l.split('\t').next() == Some(name))
}

/// `list`, `top` and `status` show every synchronizer by its kind (issue 30,
/// item 3): a semaphore and a latch lockwarden made (by their kind labels), and,
/// made by Redisson (no label), a permit-expirable semaphore with a permit out
/// and a semaphore while something waits on it; an application's integer is not
/// listed and reads as a counter by name. A latch that opens takes its label with
/// it. Before, `list` and `top` showed locks only and `status` said "counter"
/// for all of them.
#[tokio::test]
async fn list_top_and_status_show_synchronizers_by_kind() {
    let server = RedisServer::start();
    for args in [
        &["semaphore", "set", "pool", "2"][..],
        &["latch", "set", "batch", "3"],
    ] {
        let out = run(&server, args).await;
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    }
    // A permit-expirable semaphore a Redisson client made, with one permit out
    // (id -> expiry in its set, far in the future).
    let _: () = support::raw(&server, &["SET", "crawl", "2"]);
    let _: i64 = support::raw(
        &server,
        &[
            "ZADD",
            "{crawl}:timeout",
            "99999999999999",
            "0123456789abcdef",
        ],
    );
    let _: () = support::raw(&server, &["SET", "rsem", "4"]);
    let _redisson_waiter = subscribed(&server, "redisson_sc:{rsem}");
    let _: () = support::raw(&server, &["SET", "visits", "5"]);
    let mut lock = spawn(&server, &["hold", "held", "--for", "30s"]);

    let expected = [
        ("batch", "batch\tlatch\tcount=3\tno expiry\twaiting=0"),
        (
            "crawl",
            "crawl\tpermit-semaphore\tavailable=2 taken=1\tno expiry\twaiting=0",
        ),
        ("pool", "pool\tsemaphore\tavailable=2\tno expiry\twaiting=0"),
        ("rsem", "rsem\tsemaphore\tavailable=4\tno expiry\twaiting=1"),
    ];
    // Until the lock is held.
    let mut listed = String::new();
    let seen = support::eventually(LIMIT, || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .args(["--redis", &server.url(), "list"])
            .output()
            .expect("list");
        listed = text(&out.stdout);
        line_of(&listed, "held").is_some()
            && expected
                .iter()
                .all(|(name, line)| line_of(&listed, name) == Some(*line))
    })
    .await;
    assert!(seen, "expected {expected:?}, listed:\n{listed}");
    assert!(line_of(&listed, "held").is_some_and(|l| l.contains("\texclusive\t")));
    assert_eq!(line_of(&listed, "visits"), None, "{listed}");
    assert_eq!(listed.lines().count(), 5, "{listed}");

    let out = run(&server, &["status", "visits"]).await;
    assert!(
        text(&out.stdout).starts_with("visits: counter, value 5, 0 waiting"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&server, &["status", "rsem", "--json"]).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (
            v["kind"].as_str(),
            v["labelled"].as_bool(),
            v["waiting"].as_u64()
        ),
        (Some("semaphore"), Some(false), Some(1))
    );
    let out = run(&server, &["status", "crawl"]).await;
    assert_eq!(
        text(&out.stdout).lines().next().unwrap_or_default(),
        "crawl: permit-expirable semaphore, 2 permits available, 1 taken, 0 waiting, \
         no expiry (no lockwarden label: told by its waiters or permits out)"
    );
    let out = run(&server, &["status", "batch"]).await;
    assert_eq!(
        text(&out.stdout).lines().next().unwrap_or_default(),
        "batch: count-down latch, count 3, 0 waiting, no expiry"
    );

    let out = run(&server, &["top", "--iterations", "1", "--json"]).await;
    let frame: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let kinds: Vec<(&str, &str)> = frame["locks"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["lock"].as_str().expect("name"),
                r["kind"].as_str().expect("kind"),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("rsem", "semaphore"),
            ("batch", "latch"),
            ("crawl", "permit-semaphore"),
            ("held", "exclusive"),
            ("pool", "semaphore"),
        ],
        "most waited for first, then by name"
    );

    // The latch opens: its key and its label go, and so does its line.
    for _ in 0..3 {
        assert!(run(&server, &["latch", "count-down", "batch"])
            .await
            .status
            .success());
    }
    assert_eq!(
        support::raw::<i64>(&server, &["EXISTS", "batch", "lockwarden_kind:{batch}"]),
        0
    );
    let out = run(&server, &["list"]).await;
    assert_eq!(line_of(&text(&out.stdout), "batch"), None);

    lock.start_kill().expect("stop hold");
    let _ = finish(lock).await;
}

/// `status` of a fair semaphore says it is fair and counts its queued waiters
/// (they listen on channels of their own, so the listener count is 0); once
/// the waiting processes are done and gone, no wait of theirs is shown.
#[tokio::test]
async fn status_of_a_fair_semaphore_counts_its_queue_and_forgets_exited_waiters() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let (held, go) = (dir.path().join("held"), dir.path().join("go"));
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
        held.display(),
        go.display()
    );
    let fair = ["run", "fs", "--semaphore", "--fair", "--permits", "1"];
    let holder = spawn(&server, &[&fair[..], &["--", "sh", "-c", &script]].concat());
    let began = std::time::Instant::now();
    while !held.exists() {
        assert!(began.elapsed() < LIMIT, "the holder never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiters: Vec<Child> = (0..2)
        .map(|_| {
            spawn(
                &server,
                &[&fair[..], &["--wait", "30s", "--", "true"]].concat(),
            )
        })
        .collect();
    // Their waits are recorded once they have lasted a second.
    let status = loop {
        let status = text(&run(&server, &["status", "fs"]).await.stdout);
        if status.matches(" waits, ").count() == 2 {
            break status;
        }
        assert!(
            began.elapsed() < LIMIT,
            "the waits were never shown: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.contains("fair semaphore"), "{status}");
    assert!(status.contains(", 2 waiting,"), "{status}");
    std::fs::write(&go, "").expect("go");
    for child in std::iter::once(holder).chain(waiters) {
        let out = finish(child).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let after = text(&run(&server, &["status", "fs"]).await.stdout);
    assert!(!after.contains(" waits, "), "exited waiters shown: {after}");
    assert!(after.contains(", 0 waiting,"), "{after}");
}
