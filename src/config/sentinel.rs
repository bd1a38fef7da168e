//! The settings of a master found through Redis Sentinel: the Sentinels' URLs,
//! the master's name, its credentials, and whether TLS is spoken to each side.
//!
//! Two kinds of connection leave a Sentinel setup: to the Sentinels (to ask where
//! the master is, and to hear `+switch-master`) and to the servers they name (the
//! master, replicas when a lookup checks roles). The first kind is described by
//! the Sentinel URLs, scheme and password included; the second has no URL of its
//! own, so its password ([`Config::master_credentials`]) and TLS
//! ([`Config::master_tls`]) are settings. A deployment that encrypts its
//! Sentinels nearly always encrypts its data servers too (`tls-replication yes`),
//! so TLS to the master follows the Sentinels' scheme unless said otherwise. The
//! certificate authority of [`Config::tls_root_cert`] is trusted on both sides,
//! as one private CA usually signs every server of a deployment.
//!
//! redis-rs takes the Sentinels' TLS settings and password once for all of them
//! (`SentinelClientBuilder`, the only way to hand it a CA for the master), so the
//! Sentinel URLs must agree on scheme and credentials: a mix is refused here,
//! before anything connects, rather than applied to the wrong Sentinel.

use super::Config;
use crate::error::LockError;

impl Config {
    /// A configuration for the master that Redis Sentinel knows as `master`, found
    /// through these Sentinels (`redis://host:26379`, or `rediss://` for Sentinels
    /// that speak TLS, with `:password@` or `user:password@` for Sentinels with a
    /// password), with every other setting at its default. The master is looked
    /// up when the manager starts and again whenever its connection fails or
    /// answers READONLY (a failover demoted it) or a Sentinel announces that it
    /// switched the master (`+switch-master`), so the manager follows failovers.
    /// A master that needs a password takes [`Config::master_credentials`]; with
    /// `rediss://` Sentinels the master is reached over TLS too
    /// ([`Config::master_tls`] says otherwise), and [`Config::tls_root_cert`]
    /// names a private certificate authority for both.
    /// Fails with [`LockError::InvalidConfig`] if the name is empty, no Sentinel is
    /// given, a URL cannot be parsed or asks for TLS in a build without it, or the
    /// URLs mix `redis://` and `rediss://` or carry different credentials (the
    /// Sentinels of one deployment share them; nothing connects yet).
    pub fn sentinel<'a>(
        master: &str,
        sentinels: impl IntoIterator<Item = &'a str>,
    ) -> Result<Config, LockError> {
        let urls: Vec<String> = sentinels.into_iter().map(str::to_string).collect();
        if master.is_empty() {
            return Err(LockError::InvalidConfig(
                "the Sentinel master name is empty".into(),
            ));
        }
        let Some(first) = urls.first() else {
            return Err(LockError::InvalidConfig("no Sentinel URL given".into()));
        };
        let config = Config::from_url(first)?;
        let own = |c: &Config| {
            let redis = c.client.get_connection_info().redis_settings();
            (
                redis.username().map(str::to_owned),
                redis.password().map(str::to_owned),
            )
        };
        let (tls, credentials) = (crate::tls::wants_tls(first), own(&config));
        for url in &urls[1..] {
            let other = Config::from_url(url)?;
            if crate::tls::wants_tls(url) != tls {
                return Err(LockError::InvalidConfig(
                    "the Sentinel URLs mix redis:// and rediss://: give every Sentinel of \
                     the deployment the same scheme"
                        .into(),
                ));
            }
            if own(&other) != credentials {
                return Err(LockError::InvalidConfig(
                    "the Sentinel URLs carry different credentials: the Sentinels of one \
                     deployment share one password (sentinel-pass), given in every URL"
                        .into(),
                ));
            }
        }
        Ok(Config {
            sentinel: Some((master.to_string(), urls)),
            ..config
        })
    }

    /// Under Sentinel ([`Config::sentinel`]): the credentials of the master (and
    /// replicas) the Sentinels name, sent with AUTH on every connection to it
    /// (`username` `None` for a `requirepass` password, `Some` for an ACL user).
    /// The Sentinels' own credentials, when they have `requirepass`, go in their
    /// URLs (`redis://:password@host:26379`, or `user:password@`).
    /// [`Config::validate`] refuses it without `Config::sentinel`
    /// ([`LockError::InvalidConfig`]): elsewhere the credentials go in the URL.
    /// Defaults to none: the master is reached without AUTH.
    pub fn master_credentials(mut self, username: Option<&str>, password: &str) -> Config {
        self.master_auth = Some((username.map(str::to_string), password.to_string()));
        self
    }

    /// Under Sentinel ([`Config::sentinel`]): whether the master and replicas the
    /// Sentinels name are reached over TLS (their `tls-port`, which the Sentinels
    /// announce when the servers run with `tls-replication yes`). Their
    /// certificate is checked against the system's roots (`SSL_CERT_FILE` names
    /// another bundle) or [`Config::tls_root_cert`]. [`Config::validate`] refuses
    /// it without `Config::sentinel`, and `true` in a build without the `tls`
    /// feature ([`LockError::InvalidConfig`]). Defaults to the Sentinels' scheme:
    /// TLS when their URLs are `rediss://`, plain text when `redis://`.
    pub fn master_tls(mut self, on: bool) -> Config {
        self.master_tls = Some(on);
        self
    }

    /// Whether the Sentinels are reached over TLS (their URLs are `rediss://`).
    pub(crate) fn sentinels_use_tls(&self) -> bool {
        self.sentinel
            .as_ref()
            .and_then(|(_, urls)| urls.first())
            .is_some_and(|url| crate::tls::wants_tls(url))
    }

    /// Whether the master the Sentinels name is reached over TLS.
    pub(crate) fn master_uses_tls(&self) -> bool {
        self.master_tls.unwrap_or_else(|| self.sentinels_use_tls())
    }

    /// The part of [`Config::validate`] about Sentinel's settings.
    pub(super) fn validate_sentinel(&self) -> Result<(), LockError> {
        let bad = |why: &str| Err(LockError::InvalidConfig(why.into()));
        if self.sentinel.is_none() {
            if self.master_auth.is_some() {
                return bad("master_credentials is for a master found through Sentinel; put the credentials in the Redis URL");
            }
            if self.master_tls.is_some() {
                return bad("master_tls is for a master found through Sentinel; use a rediss:// URL for TLS");
            }
            return Ok(());
        }
        if self.master_uses_tls() {
            crate::tls::prepare()?;
        }
        if self.tls_root.is_some() && !self.sentinels_use_tls() && !self.master_uses_tls() {
            return bad("tls_root_cert is set, but neither the Sentinels (redis:// URLs) nor the master (master_tls) are reached over TLS");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_to_the_master_follows_the_sentinels_unless_said() {
        let plain = Config::sentinel("m", ["redis://127.0.0.1:26379"]).expect("plain");
        assert!(!plain.master_uses_tls());
        assert!(plain.clone().master_tls(true).master_uses_tls());
        let Ok(tls) = Config::sentinel("m", ["rediss://127.0.0.1:26379"]) else {
            // A build without the `tls` feature refuses rediss:// outright.
            return;
        };
        assert!(tls.sentinels_use_tls() && tls.master_uses_tls());
        assert!(!tls.master_tls(false).master_uses_tls());
    }

    #[test]
    fn sentinels_must_agree_on_scheme_and_credentials() {
        for urls in [
            ["redis://127.0.0.1:1", "rediss://127.0.0.1:2"],
            ["redis://:a@127.0.0.1:1", "redis://:b@127.0.0.1:2"],
            ["redis://:a@127.0.0.1:1", "redis://127.0.0.1:2"],
        ] {
            let refused = Config::sentinel("m", urls);
            assert!(
                matches!(refused, Err(LockError::InvalidConfig(_))),
                "{urls:?}"
            );
        }
        let same = Config::sentinel("m", ["redis://:a@127.0.0.1:1", "redis://:a@127.0.0.1:2"]);
        assert!(same.is_ok());
    }

    #[test]
    fn master_settings_need_sentinel() {
        let direct = Config::from_url("redis://127.0.0.1:6379").expect("url");
        for config in [
            direct.clone().master_tls(true),
            direct.master_credentials(None, "pw"),
        ] {
            assert!(matches!(
                config.validate(),
                Err(LockError::InvalidConfig(_))
            ));
        }
    }
}
