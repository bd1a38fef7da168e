//! Failover demo: workers in two lock managers share one lock while Redis misbehaves,
//! with a printed timeline of what the supervisor and the lock actors do about it.
//!
//! Run with `cargo run --example failover` (needs `redis-server` on the PATH; it
//! starts its own on a free port). Four faults are made for real: the pub/sub
//! connections are killed, Redis is restarted with its data gone, Redis is frozen
//! with SIGSTOP for longer than the lease, and, on a master with a replica and three
//! Sentinels of the demo's own, the master is SIGKILLed and Sentinel promotes the
//! replica. Each line is stamped with the time it
//! happened (a loss is printed when the holder learns of it, not when the demo gets
//! round to it). The demo checks each step and exits 0 only if every one behaved as
//! described, so it doubles as a smoke test.

use lockwarden_testkit as support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use actix::Addr;
use lockwarden::{Acquire, Config, GetStats, LockGuard, LockManager, LostReason};
use support::{eventually, raw, RedisServer, Sentinel, MASTER_NAME};

const LOCK: &str = "failover:demo";
const CHANNEL: &str = "redisson_lock__channel:{failover:demo}";
const LEASE: Duration = Duration::from_millis(800);

/// Prints one timeline line, stamped with the time since the demo started.
#[derive(Clone, Copy)]
struct Timeline(Instant);

impl Timeline {
    fn say(&self, what: impl std::fmt::Display) {
        println!("{:>8.3}s  {what}", self.0.elapsed().as_secs_f64());
    }
}

/// The protected resource: it remembers the highest fencing token it has seen and
/// refuses writes that carry an older one.
#[derive(Default)]
struct Resource {
    highest: u64,
}

impl Resource {
    fn write(&mut self, token: u64) -> bool {
        if token < self.highest {
            return false;
        }
        self.highest = token;
        true
    }
}

fn config(server: &RedisServer) -> Config {
    support::config(server)
        .watchdog_lease(LEASE)
        .response_timeout(Duration::from_millis(250))
        .connection_timeout(Duration::from_millis(250))
        .reconnect_backoff(Duration::from_millis(25), Duration::from_millis(250))
        .max_retry_interval(Duration::from_secs(30))
}

fn subscribers(server: &RedisServer) -> i64 {
    let n: Vec<(String, i64)> = raw(server, &["PUBSUB", "NUMSUB", CHANNEL]);
    n.first().map_or(0, |(_, c)| *c)
}

async fn acquire(m: &Addr<LockManager>, wait: Duration) -> Result<LockGuard, String> {
    m.send(Acquire::new(LOCK).wait(wait))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Spawns a waiter in `m` and returns a handle that yields (when acquired, result).
fn spawn_waiter(
    m: &Addr<LockManager>,
) -> actix_rt::task::JoinHandle<(Instant, Result<LockGuard, String>)> {
    let m = m.clone();
    actix_rt::spawn(async move {
        let res = acquire(&m, Duration::from_secs(20)).await;
        (Instant::now(), res)
    })
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what.to_string())
    }
}

async fn demo(
    server: &mut RedisServer,
    t: &Timeline,
    resource: &mut Resource,
) -> Result<(), String> {
    let a = LockManager::start(config(server))
        .await
        .map_err(|e| e.to_string())?;
    let b = LockManager::start(config(server))
        .await
        .map_err(|e| e.to_string())?;
    t.say("== 1. normal handoffs between manager A and manager B");
    for (label, m) in [("A", &a), ("B", &b), ("A", &a)] {
        let g = acquire(m, Duration::from_secs(5)).await?;
        check(
            resource.write(g.fencing_token()),
            "resource refused a current holder",
        )?;
        t.say(format!(
            "manager {label} holds the lock, token {}",
            g.fencing_token()
        ));
        g.release().await.map_err(|e| e.to_string())?;
    }

    t.say("== 2. the pub/sub connections are killed while B waits");
    let held = acquire(&a, Duration::from_secs(5)).await?;
    let waiting = spawn_waiter(&b);
    check(
        eventually(Duration::from_secs(5), || subscribers(server) == 1).await,
        "B never subscribed",
    )?;
    let killed: i64 = raw(server, &["CLIENT", "KILL", "TYPE", "pubsub"]);
    t.say(format!(
        "CLIENT KILL TYPE pubsub: {killed} connection(s) killed"
    ));
    check(
        eventually(Duration::from_secs(5), || subscribers(server) == 1).await,
        "the subscriber did not resubscribe",
    )?;
    let stats = b.send(GetStats).await.map_err(|e| e.to_string())?;
    t.say(format!(
        "B's supervisor restarted its subscriber ({} reconnect(s)); channel resubscribed",
        stats.reconnects
    ));
    check(stats.reconnects >= 1, "no reconnect counted")?;
    let released = Instant::now();
    held.release().await.map_err(|e| e.to_string())?;
    let (at, g) = waiting.await.map_err(|e| e.to_string())?;
    let g = g?;
    let handoff = at - released;
    t.say(format!(
        "A released; B woken by the unlock message after {handoff:.1?}, token {}",
        g.fencing_token()
    ));
    check(
        handoff < Duration::from_secs(1),
        "B was not woken by the message",
    )?;
    check(resource.write(g.fencing_token()), "resource refused B")?;

    t.say("== 3. Redis restarts with its data gone while B holds and A waits");
    let old_token = g.fencing_token();
    let waiting = spawn_waiter(&a);
    check(
        eventually(Duration::from_secs(5), || subscribers(server) == 1).await,
        "A never subscribed",
    )?;
    server.restart();
    t.say("redis-server killed and started again on the same port (empty)");
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .map_err(|_| "B was not told its lock was lost".to_string())?;
    t.say(format!("B is told its lock is lost: {reason}"));
    let (_, g) = waiting.await.map_err(|e| e.to_string())?;
    let g = g?;
    t.say(format!(
        "A acquires after the restart (scripts reloaded), token {} > {old_token}",
        g.fencing_token()
    ));
    check(g.fencing_token() > old_token, "tokens went backwards")?;
    check(resource.write(g.fencing_token()), "resource refused A")?;

    t.say("== 4. Redis is frozen (SIGSTOP) for longer than the lease while A holds");
    let stale_token = g.fencing_token();
    // The line is printed when A learns of the loss, so its time on the timeline is
    // that moment (while Redis is still frozen), not when the demo looks later.
    let timeline = Timeline(t.0);
    let lost_watch = actix_rt::spawn(async move {
        let reason = g.lost().await;
        let at = Instant::now();
        timeline.say(format!("A is told its lock is lost: {reason}"));
        (at, reason)
    });
    let waiting = spawn_waiter(&b);
    check(
        eventually(Duration::from_secs(5), || subscribers(server) == 1).await,
        "B never subscribed",
    )?;
    server.pause();
    let paused_at = Instant::now();
    t.say(format!(
        "redis-server paused for {:?} (A's lease is {LEASE:?})",
        LEASE * 2
    ));
    actix_rt::time::sleep(LEASE * 2).await;
    server.resume();
    let resumed_at = Instant::now();
    t.say("redis-server resumed");
    let (lost_at, reason) = lost_watch.await.map_err(|e| e.to_string())?;
    t.say(format!(
        "A learned of the loss {:.3}s after Redis froze, {}",
        lost_at.duration_since(paused_at).as_secs_f64(),
        if lost_at < resumed_at {
            "while it was still frozen"
        } else {
            "only after it resumed (late)"
        }
    ));
    check(
        reason == LostReason::Unreachable,
        "A was not told that Redis could not be reached within its lease",
    )?;
    check(
        lost_at < resumed_at,
        "A learned of the loss only after Redis resumed, not when its lease ran out",
    )?;
    let (got_at, g) = waiting.await.map_err(|e| e.to_string())?;
    let g = g?;
    t.say(format!("B acquires, token {}", g.fencing_token()));
    check(
        lost_at <= got_at,
        "A still believed it held the lock when B got it",
    )?;
    check(resource.write(g.fencing_token()), "resource refused B")?;
    let stale_accepted = resource.write(stale_token);
    t.say(format!(
        "a late write by A with its old token {stale_token} is {}",
        if stale_accepted {
            "ACCEPTED (wrong)"
        } else {
            "refused by the resource"
        }
    ));
    check(!stale_accepted, "the stale holder's write was accepted")?;
    g.release().await.map_err(|e| e.to_string())?;
    Ok(())
}

/// Act 5: a master with a replica and three Sentinels; A holds (its grant confirmed
/// on the replica with WAIT) and B waits when the master is SIGKILLed. Sentinel
/// promotes the replica; A keeps its lock there, its release reaches the new master
/// and wakes B, and the tokens still rise.
async fn sentinel_act(t: &Timeline, resource: &mut Resource) -> Result<(), String> {
    t.say("== 5. under Sentinel, the master is killed while A holds and B waits");
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(&master, 2)).collect();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    t.say(format!(
        "master on port {}, replica on {}, Sentinels on {}",
        master.port(),
        replica.port(),
        sentinels
            .iter()
            .map(|s| s.url().rsplit(':').next().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // The lease outlasts the failover (a few seconds), so A's lock is kept through
    // it; with the 800 ms lease of the acts above A would be told Unreachable.
    let config = || {
        Config::sentinel(MASTER_NAME, urls.iter().map(String::as_str))
            .map(|c| {
                c.watchdog_lease(Duration::from_secs(10))
                    .response_timeout(Duration::from_millis(250))
                    .connection_timeout(Duration::from_millis(500))
                    .reconnect_backoff(Duration::from_millis(25), Duration::from_millis(250))
                    .max_retry_interval(Duration::from_secs(30))
            })
            .map_err(|e| e.to_string())
    };
    let a = LockManager::start(config()?)
        .await
        .map_err(|e| e.to_string())?;
    let b = LockManager::start(config()?)
        .await
        .map_err(|e| e.to_string())?;
    let held = acquire(&a, Duration::from_secs(5)).await?;
    check(
        resource.write(held.fencing_token()),
        "resource refused A on the master",
    )?;
    // WAIT counts the replicas that have everything *its own connection* wrote,
    // so it is sent behind a write on one connection: the replication stream is
    // in order, so a replica that acknowledged this write has A's grant too. (A
    // WAIT on a fresh connection answers at once and proves nothing: the kill
    // could then come before the grant reached the replica.)
    let acked: i64 = {
        let client = redis::Client::open(master.url()).map_err(|e| e.to_string())?;
        let mut conn = client.get_connection().map_err(|e| e.to_string())?;
        redis::pipe()
            .cmd("INCR")
            .arg("failover:probe")
            .ignore()
            .cmd("WAIT")
            .arg(1)
            .arg(2000)
            .query::<(i64,)>(&mut conn)
            .map_err(|e| e.to_string())?
            .0
    };
    t.say(format!(
        "A holds the lock through Sentinel, token {}; WAIT: {acked} replica has the grant",
        held.fencing_token()
    ));
    check(acked == 1, "the replica did not acknowledge the grant")?;
    let waiting = spawn_waiter(&b);
    check(
        eventually(Duration::from_secs(5), || subscribers(&master) == 1).await,
        "B never subscribed",
    )?;
    master.kill();
    let killed = Instant::now();
    t.say("master SIGKILLed");
    let promoted = eventually(Duration::from_secs(30), || {
        sentinels[0].master_port() == Some(replica.port())
    })
    .await;
    check(promoted, "Sentinel did not promote the replica within 30 s")?;
    t.say(format!(
        "Sentinel promoted the replica {:.1}s after the kill",
        killed.elapsed().as_secs_f64()
    ));
    let pttl: i64 = raw(&replica, &["PTTL", LOCK]);
    check(pttl > 0, "the promoted replica does not have A's lock")?;
    check(
        held.is_lost().is_none(),
        "A was told lost though its grant survived",
    )?;
    t.say(format!(
        "A still holds it on the new master (PTTL {pttl} ms), not told lost"
    ));
    let token = held.fencing_token();
    let released = Instant::now();
    held.release().await.map_err(|e| e.to_string())?;
    let (at, g) = waiting.await.map_err(|e| e.to_string())?;
    let g = g?;
    t.say(format!(
        "A released on the new master; B woken {:.1?} later, token {} > {token}",
        at - released,
        g.fencing_token()
    ));
    check(g.fencing_token() > token, "tokens went backwards")?;
    check(resource.write(g.fencing_token()), "resource refused B")?;
    g.release().await.map_err(|e| e.to_string())?;
    Ok(())
}

#[actix::main]
async fn main() -> ExitCode {
    let mut server = RedisServer::start();
    let t = Timeline(Instant::now());
    t.say(format!("redis-server started on port {}", server.port()));
    let mut resource = Resource::default();
    let outcome = match demo(&mut server, &t, &mut resource).await {
        Ok(()) => sentinel_act(&t, &mut resource).await,
        Err(step) => Err(step),
    };
    match outcome {
        Ok(()) => {
            t.say("every step behaved as described");
            ExitCode::SUCCESS
        }
        Err(step) => {
            t.say(format!("FAILED: {step}"));
            ExitCode::FAILURE
        }
    }
}
