//! Two actix-web services (two managers, as two processes would be) whose
//! handlers take two locks in opposite orders, written the obvious way: two
//! `Acquire`s in a row, no owner passed. The locks a handler's task holds count
//! for its next wait (src/unit.rs), so the cycle is seen: exactly one request
//! is answered 503 with `Retry-After` (its wait chosen to end the deadlock)
//! within the deadlock timeout and a margin, and the other gets both locks.
//! Requests go over real HTTP to real servers, so each handler runs in its
//! connection's task as in production.
//!
//! `LOCKWARDEN_TEST_UNIT_TRIALS` runs more trials by hand (the default keeps
//! CI's cost near two seconds).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use actix_web::{web, App, HttpResponse, HttpServer};
use lockwarden::{Acquire, LockError, LockManager};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Barrier;

use crate::support::{self, RedisServer};

/// The deadlock timeout of both managers: short, so that trials are quick.
const TIMEOUT: Duration = Duration::from_millis(300);

/// What each service shares with its handler.
struct App2 {
    manager: Addr<LockManager>,
    /// Both handlers hold their first lock before either asks for its second.
    both_hold: Arc<Barrier>,
}

/// `GET /move/{first}/{second}`: takes `first`, then `second`, as a handler
/// would, and answers 200 with both; `?` turns a lockwarden error into its
/// response (a `Deadlock` is 503 with `Retry-After`).
async fn move_between(
    path: web::Path<(String, String)>,
    app: web::Data<App2>,
) -> Result<HttpResponse, LockError> {
    let (first, second) = path.into_inner();
    let wait = Duration::from_secs(10);
    let a = app.manager.send(Acquire::new(first).wait(wait)).await??;
    app.both_hold.wait().await;
    let b = app.manager.send(Acquire::new(second).wait(wait)).await??;
    b.release().await?;
    a.release().await?;
    Ok(HttpResponse::Ok().body("moved"))
}

/// Starts one service on a free port; answers its port.
fn serve(manager: Addr<LockManager>, both_hold: Arc<Barrier>) -> u16 {
    let data = web::Data::new(App2 { manager, both_hold });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/move/{first}/{second}", web::get().to(move_between))
    })
    .workers(1)
    .disable_signals()
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let port = server.addrs()[0].port();
    actix_rt::spawn(server.run());
    port
}

/// One GET over a fresh connection: the status and the `Retry-After` header.
async fn get(port: u16, path: &str) -> (u16, Option<String>) {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.expect("send");
    let mut text = String::new();
    conn.read_to_string(&mut text).await.expect("read");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let retry_after = text
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: ").map(str::to_string));
    (status, retry_after)
}

#[actix_rt::test]
async fn handlers_in_opposite_order_one_gets_deadlock() {
    let redis = RedisServer::start();
    let both_hold = Arc::new(Barrier::new(2));
    let mut ports = Vec::new();
    for _ in 0..2 {
        let m = support::manager(&redis, |c| c.deadlock_timeout(TIMEOUT)).await;
        ports.push(serve(m, both_hold.clone()));
    }
    let trials: usize = std::env::var("LOCKWARDEN_TEST_UNIT_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    for trial in 0..trials {
        let (a, b) = (format!("uow:{trial}:a"), format!("uow:{trial}:b"));
        let began = Instant::now();
        let (ab, ba) = (format!("/move/{a}/{b}"), format!("/move/{b}/{a}"));
        let (one, other) = tokio::join!(get(ports[0], &ab), get(ports[1], &ba));
        let took = began.elapsed();
        let mut statuses = [one.0, other.0];
        statuses.sort();
        assert_eq!(statuses, [200, 503], "trial {trial}: {one:?} {other:?}");
        let refused = if one.0 == 503 { &one } else { &other };
        assert!(refused.1.is_some(), "trial {trial}: no Retry-After");
        // The cycle is checked once a wait is older than the deadlock timeout;
        // a few hundred ms more cover the checks on a loaded machine.
        assert!(
            took < TIMEOUT + Duration::from_millis(1500),
            "trial {trial}: answered after {took:?}"
        );
        assert!(!support::exists(&redis, &a) && !support::exists(&redis, &b));
    }
}

/// A task that asks again for a lock it holds, with no owner given, is told
/// `Deadlock` after one timeout instead of waiting for itself for ever; a
/// detached acquisition is not counted for its task, and once the first guard
/// is gone the task waits for nothing of its own.
#[actix_rt::test]
async fn a_task_asking_again_for_its_own_lock_is_told() {
    let redis = RedisServer::start();
    let m = support::manager(&redis, |c| c.deadlock_timeout(TIMEOUT)).await;
    let job = actix_rt::spawn(async move {
        let outer = m.send(Acquire::new("uow:self")).await??;
        let began = Instant::now();
        let again = m
            .send(Acquire::new("uow:self").wait(Duration::from_secs(10)))
            .await?;
        let took = began.elapsed();
        assert!(matches!(again, Err(LockError::Deadlock(_))), "{again:?}");
        assert!(took < TIMEOUT + Duration::from_millis(1500), "{took:?}");
        // A detached hold does not count: waiting behind it is an ordinary wait.
        let other = m.send(Acquire::new("uow:other").detached()).await??;
        let short = Acquire::new("uow:other").wait(TIMEOUT * 3);
        let behind = m.send(short).await?;
        assert!(
            matches!(behind, Err(LockError::Timeout { .. })),
            "{behind:?}"
        );
        other.release().await?;
        outer.release().await?;
        // Nothing of its own is held now: the lock is taken at once.
        let after = m
            .send(Acquire::new("uow:self").wait(Duration::from_secs(5)))
            .await??;
        after.release().await?;
        Ok::<_, LockError>(())
    });
    job.await.expect("the task ran").expect("lockwarden calls");
}
