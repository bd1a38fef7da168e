//! TLS (`rediss://`) against a real `redis-server --tls-port`, with a certificate
//! authority and server certificate this test makes with `openssl`: the library
//! (trusting the CA through `Config::tls_root_cert`) and the command (trusting it
//! through `SSL_CERT_FILE`, as with any system bundle) take and release a lock.
//! Before the `tls` feature, the command panicked on `rediss://` in a build that
//! shared redis-rs's TLS features with a dev-dependency.
#![cfg(feature = "tls")]

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockManager};
use support::{free_port, Certs, RedisServer};

/// A server with its plain port (for the test's own checks) and a TLS port.
fn tls_server(certs: &Certs) -> (RedisServer, u16) {
    let tls_port = free_port().to_string();
    let mut args = vec!["--tls-port".to_string(), tls_port.clone()];
    args.extend(certs.files().args());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&args);
    (server, tls_port.parse().expect("a port"))
}

/// The library over TLS: acquire, see the lock in Redis, release.
#[actix_rt::test]
async fn the_library_locks_over_tls() {
    let certs = Certs::make();
    let (server, port) = tls_server(&certs);
    let config = Config::from_url(&format!("rediss://127.0.0.1:{port}/"))
        .expect("rediss URL")
        .tls_root_cert(certs.ca_pem())
        .expect("CA certificate");
    let m = LockManager::start(config).await.expect("manager over TLS");
    let g = m
        .send(Acquire::new("tls:1").wait(Duration::from_secs(5)))
        .await
        .expect("running")
        .expect("acquired over TLS");
    assert!(support::exists(&server, "tls:1"));
    g.release().await.expect("released over TLS");
    assert!(!support::exists(&server, "tls:1"));
}

/// A certificate nobody vouches for is refused: TLS is checked, not just spoken.
/// The refusal names the cause and both ways to trust a private authority, at
/// once: not after the connection timeout of retrying a certificate that will
/// not change.
#[actix_rt::test]
async fn an_untrusted_server_certificate_is_refused_and_named() {
    let certs = Certs::make();
    let (_server, port) = tls_server(&certs);
    let config = Config::from_url(&format!("rediss://127.0.0.1:{port}/"))
        .expect("rediss URL")
        .connection_timeout(Duration::from_secs(5));
    let began = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("connected to an untrusted server");
    let took = began.elapsed();
    let said = err.to_string();
    for words in ["certificate authority", "tls_root_cert", "SSL_CERT_FILE"] {
        assert!(said.contains(words), "{words:?} missing from: {said}");
    }
    // Named without waiting out the 5 s connection timeout (it takes a few
    // milliseconds; the bound is generous for a loaded machine).
    assert!(
        took < Duration::from_secs(2),
        "named after {took:?}: {said}"
    );
}

/// `redis://` (plain) to a port that speaks only TLS: the server drops the
/// connection (a reset, not an answer), and the error says the port wants
/// `rediss://`, at once.
#[actix_rt::test]
async fn a_plain_url_to_a_tls_only_port_is_named() {
    let certs = Certs::make();
    let server = RedisServer::start_tls(&certs.files(), &[]);
    let config = Config::from_url(&format!("redis://127.0.0.1:{}/", server.port()))
        .expect("redis URL")
        .connection_timeout(Duration::from_secs(5));
    let began = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("a plain connection to a TLS port");
    let took = began.elapsed();
    let said = err.to_string();
    assert!(said.contains("speaks only TLS"), "{said}");
    assert!(said.contains("rediss://"), "{said}");
    assert!(
        took < Duration::from_secs(2),
        "named after {took:?}: {said}"
    );
}

/// The command over TLS, trusting the CA through SSL_CERT_FILE: `run` takes the
/// lock, runs its command and exits 0; no panic.
#[cfg(feature = "cli")]
#[actix_rt::test]
async fn the_command_runs_over_tls() {
    let certs = Certs::make();
    let (_server, port) = tls_server(&certs);
    let mut cmd = certs.lockwarden(env!("CARGO_BIN_EXE_lockwarden"));
    cmd.arg("--redis")
        .arg(format!("rediss://127.0.0.1:{port}/"));
    cmd.args(["run", "tls:cli", "--wait", "5s", "--", "true"]);
    support::succeeds(cmd, Duration::from_secs(20)).await;
}

/// The command says the same as the library, at once, for both TLS mistakes:
/// its exit is not 0 and its stderr names the cause and the fix.
#[cfg(feature = "cli")]
#[actix_rt::test]
async fn the_command_names_tls_mistakes() {
    let certs = Certs::make();
    let server = RedisServer::start_tls(&certs.files(), &[]);
    let port = server.port();
    let cases = [
        (format!("redis://127.0.0.1:{port}/"), "rediss://"),
        (format!("rediss://127.0.0.1:{port}/"), "SSL_CERT_FILE"),
    ];
    for (url, fix) in cases {
        let mut cmd = support::lockwarden_at(env!("CARGO_BIN_EXE_lockwarden"), &url);
        cmd.args(["status", "tls:cli"]).env_remove("SSL_CERT_FILE");
        let out = tokio::time::timeout(Duration::from_secs(20), cmd.output())
            .await
            .expect("the command exited in time")
            .expect("the command ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{url}: {stderr}");
        assert!(
            stderr.contains(fix),
            "{url}: {fix:?} missing from: {stderr}"
        );
    }
}
