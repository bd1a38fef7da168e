//! How the [`Follower`] reaches the Sentinels and the servers
//! they name: the redis-rs Sentinel client it asks, and one client per Sentinel
//! for the `+switch-master` listeners, both with the password and TLS the
//! configuration gives (`config/sentinel.rs`).
//!
//! redis-rs builds a Sentinel client two ways. `SentinelClient::build` takes each
//! Sentinel's URL as it is, but has no place for a certificate authority of the
//! master: the master's role check and every connection to it would trust only
//! the system's roots, and a private CA (the usual case for TLS inside a
//! deployment) would make the master unreachable. `SentinelClientBuilder` takes a
//! CA for each side, TLS for the master, and one password for all the Sentinels,
//! so it is the one used; `Config::sentinel` has already refused Sentinel URLs
//! that disagree on scheme or password. What it builds checks certificates
//! against the CA of `Config::tls_root_cert` or, without one, the system's roots
//! (`SSL_CERT_FILE` names another bundle, as the `lockwarden` command uses it).
//!
//! The connections to the master are made here too: one per lane, all at once
//! ([`connect_lanes`]), and a lane's replacement when it stopped answering
//! while a fresh connection answers ([`Follower::replace_silent`]).

use std::sync::atomic::Ordering;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, ConnectionInfo, IntoConnectionInfo, RedisError, RedisResult, TlsMode};
use tracing::debug;

use super::{Follower, LOOKUP_PAUSE};
use crate::config::Config;

/// `lanes` connections (at least one) to the master `client` reaches, made
/// side by side.
pub(super) async fn connect_lanes(
    client: &Client,
    settings: &ConnectionManagerConfig,
    lanes: usize,
) -> RedisResult<Vec<ConnectionManager>> {
    let made = (0..lanes.max(1))
        .map(|_| ConnectionManager::new_with_config(client.clone(), settings.clone()));
    futures::future::try_join_all(made).await
}

impl Follower {
    /// The Sentinels name the master in use: answers whether it answers. Each
    /// lane whose connection does not answer a PING is looked at: a frozen
    /// master answers no connection, but if a fresh one answers, the lane's
    /// lost a call's bytes and pairs each reply with the request before it for
    /// good (`node/standalone.rs` says more), so it is replaced. A lane whose
    /// call waits in a `WAIT` answers its PING only once the `WAIT` ends, so
    /// it gets that long again before it counts as silent: replacing it would
    /// abort a call that was only waiting for replicas.
    pub(super) async fn replace_silent(&self, master: Client) -> RedisResult<bool> {
        let silent = self
            .unanswered((0..self.lanes()).collect(), LOOKUP_PAUSE)
            .await;
        if silent.is_empty() {
            return Ok(true);
        }
        let fresh = silent.iter().map(|_| async {
            let mut fresh =
                ConnectionManager::new_with_config(master.clone(), self.settings.clone()).await?;
            redis::cmd("PING").query_async::<String>(&mut fresh).await?;
            Ok::<_, RedisError>(fresh)
        });
        let fresh = futures::future::try_join_all(fresh);
        let Ok(Ok(mut fresh)) = tokio::time::timeout(LOOKUP_PAUSE, fresh).await else {
            return Ok(false);
        };
        let silent = self.unanswered(silent, self.waits_up_to).await;
        fresh.truncate(silent.len());
        if silent.is_empty() {
            return Ok(true);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            for (lane, conn) in silent.iter().zip(fresh) {
                if let Some(slot) = current.0.get_mut(*lane) {
                    *slot = conn;
                }
            }
        }
        self.moved.notify_waiters();
        debug!(master = %master.get_connection_info().addr(), lanes = ?silent, "the master's connection stopped answering while a new one answers: replaced");
        Ok(true)
    }

    /// The lanes of `lanes` whose connection does not answer a PING within
    /// `budget`.
    async fn unanswered(&self, lanes: Vec<usize>, budget: std::time::Duration) -> Vec<usize> {
        let pings = lanes.iter().map(|&lane| {
            let mut conn = self.conn(lane);
            async move {
                let ping = redis::cmd("PING");
                let ping = ping.query_async::<String>(&mut conn);
                matches!(tokio::time::timeout(budget, ping).await, Ok(Ok(_)))
            }
        });
        let answered = futures::future::join_all(pings).await;
        let silent = lanes
            .into_iter()
            .zip(answered)
            .filter(|(_, answered)| !answered);
        silent.map(|(lane, _)| lane).collect()
    }
}

/// The Sentinel URLs of `config` (a Sentinel setup), parsed.
fn sentinel_infos(config: &Config) -> RedisResult<(&str, Vec<ConnectionInfo>)> {
    let Some((name, urls)) = &config.sentinel else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "not a Sentinel configuration",
        )));
    };
    let infos = urls
        .iter()
        .map(|url| url.as_str().into_connection_info())
        .collect::<RedisResult<Vec<_>>>()?;
    Ok((name.as_str(), infos))
}

/// The client that asks the Sentinels where the master of `config` is, and
/// connects to it with its credentials and TLS.
pub(super) fn sentinel_client(config: &Config) -> RedisResult<SentinelClient> {
    let (name, infos) = sentinel_infos(config)?;
    let addrs = infos.iter().map(|info| info.addr().clone());
    let mut builder = SentinelClientBuilder::new(addrs, name, SentinelServerType::Master)?;
    // Every URL carries the same credentials (Config::sentinel), and the
    // protocol a URL asks for (`?protocol=resp3`) is kept.
    if let Some(first) = infos.first().map(ConnectionInfo::redis_settings) {
        builder = builder.set_client_to_sentinel_protocol(first.protocol());
        if let Some(username) = first.username() {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = first.password() {
            builder = builder.set_client_to_sentinel_password(password);
        }
    }
    if let Some((username, password)) = &config.master_auth {
        builder = builder.set_client_to_redis_password(password);
        if let Some(username) = username {
            builder = builder.set_client_to_redis_username(username);
        }
    }
    if config.master_uses_tls() {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
    }
    #[cfg(feature = "tls")]
    if let Some(certs) = root_cert(config) {
        if config.sentinels_use_tls() {
            builder = builder.set_client_to_sentinel_certificates(certs.clone());
        }
        if config.master_uses_tls() {
            builder = builder.set_client_to_redis_certificates(certs);
        }
    }
    builder.build()
}

/// One client per Sentinel of `config`, for listening to its announcements.
pub(super) fn sentinel_clients(config: &Config) -> RedisResult<Vec<Client>> {
    let (_, infos) = sentinel_infos(config)?;
    infos
        .into_iter()
        .map(|info| {
            #[cfg(feature = "tls")]
            if let Some(certs) = root_cert(config).filter(|_| config.sentinels_use_tls()) {
                return Client::build_with_tls(info, certs);
            }
            Client::open(info)
        })
        .collect()
}

/// The certificate authority of `Config::tls_root_cert`, if one was given.
#[cfg(feature = "tls")]
fn root_cert(config: &Config) -> Option<redis::TlsCertificates> {
    config.tls_root.as_ref().map(|pem| redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every Sentinel setup the configuration accepts must build: redis-rs's
    /// builder refuses some (TLS settings for a plain Sentinel), which would
    /// otherwise only show when a manager starts. Nothing connects here.
    #[test]
    fn every_sentinel_setup_the_config_accepts_builds() {
        let urls = ["redis://:pw@127.0.0.1:26379", "redis://:pw@127.0.0.1:26380"];
        let plain = Config::sentinel("m", urls).expect("config");
        for config in [plain.clone(), plain.master_tls(true)] {
            assert!(sentinel_client(&config).is_ok());
            assert_eq!(sentinel_clients(&config).expect("clients").len(), 2);
        }
        if let Ok(tls) = Config::sentinel("m", ["rediss://127.0.0.1:26379"]) {
            assert!(sentinel_client(&tls).is_ok());
            assert!(sentinel_client(&tls.master_tls(false)).is_ok());
        }
    }
}
