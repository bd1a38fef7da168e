//! Test support: real `redis-server` processes (`server.rs`) and shorthands for
//! the setup steps of lockwarden tests, as a crate of the workspace
//! (`lockwarden-testkit`, `Cargo.toml` beside this file) compiled once for all
//! of them. A group's `main.rs` (`tests/<group>/main.rs`) names it `support`
//! (`use lockwarden_testkit as support;`, with `#[macro_use] extern crate` for
//! `standalone!`), and each of the group's files reaches it with
//! `use crate::support;`; examples, benches and the library's unit tests use
//! it as a dev-dependency.

mod certs;
mod cluster;
mod heavy;
mod log;
mod proxy;
mod sentinel;
mod server;
mod target;

#[allow(unused_imports)] // only the TLS tests use it
pub use certs::*;
#[allow(unused_imports)] // only the Cluster tests use it
pub use cluster::*;
#[allow(unused_imports)]
// only the grouped test binaries use it (not the examples, not benches/chaos)
pub use heavy::*;
#[allow(unused_imports)] // only the tests that read the log use it
pub use log::*;
#[allow(unused_imports)] // only the fault tests use it
pub use proxy::*;
#[allow(unused_imports)] // only the Sentinel tests use it
pub use sentinel::*;
pub use server::*;
#[allow(unused_imports)] // only the behaviour tests use it
pub use target::*;

/// One standalone test per scenario: `standalone!(module; a, b)` makes the tests
/// `a` and `b`, each running `module::a` (or `b`) on a server of its own
/// (`Target::standalone`). A scenario file's `each!` hands it the file's list, so
/// that a scenario is named once (see `tests/scenarios/`).
#[macro_export]
macro_rules! standalone {
    ($module:ident; $($scenario:ident),+ $(,)?) => {
        $(
            #[actix_rt::test]
            async fn $scenario() {
                $module::$scenario(&$crate::Target::standalone()).await;
            }
        )+
    };
}

/// A config for this server with every other setting at its default.
pub fn config(server: &RedisServer) -> lockwarden::Config {
    lockwarden::Config::from_url(&server.url()).expect("test server URL parses")
}

/// The command's stderr without the line that says replica confirmation is
/// reduced or off (printed at start against a server with no replica, as most
/// test servers are), for tests of the other lines.
#[allow(dead_code)]
pub fn without_confirmation_note(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| !l.contains(": replica confirmation "))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// Starts a manager on this server, with `tune` applied to the default config.
pub async fn manager(
    server: &RedisServer,
    tune: impl FnOnce(lockwarden::Config) -> lockwarden::Config,
) -> actix::Addr<lockwarden::LockManager> {
    lockwarden::LockManager::start(tune(config(server)))
        .await
        .unwrap_or_else(|e| panic!("manager did not start: {e}\n{}", server.log()))
}

/// Acquires `name` through `manager` with `tune` applied to the request, panicking on
/// any error (for the setup steps of a test, not for what it checks).
pub async fn hold(
    manager: &actix::Addr<lockwarden::LockManager>,
    name: &str,
    tune: impl FnOnce(lockwarden::Acquire) -> lockwarden::Acquire,
) -> lockwarden::LockGuard {
    manager
        .send(tune(lockwarden::Acquire::new(name)))
        .await
        .expect("manager is running")
        .unwrap_or_else(|e| panic!("acquire {name}: {e}"))
}

/// The owner field of a hold of the lock `name`, read back from `server` (a
/// replica, say); `None`: not held there. A server being promoted drops its
/// clients (Sentinel's `CLIENT KILL` beside `REPLICAOF NO ONE`), so a read
/// that fails is tried again for up to 2 s: only an answer says "not held".
pub fn holder_on(server: &RedisServer, name: &str) -> Option<String> {
    let read = || -> redis::RedisResult<Vec<String>> {
        let mut conn = server
            .client()?
            .get_connection_with_timeout(std::time::Duration::from_secs(2))?;
        redis::cmd("HKEYS").arg(name).query(&mut conn)
    };
    let mut tries = 0;
    let fields = loop {
        match read() {
            Ok(fields) => break fields,
            Err(_) if tries < 40 => tries += 1,
            Err(e) => panic!("cannot read {name}: {e}\n{}", server.log()),
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    fields.into_iter().find(|f| f.contains(':'))
}

/// The exclusive lock's `lua/acquire.lua` and `lua/release.lua` as the library
/// sends them (each behind `lua/token_prelude.lua`), for tests and benches that
/// call the scripts without the library.
pub fn exclusive_scripts() -> (String, String) {
    let prelude = include_str!("../../lua/token_prelude.lua");
    (
        [prelude, include_str!("../../lua/acquire.lua")].concat(),
        [prelude, include_str!("../../lua/release.lua")].concat(),
    )
}

/// Runs a raw command on the test server and returns its reply.
pub fn raw<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut server.conn())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Fills the server with 4 MB of data, then sets `maxmemory` below what is used
/// under `noeviction`: from now on Redis refuses every command that could grow
/// memory (outside a script that has already written), whatever buffers come and go.
pub fn fill_until_oom(server: &RedisServer) {
    let mut conn = server.conn();
    let blob = "x".repeat(64 * 1024);
    for i in 0..64 {
        let _: () = redis::cmd("SET")
            .arg(format!("fill:{i}"))
            .arg(&blob)
            .query(&mut conn)
            .expect("fill");
    }
    let _: () = raw(server, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let _: () = raw(server, &["CONFIG", "SET", "maxmemory", "2mb"]);
    let refused: redis::RedisResult<()> =
        redis::cmd("SET").arg("one:more").arg("x").query(&mut conn);
    assert!(
        refused.is_err_and(|e| e.to_string().contains("OOM")),
        "Redis should refuse writes now"
    );
}

/// `INFO stats`' counts of error replies, read on `conn`: asked on a connection
/// of its own, each read would add errors of its own on Redis 7.0 (redis-rs's
/// CLIENT SETINFO, which 7.0 does not know).
pub fn error_replies(conn: &mut redis::Connection) -> String {
    let stats: String = redis::cmd("INFO")
        .arg("stats")
        .query(conn)
        .expect("INFO stats");
    stats
        .lines()
        .filter(|l| l.contains("error_replies"))
        .collect()
}

/// Whether a key exists on the test server.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    raw::<i64>(server, &["EXISTS", key]) == 1
}

/// The payload of the next message of a pub/sub stream, within 2 s.
pub async fn next_payload(
    messages: &mut (impl futures::Stream<Item = redis::Msg> + Unpin),
) -> String {
    let next = futures::StreamExt::next(messages);
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), next)
        .await
        .expect("message within 2 s")
        .expect("stream open");
    msg.get_payload::<String>().expect("text payload")
}

/// The `lockwarden` command (`bin`: the test's `env!("CARGO_BIN_EXE_lockwarden")`,
/// which the examples that share this file do not have) with `--redis url`, output
/// captured, no input, and nothing taken from the environment (REDIS_URL,
/// LOCKWARDEN_*, RUST_LOG).
pub fn lockwarden_at(bin: &str, url: &str) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("--redis")
        .arg(url)
        .env_remove("REDIS_URL")
        .env_remove("LOCKWARDEN_WATCHDOG_LEASE")
        .env_remove("LOCKWARDEN_LABEL")
        .env_remove("LOCKWARDEN_HOLDER")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `cmd` to its end, within `limit`, and checks that it exited 0 (its
/// stderr shown if not).
pub async fn succeeds(mut cmd: tokio::process::Command, limit: std::time::Duration) {
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .expect("the command exited in time")
        .expect("the command ran");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The keys on the test server other than lock managers' client registry
/// entries (`lockwarden:client:{<client id>}`, one per running manager, kept
/// alive while it runs): what a test that checks "nothing was written" counts.
pub fn data_keys(server: &RedisServer) -> Vec<String> {
    let keys: Vec<String> = raw(server, &["KEYS", "*"]);
    keys.into_iter()
        .filter(|k| !k.starts_with("lockwarden:client:{"))
        .collect()
}

/// How many [`data_keys`] the test server holds.
pub fn data_key_count(server: &RedisServer) -> i64 {
    data_keys(server).len() as i64
}

/// For an example that writes its own keys and needs no other process (the
/// quickstart): `REDIS_URL` if set, else a private `redis-server` started for
/// the run on a free port (it stops when dropped). Never whatever answers at
/// 127.0.0.1:6379: that server may be someone else's, and nobody asked to write
/// to it.
pub fn private_redis() -> Result<(String, Option<RedisServer>), String> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return Ok((url, None));
    }
    private_server(
        "`redis-server` is not on the PATH, and REDIS_URL is not set",
        "a server this example may write to",
        "Started a private redis-server",
    )
}

/// A private `redis-server` started for the run, saying `started` (with its
/// port) on stdout; or, with none on the PATH, the error `missing` with how to
/// get one or name `instead` by `REDIS_URL`.
fn private_server(
    missing: &str,
    instead: &str,
    started: &str,
) -> Result<(String, Option<RedisServer>), String> {
    let on_path = std::process::Command::new(redis_server_bin())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !on_path {
        return Err(format!(
            "{missing}.\nInstall Redis (Debian/Ubuntu: `sudo apt-get install redis-server`), \
             or set REDIS_URL=redis://host:port to {instead}."
        ));
    }
    let server = RedisServer::start();
    println!(
        "{started} on port {} for this run (set REDIS_URL to use another).",
        server.port()
    );
    Ok((server.url(), Some(server)))
}

/// For the examples: where to find Redis (`REDIS_URL`, else a server answering at
/// 127.0.0.1:6379, else a private `redis-server` started for the run), and the
/// private server if one had to be started (it stops when dropped).
pub fn find_redis() -> Result<(String, Option<RedisServer>), String> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return Ok((url, None));
    }
    let default = "redis://127.0.0.1:6379/";
    let answers = redis::Client::open(default)
        .and_then(|c| c.get_connection_with_timeout(std::time::Duration::from_millis(300)))
        .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
        .is_ok();
    if answers {
        return Ok((default.to_string(), None));
    }
    private_server(
        "no Redis answers at 127.0.0.1:6379 and `redis-server` is not on the PATH",
        "a server you have",
        "No Redis at 127.0.0.1:6379: started a private redis-server",
    )
}

/// Waits (at most 15 s) until `manager` counts no replica that can confirm:
/// a zero-wait grant of `probe` then goes without a `WAIT` and is granted
/// (before, it is refused as not replicated). Answers whether it came to that.
pub async fn until_no_replica_counted(
    manager: &actix::Addr<lockwarden::LockManager>,
    probe: &str,
) -> bool {
    let began = std::time::Instant::now();
    while began.elapsed() < std::time::Duration::from_secs(15) {
        let tried = manager
            .send(lockwarden::Acquire::new(probe).wait(std::time::Duration::ZERO))
            .await;
        if let Ok(Ok(g)) = tried {
            g.release().await.expect("probe released");
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    false
}
