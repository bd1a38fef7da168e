//! Test support: real `redis-server` processes (`server.rs`) and shorthands for
//! the setup steps of lockwarden tests. Each test file includes it with `mod support;`.
#![allow(dead_code)] // each test binary uses a different part of this

mod server;

pub use server::*;

/// A config for this server with every other setting at its default.
pub fn config(server: &RedisServer) -> lockwarden::Config {
    lockwarden::Config::from_url(&server.url()).expect("test server URL parses")
}

/// Starts a manager on this server, with `tune` applied to the default config.
pub async fn manager(
    server: &RedisServer,
    tune: impl FnOnce(lockwarden::Config) -> lockwarden::Config,
) -> actix::Addr<lockwarden::LockManager> {
    lockwarden::LockManager::start(tune(config(server)))
        .await
        .unwrap_or_else(|e| panic!("manager did not start: {e}\n{}", server.log()))
}

/// Acquires `name` through `manager` with `tune` applied to the request, panicking on
/// any error (for the setup steps of a test, not for what it checks).
pub async fn hold(
    manager: &actix::Addr<lockwarden::LockManager>,
    name: &str,
    tune: impl FnOnce(lockwarden::Acquire) -> lockwarden::Acquire,
) -> lockwarden::LockGuard {
    manager
        .send(tune(lockwarden::Acquire::new(name)))
        .await
        .expect("manager is running")
        .unwrap_or_else(|e| panic!("acquire {name}: {e}"))
}

/// Runs a raw command on the test server and returns its reply.
pub fn raw<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut server.conn())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}
