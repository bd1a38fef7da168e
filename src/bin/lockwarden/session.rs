//! Turning the common options into a connection: the [`Config`], the checks made
//! before any I/O, and the connections a subcommand asks for.
//!
//! The order matters for the promise "bad input changes nothing and fails fast":
//! the URL and the lock name are checked without touching the network, then one
//! quick PING (a single attempt, [`Admin::connect`]) tells an unreachable server
//! apart at once, before a [`LockManager`] is started, since the manager's own
//! connection retries with backoff, which is right for a service and slow for a
//! command that should say "cannot reach Redis" and exit 2.

use std::future::Future;
use std::time::Duration;

use actix::Addr;
use lockwarden::{check_lock_name, Admin, Config, GetReplicaConfirmation, LockError, LockManager};

use crate::cli::{Common, DeadlockTimeout};
use crate::outcome::Failure;

/// The checked settings of one invocation.
#[derive(Debug)]
pub struct Session {
    /// The library configuration built from the options.
    config: Config,
    /// The URL with any password hidden, for messages.
    shown_url: String,
    /// With `run --redlock`: one configuration per independent server, each with
    /// its URL (password hidden) for messages; empty otherwise.
    nodes: Vec<(String, Config)>,
    /// When the command started: `--wait` counts from here, finding the master
    /// included.
    began: std::time::Instant,
    /// Whether finding the master may take part of the wait (`run`, `hold`).
    waits: bool,
    /// `--sync-replicas 0`: replica confirmation is off by the user's own
    /// choice, not said again on stderr.
    sync_off: bool,
    /// `--connect-timeout`: how long after `began` connecting may end.
    connect_timeout: Option<Duration>,
}

/// `config` with `--deadlock-timeout` applied (the library's 1 s when not given).
fn with_deadlock_timeout(config: Config, common: &Common) -> Config {
    match common.deadlock_timeout {
        Some(DeadlockTimeout::After(after)) => config.deadlock_timeout(after),
        Some(DeadlockTimeout::Off) => config.no_deadlock_detection(),
        None => config,
    }
}

/// Fewest servers `run --redlock` takes: with two, the majority is both, so one
/// server down stops every client, which is no better than one server.
pub const REDLOCK_MIN_NODES: usize = 3;

impl Session {
    /// Builds the configuration: no I/O. A URL that does not parse (wrong scheme,
    /// bad port) is bad input. `watchdog_lease` is `run`'s and `hold`'s
    /// `--watchdog-lease`; the other subcommands hold no lock and leave the default.
    /// `redlock` is `run --redlock`, the one use of several `--redis` URLs.
    pub fn new(
        common: &Common,
        watchdog_lease: Option<Duration>,
        redlock: bool,
    ) -> Result<Session, Failure> {
        if redlock {
            return Session::redlock(common, watchdog_lease);
        }
        let [redis_url] = common.redis_urls.as_slice() else {
            return Err(Failure::usage(
                "several --redis URLs are for run --redlock (one lock on a majority of \
                 independent servers); give one --redis for anything else",
            ));
        };
        if !common.cluster.is_empty()
            && (!common.sentinels.is_empty() || common.master_name.is_some())
        {
            return Err(Failure::usage(
                "--cluster and --sentinel/--master-name name different deployments: give one",
            ));
        }
        let (shown_url, mut config) = if !common.cluster.is_empty() {
            let shown: Vec<String> = common.cluster.iter().map(|u| redact(u)).collect();
            let shown_url = format!("Redis Cluster via {}", shown.join(", "));
            let config = Config::cluster(common.cluster.iter().map(String::as_str))
                .map_err(|e| Failure::usage(format!("{shown_url}: {e}")))?;
            (shown_url, config)
        } else if common.sentinels.is_empty() {
            if common.master_name.is_some() {
                return Err(Failure::usage(
                    "--master-name goes with --sentinel URL (one per Sentinel)",
                ));
            }
            let shown_url = redact(redis_url);
            let config = Config::from_url(redis_url).map_err(|e| {
                Failure::usage(format!(
                    "invalid Redis URL '{shown_url}': {e} (expected redis://host[:port][/db])"
                ))
            })?;
            (shown_url, config)
        } else {
            let Some(master) = common.master_name.as_deref() else {
                return Err(Failure::usage(
                    "--sentinel needs --master-name: the name the Sentinels know the master by",
                ));
            };
            let shown: Vec<String> = common.sentinels.iter().map(|u| redact(u)).collect();
            let shown_url = format!("master '{master}' via Sentinel {}", shown.join(", "));
            let config = Config::sentinel(master, common.sentinels.iter().map(String::as_str))
                .map_err(|e| Failure::usage(format!("{shown_url}: {e}")))?;
            (shown_url, config)
        };
        if let Some(lease) = watchdog_lease {
            config = config.watchdog_lease(lease);
        }
        if let Some(password) = &common.master_password {
            config = config.master_credentials(None, password);
        }
        if let Some(on) = common.master_tls {
            config = config.master_tls(on);
        }
        config = match (common.sync_replicas, common.sync_timeout) {
            (Some(0), _) => config.no_replica_sync(),
            (Some(min), timeout) => {
                config.sync_replicas(min, timeout.unwrap_or(Duration::from_secs(1)))
            }
            (None, Some(timeout)) => config.sync_replicas(1, timeout),
            (None, None) => config,
        };
        if let Some(label) = &common.label {
            config = config.label(label.as_str());
        }
        config = with_deadlock_timeout(config, common);
        config
            .validate()
            .map_err(|e| Failure::usage(e.to_string()))?;
        Ok(Session {
            config,
            shown_url,
            nodes: Vec::new(),
            began: std::time::Instant::now(),
            waits: false,
            sync_off: common.sync_replicas == Some(0),
            connect_timeout: common.connect_timeout,
        })
    }

    /// The settings of `run --redlock`: at least [`REDLOCK_MIN_NODES`] distinct
    /// `--redis` URLs, no Sentinel or Cluster (a RedLock's servers are independent
    /// masters; each is reached directly).
    fn redlock(common: &Common, watchdog_lease: Option<Duration>) -> Result<Session, Failure> {
        if !common.cluster.is_empty() || !common.sentinels.is_empty() {
            return Err(Failure::usage(
                "--redlock takes its servers as --redis URL, one per independent server, \
                 not --cluster or --sentinel",
            ));
        }
        if common.sync_replicas.is_some_and(|n| n > 0) {
            return Err(Failure::usage(
                "--sync-replicas is not for --redlock: its servers are independent masters",
            ));
        }
        let urls = &common.redis_urls;
        if urls.len() < REDLOCK_MIN_NODES {
            return Err(Failure::usage(format!(
                "--redlock needs at least {REDLOCK_MIN_NODES} --redis servers, got {}: a \
                 majority of fewer cannot survive the loss of one",
                urls.len()
            )));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        let mut seen: Vec<(String, Server)> = Vec::with_capacity(urls.len());
        for url in urls {
            let shown = redact(url);
            let server = Server::of(url);
            if let Some((other, _)) = seen.iter().find(|(_, s)| s.same_as(&server)) {
                let also = match other == &shown {
                    true => String::new(),
                    false => format!(" (as {other})"),
                };
                return Err(Failure::usage(format!(
                    "--redis {shown} is given twice{also}: both name one server, and a \
                     RedLock's servers must be independent"
                )));
            }
            seen.push((shown.clone(), server));
            let mut config = Config::from_url(url).map_err(|e| {
                Failure::usage(format!(
                    "invalid Redis URL '{shown}': {e} (expected redis://host[:port][/db])"
                ))
            })?;
            if let Some(lease) = watchdog_lease {
                config = config.watchdog_lease(lease);
            }
            if let Some(label) = &common.label {
                config = config.label(label.as_str());
            }
            config = with_deadlock_timeout(config, common);
            config
                .validate()
                .map_err(|e| Failure::usage(format!("--watchdog-lease or --label: {e}")))?;
            nodes.push((shown, config));
        }
        let (shown_url, config) = nodes[0].clone();
        Ok(Session {
            config,
            shown_url: format!("{shown_url} and {} more", nodes.len() - 1),
            nodes,
            began: std::time::Instant::now(),
            waits: false,
            sync_off: common.sync_replicas == Some(0),
            connect_timeout: common.connect_timeout,
        })
    }

    /// `run`'s and `hold`'s `--lock-delay`, for the manager (each RedLock server's
    /// too); a delay the configuration refuses (over the maximum lease) is bad input.
    pub fn with_lock_delay(mut self, delay: Duration) -> Result<Session, Failure> {
        let set = |config: Config| -> Result<Config, Failure> {
            let config = config.lock_delay(delay);
            config
                .validate()
                .map_err(|e| Failure::usage(format!("--lock-delay: {e}")))?;
            Ok(config)
        };
        self.config = set(self.config)?;
        for (_, config) in &mut self.nodes {
            *config = set(config.clone())?;
        }
        Ok(self)
    }

    /// `run`'s and `hold`'s `--direct-handoff`, for the manager (each RedLock
    /// server's too, where it changes nothing: a RedLock waits by rounds).
    pub fn with_direct_handoff(mut self, on: bool) -> Session {
        self.config = self.config.direct_handoff(on);
        for (_, config) in &mut self.nodes {
            *config = config.clone().direct_handoff(on);
        }
        self
    }

    /// Makes finding the master part of `run`'s and `hold`'s `--wait` (forever
    /// without one): a Sentinel failover or a cluster taking over slots when the
    /// command starts is waited out (and said so), not a failure.
    pub fn waiting_for(mut self, wait: Option<Duration>) -> Session {
        self.config = self.config.start_wait(wait.unwrap_or(Duration::MAX));
        self.waits = wait != Some(Duration::ZERO);
        self
    }

    /// When the command started.
    pub fn began(&self) -> std::time::Instant {
        self.began
    }

    /// What is left of `wait` now that the command has found its master.
    pub fn wait_left(&self, wait: Option<Duration>) -> Option<Duration> {
        wait.map(|w| w.saturating_sub(self.began.elapsed()))
    }

    /// With `run --redlock`: each server's configuration and shown URL.
    pub fn nodes(&self) -> &[(String, Config)] {
        &self.nodes
    }

    /// The URL, with any password hidden, for messages.
    pub fn shown_url(&self) -> &str {
        &self.shown_url
    }

    /// Refuses a `--lease` no lock can have, before anything connects, naming the
    /// limit it broke.
    pub fn check_lease(&self, lease: Option<Duration>) -> Result<(), Failure> {
        let Some(lease) = lease else { return Ok(()) };
        let human = crate::duration::human;
        lockwarden::check_lease(&self.config, lease).map_err(|e| match e {
            // The command never changes the library's maximum.
            LockError::InvalidLease { reason, .. } if lease > lockwarden::MAX_LEASE => {
                Failure::usage(format!(
                    "--lease {} {reason}, {}",
                    human(lease),
                    human(lockwarden::MAX_LEASE)
                ))
            }
            e => Failure::usage(format!("--lease {}: {e}", human(lease))),
        })
    }

    /// Refuses a lock name no lock can have, before anything connects.
    pub fn check_name(&self, name: &str) -> Result<(), Failure> {
        check_lock_name(&self.config, name).map_err(|e| Failure::from_lock("", e))
    }

    /// `start` (a step of connecting), within what is left of `--connect-timeout`
    /// counted from the command's start; past it, exit 2 naming the option. The
    /// library bounds each connection and each answer (2 s), not a start of many
    /// round trips, which a slow link stretches: 16 s at 800 ms each way.
    pub async fn connecting<T>(
        &self,
        start: impl Future<Output = Result<T, Failure>>,
    ) -> Result<T, Failure> {
        let Some(limit) = self.connect_timeout else {
            return start.await;
        };
        let left = limit.saturating_sub(self.began.elapsed());
        tokio::time::timeout(left, start).await.unwrap_or_else(|_| {
            Err(Failure::usage(format!(
                "cannot reach Redis at {}: not connected within {} (--connect-timeout)",
                self.shown_url,
                crate::duration::human(limit)
            )))
        })
    }

    /// Refuses a name that `run`, `hold`, `latch` or `semaphore` would take,
    /// hold or change something under, if it would not print as typed: a
    /// control character (a newline or an escape sequence makes `status`, `list`
    /// and the log show a forged or broken line) or nothing but whitespace.
    /// `status` and `unlock --force` still take such a name (checked by
    /// [`Session::check_name`] only), so that a lock a program made under one
    /// can be looked at and broken; every name they print is escaped.
    pub fn check_new_name(&self, name: &str) -> Result<(), Failure> {
        self.check_name(name)?;
        let shown = crate::outcome::field(name);
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(Failure::usage(format!(
                "name \"{shown}\" has a control character ({}): give a name of printable \
                 characters (status and unlock --force still take such a name)",
                c.escape_default()
            )));
        }
        if name.trim().is_empty() {
            return Err(Failure::usage(format!(
                "name \"{shown}\" is only whitespace: give a name that shows when printed"
            )));
        }
        Ok(())
    }

    /// A read-only connection, after one PING.
    pub async fn admin(&self) -> Result<Admin, Failure> {
        self.connecting(async {
            Admin::connect(&self.config)
                .await
                .map_err(|e| self.unreachable(e))
        })
        .await
    }

    /// A running lock manager, once the server answered a PING. A deployment
    /// changing hands (a failover in progress) is waited out within the command's
    /// `--wait` ([`Session::waiting_for`]), and said so once.
    pub async fn manager(&self) -> Result<Addr<LockManager>, Failure> {
        let once = self.config.clone().start_wait(Duration::ZERO);
        let pinged = self.connecting(async {
            match Admin::connect(&once).await {
                Ok(_) => Ok(()),
                Err(e) if e.is_failover_in_progress() && self.waits => {
                    crate::outcome::note(format!(
                        "{}: failover in progress, waiting for the new master",
                        self.shown_url
                    ));
                    self.admin().await.map(drop)
                }
                Err(e) => Err(self.unreachable(e)),
            }
        });
        pinged.await?;
        self.start_manager().await
    }

    /// The failure for a start that did not find Redis.
    fn unreachable(&self, e: LockError) -> Failure {
        match e {
            // Reached, but not what the settings need, or a master name no
            // Sentinel monitors: say that, not "cannot reach".
            LockError::InvalidConfig(_) => Failure::usage(format!("{}: {e}", self.shown_url)),
            // The seam names the cause and the fix (node/diagnose.rs), as it does
            // for the library.
            e => Failure::usage(format!("cannot reach Redis at {}: {e}", self.shown_url)),
        }
    }

    /// A running lock manager, without the quick PING first (for a caller that
    /// already holds an [`Admin`], which made it).
    /// Says on stderr, without `-v`, when replica confirmation is off or
    /// reduced: the lock changes it makes are then not confirmed by a replica,
    /// and a failover can forget them.
    pub async fn start_manager(&self) -> Result<Addr<LockManager>, Failure> {
        let manager = self
            .connecting(async {
                LockManager::start(self.config.clone())
                    .await
                    .map_err(|e| self.unreachable(e))
            })
            .await?;
        if let Ok(confirmation) = manager.send(GetReplicaConfirmation).await {
            if !confirmation.is_full() && !self.sync_off {
                crate::outcome::note(format!("{}: {confirmation}", self.shown_url));
            }
        }
        Ok(manager)
    }
}

/// Where a `--redis` URL leads, for telling two spellings of one server apart
/// (`localhost` and `127.0.0.1`, `/0` or not, the default port written out): the
/// addresses its host resolves to, its port and its database.
#[derive(Debug)]
struct Server {
    addrs: Vec<std::net::IpAddr>,
    host: String,
    port: u16,
    db: i64,
}

impl Server {
    /// What `url` names; a URL that does not parse names only itself (it is
    /// refused later with its own message).
    fn of(url: &str) -> Server {
        use redis::IntoConnectionInfo;
        use std::net::ToSocketAddrs;
        let Ok(info) = url.into_connection_info() else {
            return Server {
                addrs: Vec::new(),
                host: url.to_string(),
                port: 0,
                db: 0,
            };
        };
        let (host, port) = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            redis::ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port),
            other => (other.to_string(), 0),
        };
        let addrs = (host.as_str(), port)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.ip()).collect())
            .unwrap_or_default();
        Server {
            addrs,
            host,
            port,
            db: info.redis_settings().db(),
        }
    }

    /// Whether both name the same database of the same server: same port and
    /// database, and the same host or a shared address.
    fn same_as(&self, other: &Server) -> bool {
        self.port == other.port
            && self.db == other.db
            && (self.host == other.host || self.addrs.iter().any(|a| other.addrs.contains(a)))
    }
}

/// The URL with the password (if any) replaced by `***`, so that it can be shown.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_in_messages() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("nonsense"), "nonsense");
    }
}
