//! How the [`Follower`](super::Follower) reaches the Sentinels and the servers
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

use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, ConnectionInfo, IntoConnectionInfo, RedisResult, TlsMode};

use crate::config::Config;

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
