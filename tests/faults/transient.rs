//! Passing refusals from Redis: BUSY (another client's script runs past the busy
//! threshold), OOM (`maxmemory` under `noeviction`) and LOADING (a restarted server
//! still reading its snapshot). Neither means the lock call
//! is wrong, so a waiter keeps trying until its own deadline, the error says it is
//! retryable, and the watchdog tries again at its next tick instead of a period
//! later. Each fault is made for real: a Lua loop run by another connection, a
//! server filled past its memory limit, a server restarted on a snapshot that it
//! reads slowly (`key-load-delay`).

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, LockError};
use support::{eventually, fill_until_oom, hold, manager, raw, RedisServer};

/// Runs a script that keeps Redis busy for `ms` milliseconds on its own
/// connection, in a thread; the thread ends when the script does.
fn busy_for(server: &RedisServer, ms: u64) -> std::thread::JoinHandle<()> {
    let mut conn = server.conn();
    std::thread::spawn(move || {
        let script = "local s = redis.call('time') \
            local stop = tonumber(s[1]) * 1000000 + tonumber(s[2]) + tonumber(ARGV[1]) * 1000 \
            while true do \
              local t = redis.call('time') \
              if tonumber(t[1]) * 1000000 + tonumber(t[2]) >= stop then return 1 end \
            end";
        let _: i64 = redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .arg(ms)
            .query(&mut conn)
            .expect("busy script");
    })
}

/// Waits until Redis answers BUSY to other clients.
async fn wait_busy(server: &RedisServer) {
    let url = server.url();
    let busy = eventually(Duration::from_secs(5), || {
        let client = redis::Client::open(url.as_str()).expect("url");
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return false;
        };
        let r: redis::RedisResult<String> = redis::cmd("PING").query(&mut c);
        r.is_err_and(|e| e.code() == Some("BUSY"))
    })
    .await;
    assert!(busy, "Redis never answered BUSY");
}

/// A slow script of another client (BUSY) does not end a wait early: the waiter
/// keeps trying and gets the lock once the script is over and the holder's lease
/// has run out. A try-once call made meanwhile fails with a retryable error.
#[actix_rt::test]
async fn a_busy_script_does_not_end_a_wait() {
    let _heavy = support::heavy();
    let server = RedisServer::start_with(&["--lua-time-limit", "50"]);
    let holder = manager(&server, |c| c).await;
    let waiter = manager(&server, |c| {
        c.reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
    })
    .await;
    let _held = hold(&holder, "b", |a| a.lease(Duration::from_millis(500))).await;
    let busy = busy_for(&server, 2500);
    wait_busy(&server).await;
    let started = Instant::now();

    let once = waiter
        .send(Acquire::new("other").wait(Duration::ZERO))
        .await
        .expect("running");
    match once {
        Err(e) => assert!(e.is_retryable(), "BUSY must be retryable: {e}"),
        Ok(_) => panic!(
            "acquired while Redis was busy, {:?} after BUSY was seen",
            started.elapsed()
        ),
    }
    let g = waiter
        .send(Acquire::new("b").wait(Duration::from_secs(20)))
        .await
        .expect("running")
        .unwrap_or_else(|e| panic!("the wait ended after {:?}: {e}", started.elapsed()));
    busy.join().expect("busy thread");
    assert!(g.fencing_token() > 0);
    eprintln!("BUSY waiter acquired after {:?}", started.elapsed());
}

/// Out of memory under `noeviction`, a waiter woken by the release meets OOM; it
/// keeps trying and gets the lock once memory is available again, instead of
/// giving up with time left.
#[actix_rt::test]
async fn out_of_memory_does_not_end_a_wait() {
    let server = RedisServer::start();
    let m = manager(&server, |c| {
        c.reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
    })
    .await;
    let holder = manager(&server, |c| c).await;
    let held = hold(&holder, "m", |a| a).await;
    let waiting = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("m").wait(Duration::from_secs(20)))
                .await
        }
    });
    let subscribed = eventually(Duration::from_secs(5), || {
        let n: Vec<(String, i64)> =
            raw(&server, &["PUBSUB", "NUMSUB", "redisson_lock__channel:{m}"]);
        n.first().is_some_and(|(_, c)| *c == 1)
    })
    .await;
    assert!(subscribed, "the waiter never subscribed");
    fill_until_oom(&server);
    held.release().await.expect("a release works out of memory");
    let refused = eventually(Duration::from_secs(5), || {
        raw::<String>(&server, &["INFO", "errorstats"]).contains("errorstat_OOM")
    })
    .await;
    assert!(refused, "the woken waiter was never refused with OOM");
    assert!(!waiting.is_finished(), "the waiter gave up on OOM");

    let _: () = raw(&server, &["CONFIG", "SET", "maxmemory", "0"]);
    let g = waiting
        .await
        .expect("task")
        .expect("running")
        .expect("acquired once memory was back");
    assert!(g.fencing_token() > 0);
}

/// A watchdog renewal that meets BUSY is tried again at the next tick: a script
/// that keeps Redis busy from just after one renewal (lease 3 s, period 2 s) until
/// 0.6 s before the lease runs out does not cost the lock. The next regular
/// renewal would come a period after the refused one, 1 s after the lease ran out.
#[actix_rt::test]
async fn a_renewal_that_meets_busy_is_retried_soon() {
    let _heavy = support::heavy();
    let server = RedisServer::start_with(&["--lua-time-limit", "50"]);
    let m = manager(&server, |c| {
        c.watchdog_lease(Duration::from_millis(3000))
            .renew_interval(Duration::from_millis(2000))
    })
    .await;
    let g = hold(&m, "w", |a| a).await;
    // Catch a renewal: the PTTL jumps back up to the lease.
    let mut last: i64 = raw(&server, &["PTTL", "w"]);
    let renewed = eventually(Duration::from_secs(5), || {
        let now: i64 = raw(&server, &["PTTL", "w"]);
        let jumped = now > last + 300;
        last = now;
        jumped
    })
    .await;
    assert!(renewed, "no renewal seen");
    // Not joined: this thread runs the manager's actors too.
    let busy = busy_for(&server, 2400);
    let over = eventually(Duration::from_secs(10), || busy.is_finished()).await;
    assert!(over, "the busy script did not end");
    let kept = eventually(Duration::from_secs(2), || {
        raw::<i64>(&server, &["PTTL", "w"]) > 2500
    })
    .await;
    let stats = m.send(lockwarden::GetStats).await.expect("running");
    assert!(stats.renewals_failed >= 1, "no renewal met BUSY: {stats:?}");
    assert!(
        kept,
        "no renewal after the busy script; lost: {:?}",
        g.is_lost()
    );
    assert_eq!(g.is_lost(), None);
}

/// A server that is loading its snapshot answers LOADING until it is done. A
/// waiter whose wait outlasts the loading keeps trying and gets the lock once the
/// data is in; one whose wait ends first gets the LOADING error (retryable) at its
/// deadline, not at its first attempt. The loading is made real: 30,000 keys saved,
/// then read back at 100 µs a key (`key-load-delay`: at least 3 s), with the server
/// answering clients every KiB read.
#[actix_rt::test]
async fn loading_does_not_end_a_wait() {
    let mut server = RedisServer::start_with(&[
        "--loading-process-events-interval-bytes",
        "1024",
        "--enable-debug-command",
        "local",
    ]);
    let _: () = raw(&server, &["DEBUG", "POPULATE", "30000", "filler"]);
    let _: () = raw(&server, &["SAVE"]);
    let m = manager(&server, |c| {
        c.reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
    })
    .await;
    server.restart_loading(&["--key-load-delay", "100"]);
    assert!(server.is_loading(), "the restarted server is not loading");
    // The manager's first call after the restart meets the dropped connection
    // (broken pipe) and reconnects; calls on other locks until one meets LOADING,
    // so that the waiters below meet only the loading.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    for i in 0.. {
        let r = m
            .send(Acquire::new(format!("warm-up:{i}")).wait(Duration::ZERO))
            .await
            .expect("running");
        match r {
            Err(LockError::Redis(e)) if e.code() == Some("LOADING") => break,
            other => seen.push(format!("{other:?}")),
        }
        assert!(
            Instant::now() < deadline,
            "the manager never met LOADING: {seen:?}"
        );
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
    let started = Instant::now();

    let long = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("l").wait(Duration::from_secs(60)))
                .await
        }
    });
    let short = m
        .send(Acquire::new("l").wait(Duration::from_millis(1000)))
        .await
        .expect("running");
    let short_took = started.elapsed();
    match short {
        Err(LockError::Redis(e)) => {
            assert_eq!(e.code(), Some("LOADING"), "{e} after {short_took:?}");
            assert!(LockError::Redis(e).is_retryable());
        }
        other => panic!("the short wait ended with {other:?} after {short_took:?}"),
    }
    assert!(
        short_took >= Duration::from_millis(900),
        "the short wait gave up early, after {short_took:?}"
    );
    assert!(
        server.is_loading(),
        "loading ended before the short wait did"
    );
    assert!(!long.is_finished(), "the long wait ended during loading");

    let g = long
        .await
        .expect("task")
        .expect("running")
        .unwrap_or_else(|e| panic!("the long wait ended after {:?}: {e}", started.elapsed()));
    assert!(!server.is_loading(), "granted while loading");
    let keys: i64 = raw(&server, &["DBSIZE"]);
    assert!(keys > 30_000, "the snapshot was not loaded: {keys} keys");
    eprintln!(
        "LOADING: short wait failed after {short_took:?}, long wait acquired after {:?}",
        started.elapsed()
    );
    g.release().await.expect("released");
}

/// The typed error keeps the Redis error for a caller who wants it.
#[test]
fn busy_oom_and_loading_are_retryable() {
    for code in ["BUSY", "OOM", "LOADING"] {
        let e = redis::make_extension_error(code.to_string(), Some("test".to_string()));
        assert!(LockError::from(e).is_retryable(), "{code}");
    }
}

/// A link that swallowed the bytes of the calls in flight (blackholed 3 s by the
/// proxy, which reads and drops them) leaves the multiplexed connection pairing
/// each later reply with the request before it: every call timed out for as
/// long as the manager ran. After a timeout the connection is replaced
/// (src/node/standalone.rs), so the manager works again within a response
/// timeout or two of the link's return.
#[actix_rt::test]
async fn a_manager_recovers_from_a_link_that_swallowed_its_calls() {
    let server = RedisServer::start();
    let link = support::Proxy::start(server.port());
    let holder = manager(&server, |c| c).await;
    let config = lockwarden::Config::from_url(&link.url()).expect("url");
    let m = lockwarden::LockManager::start(config)
        .await
        .expect("started");
    let held = holder
        .send(Acquire::new("swallowed"))
        .await
        .expect("running")
        .expect("granted");
    // A waiter's retries and waiting records are in flight when the link goes.
    let waiter = actix_rt::spawn({
        let m = m.clone();
        async move {
            m.send(Acquire::new("swallowed").wait(Duration::from_secs(4)))
                .await
        }
    });
    actix_rt::time::sleep(Duration::from_millis(1500)).await;
    link.set(support::Mode::Blackhole);
    actix_rt::time::sleep(Duration::from_secs(3)).await;
    link.set(support::Mode::Pass);
    let _ = waiter.await;
    held.release().await.expect("released");
    let back = Instant::now();
    let granted = m
        .send(Acquire::new("after-the-blackhole").wait(Duration::from_secs(12)))
        .await
        .expect("running");
    let took = back.elapsed();
    let guard = granted.unwrap_or_else(|e| {
        panic!("the manager did not recover from the swallowed calls in {took:?}: {e}")
    });
    guard.release().await.expect("released");
    assert!(took < Duration::from_secs(10), "recovered after {took:?}");
    eprintln!("granted {took:?} after the link came back");
}
