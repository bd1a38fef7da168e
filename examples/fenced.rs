//! Fenced writes: the story every fencing token is told with, run for real. Holder A
//! takes a lock with a short lease and is "paused" past it; B takes the lock and
//! writes; A wakes up and writes too. A's write must be refused, both for data in
//! Redis (`FencedWrite`, checked by a script where the data lives) and for a row in
//! PostgreSQL (a token column and `UPDATE ... WHERE token <= $token`).
//!
//! Run with `cargo run --example fenced`. Redis: `REDIS_URL`, else
//! `redis://127.0.0.1:6379`, else a private `redis-server` on a free port.
//! PostgreSQL: `DATABASE_URL` (a libpq connection string), else
//! `host=127.0.0.1 user=postgres dbname=test`; without one, the SQL half is skipped
//! and said so. Exits 1 if any stale write went through.

use lockwarden_testkit as support;

use std::process::ExitCode;
use std::time::Duration;

use actix::Addr;
use lockwarden::{Acquire, Config, FencedWrite, LockError, LockGuard, LockManager};

/// The lock both holders take.
const LOCK: &str = "fenced-demo:account:7";
/// The balance in Redis (its fence is
/// `lockwarden_fence:{fenced-demo:account:7:balance}:fenced-demo:account:7:balance`).
const BALANCE: &str = "fenced-demo:account:7:balance";

/// A holds the lock with a 200 ms lease and is paused past it; B takes it.
async fn paused_then_overtaken(
    a: &Addr<LockManager>,
    b: &Addr<LockManager>,
) -> Result<(LockGuard, LockGuard), LockError> {
    let first = a
        .send(Acquire::new(LOCK).lease(Duration::from_millis(200)))
        .await??;
    println!(
        "A holds the lock, token {}; A pauses (a GC, a stopped VM) ...",
        first.fencing_token()
    );
    let second = b
        .send(Acquire::new(LOCK).wait(Duration::from_secs(5)))
        .await??;
    println!(
        "A's lease ran out; B holds the lock, token {}",
        second.fencing_token()
    );
    Ok((first, second))
}

/// The Redis half: B's write goes, A's is refused by the fence.
async fn in_redis(a: &Addr<LockManager>, b: &Addr<LockManager>) -> Result<bool, LockError> {
    let (first, second) = paused_then_overtaken(a, b).await?;
    b.send(FencedWrite::new(&second, BALANCE, "SET").arg(150))
        .await??;
    println!(
        "B: SET balance 150 with token {}: written",
        second.fencing_token()
    );
    let stale = a
        .send(FencedWrite::new(&first, BALANCE, "SET").arg(90))
        .await?;
    second.release().await?;
    match stale {
        Err(e @ LockError::StaleToken { .. }) => {
            println!(
                "A wakes: SET balance 90 with token {}: refused ({e})",
                first.fencing_token()
            );
            Ok(true)
        }
        other => {
            println!("A wakes: SET balance 90 went through: {other:?}");
            Ok(false)
        }
    }
}

/// The SQL half, on a table with a token column: `Ok(None)` when no database
/// answers.
async fn in_postgres(a: &Addr<LockManager>, b: &Addr<LockManager>) -> Result<Option<bool>, String> {
    let dsn = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".to_string());
    let (client, connection) = match tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await {
        Ok(pair) => pair,
        Err(e) => {
            println!("no PostgreSQL at '{dsn}' ({e}): the SQL half is skipped");
            return Ok(None);
        }
    };
    actix_rt::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("postgres connection: {e}");
        }
    });
    let sql = |e: tokio_postgres::Error| e.to_string();
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS lockwarden_fenced_demo \
             (id text PRIMARY KEY, balance bigint NOT NULL, token bigint NOT NULL DEFAULT 0)",
        )
        .await
        .map_err(sql)?;
    let id = uuid::Uuid::new_v4().to_string();
    client
        .execute(
            "INSERT INTO lockwarden_fenced_demo (id, balance) VALUES ($1, 100)",
            &[&id],
        )
        .await
        .map_err(sql)?;
    // The fenced update: the check and the write in one statement.
    let update = "UPDATE lockwarden_fenced_demo SET balance = $2, token = $3 \
                  WHERE id = $1 AND token <= $3";
    let (first, second) = paused_then_overtaken(a, b)
        .await
        .map_err(|e| e.to_string())?;
    let token = |g: &LockGuard| i64::try_from(g.fencing_token()).expect("tokens are below 2^53");
    let rows = client
        .execute(update, &[&id, &150i64, &token(&second)])
        .await
        .map_err(sql)?;
    println!(
        "B: UPDATE balance = 150 with token {}: {rows} row",
        second.fencing_token()
    );
    let stale = client
        .execute(update, &[&id, &90i64, &token(&first)])
        .await
        .map_err(sql)?;
    second.release().await.map_err(|e| e.to_string())?;
    println!(
        "A wakes: UPDATE balance = 90 with token {}: {stale} rows ({})",
        first.fencing_token(),
        if stale == 0 {
            "refused"
        } else {
            "WENT THROUGH"
        }
    );
    let balance: i64 = client
        .query_one(
            "SELECT balance FROM lockwarden_fenced_demo WHERE id = $1",
            &[&id],
        )
        .await
        .map_err(sql)?
        .get(0);
    client
        .execute("DELETE FROM lockwarden_fenced_demo WHERE id = $1", &[&id])
        .await
        .map_err(sql)?;
    Ok(Some(rows == 1 && stale == 0 && balance == 150))
}

#[actix::main]
async fn main() -> ExitCode {
    let (url, _server) = match support::find_redis() {
        Ok(found) => found,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let start = || async {
        let config = Config::from_url(&url)?;
        LockManager::start(config).await
    };
    let (a, b) = match (start().await, start().await) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("cannot start a lock manager on {url}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("-- data in Redis (FencedWrite)");
    let redis_ok = match in_redis(&a, &b).await {
        Ok(ok) => ok,
        Err(e) => {
            eprintln!("Redis half failed: {e}");
            false
        }
    };
    println!("-- a row in PostgreSQL (a token column)");
    let sql_ok = match in_postgres(&a, &b).await {
        Ok(ok) => ok.unwrap_or(true),
        Err(e) => {
            eprintln!("SQL half failed: {e}");
            false
        }
    };
    if redis_ok && sql_ok {
        println!("every stale write was refused");
        ExitCode::SUCCESS
    } else {
        println!("a stale write went through");
        ExitCode::FAILURE
    }
}
