//! The TLS half of the start-up diagnosis: a certificate this process does not
//! trust, and a plain `redis://` URL pointed at a port that speaks only TLS.
//!
//! Both fail in ways redis-rs reports without their cause, and both would be
//! retried for the whole connection timeout although neither can pass: rustls
//! says `invalid peer certificate: UnknownIssuer` (nothing about where trust
//! comes from), and a TLS port reads a plain client's first bytes as a broken
//! handshake and resets the connection (`Connection reset by peer`). So a
//! refused certificate is named from rustls's words, and a plain connection
//! that a port drops is followed by one TLS connection of redis-rs's own to the
//! same port: if a handshake happens there (whether or not its certificate is
//! trusted), the port speaks TLS and the URL's scheme is what to change.

#[cfg(feature = "tls")]
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use crate::config::Config;

#[cfg(feature = "tls")]
/// How long the TLS look at a plain URL's port may take: a handshake on any
/// network a lock service runs on is far shorter, and the user is waiting.
const TLS_LOOK: Duration = Duration::from_secs(1);

/// The error for a certificate rustls refused (`e` says "invalid peer
/// certificate"), naming the cause and the fix; `None` for another error.
pub(super) fn untrusted(e: &RedisError, host: &str) -> Option<RedisError> {
    let said = e.to_string();
    let at = said.find("invalid peer certificate")?;
    let said = &said[at..];
    let why = if said.contains("UnknownIssuer") {
        "it is signed by a certificate authority this process does not trust (a \
         private CA?): trust that authority with Config::tls_root_cert(pem) in the \
         library, or point SSL_CERT_FILE at its PEM file (the command, or any \
         process using the system's roots)"
            .to_string()
    } else if said.contains("NotValidForName") {
        format!(
            "it does not name the host '{host}' of the URL: connect by a name the \
             certificate lists (its subjectAltName)"
        )
    } else if said.contains("Expired") || said.contains("NotValidYet") {
        "it is outside its dates: renew it, or check this machine's clock".to_string()
    } else {
        "rustls refused it: check the certificate the server's tls-cert-file names".to_string()
    };
    Some(RedisError::from((
        ErrorKind::InvalidClientConfig,
        "Redis's TLS certificate is not trusted",
        format!("the server's certificate was refused: {why} ({said})"),
    )))
}

/// Whether `host:port`, which dropped a plain connection, completes a TLS
/// handshake (see the module documentation). Only with the `tls` feature;
/// without it, nothing is known.
pub(super) async fn speaks_tls(config: &Config, host: &str, port: u16) -> bool {
    #[cfg(feature = "tls")]
    {
        let host = match host.contains(':') {
            true => format!("[{host}]"),
            false => host.to_string(),
        };
        let url = format!("rediss://{host}:{port}/");
        let client = match &config.tls_root {
            Some(pem) => redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            None => redis::Client::open(url),
        };
        let Ok(client) = client else {
            return false;
        };
        let settings = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(TLS_LOOK.min(config.connection_timeout)))
            .set_response_timeout(Some(TLS_LOOK));
        match client
            .get_multiplexed_async_connection_with_config(&settings)
            .await
        {
            Ok(_) => true,
            // A refused certificate or a server's error reply: a handshake
            // happened either way.
            Err(e) => e.to_string().contains("invalid peer certificate") || e.code().is_some(),
        }
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (config, host, port);
        false
    }
}

/// The error for a `redis://` URL whose port speaks only TLS.
pub(super) fn tls_only(host: &str, port: u16) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "Redis speaks only TLS on this port",
        format!(
            "{host}:{port} speaks only TLS (it dropped the plain connection and \
             completed a TLS handshake): start the URL with rediss:// for this port, \
             or use the server's plain port"
        ),
    ))
}
