//! An actix-web service that uses lockwarden the way a real one would. Start two of
//! them on one Redis and they share the locks:
//!
//! - `POST /jobs/{key}` runs one job at a time per key across every instance: the
//!   handler takes the lock `web:job:{key}` (`Locks::acquire`), does the work,
//!   and stores the result with the lock's fencing token (`Locks::fenced_write`),
//!   so a holder that lost its lock mid-job cannot overwrite a newer result;
//! - `GET /partner` calls a (pretend) partner API that allows two calls at once,
//!   fleet-wide: a semaphore of 2 permits around the call;
//! - a scheduler ticks only on the elected leader (`Leader`): `GET /role` says
//!   `leader` or `follower`;
//! - `GET /health` answers once the manager, the semaphore and the candidate run.
//!
//! The work itself checks what the locks promise, in Redis, so that a test (or you)
//! can look: a job that finds another job of its key running sets
//! `web:overlap:{key}`, a partner call that finds more than two calls running sets
//! `web:partner:over`. Neither key should ever exist.
//!
//! Every lockwarden call in a handler ends in `?`, with no wrapper type: with the
//! `actix-web` feature a `LockError` is an actix-web `ResponseError`, so a wait
//! that ran out answers 503 with `Retry-After`, a stale fencing token 409, a
//! stopped manager 503 (the README's "With actix-web" has the whole table).
//!
//! Run with `cargo run --example web` (`PORT`, default 8080; `INSTANCE`, a name for
//! this process, default `web-<pid>`; Redis as the other examples find it, from
//! `REDIS_URL` or 127.0.0.1:6379). `tests/service/examples.rs` starts two instances and
//! drives them with HTTP requests.

use lockwarden_testkit as support;

use std::time::Duration;

use actix::prelude::*;
use actix_web::{web, App, HttpResponse, HttpServer};
use lockwarden::{
    Acquire, Config, Deposed, Elected, FencedWrite, Leader, LockError, LockManager, Locks, Resign,
    SemaphoreHandle,
};
use redis::AsyncCommands;

/// How long a request waits for its lock or permit before answering 503.
const WAIT: Duration = Duration::from_secs(10);
/// Calls the partner allows at once.
const PARTNER_PERMITS: u32 = 2;

/// Resolves at SIGTERM (a deploy, `kill`) or Ctrl-C.
async fn stopping() {
    use actix_rt::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = actix_rt::signal::ctrl_c() => {}
            }
        }
        // No SIGTERM handler: Ctrl-C alone.
        Err(_) => {
            let _ = actix_rt::signal::ctrl_c().await;
        }
    }
}

/// What every handler shares.
struct Shared {
    /// This process's name, in answers.
    instance: String,
    /// The lock manager: handlers send it messages.
    manager: Addr<LockManager>,
    /// The partner API's semaphore.
    partner: SemaphoreHandle,
    /// The scheduler, to ask whether this instance leads.
    scheduler: Addr<Scheduler>,
    /// Plain Redis, for the work's own bookkeeping.
    redis: redis::aio::MultiplexedConnection,
}

/// The periodic work that must run on one instance only.
struct Scheduler {
    /// This process's name, in the tick counter's key.
    instance: String,
    /// Plain Redis, to count ticks.
    redis: redis::aio::MultiplexedConnection,
    /// The ticking, while elected.
    ticking: Option<SpawnHandle>,
}

impl Actor for Scheduler {
    type Context = Context<Self>;
}

impl Handler<Elected> for Scheduler {
    type Result = ();

    fn handle(&mut self, msg: Elected, ctx: &mut Context<Self>) {
        println!("{}: elected (token {})", self.instance, msg.fencing_token);
        let key = format!("web:ticks:{}", self.instance);
        self.ticking = Some(
            ctx.run_interval(Duration::from_millis(100), move |act, ctx| {
                let mut redis = act.redis.clone();
                let key = key.clone();
                ctx.spawn(
                    async move {
                        let _: Result<i64, _> = redis.incr(&key, 1).await;
                    }
                    .into_actor(act),
                );
            }),
        );
    }
}

impl Handler<Deposed> for Scheduler {
    type Result = ();

    fn handle(&mut self, msg: Deposed, ctx: &mut Context<Self>) {
        println!("{}: deposed ({:?})", self.instance, msg.reason);
        if let Some(ticking) = self.ticking.take() {
            ctx.cancel_future(ticking);
        }
    }
}

/// Whether the scheduler ticks here.
#[derive(Message)]
#[rtype(result = "bool")]
struct Leads;

impl Handler<Leads> for Scheduler {
    type Result = bool;

    fn handle(&mut self, _: Leads, _: &mut Context<Self>) -> bool {
        self.ticking.is_some()
    }
}

/// `POST /jobs/{key}`: one job per key at a time, its result fenced.
async fn run_job(
    shared: web::Data<Shared>,
    key: web::Path<String>,
) -> Result<HttpResponse, LockError> {
    let key = key.into_inner();
    // 503 with Retry-After if another job of this key holds it past WAIT.
    let guard = shared
        .manager
        .acquire(Acquire::new(format!("web:job:{key}")).wait(WAIT))
        .await?;
    let mut redis = shared.redis.clone();
    // The work, which checks that it runs alone.
    let inside: i64 = redis
        .incr(format!("web:inside:{key}"), 1)
        .await
        .unwrap_or(0);
    if inside > 1 {
        let _: Result<(), _> = redis.set(format!("web:overlap:{key}"), 1).await;
    }
    actix_rt::time::sleep(Duration::from_millis(30)).await;
    let _: Result<i64, _> = redis.decr(format!("web:inside:{key}"), 1).await;
    let token = guard.fencing_token();
    // 409 if a later holder of the lock wrote first (this one's lease ran out
    // mid-job); the guard dropped on that path is released in the background.
    shared
        .manager
        .fenced_write(
            FencedWrite::new(&guard, format!("web:result:{key}"), "SET")
                .arg(format!("{} {token}", shared.instance)),
        )
        .await?;
    guard.release().await?;
    Ok(HttpResponse::Ok().body(format!("done {key} on {} token {token}\n", shared.instance)))
}

/// `GET /partner`: at most two calls at once, fleet-wide.
async fn call_partner(shared: web::Data<Shared>) -> Result<HttpResponse, LockError> {
    let permit = shared.partner.acquire_within(1, WAIT).await?;
    let mut redis = shared.redis.clone();
    let inside: i64 = redis.incr("web:partner:inside", 1).await.unwrap_or(0);
    if inside > i64::from(PARTNER_PERMITS) {
        let _: Result<(), _> = redis.set("web:partner:over", inside).await;
    }
    actix_rt::time::sleep(Duration::from_millis(30)).await;
    let _: Result<i64, _> = redis.decr("web:partner:inside", 1).await;
    permit.release().await?;
    Ok(HttpResponse::Ok().body(format!("called on {}\n", shared.instance)))
}

/// `GET /role`: `leader` or `follower`. The scheduler is this example's own
/// actor, so its mailbox error is the application's to map.
async fn role(shared: web::Data<Shared>) -> actix_web::Result<HttpResponse> {
    let leads = shared
        .scheduler
        .send(Leads)
        .await
        .map_err(actix_web::error::ErrorServiceUnavailable)?;
    Ok(HttpResponse::Ok().body(if leads { "leader\n" } else { "follower\n" }))
}

/// `GET /health`.
async fn health(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok().body(format!("ok {}\n", shared.instance))
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let (url, _private_server) = support::find_redis().map_err(std::io::Error::other)?;
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8080);
    let instance =
        std::env::var("INSTANCE").unwrap_or_else(|_| format!("web-{}", std::process::id()));
    let config = Config::from_url(&url)
        .map_err(std::io::Error::other)?
        .label(instance.as_str());
    let manager = LockManager::start(config)
        .await
        .map_err(std::io::Error::other)?;
    let partner = manager
        .semaphore("web:partner")
        .await
        .map_err(std::io::Error::other)?;
    // The first instance up sizes the semaphore; the others find it sized.
    partner
        .try_set_permits(PARTNER_PERMITS)
        .await
        .map_err(std::io::Error::other)?;
    let redis = redis::Client::open(url.as_str())
        .map_err(std::io::Error::other)?
        .get_multiplexed_async_connection()
        .await
        .map_err(std::io::Error::other)?;
    let scheduler = Scheduler {
        instance: instance.clone(),
        redis: redis.clone(),
        ticking: None,
    }
    .start();
    let candidate = Leader::campaign(
        manager.clone(),
        "web:scheduler",
        scheduler.clone().recipient(),
        scheduler.clone().recipient(),
    )
    .await
    .map_err(std::io::Error::other)?;
    let shared = web::Data::new(Shared {
        instance: instance.clone(),
        manager,
        partner,
        scheduler,
        redis,
    });
    println!("{instance}: listening on 127.0.0.1:{port}");
    let running = shared.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(shared.clone())
            .route("/jobs/{key}", web::post().to(run_job))
            .route("/partner", web::get().to(call_partner))
            .route("/role", web::get().to(role))
            .route("/health", web::get().to(health))
    })
    .workers(1)
    // The signals are ours: leadership goes before the connections drain.
    .disable_signals()
    .bind(("127.0.0.1", port))?
    .run();
    let draining = server.handle();
    actix_rt::spawn(async move {
        stopping().await;
        // Step down first: the other instance leads at once, while this one's
        // server drains (under load that took a second, and the scheduler would
        // have had no leader meanwhile). Requests in flight keep their locks.
        if let Err(e) = candidate.send(Resign).await {
            eprintln!("resigning: {e}");
        }
        draining.stop(true).await;
    });
    server.await?;
    // Drained; the actix system still runs. Hand over the rest before exiting:
    // waiters are answered and locks still held are given back, so the other
    // instance does not wait a lease (~30 s) for them. Bounded by
    // Config::shutdown_timeout.
    let handed_over = running.manager.shutdown().await;
    println!(
        "{}: shut down (handed over: {handed_over})",
        running.instance
    );
    Ok(())
}
