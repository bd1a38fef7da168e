//! Redis Sentinel processes for tests: `redis-server <config> --sentinel` on a free
//! port, watching a master the test started, with timings small enough that a
//! failover takes a few seconds. A Sentinel of a TLS master speaks only TLS
//! itself (`port 0`, `tls-port`), to clients, to its peers and to the servers
//! it watches (`tls-replication yes`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::server::{client_for, free_port, redis_server_bin, RedisServer, TlsFiles};

/// The name every test Sentinel monitors its master under.
pub const MASTER_NAME: &str = "mymaster";

/// One Sentinel; killed on drop (its log is printed if the test panicked).
pub struct Sentinel {
    port: u16,
    /// Its `requirepass`, if any (then in its URL).
    password: Option<String>,
    /// Set when it speaks only TLS (`rediss://` URL).
    tls: Option<TlsFiles>,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts a Sentinel monitoring `master` with this quorum: the master is
    /// considered down after 1 s without answers, a failover may take 5 s.
    pub fn start(master: &RedisServer, quorum: u32) -> Sentinel {
        Sentinel::start_with_auth(master, quorum, None, None)
    }

    /// As [`Sentinel::start`], with a password of its own (`requirepass`, and
    /// `sentinel-pass` for its peers, which must share it) and the password of the
    /// master and replicas it watches (`auth-pass`).
    pub fn start_with_auth(
        master: &RedisServer,
        quorum: u32,
        password: Option<&str>,
        master_password: Option<&str>,
    ) -> Sentinel {
        Sentinel::launch(master, quorum, password, master_password, None)
    }

    /// As [`Sentinel::start`], speaking only TLS with these files, for a
    /// master started with [`RedisServer::start_tls`].
    pub fn start_tls(master: &RedisServer, quorum: u32, tls: &TlsFiles) -> Sentinel {
        Sentinel::launch(master, quorum, None, None, Some(tls))
    }

    fn launch(
        master: &RedisServer,
        quorum: u32,
        password: Option<&str>,
        master_password: Option<&str>,
        tls: Option<&TlsFiles>,
    ) -> Sentinel {
        let mut auth = String::new();
        if let Some(pw) = password {
            auth.push_str(&format!("requirepass {pw}\nsentinel sentinel-pass {pw}\n"));
        }
        if let Some(pw) = master_password {
            auth.push_str(&format!("sentinel auth-pass {MASTER_NAME} {pw}\n"));
        }
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("temp dir");
            let port = free_port();
            let listen = match tls {
                None => format!("port {port}\n"),
                // The same settings as the servers' flags, in config-file form.
                Some(tls) => {
                    let mut lines = format!("port 0\ntls-port {port}\ntls-replication yes\n");
                    for pair in tls.args().chunks(2) {
                        let key = pair[0].trim_start_matches("--");
                        lines.push_str(&format!("{key} {}\n", pair[1]));
                    }
                    lines
                }
            };
            let conf = dir.path().join("sentinel.conf");
            // Sentinel rewrites its config file, so each has its own, writable.
            std::fs::write(
                &conf,
                format!(
                    "{listen}bind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master} {quorum}\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n{auth}",
                    dir = dir.path().display(),
                    log = dir.path().join("sentinel.log").display(),
                    master = master.port(),
                ),
            )
            .expect("write sentinel.conf");
            let child = Command::new(redis_server_bin())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("run redis-server --sentinel");
            let mut s = Sentinel {
                port,
                password: password.map(str::to_string),
                tls: tls.cloned(),
                child: Some(child),
                dir,
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if s.master_port().is_some() {
                    return s;
                }
                if s.child
                    .as_mut()
                    .is_some_and(|c| c.try_wait().ok().flatten().is_some())
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            s.kill();
        }
        panic!("redis-server --sentinel did not start");
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` if it speaks TLS), with
    /// `:<password>@` if it has one.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.password {
            Some(pw) => format!("{scheme}://:{pw}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// The port of the master this Sentinel names now, if it answers.
    pub fn master_port(&self) -> Option<u16> {
        let client = client_for(&self.url(), self.tls.as_ref()).ok()?;
        let mut conn = client
            .get_connection_with_timeout(Duration::from_millis(200))
            .ok()?;
        let addr: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query(&mut conn)
            .ok()?;
        addr.and_then(|(_, port)| port.parse().ok())
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "---- sentinel log (port {}) ----\n{}",
                self.port,
                self.log()
            );
        }
        self.kill();
    }
}
