//! The server's own words for two refusals redis-rs reports without them.
//!
//! A standalone server that refuses a new connection says why, and redis-rs
//! loses it on the way: a server in protected mode writes "-DENIED ..." and
//! closes, which reaches the caller as "Connection reset by peer"; a password
//! the server does not take is always "Password authentication failed", whether
//! the password is wrong or the server has none at all (redis-rs keeps the
//! reply's kind, not its text). Both are things a person must fix, and the
//! wrong words send them looking at the network or at a password that is right.
//! So, once a first connection has failed in one of these two ways, one more
//! connection asks again and reads the answer itself: the greeting of a bare TCP
//! connection, or an `AUTH` sent on a connection made without credentials. It
//! costs nothing on the paths that work, and one short round trip on these.

use std::time::Duration;

use redis::{ConnectionAddr, ErrorKind, RedisConnectionInfo, RedisError};
use tokio::io::AsyncReadExt;

use crate::config::Config;

/// What Redis in protected mode sends a client from another host, first thing.
const DENIED: &str = "-DENIED";

/// The error to answer instead of `e`, in the server's words, when the
/// server's own answer explains a failed first connection; `None` otherwise.
/// Only for a standalone server (its address is the client's own).
pub(super) async fn explained(config: &Config, e: &RedisError) -> Option<RedisError> {
    let info = config.client.get_connection_info();
    let wait = config.connection_timeout;
    if e.kind() == ErrorKind::AuthenticationFailed {
        let said = auth_answer(info, wait).await?;
        let hint = if said.contains("without any password configured") {
            "the server has no password for this user: drop it from the URL, or give \
             the server one (requirepass, ACL SETUSER)"
        } else if said.starts_with("WRONGPASS") {
            "the user name or the password is wrong, or the user is disabled \
             (ACL LIST on the server shows its users)"
        } else {
            "the credentials in the URL are not ones this server takes"
        };
        return Some(RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Redis refused the credentials",
            format!("{hint}; the server said: {said}"),
        )));
    }
    // A refused or timed-out connection has nothing to read; a reset one may.
    let reset = e.is_connection_dropped()
        || (e.is_io_error() && !e.is_timeout() && !e.is_connection_refusal());
    if !reset {
        return None;
    }
    // TLS and unix sockets: no plain greeting to read.
    let ConnectionAddr::Tcp(host, port) = info.addr() else {
        return None;
    };
    let greeting = greeting(host, *port, wait).await?;
    let rest = greeting.strip_prefix(DENIED)?;
    // Redis's text is a paragraph; its first sentence says what happened.
    let first = rest
        .trim()
        .split(". ")
        .next()
        .unwrap_or("")
        .trim_end_matches('.');
    Some(RedisError::from((
        ErrorKind::Io,
        "Redis refused the connection",
        format!(
            "DENIED {first}. It takes connections only from its own host (loopback) \
             until its default user has a password: set one (requirepass) and put it \
             in the URL, or run the server with --protected-mode no on a trusted \
             network"
        ),
    )))
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

/// The first line a server sends on a fresh TCP connection before it is asked
/// anything (Redis sends nothing unless it refuses), read for a short while.
async fn greeting(host: &str, port: u16, wait: Duration) -> Option<String> {
    let read = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        let mut buf = vec![0u8; 1024];
        let n = stream.read(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        Some(text.lines().next().unwrap_or("").to_string())
    };
    // Half the connection timeout at most: a server that sends nothing is not
    // refusing, and the caller is waiting for an answer.
    tokio::time::timeout(wait / 2, read).await.ok()?
}
