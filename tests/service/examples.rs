//! The examples, run as a new user runs them, checked against what they print: the
//! quickstart's holds really alternate between the two managers with growing
//! fencing tokens, and the failover demo stamps "A is told its lock is lost" with
//! the time A learned it (while Redis was frozen), not the time Redis resumed;
//! the metrics example finds what it expects in its own `/metrics` scrape; the
//! fenced example's stale writes are refused in Redis and in PostgreSQL; two
//! instances of the actix-web example share their locks, semaphore and leader.
//!
//! `cargo test` builds the examples but does not say where; a filtered run
//! (`cargo test --test service examples::`) does not build them at all. So the test asks cargo
//! to build them (a no-op when they are fresh) and runs the binaries from the
//! target directory. Each example gets its own `redis-server`.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use support::{free_port, raw, RedisServer};

/// `target/debug/examples/<name>`, built once per test run (`deadlock_processes.rs`
/// runs `deadlock` from here too).
pub(crate) fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Without the variables cargo sets for a test (CARGO_PKG_*, CARGO_MANIFEST_*,
        // ...): some build scripts track them, and seeing them changed would rebuild
        // half the dependencies (20 s) instead of finding everything fresh.
        let keep = |key: &str| {
            !key.starts_with("CARGO_")
                || key == "CARGO_HOME"
                || key == "CARGO_TARGET_DIR"
                || key.starts_with("CARGO_BUILD_")
        };
        let out = Command::new(cargo)
            .env_clear()
            .envs(std::env::vars().filter(|(k, _)| keep(k)))
            .args([
                "build",
                "--example",
                "quickstart",
                "--example",
                "failover",
                "--example",
                "leader",
                "--example",
                "metrics",
                "--example",
                "fenced",
                "--example",
                "web",
                "--example",
                "deadlock",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cannot run cargo");
        assert!(
            out.status.success(),
            "cargo build --example failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    // The test binary is target/<profile>/deps/examples-<hash>.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    profile_dir.join("examples").join(name)
}

fn run(name: &str, redis_url: Option<&str>) -> Output {
    let mut cmd = Command::new(example(name));
    cmd.env_remove("REDIS_URL");
    if let Some(url) = redis_url {
        cmd.env("REDIS_URL", url);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run example {name}: {e}"))
}

/// The example's stdout, once it is known to have exited 0 (else its stdout and
/// stderr are the failure message).
fn succeeded(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// Without `REDIS_URL` the quickstart starts a server of its own (it never
/// writes to whatever answers at 127.0.0.1:6379) and says so.
#[test]
fn quickstart_without_redis_url_uses_a_private_server() {
    let out = run("quickstart", None);
    let text = succeeded(&out);
    assert!(
        text.contains("Started a private redis-server on port"),
        "{text}"
    );
}

/// The quickstart's holds alternate A, B, A, ... (every handoff goes to the other
/// manager), their fencing tokens grow, and the summary counts the handoffs it saw.
#[test]
fn quickstart_alternates_managers_with_growing_tokens() {
    let server = RedisServer::start();
    let out = run("quickstart", Some(&server.url()));
    let text = succeeded(&out);
    let holds: Vec<(String, u64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.split_once("manager ")?.1;
            let (manager, rest) = rest.split_once(" holds the lock: token ")?;
            let token = rest.split(',').next()?.parse().ok()?;
            Some((manager.to_string(), token))
        })
        .collect();
    assert_eq!(holds.len(), 12, "twelve holds printed:\n{text}");
    for pair in holds.windows(2) {
        assert_ne!(
            pair[0].0, pair[1].0,
            "the same manager twice in a row:\n{text}"
        );
        assert!(pair[1].1 > pair[0].1, "tokens not increasing:\n{text}");
    }
    assert!(
        text.contains("11 handoffs between managers"),
        "summary counts the handoffs between managers:\n{text}"
    );
}

/// The failover demo prints A's loss at the moment A learned it: on the timeline
/// that is before "redis-server resumed", since A's lease (800 ms) runs out while
/// Redis is frozen (1.6 s).
#[test]
fn failover_stamps_the_loss_when_it_was_learned() {
    let out = run("failover", None);
    let text = succeeded(&out);
    // "   1.234s  what happened"
    let stamp = |is: &dyn Fn(&str) -> bool| -> f64 {
        text.lines()
            .find_map(|l| {
                let (secs, what) = l.trim_start().split_once("s  ")?;
                is(what).then(|| secs.parse().ok()).flatten()
            })
            .unwrap_or_else(|| panic!("line not found:\n{text}"))
    };
    let lost = stamp(&|what| what.starts_with("A ") && what.contains("told its lock is lost"));
    let resumed = stamp(&|what| what == "redis-server resumed");
    assert!(
        lost < resumed,
        "loss stamped {lost}s, after Redis resumed at {resumed}s:\n{text}"
    );
}

/// The leader demo: after the leader's system is stopped the old leader is deposed
/// first and another candidate is elected within one lease, a resignation hands
/// over at once, tokens only rise, never two leaders (the demo checks each and
/// exits 0 only if all held; here every check line must say ok).
#[test]
fn leader_hands_over_with_one_leader_at_a_time() {
    let out = run("leader", None);
    let text = succeeded(&out);
    assert!(!text.contains("FAIL"), "a check failed:\n{text}");
    assert!(text.contains("deposed: Lost(ManagerStopped)"), "{text}");
    assert!(text.contains("deposed: Resigned"), "{text}");
    assert!(text.contains("every check held"), "{text}");
}

/// The metrics example serves `/metrics` through the Prometheus exporter while
/// its workers contend, scrapes it once and finds the acquisitions, the timeout,
/// the wait and hold histograms and the batch sizes it expects (it exits 1
/// otherwise).
#[test]
fn metrics_example_scrapes_its_own_endpoint() {
    let out = run("metrics", None);
    let text = succeeded(&out);
    assert!(text.contains("every expected metric is there"), "{text}");
    assert!(
        text.contains("lockwarden_acquisitions_total{kind=\"exclusive\",outcome=\"acquired\"} 61"),
        "{text}"
    );
}

/// The fenced example tells the paused-holder story against Redis and, when a
/// PostgreSQL answers (`DATABASE_URL`, else the local one), against a row with a
/// token column: A's stale write is refused both times and the data is B's.
#[test]
fn fenced_example_refuses_the_stale_writes() {
    let server = RedisServer::start();
    let out = run("fenced", Some(&server.url()));
    let text = succeeded(&out);
    assert!(text.contains("SET balance 90 with token"), "{text}");
    assert!(
        text.contains("refused (write refused: fencing token"),
        "{text}"
    );
    assert!(
        text.contains("0 rows (refused)") || text.contains("the SQL half is skipped"),
        "{text}"
    );
    assert!(text.contains("every stale write was refused"), "{text}");
}

/// One HTTP/1.1 request to 127.0.0.1:`port`, answered with its status and body
/// (`None` when nothing answers).
fn http(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((status, body.to_string()))
}

/// A running example process, killed when dropped (its output kept for a failure).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Two instances of the actix-web example on one Redis, driven over HTTP: jobs of
/// one key sent to both never overlap and each stores its result, partner calls
/// never pass two at once across both, exactly one instance leads and only its
/// scheduler ticks.
#[test]
fn web_example_shares_locks_between_two_instances() {
    let server = RedisServer::start();
    let ports = [free_port(), free_port()];
    let _instances: Vec<Running> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let child = Command::new(example("web"))
                .env("REDIS_URL", server.url())
                .env("PORT", port.to_string())
                .env("INSTANCE", format!("web-{i}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start the web example");
            Running(child)
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for port in ports {
        while http(port, "GET", "/health").map(|(s, _)| s) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "instance on {port} never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // Twelve jobs of one key, half on each instance, all at once.
    let jobs: Vec<_> = (0..12)
        .map(|i| {
            let port = ports[i % 2];
            std::thread::spawn(move || http(port, "POST", "/jobs/report"))
        })
        .collect();
    // Eight partner calls, half on each instance, at the same time.
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let port = ports[i % 2];
            std::thread::spawn(move || http(port, "GET", "/partner"))
        })
        .collect();
    for job in jobs {
        let (status, body) = job.join().expect("thread").expect("an answer");
        assert_eq!(status, 200, "{body}");
        assert!(body.starts_with("done report on web-"), "{body}");
    }
    for call in calls {
        let (status, body) = call.join().expect("thread").expect("an answer");
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        raw::<Option<String>>(&server, &["GET", "web:overlap:report"]),
        None
    );
    assert_eq!(
        raw::<Option<String>>(&server, &["GET", "web:partner:over"]),
        None
    );
    let result: String = raw(&server, &["GET", "web:result:report"]);
    assert!(result.starts_with("web-"), "{result}");

    // One leader, and only its scheduler ticks.
    let leaders = || -> Vec<usize> {
        (0..2)
            .filter(|&i| http(ports[i], "GET", "/role").is_some_and(|(_, b)| b.trim() == "leader"))
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader = loop {
        match leaders()[..] {
            [one] => break one,
            ref many => {
                assert!(many.len() < 2, "two leaders at once: {many:?}");
                assert!(Instant::now() < deadline, "nobody was elected");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    let ticked = |i: usize| raw::<Option<i64>>(&server, &["GET", &format!("web:ticks:web-{i}")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while ticked(leader).unwrap_or(0) < 2 {
        assert!(
            Instant::now() < deadline,
            "the leader's scheduler never ticked"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ticked(1 - leader), None, "the follower's scheduler ticked");
}

/// How a request of the load went: answered with a status, or refused before it
/// was sent (the server stopped listening: a load balancer sends it to the other
/// instance), or cut after it was sent (a request lost in the drain).
enum Sent {
    Answered(u16),
    Refused,
    Cut,
}

/// One request of the load.
fn load_request(port: u16, method: &str, path: &str) -> Sent {
    let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
        return Sent::Refused;
    };
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if conn.write_all(head.as_bytes()).is_err() {
        return Sent::Refused;
    }
    let mut answer = String::new();
    if conn.read_to_string(&mut answer).is_err() || answer.is_empty() {
        // A listener that closes without reading was refusing, not cutting.
        return Sent::Cut;
    }
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .map_or(Sent::Cut, Sent::Answered)
}

/// Eight client threads, each sending jobs and partner calls to both
/// instances in turn until `stop`; a request refused at the door goes to the
/// other instance. Answers the requests answered and those that failed (cut,
/// or answered other than 200), with a sample of what failed.
fn load(
    ports: [u16; 2],
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(u64, Vec<String>)>> {
    (0..8)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut answered, mut failed) = (0, Vec::new());
                let mut n: usize = t;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let (method, path) = match n % 3 {
                        0 => ("GET", "/partner".to_string()),
                        _ => ("POST", format!("/jobs/load{}", n % 4)),
                    };
                    let mut outcome = load_request(ports[n % 2], method, &path);
                    if matches!(outcome, Sent::Refused) {
                        outcome = load_request(ports[(n + 1) % 2], method, &path);
                    }
                    match outcome {
                        Sent::Answered(200) => answered += 1,
                        Sent::Answered(status) => failed.push(format!("{path}: {status}")),
                        Sent::Cut => failed.push(format!("{path}: cut")),
                        Sent::Refused => failed.push(format!("{path}: refused by both")),
                    }
                }
                (answered, failed)
            })
        })
        .collect()
}

/// A rolling restart of the actix-web example under load (eight client
/// threads): SIGTERM to the leading instance makes it step down at once, before
/// its server drains, so the other instance leads within a second (the
/// example's measured ~0.1 s; a whole lease, ~27-29 s, without any handover,
/// and 1.3 s under load when the handover waited for the drain) and the lock
/// is free of the old leader; requests in flight finish (none cut, none failed:
/// a request the stopped server no longer takes goes to the other instance, as
/// a load balancer sends it); the stopped process exits on its own.
#[test]
fn web_example_hands_over_on_sigterm() {
    let server = RedisServer::start();
    let ports = [free_port(), free_port()];
    let mut instances: Vec<Option<Running>> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let child = Command::new(example("web"))
                .env("REDIS_URL", server.url())
                .env("PORT", port.to_string())
                .env("INSTANCE", format!("web-{i}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("cannot start the web example");
            Some(Running(child))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for port in ports {
        while http(port, "GET", "/health").map(|(s, _)| s) != Some(200) {
            assert!(
                Instant::now() < deadline,
                "instance on {port} never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let leads =
        |i: usize| http(ports[i], "GET", "/role").is_some_and(|(_, b)| b.trim() == "leader");
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader = loop {
        if let Some(i) = (0..2).find(|&i| leads(i)) {
            break i;
        }
        assert!(Instant::now() < deadline, "nobody was elected");
        std::thread::sleep(Duration::from_millis(20));
    };
    let follower = 1 - leader;
    // The leader's owner field in the election's lock hash.
    let fields: Vec<String> = raw(&server, &["HKEYS", "web:scheduler"]);
    assert_eq!(fields.len(), 1, "one holder of the election: {fields:?}");
    let old_field = fields[0].clone();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(ports, stop.clone());
    // The load runs a moment before the signal.
    std::thread::sleep(Duration::from_millis(300));

    let running = instances[leader].take().expect("the leader runs");
    let pid = running.0.id().to_string();
    let sent = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("cannot run kill");
    assert!(killed.success());
    let (mut freed, mut led) = (None, None);
    let limit = sent + Duration::from_secs(10);
    while (freed.is_none() || led.is_none()) && Instant::now() < limit {
        if freed.is_none() && raw::<i64>(&server, &["HEXISTS", "web:scheduler", &old_field]) == 0 {
            freed = Some(sent.elapsed());
        }
        if led.is_none() && leads(follower) {
            led = Some(sent.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The load goes on a moment after the new leader is in.
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (mut answered, mut failed) = (0, Vec::new());
    for client in clients {
        let (a, f) = client.join().expect("a client thread");
        answered += a;
        failed.extend(f);
    }
    eprintln!(
        "after SIGTERM under load: lock free of the old leader in {freed:?}, the other \
         instance leads in {led:?}; {answered} requests answered 200, {} failed",
        failed.len()
    );
    assert!(answered > 0, "the load sent nothing");
    assert!(failed.is_empty(), "requests failed: {failed:?}");
    let freed = freed.expect("the old leader's lock was never given back (within 10 s)");
    let led = led.expect("the other instance was not elected within 10 s");
    assert!(
        freed < Duration::from_secs(1),
        "lock given back {freed:?} after SIGTERM"
    );
    assert!(
        led < Duration::from_secs(1),
        "the other instance led {led:?} after SIGTERM"
    );

    // The stopped instance exits by itself, and with success.
    let mut child = running;
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped instance did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "the stopped instance exited {:?} after SIGTERM",
        sent.elapsed()
    );
    assert!(
        status.success(),
        "the stopped instance exited with {status:?}"
    );
    drop(instances);
}
