//! The implementations under test behind one `Client` type, so that every scenario
//! runs the very same loop against each of them.
//!
//! Dispatch is an enum rather than a trait object: async functions in traits are
//! not object-safe, and a `match` keeps each implementation's call visible as the
//! application would write it. lockwarden is driven through its public API only
//! (`manager.send(Acquire::new(..))`, `guard.release().await`), rslock through its
//! own (`acquire`, `LockGuard::release`); the raw-EVALSHA and naive clients, which
//! have no library to go through, live in `direct.rs`.

use std::time::Duration;

use actix::Addr;
use lockwarden::{Acquire, Config, LockGuard, LockManager, RedGuard, RedLock};

use crate::direct::{Naive, NaiveHeld, Raw, RawHeld, LEASE};

/// One implementation under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Impl {
    /// lockwarden through its actors.
    Lockwarden,
    /// lockwarden's own Lua scripts over one multiplexed connection, no actors.
    Raw,
    /// lockwarden's spin lock (`Acquire::spin`): waiters poll with the default
    /// backoff (1 ms doubling to 128 ms) instead of listening.
    LockwardenSpin,
    /// rslock 0.10 with its default retry (3 tries, random 0-200 ms apart).
    Rslock,
    /// rslock 0.10 with the retry delay tuned down to 10 ms.
    RslockTuned,
    /// `SET NX PX` polled every 10 ms, compare-and-delete release.
    Naive,
    /// lockwarden's RedLock over several servers (scenario R only), one manager
    /// per server.
    RedLock,
    /// lockwarden on a three-master Redis Cluster (scenario K only), one manager
    /// given every master as a seed.
    LockwardenCluster,
    /// lockwarden with replica confirmation off (`Config::no_replica_sync`),
    /// scenario Y only.
    LockwardenNoSync,
    /// lockwarden confirming with one replica within 300 ms
    /// (`Config::sync_replicas(1, 300 ms)`: a budget of 4 `WAIT`s in flight
    /// against the default's 1), scenario Y only.
    LockwardenWait300,
    /// Redisson's way of confirming: lockwarden's scripts (as `Raw`), each call
    /// followed by its own `WAIT 1 1000` on a connection checked out of a pool
    /// of 64 (`masterConnectionPoolSize`'s default), scenario Y only. The
    /// acknowledgement timeout is lockwarden's default (1 s); the masters keep
    /// no AOF, so there is no `WAITAOF` to add.
    RedissonLayout,
    /// lockwarden with deadlock detection off (`Config::no_deadlock_detection`):
    /// the baseline that shows what detection costs waits shorter than its
    /// timeout (nothing). Not in the default set: name it in
    /// `LOCKWARDEN_BENCH_IMPLS` (scenarios A and B).
    LockwardenNoDeadlock,
    /// lockwarden with the direct handoff across processes
    /// (`Config::direct_handoff`): a release hands the lock to the next
    /// process's waiter in the same script call. Not in the default set: name
    /// it in `LOCKWARDEN_BENCH_IMPLS` (scenarios B and P show what it gives).
    LockwardenHandoff,
}

impl Impl {
    /// Every implementation, in the order of the tables.
    pub const ALL: [Impl; 6] = [
        Impl::Lockwarden,
        Impl::Raw,
        Impl::LockwardenSpin,
        Impl::Rslock,
        Impl::RslockTuned,
        Impl::Naive,
    ];

    /// Implementations that run only when `LOCKWARDEN_BENCH_IMPLS` names them.
    pub const OPTIONAL: [Impl; 2] = [Impl::LockwardenNoDeadlock, Impl::LockwardenHandoff];

    /// Scenario R's implementations: RedLock clients over the same servers
    /// (rslock is one, with either retry setting).
    pub const REDLOCK: [Impl; 3] = [Impl::RedLock, Impl::Rslock, Impl::RslockTuned];

    /// Scenario Y's implementations: lockwarden with replica confirmation at its
    /// default, off, and with a 300 ms timeout.
    pub const REPLICATED: [Impl; 4] = [
        Impl::Lockwarden,
        Impl::LockwardenNoSync,
        Impl::LockwardenWait300,
        Impl::RedissonLayout,
    ];

    /// Scenario Y's far-replica rows: lockwarden at its default against
    /// confirmation off (which the replica's distance does not touch).
    pub const FAR: [Impl; 3] = [
        Impl::Lockwarden,
        Impl::LockwardenNoSync,
        Impl::RedissonLayout,
    ];

    /// The name used in tables, JSON and `LOCKWARDEN_BENCH_IMPLS`.
    pub fn name(self) -> &'static str {
        match self {
            Impl::Lockwarden => "lockwarden",
            Impl::Raw => "raw-evalsha",
            Impl::LockwardenSpin => "lockwarden-spin",
            Impl::Rslock => "rslock",
            Impl::RslockTuned => "rslock-10ms",
            Impl::Naive => "naive",
            Impl::RedLock => "lockwarden-redlock",
            Impl::LockwardenCluster => "lockwarden-cluster",
            Impl::LockwardenNoSync => "lockwarden-nosync",
            Impl::LockwardenWait300 => "lockwarden-wait300ms",
            Impl::LockwardenNoDeadlock => "lockwarden-nodeadlock",
            Impl::LockwardenHandoff => "lockwarden-handoff",
            Impl::RedissonLayout => "redisson-layout",
        }
    }

    /// Commands this implementation sends itself, as opposed to the ones its
    /// scripts run inside Redis: counting only these gives round trips (INFO
    /// commandstats counts both under the same names).
    pub fn top_level(self) -> &'static [&'static str] {
        const SCRIPTED: &[&str] = &[
            "evalsha",
            "eval",
            "script",
            "subscribe",
            "unsubscribe",
            "ssubscribe",
            "sunsubscribe",
            "ping",
        ];
        const PLAIN: &[&str] = &[
            "evalsha",
            "eval",
            "script",
            "subscribe",
            "unsubscribe",
            "ping",
            "set",
        ];
        match self {
            // lockwarden and raw only ever send scripts (SET appears inside them).
            Impl::Lockwarden
            | Impl::Raw
            | Impl::LockwardenSpin
            | Impl::RedLock
            | Impl::LockwardenCluster
            | Impl::LockwardenNoSync
            | Impl::LockwardenWait300
            | Impl::LockwardenNoDeadlock
            | Impl::LockwardenHandoff
            | Impl::RedissonLayout => SCRIPTED,
            Impl::Rslock | Impl::RslockTuned | Impl::Naive => PLAIN,
        }
    }
}

/// A connected client of one implementation: the unit an application process
/// would hold (one lockwarden manager, one rslock manager, one connection).
pub enum Client {
    /// A lockwarden manager.
    Lockwarden(Addr<LockManager>),
    /// A lockwarden manager whose acquisitions take the spin lock.
    LockwardenSpin(Addr<LockManager>),
    /// The scripts straight over a connection.
    Raw(Raw),
    /// An rslock manager (either retry setting).
    Rslock(rslock::LockManager),
    /// SET NX polling.
    Naive(Naive),
    /// One lockwarden manager per server of a RedLock.
    RedLock(Vec<Addr<LockManager>>),
}

/// A held lock of any implementation.
pub enum Held {
    /// lockwarden's guard.
    Lockwarden(LockGuard),
    /// What raw release needs.
    Raw(RawHeld),
    /// rslock's guard.
    Rslock(rslock::LockGuard),
    /// What naive release needs.
    Naive(NaiveHeld),
    /// lockwarden's RedLock guard.
    RedLock(RedGuard),
}

impl Client {
    /// Connects one client. `contended` names the lock that many waiters will share,
    /// for the raw client, which subscribes to its unlock channel up front
    /// (lockwarden subscribes by itself when it first finds a lock busy). `url` may
    /// list several servers, comma-separated, for the RedLock clients.
    pub async fn connect(which: Impl, url: &str, contended: Option<&str>) -> Client {
        match which {
            Impl::LockwardenSpin => {
                let config = Config::from_url(url).expect("redis url");
                Client::LockwardenSpin(LockManager::start(config).await.expect("lockwarden start"))
            }
            Impl::Lockwarden
            | Impl::LockwardenNoSync
            | Impl::LockwardenWait300
            | Impl::LockwardenNoDeadlock
            | Impl::LockwardenHandoff => {
                let mut config = Config::from_url(url).expect("redis url");
                config = match which {
                    Impl::LockwardenNoSync => config.no_replica_sync(),
                    Impl::LockwardenWait300 => config.sync_replicas(1, Duration::from_millis(300)),
                    Impl::LockwardenNoDeadlock => config.no_deadlock_detection(),
                    Impl::LockwardenHandoff => config.direct_handoff(true),
                    _ => config,
                };
                // LOCKWARDEN_BENCH_BATCHING="max_ops,in_flight" tries other coalescing
                // settings than the library's defaults.
                if let Ok(spec) = std::env::var("LOCKWARDEN_BENCH_BATCHING") {
                    let n: Vec<usize> = spec
                        .split(',')
                        .filter_map(|v| v.trim().parse().ok())
                        .collect();
                    if let [max_ops, in_flight] = n[..] {
                        config = config.batching(max_ops, in_flight);
                    }
                }
                // LOCKWARDEN_BENCH_RESPONSE_MS=ms tries another response timeout,
                // which sizes the WAIT budget (more fast places with a longer one).
                if let Some(ms) = std::env::var("LOCKWARDEN_BENCH_RESPONSE_MS")
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                {
                    config = config.response_timeout(Duration::from_millis(ms));
                }
                // LOCKWARDEN_BENCH_LANES=k tries another number of confirmation lanes
                // than the library's default.
                if let Some(k) = std::env::var("LOCKWARDEN_BENCH_LANES")
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                {
                    config = config.confirmation_lanes(k);
                }
                Client::Lockwarden(LockManager::start(config).await.expect("lockwarden start"))
            }
            Impl::Raw => Client::Raw(Raw::connect(url, contended).await),
            Impl::RedissonLayout => Client::Raw(Raw::pooled(url, contended).await),
            Impl::LockwardenCluster => {
                let config = Config::cluster(url.split(',')).expect("cluster seeds");
                Client::Lockwarden(LockManager::start(config).await.expect("lockwarden start"))
            }
            Impl::RedLock => {
                let mut managers = Vec::new();
                for url in url.split(',') {
                    let config = Config::from_url(url).expect("redis url");
                    managers.push(LockManager::start(config).await.expect("lockwarden start"));
                }
                Client::RedLock(managers)
            }
            Impl::Rslock | Impl::RslockTuned => {
                let urls: Vec<String> = url.split(',').map(str::to_string).collect();
                let mut manager = rslock::LockManager::new(urls);
                if which == Impl::RslockTuned {
                    // Same retry count as the default (3), a 10 ms delay instead of 200 ms.
                    manager.set_retry(3, Duration::from_millis(10));
                }
                Client::Rslock(manager)
            }
            Impl::Naive => Client::Naive(Naive::connect(url).await),
        }
    }

    /// Waits until `key` is acquired.
    pub async fn acquire(&self, key: &str) -> Held {
        match self {
            Client::Lockwarden(manager) => Held::Lockwarden(
                manager
                    .send(Acquire::new(key))
                    .await
                    .expect("lockwarden manager mailbox")
                    .expect("lockwarden acquire"),
            ),
            Client::LockwardenSpin(manager) => Held::Lockwarden(
                manager
                    .send(Acquire::new(key).spin())
                    .await
                    .expect("lockwarden manager mailbox")
                    .expect("lockwarden spin acquire"),
            ),
            Client::Raw(raw) => Held::Raw(raw.acquire(key).await),
            Client::Rslock(manager) => {
                Held::Rslock(manager.acquire(key, LEASE).await.expect("rslock acquire"))
            }
            Client::Naive(naive) => Held::Naive(naive.acquire(key).await),
            Client::RedLock(managers) => Held::RedLock(
                RedLock::new(managers, key)
                    .acquire()
                    .await
                    .expect("lockwarden redlock acquire"),
            ),
        }
    }

    /// Releases a lock this client acquired and waits for the answer.
    pub async fn release(&self, held: Held) {
        match (self, held) {
            (Client::Lockwarden(_) | Client::LockwardenSpin(_), Held::Lockwarden(guard)) => {
                guard.release().await.expect("lockwarden release");
            }
            (Client::Raw(raw), Held::Raw(held)) => raw.release(held).await,
            (Client::Rslock(_), Held::Rslock(guard)) => guard.release().await,
            (Client::Naive(naive), Held::Naive(held)) => naive.release(held).await,
            (Client::RedLock(_), Held::RedLock(guard)) => {
                guard.release().await.expect("lockwarden redlock release");
            }
            _ => panic!("a lock released through another implementation's client"),
        }
    }
}
