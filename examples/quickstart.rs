//! Quickstart: two lock managers (as two processes would be) contend for one lock,
//! and every handoff is printed with its fencing token and how long the new holder
//! waited.
//!
//! Run with `cargo run --example quickstart`. It uses `REDIS_URL` if set, else
//! `redis://127.0.0.1:6379`; if nothing answers there and `redis-server` is on the
//! PATH, it starts a private server on a free port for as long as it runs.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use lockwarden::{Acquire, Config, LockManager};

/// Where to find Redis, and the private server if one had to be started.
fn find_redis() -> Result<(String, Option<support::RedisServer>), String> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        return Ok((url, None));
    }
    let default = "redis://127.0.0.1:6379/";
    let answers = redis::Client::open(default)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(300)))
        .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
        .is_ok();
    if answers {
        return Ok((default.to_string(), None));
    }
    let on_path = std::process::Command::new(support::redis_server_bin())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !on_path {
        return Err(
            "no Redis answers at 127.0.0.1:6379 and `redis-server` is not on the PATH.\n\
             Install Redis (Debian/Ubuntu: `sudo apt-get install redis-server`), or set \
             REDIS_URL=redis://host:port to a server you have."
                .to_string(),
        );
    }
    let server = support::RedisServer::start();
    println!(
        "No Redis at 127.0.0.1:6379: started a private redis-server on port {} for this run.",
        server.port()
    );
    Ok((server.url(), Some(server)))
}

#[actix::main]
async fn main() -> ExitCode {
    let (url, _private_server) = match find_redis() {
        Ok(found) => found,
        Err(why) => {
            eprintln!("quickstart: {why}");
            return ExitCode::from(2);
        }
    };
    match run(&url).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<(), lockwarden::LockError> {
    println!("Using Redis at {url}");
    let managers = [
        ("A", LockManager::start(Config::from_url(url)?).await?),
        ("B", LockManager::start(Config::from_url(url)?).await?),
    ];
    let start = Instant::now();
    let mut workers = Vec::new();
    for (label, manager) in &managers {
        for worker in 1..=3 {
            let manager = manager.clone();
            let label = *label;
            workers.push(actix_rt::spawn(async move {
                for _ in 0..2 {
                    let asked = Instant::now();
                    let guard = manager
                        .send(Acquire::new("quickstart:report").wait(Duration::from_secs(10)))
                        .await??;
                    println!(
                        "{:>7.1?}  manager {label} worker {worker} holds the lock: token {}, waited {:.1?}",
                        start.elapsed(),
                        guard.fencing_token(),
                        asked.elapsed()
                    );
                    // The critical section: in a real service, pass the token along
                    // to the resource so it can refuse a stale holder.
                    actix_rt::time::sleep(Duration::from_millis(50)).await;
                    guard.release().await?;
                }
                Ok::<(), lockwarden::LockError>(())
            }));
        }
    }
    for w in workers {
        w.await.map_err(|_| lockwarden::LockError::Stopped)??;
    }
    println!(
        "Done: 12 handoffs between 2 managers in {:.1?}, one holder at a time, tokens always increasing.",
        start.elapsed()
    );
    Ok(())
}
