//! Real `redis-server` processes for tests and examples, one per test, on free ports.
//! (This file knows nothing of lockwarden, so the crate's own unit tests can use it.)
//!
//! Modelled on redis-rs's own test support: each server gets its own port and
//! directory, runs with persistence off, is ready once it answers PING, and is killed
//! when dropped. Tests can crash it, restart it on the same port (its data gone), and
//! pause it with SIGSTOP. When a test panics, the server's log is printed so the
//! failure can be read next to Redis's side of the story.
//!
//! A server can also speak only TLS ([`RedisServer::start_tls`]): its port is
//! then its TLS port, replication to its replicas is TLS, and the test's own
//! connections trust the CA it was given.
//!
//! The binary is `redis-server` from `PATH`, or the path in `REDIS_SERVER_BIN`.
//! Never the server at 6379: every test starts its own.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process owned by a test.
pub struct RedisServer {
    /// The port it listens on (kept across restarts).
    port: u16,
    /// The running process; `None` while stopped.
    child: Option<Child>,
    /// Holds the working directory and log; removed on drop.
    dir: tempfile::TempDir,
    /// Extra command-line arguments, kept for restarts.
    args: Vec<String>,
    /// Paused with SIGSTOP.
    paused: bool,
    /// Set for a server that speaks only TLS.
    tls: Option<TlsFiles>,
}

/// The certificate, key and CA a TLS server runs with (`--tls-*-file`).
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// A client for `url`, trusting the CA of `tls` if given.
pub fn client_for(url: &str, tls: Option<&TlsFiles>) -> redis::RedisResult<redis::Client> {
    match tls {
        None => redis::Client::open(url),
        Some(tls) => tls.client(url),
    }
}

impl TlsFiles {
    /// `redis-server` arguments naming these files; clients need no certificate.
    pub fn args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.to_string_lossy().into_owned();
        [
            "--tls-cert-file".to_string(),
            path(&self.cert),
            "--tls-key-file".into(),
            path(&self.key),
            "--tls-ca-cert-file".into(),
            path(&self.ca),
            "--tls-auth-clients".into(),
            "no".into(),
        ]
        .into()
    }

    /// A client for `url` (`rediss://`) that trusts this CA.
    #[cfg(feature = "tls")]
    pub fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        // rustls needs a process-wide provider; lockwarden installs the same one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let root = std::fs::read(&self.ca).map_err(redis::RedisError::from)?;
        let certs = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root),
        };
        redis::Client::build_with_tls(url, certs)
    }

    /// Without the `tls` feature, no client speaks TLS.
    #[cfg(not(feature = "tls"))]
    pub fn client(&self, _url: &str) -> redis::RedisResult<redis::Client> {
        Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "TLS test servers need the tls feature",
        )))
    }
}

/// Which binary to run.
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_string())
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

impl RedisServer {
    /// Starts a server with default settings.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`["--maxmemory", "2mb"]`).
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::start_as(None, args)
    }

    /// Starts a server that speaks only TLS (`--port 0`, its port the TLS
    /// port, `--tls-replication yes`) with these files and extra arguments.
    pub fn start_tls(tls: &TlsFiles, args: &[&str]) -> RedisServer {
        RedisServer::start_as(Some(tls.clone()), args)
    }

    fn start_as(tls: Option<TlsFiles>, args: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().expect("cannot make a temp dir");
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            paused: false,
            tls,
        };
        // Another process may take the port between our probe and the bind: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn().is_ok() {
                return server;
            }
        }
        panic!("redis-server did not start; log:\n{}", server.log());
    }

    /// Runs the process on `self.port` and waits until it answers PING.
    fn spawn(&mut self) -> Result<(), String> {
        self.spawn_until(|s| s.ping())
    }

    /// Runs the process on `self.port` and waits until `ready` holds.
    fn spawn_until(&mut self, ready: impl Fn(&RedisServer) -> bool) -> Result<(), String> {
        let mut cmd = Command::new(redis_server_bin());
        match &self.tls {
            None => cmd.arg("--port").arg(self.port.to_string()),
            Some(tls) => cmd
                .args(["--port", "0", "--tls-replication", "yes", "--tls-port"])
                .arg(self.port.to_string())
                .args(tls.args()),
        };
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot run `{}` ({e}). Install Redis (apt-get install redis-server) \
                 or set REDIS_SERVER_BIN to its path.",
                redis_server_bin()
            )
        });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!("redis-server exited with {status}"));
            }
            if ready(self) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err("redis-server did not answer PING within 10 s".into())
    }

    fn ping(&self) -> bool {
        let Ok(client) = self.client() else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut conn).is_ok()
    }

    /// `redis://127.0.0.1:<port>/`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// A client for this server (trusting its CA if it speaks TLS).
    pub fn client(&self) -> redis::RedisResult<redis::Client> {
        client_for(&self.url(), self.tls.as_ref())
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// A plain blocking connection, for raw commands in assertions.
    pub fn conn(&self) -> redis::Connection {
        self.client()
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("cannot connect to test redis: {e}\n{}", self.log()))
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.paused {
                self.signal_pid(child.id(), "CONT");
                self.paused = false;
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port and directory: with no
    /// data, unless a snapshot was saved there (`SAVE`), which it then loads.
    pub fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        for _ in 0..20 {
            match self.spawn() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "redis-server did not restart on port {}: {last}\n{}",
            self.port,
            self.log()
        );
    }

    /// Kills the server and starts it again on the same port and directory with
    /// `extra` arguments added for this run only, and returns as soon as it answers
    /// at all, LOADING included (`restart` waits for PING to succeed). With a
    /// snapshot saved and `--key-load-delay`, it is still loading then.
    pub fn restart_loading(&mut self, extra: &[&str]) {
        self.kill();
        let kept = self.args.clone();
        self.args.extend(extra.iter().map(|a| a.to_string()));
        let mut started = false;
        for _ in 0..20 {
            if self.spawn_answering().is_ok() {
                started = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.args = kept;
        assert!(
            started,
            "redis-server did not restart on port {}\n{}",
            self.port,
            self.log()
        );
    }

    /// Runs the process and waits until it answers PING with anything (a reply or
    /// an error such as LOADING).
    fn spawn_answering(&mut self) -> Result<(), String> {
        self.spawn_until(|s| s.answers())
    }

    fn answers(&self) -> bool {
        let Ok(client) = self.client() else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        match redis::cmd("PING").query::<String>(&mut conn) {
            Ok(_) => true,
            Err(e) => e.code().is_some(),
        }
    }

    /// Whether the server answers LOADING right now.
    pub fn is_loading(&self) -> bool {
        let Ok(client) = self.client() else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return false;
        };
        redis::cmd("PING")
            .query::<String>(&mut conn)
            .is_err_and(|e| e.code() == Some("LOADING"))
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered.
    pub fn pause(&mut self) {
        if let Some(pid) = self.pid() {
            self.signal_pid(pid, "STOP");
            self.paused = true;
        }
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&mut self) {
        if let Some(pid) = self.pid() {
            self.signal_pid(pid, "CONT");
            self.paused = false;
        }
    }

    fn signal_pid(&self, pid: u32, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{signal} {pid} failed");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// Starts a replica of `master` (speaking TLS if it does) and waits until
    /// its first sync is done.
    pub fn start_replica_of(master: &RedisServer) -> RedisServer {
        Self::start_replica_through(master, master.port())
    }

    /// As [`RedisServer::start_replica_of`], but the replica reaches its master
    /// at `port` (a proxy in front of it, to slow or cut the replication link).
    pub fn start_replica_through(master: &RedisServer, port: u16) -> RedisServer {
        let port = port.to_string();
        // Redis waits 5 s for more replicas before a diskless full sync.
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "repl-diskless-sync-delay", "0"])
            .query(&mut master.conn())
            .expect("CONFIG SET on the master");
        let replica =
            RedisServer::start_as(master.tls.clone(), &["--replicaof", "127.0.0.1", &port]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !replica
            .info("replication")
            .contains("master_link_status:up")
        {
            assert!(
                Instant::now() < deadline,
                "replica did not sync within 30 s\n{}",
                replica.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The master counts it as a replica that can confirm writes (WAIT) only
        // once it is online there too, a moment after the replica's side is up,
        // and has acknowledged something, within the last second (lockwarden
        // counts only those, src/node/replicas/count.rs).
        let online = format!("port={},state=online", replica.port());
        let ready = |info: &str| {
            info.lines().any(|l| {
                // Valkey adds fields after lag (`type=replica`): look at each.
                let fields: Vec<&str> = l.trim_end().split([':', ',']).collect();
                l.contains(&online) && fields.contains(&"lag=0") && !fields.contains(&"offset=0")
            })
        };
        // Something to acknowledge, that leaves no key behind (PUBLISH is
        // replicated).
        let _: i64 = redis::cmd("PUBLISH")
            .arg("lockwarden-test:replica-ready")
            .arg("")
            .query(&mut master.conn())
            .expect("PUBLISH on the master");
        while !ready(&master.info("replication")) {
            assert!(
                Instant::now() < deadline,
                "the master does not see its replica online within 30 s\n{}",
                master.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        replica
    }

    /// A section of `INFO`.
    pub fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("INFO {section}: {e}"))
    }

    /// `CLUSTER INFO`, or an empty string if the node does not answer (a node
    /// still starting, or one that is not in cluster mode).
    pub fn cluster_info(&self) -> String {
        let Ok(client) = self.client() else {
            return String::new();
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return String::new();
        };
        redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut conn)
            .unwrap_or_default()
    }

    /// Calls per command since start (or `CONFIG RESETSTAT`), from `INFO commandstats`;
    /// commands run inside scripts count too.
    pub fn commandstats(&self) -> HashMap<String, u64> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .expect("INFO commandstats");
        parse_commandstats(&info)
    }

    /// Total calls of all commands, script-internal ones included.
    pub fn total_calls(&self) -> u64 {
        self.commandstats().values().sum()
    }
}

/// Parses `cmdstat_<name>:calls=<n>,...` lines.
pub fn parse_commandstats(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, fields) = rest.split_once(':')?;
            let calls = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- redis-server log (port {}) ----\n{}\n---- end of log ----",
                self.port,
                self.log()
            );
        }
        self.kill();
    }
}

/// Polls `check` every few milliseconds until it holds or `limit` passes; returns
/// whether it held. For waiting on an effect with a generous bound, not for timing.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        actix_rt::time::sleep(Duration::from_millis(5)).await;
    }
}
