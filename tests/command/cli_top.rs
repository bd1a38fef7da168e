//! `lockwarden top`: what it shows piped, as JSON, and on a terminal (a real
//! pseudo-terminal made by `script(1)`), while locks are held and waited for.

use crate::support;

use std::time::Duration;

use lockwarden::{Acquire, LockGuard, Locks};
use support::{hold, manager, raw, RedisServer};
use tokio::io::AsyncReadExt;

/// The `lockwarden` binary with `--redis` set to this server.
fn lockwarden(server: &RedisServer) -> tokio::process::Command {
    support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &server.url())
}

/// Locks of every kind, one waited for by another manager, one fair lock with a
/// queued waiter. Returns what keeps them held (drop to release).
async fn scene(server: &RedisServer) -> (Vec<LockGuard>, Vec<actix_rt::task::JoinHandle<()>>) {
    let a = manager(server, |c| c).await;
    let b = manager(server, |c| c).await;
    let held = hold(&a, "top:held", |x| x).await;
    let fair = hold(&a, "top:fair", |x| x.fair()).await;
    let read = hold(&a, "top:rw", |x| x.read()).await;
    let mut waiters = Vec::new();
    for request in [
        Acquire::new("top:held").wait(Duration::from_secs(60)),
        Acquire::new("top:fair")
            .fair()
            .wait(Duration::from_secs(60)),
    ] {
        let b = b.clone();
        waiters.push(actix_rt::spawn(async move {
            let _ = b.send(request).await;
        }));
    }
    let ready = support::eventually(Duration::from_secs(10), || {
        let subs: Vec<(String, i64)> = raw(
            server,
            &["PUBSUB", "NUMSUB", "redisson_lock__channel:{top:held}"],
        );
        let queued: i64 = raw(server, &["LLEN", "redisson_lock_queue:{top:fair}"]);
        subs.first().is_some_and(|(_, n)| *n == 1) && queued == 1
    })
    .await;
    assert!(ready, "the waiters did not start waiting");
    (vec![held, fair, read], waiters)
}

/// Piped: a header line and one line a lock per refresh, with waiting processes,
/// the fair queue, kinds and holders (named by host and pid); `--json`: one
/// object per refresh.
#[actix_rt::test]
async fn piped_and_json_output_show_every_lock() {
    let server = RedisServer::start();
    let (_held, _waiters) = scene(&server).await;

    let out = lockwarden(&server)
        .args(["top", "--iterations", "2", "--interval", "100ms"])
        .output()
        .await
        .expect("run lockwarden top");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !text.contains('\x1b'),
        "no terminal codes in a pipe: {text:?}"
    );
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("# ")).collect();
    assert_eq!(headers.len(), 2, "{text}");
    assert!(headers.iter().all(|h| h.ends_with(" 3 locks")), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"))
            .to_string()
    };
    assert!(
        line("top:held").contains("\texclusive\twaiting=1\tqueue=0\t"),
        "{text}"
    );
    assert!(line("top:fair").contains("\tqueue=1\t"), "{text}");
    assert!(line("top:rw").contains("\tread-write\t"), "{text}");
    assert!(line("top:held").contains("expires in "), "{text}");
    // The holder is named by its process (this test's managers).
    let me = format!("pid {} ", std::process::id());
    assert!(line("top:held").contains(&me), "{text}");

    let out = lockwarden(&server)
        .args(["top", "--json", "--iterations", "1"])
        .output()
        .await
        .expect("run lockwarden top --json");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    let frame: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    let locks = frame["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 3);
    assert_eq!(
        locks[0]["lock"], "top:held",
        "most waited-for first: {text}"
    );
    assert_eq!(locks[0]["waiting"], 1);
    assert_eq!(locks[0]["holders"].as_array().map(Vec::len), Some(1));
    assert_eq!(locks[0]["holders"][0]["client"]["pid"], std::process::id());
    assert!(frame["at_ms"].as_u64().is_some());
}

/// On a terminal the screen is redrawn in place, and a released lock leaves it;
/// a semaphore has its row, with its permits where a lock's holders are.
#[actix_rt::test]
async fn on_a_terminal_the_screen_follows_the_locks() {
    let server = RedisServer::start();
    let (mut held, _waiters) = scene(&server).await;
    let sem = manager(&server, |c| c).await;
    let sem = sem.semaphore("top:sem").await.expect("handle");
    assert!(sem.try_set_permits(2).await.expect("set"));
    let command = format!(
        "{} --redis {} top --interval 100ms --iterations 40",
        env!("CARGO_BIN_EXE_lockwarden"),
        server.url()
    );
    // script(1) runs the command on a new pseudo-terminal and copies what it
    // writes there to our pipe.
    let mut child = tokio::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env_remove("REDIS_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("script(1) from util-linux");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    let read_until = |seen: &String, what: &str| seen.contains(what);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The whole first screen: the semaphore's row comes after the locks', and
    // may arrive in a later read than "top:rw" (it failed CI once that way).
    while !(read_until(&seen, "top:rw") && read_until(&seen, "permits available)")) {
        let n = tokio::time::timeout_at(deadline, stdout.read(&mut buf))
            .await
            .expect("the first screen within 10 s")
            .expect("read");
        assert!(n > 0, "top ended early: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(
        seen.starts_with("\x1b[H\x1b[2J"),
        "redrawn in place: {seen:?}"
    );
    assert!(seen.contains("NAME"), "{seen:?}");
    assert!(
        seen.lines().any(|l| l.starts_with("top:sem ")
            && l.contains(" semaphore ")
            && l.ends_with("(2 permits available)")),
        "{seen:?}"
    );
    // Holders as host/pid: this test's managers hold them.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(
        seen.contains(&format!("{}/{}", host.trim(), std::process::id())),
        "{seen:?}"
    );

    // Release the read hold; a later screen no longer shows the lock.
    let read = held.pop().expect("the read hold");
    read.release().await.expect("released");
    let released_at = seen.len();
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).await.expect("read the rest");
    seen.push_str(&String::from_utf8_lossy(&rest));
    let status = child.wait().await.expect("top ended");
    assert!(status.success(), "{status:?}");
    let last = seen.rsplit("\x1b[H\x1b[2J").next().unwrap_or_default();
    assert!(seen.len() > released_at, "no screen after the release");
    assert!(
        !last.contains("top:rw"),
        "the released lock is still shown: {last:?}"
    );
    assert!(
        last.contains("top:held") && last.contains("2 locks, 1 synchronizer"),
        "{last:?}"
    );
}

/// Bad options are refused with exit 2 before anything connects.
#[test]
fn bad_options_are_refused() {
    for args in [
        &["top", "--interval", "0s"][..],
        &["top", "--iterations", "0"][..],
        &["top", "--interval", "soon"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .args(["--redis", "redis://127.0.0.1:1"])
            .args(args)
            .env_remove("REDIS_URL")
            .output()
            .expect("run lockwarden");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}
