//! Sentinel over TLS: a master and a replica that speak only TLS (`--port 0`,
//! `--tls-replication yes`) and three Sentinels that speak only TLS too, all
//! with a certificate authority the test makes with `openssl`. The manager finds
//! the master through `rediss://` Sentinel URLs, trusting the CA through
//! `Config::tls_root_cert` (the command through `SSL_CERT_FILE`); every
//! connection it makes, the lookups, the master's, the subscriber's and the
//! `+switch-master` listeners', has no plain port to fall back on.
//!
//! A TLS topology takes seconds to form, so one serves the whole binary: the
//! steps run in order in one test, the failover last, as it changes the master.
#![cfg(feature = "tls")]

use crate::support;

use std::time::{Duration, Instant};

use actix::Addr;
use lockwarden::{Acquire, Config, LockManager};
use support::{eventually, raw, Certs, RedisServer, Sentinel, MASTER_NAME};

/// The servers of the test, and the CA they trust.
struct Topology {
    certs: Certs,
    master: RedisServer,
    replica: RedisServer,
    sentinels: Vec<Sentinel>,
}

impl Topology {
    fn start() -> Topology {
        let certs = Certs::make();
        let files = certs.files();
        let master = RedisServer::start_tls(&files, &[]);
        let replica = RedisServer::start_replica_of(&master);
        let sentinels = (0..3)
            .map(|_| Sentinel::start_tls(&master, 2, &files))
            .collect();
        Topology {
            certs,
            master,
            replica,
            sentinels,
        }
    }

    fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    fn config(&self) -> Config {
        let urls = self.urls();
        Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
            .expect("rediss:// Sentinel URLs")
            .tls_root_cert(self.certs.ca_pem())
            .expect("the test CA")
    }
}

#[actix_rt::test]
async fn locks_work_and_follow_the_master_through_tls_sentinels() {
    let _heavy = support::heavy();
    let mut t = Topology::start();
    assert!(
        t.urls().iter().all(|u| u.starts_with("rediss://"))
            && t.master.url().starts_with("rediss://"),
        "every server of the topology speaks only TLS"
    );
    // No unlock message missed may be made up for by a retry: a waiter that is
    // granted well before this was woken by its unlock message.
    let m = LockManager::start(t.config().max_retry_interval(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("manager through TLS Sentinels: {e}\n{}", t.master.log()));

    a_lock_is_taken_and_released(&t, &m).await;
    a_waiter_is_woken_by_its_unlock_message(&t, &m).await;
    #[cfg(feature = "cli")]
    the_command_runs_through_tls_sentinels(&t).await;
    a_master_that_would_need_plain_text_is_not_reached(&t).await;
    the_manager_follows_a_failover(&mut t, &m).await;
}

async fn a_lock_is_taken_and_released(t: &Topology, m: &Addr<LockManager>) {
    let g = support::hold(m, "tlslock", |a| a.wait(Duration::from_secs(5))).await;
    assert!(
        support::exists(&t.master, "tlslock"),
        "the lock is on the master"
    );
    g.release().await.expect("released over TLS");
    assert!(!support::exists(&t.master, "tlslock"));
}

/// The holder is another manager: a waiter of the same manager would be handed
/// the lock in process, without Redis's message.
async fn a_waiter_is_woken_by_its_unlock_message(t: &Topology, m: &Addr<LockManager>) {
    let other = LockManager::start(t.config())
        .await
        .expect("a second manager");
    let held = support::hold(&other, "tlswake", |a| a).await;
    let waiter = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("tlswake").wait(Duration::from_secs(20)))
                .await
        }
    });
    // The waiter listens on the lock's channel, over the subscriber's TLS
    // connection to the master, before the lock is freed.
    let subscribed = eventually(Duration::from_secs(10), || {
        let counts: Vec<(String, i64)> = raw(
            &t.master,
            &["PUBSUB", "NUMSUB", "redisson_lock__channel:{tlswake}"],
        );
        counts.first().is_some_and(|(_, n)| *n == 1)
    })
    .await;
    assert!(subscribed, "the waiter never subscribed");
    let freed = Instant::now();
    held.release().await.expect("released");
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was answered")
        .expect("task")
        .expect("running")
        .expect("the waiter got the lock");
    let woke = freed.elapsed();
    // Its next retry was a minute away and the holder's lease 30 s.
    assert!(
        woke < Duration::from_secs(5),
        "granted {woke:?} after release: not woken by pub/sub"
    );
    eprintln!("waiter granted {woke:?} after the release");
    granted.release().await.expect("released");
}

/// `lockwarden --sentinel rediss://... --master-name` takes a lock, trusting the
/// CA through SSL_CERT_FILE; Sentinel URLs that mix schemes, and --master-tls
/// without --sentinel, are bad input (exit 2, nothing connects).
#[cfg(feature = "cli")]
async fn the_command_runs_through_tls_sentinels(t: &Topology) {
    let mut cmd = t.certs.lockwarden(env!("CARGO_BIN_EXE_lockwarden"));
    cmd.arg("--master-name").arg(MASTER_NAME);
    for url in t.urls() {
        cmd.arg("--sentinel").arg(url);
    }
    cmd.args(["run", "tlscli", "--wait", "5s", "--", "true"]);
    support::succeeds(cmd, Duration::from_secs(30)).await;
    let plain = format!("redis://127.0.0.1:{}", support::free_port());
    for (args, says) in [
        (
            vec![
                "--sentinel",
                &t.urls()[0],
                "--sentinel",
                &plain,
                "--master-name",
                MASTER_NAME,
            ],
            "mix redis:// and rediss://",
        ),
        (
            vec!["--master-tls", "yes"],
            "master_tls is for a master found through Sentinel",
        ),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_lockwarden"))
            .env_remove("REDIS_URL")
            .args(&args)
            .args(["status", "tlscli"])
            .output()
            .await
            .expect("lockwarden ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// `master_tls(false)` says the master speaks plain text: this one does not
/// (it has no plain port), so the manager cannot start, and says so in time.
async fn a_master_that_would_need_plain_text_is_not_reached(t: &Topology) {
    let plain = t
        .config()
        .master_tls(false)
        .connection_timeout(Duration::from_secs(1));
    let began = Instant::now();
    assert!(LockManager::start(plain).await.is_err());
    assert!(began.elapsed() < Duration::from_secs(10));
}

async fn the_manager_follows_a_failover(t: &mut Topology, m: &Addr<LockManager>) {
    let before = support::hold(m, "tlsfence", |a| a.lease(Duration::from_secs(2)))
        .await
        .fencing_token();
    t.master.kill();
    let began = Instant::now();
    let promoted = t.replica.port();
    let failed_over = eventually(Duration::from_secs(30), || {
        t.sentinels[0].master_port() == Some(promoted)
    })
    .await;
    assert!(
        failed_over,
        "no failover within 30 s\n{}",
        t.sentinels[0].log()
    );
    eprintln!(
        "Sentinel promoted the replica {:?} after the kill",
        began.elapsed()
    );
    // The lease of 2 s runs out on the new master if the grant reached it; the
    // manager asks again until the new master grants, within generous bounds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tokens = Vec::new();
    while tokens.len() < 2 {
        match m
            .send(Acquire::new("tlsfence").wait(Duration::from_secs(5)))
            .await
            .expect("running")
        {
            Ok(g) => {
                tokens.push(g.fencing_token());
                g.release().await.expect("released on the new master");
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                assert!(
                    Instant::now() < deadline,
                    "still failing after the failover: {e}"
                );
            }
        }
    }
    assert!(
        before < tokens[0] && tokens[0] < tokens[1],
        "tokens rise across the failover: {before} then {tokens:?}"
    );
    let role: Vec<redis::Value> = raw(&t.replica, &["ROLE"]);
    assert_eq!(
        role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec())),
        "the grants came from the promoted replica"
    );
    eprintln!(
        "acquired on the new master {:?} after the kill",
        began.elapsed()
    );
}
