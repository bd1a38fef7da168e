//! Metrics: lockwarden records through the `metrics` facade; this example installs
//! the Prometheus exporter (`metrics-exporter-prometheus`), which serves
//! `/metrics` over HTTP, lets a few workers of two managers contend for one lock
//! on a `redis-server` of its own, then scrapes its own endpoint once, prints a
//! few of the lines and exits 0 only if the metrics it expects are there.
//!
//! In a service the two lines that matter are the exporter's install (with
//! buckets for the `_seconds` histograms, which it would otherwise render as
//! summaries) and nothing else: every lock manager of the process records to
//! the installed recorder. Run with `cargo run --example metrics`; it needs
//! `redis-server` on the PATH (REDIS_SERVER names another binary).

use lockwarden_testkit as support;

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use lockwarden::{Acquire, Config, LockError, LockManager};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// The lock the workers contend for.
const LOCK: &str = "metrics:report";
/// Workers per manager, and rounds per worker.
const WORKERS: usize = 3;
const ROUNDS: usize = 10;

/// Bucket bounds for the wait and hold times, in seconds (100 µs to 10 s).
const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0,
];

/// Bucket bounds for the batch sizes (ops per coalesced call, locks per renewal
/// call).
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 512.0];

/// Lines the scrape must contain (as prefixes), the proof the example worked:
/// 61 holds (60 by the workers, one of `metrics:busy`), 61 releases, one
/// timeout, and the batch sizes.
const EXPECTED: &[&str] = &[
    "lockwarden_acquisitions_total{kind=\"exclusive\",outcome=\"acquired\"} 61",
    "lockwarden_acquisitions_total{kind=\"exclusive\",outcome=\"timeout\"} 1",
    "lockwarden_acquire_wait_seconds_bucket{kind=\"exclusive\",le=\"+Inf\"} 61",
    "lockwarden_hold_seconds_count{kind=\"exclusive\"} 61",
    "lockwarden_releases_total 61",
    "lockwarden_batch_ops_bucket{le=\"+Inf\"}",
];

fn main() -> ExitCode {
    let port = support::free_port();
    // Installed before any runtime exists, the exporter serves from a thread of
    // its own, so the scrape below cannot stall it.
    let installed = PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], port))
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_ops".into()), SIZE_BUCKETS))
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_locks".into()), SIZE_BUCKETS))
        .and_then(|b| b.install());
    if let Err(e) = installed {
        eprintln!("metrics: cannot start the Prometheus exporter: {e}");
        return ExitCode::from(2);
    }
    let server = support::RedisServer::start();
    println!(
        "redis-server on port {}, metrics on http://127.0.0.1:{port}/metrics",
        server.port()
    );
    let outcome = actix::System::new().block_on(contend(server.url()));
    let scraped = outcome.and_then(|()| scrape(port));
    match scraped {
        Ok(text) => check(&text),
        Err(e) => {
            eprintln!("metrics: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Two managers, [`WORKERS`] workers each, [`ROUNDS`] holds per worker of a few
/// milliseconds; then one attempt that gives up at once on a held lock.
async fn contend(url: String) -> Result<(), String> {
    let config = || Config::from_url(&url).map(|c| c.label("metrics-example"));
    let mut managers = Vec::new();
    for _ in 0..2 {
        let config = config().map_err(|e| e.to_string())?;
        managers.push(
            LockManager::start(config)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let mut workers = Vec::new();
    for manager in &managers {
        for _ in 0..WORKERS {
            let manager = manager.clone();
            workers.push(actix_rt::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = manager
                        .send(Acquire::new(LOCK).wait(Duration::from_secs(30)))
                        .await
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                    actix_rt::time::sleep(Duration::from_millis(2)).await;
                    guard.release().await.map_err(|e| e.to_string())?;
                }
                Ok::<(), String>(())
            }));
        }
    }
    for worker in workers {
        worker.await.map_err(|e| e.to_string())??;
    }
    // One timeout: the second manager tries once while the first holds.
    let held = managers[0]
        .send(Acquire::new("metrics:busy"))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let refused = managers[1]
        .send(Acquire::new("metrics:busy").wait(Duration::ZERO))
        .await
        .map_err(|e| e.to_string())?;
    if !matches!(refused, Err(LockError::Timeout { .. })) {
        return Err(format!("a try on a held lock answered {refused:?}"));
    }
    held.release().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// One plain HTTP GET of `/metrics`; the body.
fn scrape(port: u16) -> Result<String, String> {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("cannot reach the exporter: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply)
        .map_err(|e| format!("reading the scrape: {e}"))?;
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or("the exporter's answer is not HTTP")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("the exporter answered {head}"));
    }
    Ok(body.to_string())
}

/// Prints a few lines of the scrape and checks [`EXPECTED`].
fn check(text: &str) -> ExitCode {
    println!("scraped /metrics, a few of its lines:");
    for line in text
        .lines()
        .filter(|l| l.starts_with("lockwarden_") && !l.contains("_bucket{"))
        .take(12)
    {
        println!("  {line}");
    }
    let missing: Vec<&str> = EXPECTED
        .iter()
        .copied()
        .filter(|want| !text.lines().any(|l| l.starts_with(want)))
        .collect();
    if missing.is_empty() {
        println!("every expected metric is there");
        ExitCode::SUCCESS
    } else {
        eprintln!("metrics: FAILED: missing {missing:?} in:\n{text}");
        ExitCode::FAILURE
    }
}
