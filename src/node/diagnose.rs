//! Why a standalone server cannot be used, named at once with what to change.
//!
//! A lock manager's connection reconnects with backoff for as long as it lives,
//! which is right once it runs and wrong for its first connection: redis-rs then
//! retries a wrong password, a database the server does not have, a host name that
//! does not resolve, TLS spoken to a plain port and a port that is not Redis at
//! all, and after the connection timeout all of them read "could not connect
//! within the connection timeout". A server that wants a password the URL does
//! not give is worse: the connection succeeds, and the first command fails with
//! NOAUTH. So before that connection is made, [`first_look`] makes one of its own,
//! exactly as redis-rs makes it (TLS, AUTH, SELECT), once, and sends a PING; what
//! fails is named here, in the server's words where it said any. The manager, an
//! [`Admin`](crate::Admin) and the `lockwarden` command all start through it, so
//! they say the same thing.
//!
//! Some causes redis-rs reports without their reason, so the failed connection is
//! followed by one short look of our own: a server in protected mode writes
//! "-DENIED ..." and closes (redis-rs says "Connection reset by peer"); a password
//! the server does not take is always "Password authentication failed", whether it
//! is wrong or the server has none (an `AUTH` on a connection made without
//! credentials reads which); a name that does not resolve is asked of the resolver
//! again; what a port that is not Redis answers to a plain `PING` is read and
//! quoted. TLS spoken to a plain server is the one cause with no answer at all:
//! Redis reads the TLS greeting as the start of a command and waits for its end,
//! while the client waits for the TLS answer. So a TLS handshake that has not
//! finished after [`PLAIN_LOOK_AFTER`] is raced with a plain `PING` on the same
//! port: a Redis answer there ends the wait at once. A real TLS server refuses the
//! stray plain bytes (at most a line in its log) and the handshake goes on.
//!
//! A TLS certificate this process does not trust, and a plain URL aimed at a
//! port that speaks only TLS, are named by `tls.rs` beside this file.
//!
//! Everything here costs one connection and a PING on the path that works, and
//! one short round trip more on the paths that fail.

use std::pin::pin;
use std::time::Duration;

use futures::future::{select, Either};
use redis::{ConnectionAddr, ErrorKind, RedisConnectionInfo, RedisError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::debug;

use crate::config::Config;

mod tls;

/// What Redis in protected mode sends a client from another host, first thing.
const DENIED: &str = "-DENIED";

/// How long a TLS handshake may take before the port is asked, in plain text,
/// whether it speaks plain Redis: longer than a handshake on a local network, and
/// short next to the connection timeout a user would otherwise wait.
const PLAIN_LOOK_AFTER: Duration = Duration::from_millis(50);

/// How long a plain look waits for a server to speak first (a DENIED greeting)
/// before it sends its own PING: a server that refuses writes at once, and
/// writing into a connection it is closing could lose its words to a reset.
const GREETING_WAIT: Duration = Duration::from_millis(20);

/// One connection to the standalone server `config` names, made as the manager's
/// own will be, and a PING on it: `Ok` if the server takes the URL's settings,
/// otherwise the error that names why (see the module documentation). A PING the
/// user may not run (NOPERM, a least-privilege ACL) passes: the server took the
/// credentials, which is what is asked.
pub(super) async fn first_look(config: &Config) -> Result<(), RedisError> {
    let attempt = async {
        // Half the connection timeout at most: on a slow or cut link the look
        // must leave the connection manager's own attempt time to connect
        // (settled() lets a timeout through to it).
        let half = config.connection_timeout / 2;
        let settings = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(half))
            .set_response_timeout(Some(config.response_timeout.min(half)));
        let mut conn = config
            .client
            .get_multiplexed_async_connection_with_config(&settings)
            .await?;
        match redis::cmd("PING").query_async::<()>(&mut conn).await {
            Err(e) if crate::error::is_noperm(&e) => Ok(()),
            answer => answer,
        }
    };
    let answer = match config.client.get_connection_info().addr() {
        ConnectionAddr::TcpTls { host, port, .. } => {
            // The plain look only ever ends the race with an error it is sure of.
            let plain = async {
                tokio::time::sleep(PLAIN_LOOK_AFTER).await;
                // No greeting to wait for: a Redis that refuses TLS clients
                // outright is not what is looked for here.
                let wait = config.connection_timeout;
                match plain_answer(host, *port, wait, Duration::ZERO).await {
                    Answer::Line(line) if is_resp(&line) => plain_not_tls(host, *port, &line),
                    _ => std::future::pending().await,
                }
            };
            match select(pin!(attempt), pin!(plain)).await {
                Either::Left((answer, _)) => answer,
                Either::Right((named, _)) => return Err(named),
            }
        }
        _ => attempt.await,
    };
    match answer {
        Ok(()) => Ok(()),
        Err(e) => {
            debug!(error = %e, "the first connection failed; asking why");
            Err(named(config, e).await)
        }
    }
}

/// Whether `e`, from [`first_look`], names a cause a person must fix (a
/// password, a database, a host name, a scheme, a port that is not Redis), as
/// opposed to one that may pass in a moment (a refusal or a dropped connection
/// while the server restarts, a timeout on a slow or cut link): those get the
/// connection manager's own retries within the connection timeout, as before
/// the first look existed, and the look's words only if those fail too.
pub(super) fn settled(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig | ErrorKind::Parse
    ) || e.to_string().contains("host name does not resolve")
        // A refusal is answered at once too, as before the first look: nothing
        // listens there (a restart refuses for a moment; `start_wait` and the
        // caller's retry are for that).
        || e.to_string().contains("refused the connection")
        || e.code() == Some("NOAUTH")
}

/// The error to answer for `e`, a failed first connection or PING, naming its
/// cause and what to change; `e` itself when nothing better is known.
async fn named(config: &Config, e: RedisError) -> RedisError {
    if let Some(said) = no_password(config, &e) {
        return said;
    }
    if e.kind() == ErrorKind::AuthenticationFailed {
        return credentials_refused(config).await.unwrap_or(e);
    }
    let info = config.client.get_connection_info();
    // redis-rs's words for a SELECT the server refused.
    if e.to_string().contains("to switch database") {
        let db = info.redis_settings().db();
        let said = e.detail().unwrap_or("refused");
        return RedisError::from((
            ErrorKind::InvalidClientConfig,
            "Redis has no database of the URL's number",
            format!(
                "the URL asks for database {db} and the server said: {said}; a server has \
                 16 databases (0 to 15) unless its `databases` setting says otherwise \
                 (CONFIG GET databases): put one it has at the end of the URL (/0)"
            ),
        ));
    }
    let (host, port, tls) = match info.addr() {
        ConnectionAddr::Tcp(host, port) => (host.as_str(), *port, false),
        ConnectionAddr::TcpTls { host, port, .. } => (host.as_str(), *port, true),
        // A unix socket: redis-rs's words name the path.
        _ => return e,
    };
    if let Some(said) = tls.then(|| tls::untrusted(&e, host)).flatten() {
        return said;
    }
    let wait = config.connection_timeout;
    if e.is_connection_refusal() {
        return RedisError::from((
            ErrorKind::Io,
            "Redis refused the connection",
            format!(
                "{host}:{port} refused the connection ({e}): is the server running, and \
                 is this its port?"
            ),
        ));
    }
    if e.is_timeout() || !matches!(e.kind(), ErrorKind::Io | ErrorKind::Parse) {
        return e;
    }
    if let Err(why) = resolves(host, port, wait).await {
        return RedisError::from((
            ErrorKind::Io,
            "Redis's host name does not resolve",
            format!("no address for the host '{host}' of the URL ({why}): check its spelling"),
        ));
    }
    by_plain_answer(config, (host, port, tls), e).await
}

/// What the server at `host:port` (over TLS when `tls`) answers a plain
/// client says of the failure `e`: a protected server, a TLS-only port, no
/// Redis server at all, or nothing new (`e` as it is).
async fn by_plain_answer(
    config: &Config,
    (host, port, tls): (&str, u16, bool),
    e: RedisError,
) -> RedisError {
    let wait = config.connection_timeout;
    match plain_answer(host, port, wait, GREETING_WAIT).await {
        Answer::Line(line) if line.starts_with(DENIED) => protected_mode(&line),
        Answer::Line(line) if tls && is_resp(&line) => plain_not_tls(host, port, &line),
        // A Redis answer to a plain client: the failure was something else.
        Answer::Line(line) if is_resp(&line) => e,
        Answer::Line(line) => RedisError::from((
            ErrorKind::Parse,
            "not a Redis server",
            format!(
                "{host}:{port} does not answer in the Redis protocol (is it a Redis server? \
                 check the port): it said {:?}",
                first_chars(&line, 60)
            ),
        )),
        Answer::Closed | Answer::Unreachable
            if !tls && tls::speaks_tls(config, host, port).await =>
        {
            tls::tls_only(host, port)
        }
        Answer::Closed if !tls => RedisError::from((
            ErrorKind::Io,
            "not a Redis server",
            format!(
                "{host}:{port} closed the connection without a word: it is not a Redis \
                 server, or it speaks only TLS (then the URL starts with rediss://)"
            ),
        )),
        Answer::Closed | Answer::Silent | Answer::Unreachable => e,
    }
}

/// The error for a server that wants a password the settings do not give (it
/// took the connection, and answered a command NOAUTH); `None` if `e` is
/// another. For every deployment: a Sentinel's master is asked too, and its
/// password goes elsewhere than in a URL.
pub(super) fn no_password(config: &Config, e: &RedisError) -> Option<RedisError> {
    let noauth = e.code() == Some("NOAUTH") || e.to_string().contains("NOAUTH");
    let fix = match config.sentinel {
        Some(_) => {
            "give the master's password with Config::master_credentials (the command's \
             --master-password); a Sentinel's own goes in its URL"
        }
        None => {
            "put the password in the URL, redis://:PASSWORD@host:port/ \
             (redis://USER:PASSWORD@host:port/ for an ACL user)"
        }
    };
    noauth.then(|| {
        RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Redis asks for a password the settings do not give",
            format!(
                "the server answered NOAUTH ({}): {fix}",
                e.detail().unwrap_or("Authentication required").trim()
            ),
        ))
    })
}

/// Why the server refused the URL's credentials, in its words: whether it has no
/// password at all or the pair is wrong. `None` if it did not say.
async fn credentials_refused(config: &Config) -> Option<RedisError> {
    let said = auth_answer(
        config.client.get_connection_info(),
        config.connection_timeout,
    )
    .await?;
    let hint = if said.contains("without any password configured") {
        "the server has no password for this user: drop it from the URL, or give \
         the server one (requirepass, ACL SETUSER)"
    } else if said.starts_with("WRONGPASS") {
        "the user name or the password is wrong, or the user is disabled \
         (ACL LIST on the server shows its users)"
    } else {
        "the credentials in the URL are not ones this server takes"
    };
    Some(RedisError::from((
        ErrorKind::AuthenticationFailed,
        "Redis refused the credentials",
        format!("{hint}; the server said: {said}"),
    )))
}

/// The error for a server in protected mode, from its DENIED line.
fn protected_mode(line: &str) -> RedisError {
    let rest = line.strip_prefix(DENIED).unwrap_or(line);
    // Redis's text is a paragraph; its first sentence says what happened.
    let first = rest
        .trim()
        .split(". ")
        .next()
        .unwrap_or("")
        .trim_end_matches('.');
    RedisError::from((
        ErrorKind::Io,
        "Redis refused the connection",
        format!(
            "DENIED {first}. It takes connections only from its own host (loopback) \
             until its default user has a password: set one (requirepass) and put it \
             in the URL, or run the server with --protected-mode no on a trusted \
             network"
        ),
    ))
}

/// The error for a `rediss://` URL whose port answered a plain PING as Redis.
fn plain_not_tls(host: &str, port: u16, line: &str) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "Redis does not speak TLS on this port",
        format!(
            "the URL asks for TLS (rediss://), and {host}:{port} speaks plain Redis (to a \
             plain PING it answered {:?}): use redis:// for this port, or the server's \
             TLS port (tls-port)",
            first_chars(line, 60)
        ),
    ))
}

/// Whether the name `host` resolves to an address; the resolver's words if not.
async fn resolves(host: &str, port: u16, wait: Duration) -> Result<(), String> {
    match tokio::time::timeout(wait, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(mut addrs)) => match addrs.next() {
            Some(_) => Ok(()),
            None => Err("the name has no address".into()),
        },
        Ok(Err(e)) => Err(e.to_string()),
        // A resolver that does not answer in time says nothing either way.
        Err(_) => Ok(()),
    }
}

/// What a port says on a plain TCP connection, before and after a PING.
enum Answer {
    /// Its first line (without the line end).
    Line(String),
    /// It closed the connection without a byte.
    Closed,
    /// It said nothing in time.
    Silent,
    /// It could not be reached (or the connection broke before a byte came).
    Unreachable,
}

/// Connects to `host:port` in plain TCP, reads what the server says first (a
/// DENIED greeting) for up to `greeting`, and if it says nothing, sends `PING`
/// and reads the answer; all within `wait`, cut to a second: a server that sends
/// nothing is not refusing, and the caller is waiting.
async fn plain_answer(host: &str, port: u16, wait: Duration, greeting: Duration) -> Answer {
    let look = async {
        let Ok(mut stream) = tokio::net::TcpStream::connect((host, port)).await else {
            return Answer::Unreachable;
        };
        let mut buf = vec![0u8; 512];
        let first = match greeting.is_zero() {
            true => None,
            false => tokio::time::timeout(greeting, stream.read(&mut buf))
                .await
                .ok(),
        };
        let read = match first {
            Some(read) => read,
            None => {
                if stream.write_all(b"PING\r\n").await.is_err() {
                    return Answer::Unreachable;
                }
                stream.read(&mut buf).await
            }
        };
        match read {
            Ok(0) => Answer::Closed,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                Answer::Line(text.lines().next().unwrap_or("").to_string())
            }
            Err(_) => Answer::Unreachable,
        }
    };
    tokio::time::timeout(wait.min(Duration::from_secs(1)), look)
        .await
        .unwrap_or(Answer::Silent)
}

/// Whether `line` reads as a Redis reply to PING: `+PONG`, or an error such as
/// `-NOAUTH ...` or `-DENIED ...`.
fn is_resp(line: &str) -> bool {
    line == "+PONG" || (line.starts_with('-') && line[1..].starts_with(char::is_uppercase))
}

/// At most the first `n` characters of `text`, for quoting what a server said.
fn first_chars(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

/// What the server answers to the URL's credentials on a connection made
/// without them: its error text, or `None` if it took them (or did not answer).
async fn auth_answer(info: &redis::ConnectionInfo, wait: Duration) -> Option<String> {
    let settings = info.redis_settings();
    let password = settings.password()?;
    let bare = info
        .clone()
        .set_redis_settings(RedisConnectionInfo::default());
    let client = redis::Client::open(bare).ok()?;
    let mut conn = tokio::time::timeout(wait, client.get_multiplexed_async_connection())
        .await
        .ok()?
        .ok()?;
    let mut auth = redis::cmd("AUTH");
    if let Some(user) = settings.username() {
        auth.arg(user);
    }
    auth.arg(password);
    let answer = tokio::time::timeout(wait, auth.query_async::<()>(&mut conn)).await;
    let refused = answer.ok()?.err()?;
    // "WRONGPASS: invalid ..." -> code and detail as the server wrote them.
    let text = match (refused.code(), refused.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => refused.to_string(),
    };
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_answers_are_told_from_other_servers() {
        assert!(is_resp("+PONG"));
        assert!(is_resp("-NOAUTH Authentication required."));
        assert!(is_resp("-DENIED Redis is running in protected mode"));
        assert!(!is_resp("HTTP/1.1 400 Bad Request"));
        assert!(!is_resp("-"));
        assert!(!is_resp("SSH-2.0-OpenSSH_9.6"));
    }
}
