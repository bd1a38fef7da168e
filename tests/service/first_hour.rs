//! What a new user meets in their first hour: the documented settings are the
//! bounds they say they are, and an actix-web handler that writes `?` on every
//! lockwarden call answers each lock error with its status (the `actix-web`
//! feature).

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockError, LockManager};
use support::{free_port, hold, manager, Captured, RedisServer};

/// Starting against a port where nothing listens fails at once and says the
/// connection was refused (as the `lockwarden` command does), not after the
/// connection timeout with only "could not connect within the connection timeout".
#[actix_rt::test]
async fn start_against_a_closed_port_says_refused_at_once() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    // The default timeout (2 s): the refusal must not wait for it.
    let config = Config::from_url(&url).expect("URL");
    let began = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("nothing listens there");
    let took = began.elapsed();
    assert!(matches!(err, LockError::Redis(_)), "{err:?}");
    let said = err.to_string();
    assert!(
        said.contains("refused") && said.contains(&format!("127.0.0.1:{port}")),
        "{said}"
    );
    assert!(
        took < Duration::from_millis(1000),
        "start took {took:?}: the connection timeout, not the refusal"
    );
}

/// Starts a manager on `url` with every setting at its default (a 2 s connection
/// timeout), expects it to fail, and answers its error and how long it took;
/// panics if it took half a second or more: the cause is known at once, and a
/// start that waits out the connection timeout has not named it.
async fn refused_start(url: &str) -> (LockError, Duration) {
    let config = Config::from_url(url).expect("URL");
    let began = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("these settings cannot work");
    let took = began.elapsed();
    eprintln!("{url}: refused after {took:?}: {err}");
    assert!(
        took < Duration::from_millis(1000),
        "start took {took:?} (the connection timeout?): {err}"
    );
    (err, took)
}

/// A server with a password (`requirepass secret`), set once it is up (the test
/// support's own PING has none).
fn guarded_server() -> RedisServer {
    let server = RedisServer::start();
    let _: () = support::raw(&server, &["CONFIG", "SET", "requirepass", "secret"]);
    server
}

/// A wrong password fails start at once, in the server's words (WRONGPASS),
/// saying the pair is wrong; it waited out the connection timeout.
#[actix_rt::test]
async fn start_with_a_wrong_password_says_so_at_once() {
    let server = guarded_server();
    let (err, _) = refused_start(&format!("redis://:wrong@127.0.0.1:{}/", server.port())).await;
    let said = err.to_string();
    assert!(said.contains("refused the credentials"), "{said}");
    assert!(
        said.contains("WRONGPASS") && said.contains("password is wrong"),
        "{said}"
    );
}

/// No password for a server that wants one fails start (it started, and the
/// first lock failed with NOAUTH or "broken pipe"), saying where the password
/// goes.
#[actix_rt::test]
async fn start_without_the_password_a_server_wants_fails_naming_the_fix() {
    let server = guarded_server();
    let (err, _) = refused_start(&format!("redis://127.0.0.1:{}/", server.port())).await;
    let said = err.to_string();
    assert!(said.contains("NOAUTH"), "{said}");
    assert!(said.contains("put the password in the URL"), "{said}");
    assert!(said.contains("redis://:PASSWORD@host:port/"), "{said}");
    assert_eq!(
        said.matches("put the password").count(),
        1,
        "said twice: {said}"
    );
    // With the password in the URL, it starts and locks.
    let fixed = Config::from_url(&format!("redis://:secret@127.0.0.1:{}/", server.port()));
    let m = LockManager::start(fixed.expect("URL"))
        .await
        .unwrap_or_else(|e| panic!("with the password: {e}"));
    hold(&m, "with-the-password", |a| a)
        .await
        .release()
        .await
        .expect("released");
}

/// A database the server does not have fails start at once, naming the URL's
/// number and how many a server has.
#[actix_rt::test]
async fn start_with_a_database_the_server_lacks_says_so_at_once() {
    let server = RedisServer::start();
    let (err, _) = refused_start(&format!("redis://127.0.0.1:{}/99", server.port())).await;
    let said = err.to_string();
    assert!(said.contains("database 99"), "{said}");
    assert!(said.contains("DB index is out of range"), "{said}");
    assert!(said.contains("0 to 15"), "{said}");
}

/// A host name that does not resolve (`.invalid` never does) fails start at
/// once, naming the host.
#[actix_rt::test]
async fn start_with_a_host_name_that_does_not_resolve_says_so_at_once() {
    let (err, _) = refused_start("redis://no-such-host.invalid:6379/").await;
    let said = err.to_string();
    assert!(said.contains("does not resolve"), "{said}");
    assert!(said.contains("'no-such-host.invalid'"), "{said}");
    assert!(said.contains("check its spelling"), "{said}");
}

/// TLS (`rediss://`) against a port that speaks plain Redis: the server never
/// answers the TLS greeting (it waits for the end of a command), and start used
/// to wait out the connection timeout. It is named within a tenth of a second
/// or so, with the fix.
#[actix_rt::test]
async fn start_with_tls_against_a_plain_server_says_so_at_once() {
    let server = RedisServer::start();
    let (err, _) = refused_start(&format!("rediss://127.0.0.1:{}/", server.port())).await;
    let said = err.to_string();
    assert!(said.contains("does not speak TLS"), "{said}");
    assert!(said.contains("speaks plain Redis"), "{said}");
    assert!(said.contains("use redis://"), "{said}");
    // With a password, the plain answer is NOAUTH: still Redis.
    let guarded = guarded_server();
    let (err, _) = refused_start(&format!("rediss://:secret@127.0.0.1:{}/", guarded.port())).await;
    let said = err.to_string();
    assert!(said.contains("speaks plain Redis"), "{said}");
    // Its NOAUTH is quoted as the proof, not read as a missing password.
    assert!(
        said.contains("-NOAUTH") && !said.contains("put the password"),
        "{said}"
    );
}

/// A TCP listener on a free port that answers every connection with `answer`
/// (after reading what the client sends, as an HTTP server does) or, if it is
/// empty, closes it at once; its port.
fn not_redis(answer: &'static [u8]) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            if !answer.is_empty() {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer);
            }
        }
    });
    port
}

/// A port that is not Redis fails start: one that answers (an HTTP server) at
/// once, quoted; one that closes the connection within the connection timeout
/// (it may be a restart), said to, with the TLS-only port as the other reading.
#[actix_rt::test]
async fn start_against_a_port_that_is_not_redis_says_so_at_once() {
    let http = not_redis(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    let (err, _) = refused_start(&format!("redis://127.0.0.1:{http}/")).await;
    let said = err.to_string();
    assert!(said.contains("not a Redis server"), "{said}");
    assert!(said.contains("Redis protocol"), "{said}");
    assert!(said.contains("HTTP/1.1 400 Bad Request"), "{said}");
    assert!(!said.contains('\n'), "one line: {said:?}");

    // A port that closes the connection may also be a server restarting, so
    // the connection manager's retries get the connection timeout first.
    let closes = not_redis(b"");
    let config = Config::from_url(&format!("redis://127.0.0.1:{closes}/"))
        .expect("URL")
        .connection_timeout(Duration::from_millis(400));
    let began = Instant::now();
    let err = LockManager::start(config)
        .await
        .expect_err("a port that closes every connection");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    let said = err.to_string();
    assert!(
        said.contains("closed the connection without a word"),
        "{said}"
    );
    assert!(said.contains(&format!("127.0.0.1:{closes}")), "{said}");
    assert!(said.contains("rediss://"), "{said}");
}

/// Asks `m` for a round trip until it answers one, for at most `limit`.
async fn until_reachable(m: &actix::Addr<LockManager>, limit: Duration) -> Duration {
    use lockwarden::Locks;
    let began = Instant::now();
    loop {
        match m.ping(Duration::from_millis(300)).await {
            Ok(rtt) => return rtt,
            Err(e) if began.elapsed() < limit => {
                assert!(e.is_retryable(), "{e:?}");
                actix_rt::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("still unreachable after {limit:?}: {e}"),
        }
    }
}

/// The readiness call: `ping` answers the round trip while Redis is up, an
/// error within its bound while Redis is frozen or down (saying so, worth
/// retrying), and a round trip again once it is back.
#[actix_rt::test]
async fn ping_says_whether_the_manager_reaches_redis_now() {
    use lockwarden::Locks;
    let mut redis = RedisServer::start();
    let m = manager(&redis, |c| c).await;
    let bound = Duration::from_millis(300);
    let rtt = m.ping(bound).await.expect("connected");
    assert!(rtt < bound, "{rtt:?}");

    redis.pause();
    let began = Instant::now();
    let frozen = m.ping(bound).await;
    let took = began.elapsed();
    redis.resume();
    let err = frozen.expect_err("Redis is frozen");
    eprintln!("frozen: {took:?}: {err}");
    assert!(
        err.to_string()
            .contains("did not answer a PING within 300ms"),
        "{err}"
    );
    assert!(err.is_retryable(), "{err:?}");
    assert!(
        took >= bound && took < bound + Duration::from_millis(500),
        "{took:?}"
    );
    until_reachable(&m, Duration::from_secs(5)).await;

    redis.kill();
    let began = Instant::now();
    let err = m.ping(bound).await.expect_err("Redis is down");
    let took = began.elapsed();
    eprintln!("down: {took:?}: {err}");
    assert!(err.is_retryable(), "{err:?}");
    assert!(took < bound + Duration::from_millis(500), "{took:?}");
    redis.restart();
    let rtt = until_reachable(&m, Duration::from_secs(10)).await;
    eprintln!("back: round trip {rtt:?}");
}

/// A least-privilege user without `+ping` starts a manager (its first look's
/// PING is refused NOPERM, an answer all the same) and reads as connected.
#[actix_rt::test]
async fn a_user_without_ping_starts_and_reads_as_connected() {
    use lockwarden::Locks;
    let redis = RedisServer::start();
    let _: () = support::raw(
        &redis,
        &[
            "ACL", "SETUSER", "noping", "on", ">pw", "~*", "&*", "+@all", "-ping",
        ],
    );
    let url = format!("redis://noping:pw@127.0.0.1:{}/", redis.port());
    let m = LockManager::start(Config::from_url(&url).expect("URL"))
        .await
        .unwrap_or_else(|e| panic!("a user without +ping: {e}"));
    m.ping(Duration::from_millis(300))
        .await
        .expect("NOPERM is an answer");
    hold(&m, "no-ping", |a| a)
        .await
        .release()
        .await
        .expect("released");
}

/// With Redis frozen (no answer at all), a waiter whose deadline passes is told
/// that Redis did not answer, not that someone holds the lock (nobody does).
#[actix_rt::test]
async fn a_wait_that_ends_while_redis_does_not_answer_says_so() {
    let mut redis = support::RedisServer::start();
    let m = support::manager(&redis, |c| c).await;
    // Warm the connection and the scripts, then freeze the server.
    support::hold(&m, "warm", |a| a)
        .await
        .release()
        .await
        .expect("release");
    redis.pause();
    let wait = Duration::from_millis(500);
    let began = Instant::now();
    let res = m
        .send(lockwarden::Acquire::new("nobody-holds-this").wait(wait))
        .await
        .expect("manager running");
    let took = began.elapsed();
    redis.resume();
    let err = res.expect_err("Redis is frozen");
    assert!(
        !matches!(err, LockError::Timeout { .. }),
        "told the lock is held elsewhere: {err}"
    );
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("did not answer"), "{err}");
    assert!(
        took < wait + Duration::from_millis(500),
        "answered after {took:?}"
    );
}

/// The nested-acquire trap is loud: a task that takes a lock it already holds
/// without passing the same owner, and waits with no deadline, is reported in the
/// log after `Config::stall_warning`, naming the way out.
#[actix_rt::test]
async fn a_task_waiting_for_its_own_lock_is_reported() {
    let (log, _logging) = Captured::install();

    let redis = support::RedisServer::start();
    let m = support::manager(&redis, |c| c.stall_warning(Duration::from_millis(200))).await;
    let outer = support::hold(&m, "nested", |a| a).await;
    // The same task asks again without the owner: it would wait for itself.
    let inner = actix_rt::spawn({
        let m = m.clone();
        async move { m.send(lockwarden::Acquire::new("nested")).await }
    });
    let began = Instant::now();
    while !log.text().contains("waits for itself") {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "no warning; log:\n{}",
            log.text()
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(log.text().contains("Acquire::owner"), "{}", log.text());
    // Releasing the outer hold lets the waiter in: nothing else was changed.
    outer.release().await.expect("release");
    served_and_released(inner).await;
}

/// Waits (5 s at most) for a spawned acquisition to be served, and releases
/// what it got.
async fn served_and_released(
    task: actix_rt::task::JoinHandle<
        Result<Result<lockwarden::LockGuard, LockError>, actix::MailboxError>,
    >,
) {
    let got = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("served after the release")
        .expect("task")
        .expect("running")
        .expect("acquired");
    got.release().await.expect("release");
}

/// The stall warning watches every waiter that may wait for itself, with one
/// alarm per lock: a waiter served before its warning is due is never
/// reported, and two that came at different times and still wait are each
/// reported once, when their own `stall_warning` has passed.
#[actix_rt::test]
async fn each_stalled_waiter_is_reported_once_and_a_served_one_never() {
    let (log, _logging) = Captured::install();
    let redis = support::RedisServer::start();
    let after = Duration::from_millis(400);
    let m = support::manager(&redis, |c| c.stall_warning(after)).await;
    let count = || log.text().matches("waits for itself").count();
    let waiter = |m: actix::Addr<LockManager>, lock: &'static str| {
        actix_rt::spawn(async move { m.send(Acquire::new(lock)).await })
    };

    // Served in time: queued behind a local holder that lets go at once.
    let quick = hold(&m, "served", |a| a).await;
    let served = waiter(m.clone(), "served");
    // Time to queue (no event says it did; one that has not queued yet is
    // granted at once, and the count below holds either way).
    actix_rt::time::sleep(Duration::from_millis(50)).await;
    quick.release().await.expect("release");
    served_and_released(served).await;

    // Two stalled waiters, the second queued well after the first.
    let outer = hold(&m, "stalled", |a| a).await;
    let first = waiter(m.clone(), "stalled");
    let began = Instant::now();
    actix_rt::time::sleep(after / 2).await;
    let second = waiter(m.clone(), "stalled");
    while count() < 2 {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{} warnings; log:\n{}",
            count(),
            log.text()
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    // The second came `after / 2` past `began`: its report is no sooner than
    // its own delay. Then nothing more: each once, the served one never.
    assert!(
        began.elapsed() >= after + after / 2,
        "{:?}",
        began.elapsed()
    );
    actix_rt::time::sleep(after * 2).await;
    assert_eq!(count(), 2, "log:\n{}", log.text());
    outer.release().await.expect("release");
    for task in [first, second] {
        served_and_released(task).await;
    }
}

/// The everyday shape: `with_lock` holds the lock for exactly the work, hands it
/// the fencing token, releases afterwards; `is_locked`, `remaining_ttl` and
/// `is_held_by` answer without a hand-written `Inspect`.
#[actix_rt::test]
async fn with_lock_holds_for_the_work_and_the_queries_answer() {
    let redis = support::RedisServer::start();
    let m = support::manager(&redis, |c| c).await;
    let orders = m
        .send(lockwarden::Handle::new("orders"))
        .await
        .expect("running")
        .expect("valid name");
    assert!(!orders.is_locked().await.expect("is_locked"));
    let (token, held_inside) = orders
        .with_lock(|token| {
            let orders = orders.clone();
            async move { (token, orders.is_locked().await.expect("is_locked")) }
        })
        .await
        .expect("ran under the lock");
    assert!(token > 0 && held_inside);
    assert!(
        !orders.is_locked().await.expect("is_locked"),
        "released after"
    );

    let me = lockwarden::Owner::new();
    let guard = orders.acquire_with(|a| a.owner(me)).await.expect("acquire");
    assert!(orders.is_held_by(me).await.expect("is_held_by"));
    assert!(!orders
        .is_held_by(lockwarden::Owner::new())
        .await
        .expect("is_held_by"));
    let ttl = orders
        .remaining_ttl()
        .await
        .expect("ttl")
        .expect("a watchdog lease");
    assert!(
        ttl <= Duration::from_secs(30) && ttl > Duration::from_secs(20),
        "{ttl:?}"
    );
    guard.release().await.expect("release");
    assert_eq!(orders.remaining_ttl().await.expect("ttl"), None);
}

/// Work under `with_lock` whose lock is lost is cancelled and answered `Lost`.
#[actix_rt::test]
async fn with_lock_stops_the_work_when_the_lock_is_lost() {
    let redis = support::RedisServer::start();
    let m = support::manager(&redis, |c| c.watchdog_lease(Duration::from_millis(600))).await;
    let orders = m
        .send(lockwarden::Handle::new("lost-orders"))
        .await
        .expect("running")
        .expect("valid name");
    let res = orders
        .with_lock(|_| async {
            // Someone clears the lock behind our back; the renewal finds out.
            let _: i64 = redis::cmd("DEL")
                .arg("lost-orders")
                .query(&mut redis.conn())
                .expect("DEL");
            std::future::pending::<()>().await
        })
        .await;
    assert!(matches!(res, Err(LockError::Lost(_))), "{res:?}");
}

/// `Locks` answers with one error type: no `??`, and a stopped manager is
/// `LockError::Stopped`.
#[actix_rt::test]
async fn the_locks_methods_need_one_question_mark() {
    use lockwarden::Locks;
    let redis = support::RedisServer::start();
    let m = support::manager(&redis, |c| c).await;
    let guard: lockwarden::LockGuard = m
        .acquire(lockwarden::Acquire::new("one-q"))
        .await
        .expect("acquired");
    let handle = m.handle("one-q").await.expect("handle");
    assert!(handle.is_locked().await.expect("is_locked"));
    guard.release().await.expect("release");
    let bad = m.handle("").await.expect_err("empty name");
    assert!(matches!(bad, LockError::InvalidName(_)), "{bad:?}");
}

/// A manager that is dropped (its address and every guard gone) closes every
/// connection it opened, the pub/sub one included, within a few seconds: a
/// service that makes managers and drops them must not pile up connections.
#[actix_rt::test]
async fn a_dropped_manager_closes_its_connections() {
    let server = RedisServer::start();
    let clients = || -> u64 {
        let info = server.info("clients");
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("connected_clients")
    };
    let before = clients();
    let m = manager(&server, |c| c).await;
    // A waiter subscribes to the lock's channel: the pub/sub connection is in use.
    let g = hold(&m, "bye", |a| a).await;
    let waiting = m.send(Acquire::new("bye").wait(Duration::from_secs(5)));
    let second = actix_rt::spawn(waiting);
    g.release().await.expect("released");
    let g2 = second
        .await
        .expect("task")
        .expect("running")
        .expect("acquired");
    g2.release().await.expect("released");
    assert!(clients() > before, "the manager is connected");
    drop(m);
    let deadline = Instant::now() + Duration::from_secs(10);
    while clients() > before {
        assert!(
            Instant::now() < deadline,
            "{} connections still open 10 s after the manager was dropped: {}",
            clients() - before,
            support::raw::<String>(&server, &["CLIENT", "LIST"])
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Handlers as an actix-web service writes them, `?` on every lockwarden call and
/// no wrapper type (the `actix-web` feature), for the HTTP tests below.
mod handlers {
    use std::time::Duration;

    use actix::Addr;
    use actix_web::{web, HttpResponse};
    use lockwarden::{Acquire, FencedWrite, LockError, LockManager, Locks};

    /// `POST /take/{name}`: takes the lock within 100 ms, and gives it back.
    pub async fn take(
        manager: web::Data<Addr<LockManager>>,
        name: web::Path<String>,
    ) -> Result<HttpResponse, LockError> {
        let wait = Duration::from_millis(100);
        let guard = manager
            .acquire(Acquire::new(name.into_inner()).wait(wait))
            .await?;
        guard.release().await?;
        Ok(HttpResponse::Ok().finish())
    }

    /// `POST /write/{key}/{token}`: a fenced `SET` of the key with that token (as
    /// a holder that carried its token along would make it).
    pub async fn write(
        manager: web::Data<Addr<LockManager>>,
        path: web::Path<(String, u64)>,
    ) -> Result<HttpResponse, LockError> {
        let (key, token) = path.into_inner();
        manager
            .fenced_write(FencedWrite::with_token(token, key, "SET").arg("from http"))
            .await?;
        Ok(HttpResponse::Ok().finish())
    }

    /// The service with both routes, on `manager`.
    pub fn app(
        manager: Addr<LockManager>,
    ) -> actix_web::App<
        impl actix_web::dev::ServiceFactory<
            actix_web::dev::ServiceRequest,
            Config = (),
            Response = actix_web::dev::ServiceResponse,
            Error = actix_web::Error,
            InitError = (),
        >,
    > {
        actix_web::App::new()
            .app_data(web::Data::new(manager))
            .route("/take/{name}", web::post().to(take))
            .route("/write/{key}/{token}", web::post().to(write))
    }
}

/// One POST to `$uri` of `$app`, answered with its status, `Retry-After` and
/// body.
macro_rules! post {
    ($app:expr, $uri:expr) => {{
        let request = actix_web::test::TestRequest::post().uri($uri).to_request();
        let response = actix_web::test::call_service($app, request).await;
        let retry_after = response
            .headers()
            .get(actix_web::http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let status = response.status().as_u16();
        let body = actix_web::test::read_body(response).await;
        (
            status,
            retry_after,
            String::from_utf8_lossy(&body).into_owned(),
        )
    }};
}

/// A handler whose wait for a lock held elsewhere runs out answers 503 with
/// `Retry-After: 1`; once the lock is free, 200.
#[actix_rt::test]
async fn http_a_wait_that_runs_out_is_503_with_retry_after() {
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let app = actix_web::test::init_service(handlers::app(m.clone())).await;
    let held = hold(&m, "http:busy", |a| a).await;
    let (status, retry_after, body) = post!(&app, "/take/http:busy");
    assert_eq!((status, retry_after.as_deref()), (503, Some("1")), "{body}");
    assert!(body.starts_with("busy:"), "{body}");
    held.release().await.expect("released");
    let (status, _, body) = post!(&app, "/take/http:busy");
    assert_eq!(status, 200, "{body}");
}

/// A fenced write whose token is below the one a later holder wrote with
/// answers 409, and the data stays the later holder's.
#[actix_rt::test]
async fn http_a_stale_fenced_write_is_409() {
    use lockwarden::{FencedWrite, Locks};
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    let app = actix_web::test::init_service(handlers::app(m.clone())).await;
    let first = hold(&m, "http:account", |a| a).await;
    let stale = first.fencing_token();
    first.release().await.expect("released");
    let later = hold(&m, "http:account", |a| a).await;
    m.fenced_write(FencedWrite::new(&later, "http:balance", "SET").arg("later"))
        .await
        .expect("the later holder writes");
    let uri = format!("/write/http:balance/{stale}");
    let (status, retry_after, body) = post!(&app, &uri);
    assert_eq!((status, retry_after), (409, None), "{body}");
    // The body says what happened, not the tokens (the error's Display would).
    assert!(body.starts_with("conflict:"), "{body}");
    assert!(!body.contains(&stale.to_string()), "{body}");
    assert_eq!(
        support::raw::<String>(&server, &["GET", "http:balance"]),
        "later"
    );
    later.release().await.expect("released");
}

/// A handler whose lock manager is gone (its actix system stopped: the
/// mailbox is closed) answers 503 with `Retry-After: 1`, not 500.
#[actix_rt::test]
async fn http_a_manager_that_is_gone_is_503() {
    let server = RedisServer::start();
    let config = support::config(&server);
    // The manager runs on a system of its own thread, which is then stopped.
    let (sent, received) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let system = actix_rt::System::new();
        let m = system
            .block_on(LockManager::start(config))
            .expect("manager started");
        let _ = sent.send((m, actix_rt::System::current()));
        let _ = system.run();
    });
    let (m, system) = received.recv().expect("the manager's address");
    system.stop();
    thread.join().expect("the manager's system stopped");
    let app = actix_web::test::init_service(handlers::app(m)).await;
    let (status, retry_after, body) = post!(&app, "/take/http:gone");
    assert_eq!((status, retry_after.as_deref()), (503, Some("1")), "{body}");
    assert!(body.contains("not running"), "{body}");
}
