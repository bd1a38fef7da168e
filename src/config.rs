//! [`Config`]: where Redis is and every duration and limit the lock manager uses.
//!
//! Every duration can be set down to the millisecond so that tests run against a real
//! server in moments; the defaults are those of a production service (Redisson's
//! 30-second watchdog lease renewed every 10 seconds). [`Config::validate`] refuses
//! combinations that cannot work before anything connects.

use std::time::Duration;

use crate::error::LockError;

mod replicas;
mod sentinel;
mod validate;

use replicas::DEFAULT_LANES;
pub(crate) use replicas::MAX_LANES;
pub(crate) use replicas::{ReplicaSync, SyncSetting, WAIT_SLACK};

/// The longest explicit lease accepted unless [`Config::max_lease`] says otherwise:
/// 7 days. A longer one is more likely a unit mistake than an intent.
pub const MAX_LEASE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a [`LockManager`](crate::LockManager) connects and times its work.
///
/// ```
/// use std::time::Duration;
/// let config = lockwarden::Config::from_url("redis://127.0.0.1:6379")?
///     .watchdog_lease(Duration::from_secs(10))
///     .max_name_len(256);
/// # Ok::<(), lockwarden::LockError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    /// The Redis client (parsed URL); connections are made from it.
    pub(crate) client: redis::Client,
    /// Set for a master found through Sentinels: its name and the Sentinels'
    /// URLs (`client` is then the first Sentinel's, used for nothing else).
    pub(crate) sentinel: Option<(String, Vec<String>)>,
    /// Set for a Redis Cluster: the seed nodes' URLs (`client` is then the first
    /// seed's, used for nothing else).
    pub(crate) cluster: Option<Vec<String>>,
    /// Lease of a lock taken without an explicit lease, renewed by the watchdog.
    pub(crate) watchdog_lease: Duration,
    /// How often the watchdog renews; `None` means a third of the watchdog lease.
    pub(crate) renew_interval: Option<Duration>,
    /// Longest accepted lock name, in bytes.
    pub(crate) max_name_len: usize,
    /// Longest accepted explicit lease.
    pub(crate) max_lease: Duration,
    /// How long a Redis command may take before it counts as failed.
    pub(crate) response_timeout: Duration,
    /// How long connecting to Redis may take.
    pub(crate) connection_timeout: Duration,
    /// Longest a guard's release (a lock's, a semaphore's) waits for its answer
    /// before the release goes on in the background ([`Config::release_wait`]).
    pub(crate) release_wait: Duration,
    pub(crate) start_wait: Duration,
    /// How long a lock actor with nothing to do lingers before it stops.
    pub(crate) idle_timeout: Duration,
    /// Longest `Shutdown` waits for the manager's locks to be given back.
    pub(crate) shutdown_timeout: Duration,
    /// Longest a waiter goes without asking Redis again when no unlock message comes.
    pub(crate) max_retry_interval: Duration,
    /// How long a lock whose lease ran out unreleased stays taken; zero for none.
    pub(crate) lock_delay: Duration,
    /// Exclusive lock: a release hands the lock to another process's waiter
    /// directly (`Config::direct_handoff`).
    pub(crate) direct_handoff: bool,
    /// Spin lock: the delay before a waiter's second attempt.
    pub(crate) spin_first: Duration,
    /// Spin lock: the longest delay between a waiter's attempts.
    pub(crate) spin_longest: Duration,
    /// First delay before reconnecting or retrying after a connection error.
    pub(crate) reconnect_min: Duration,
    /// Longest delay between reconnection or retry attempts.
    pub(crate) reconnect_max: Duration,
    /// How long Redis remembers a release's outcome for an idempotent retry.
    pub(crate) latch_ttl: Duration,
    /// How long a fair-lock waiter keeps its place in the queue without a refresh.
    pub(crate) fair_waiter_lease: Duration,
    /// After how long a waiter kept out by another owner of this same process is
    /// reported (it may be waiting for itself).
    pub(crate) stall_warning: Duration,
    /// After how long a lock wait looks for a deadlock; `None`: never.
    pub(crate) deadlock_timeout: Option<Duration>,
    /// Most exclusive-lock acquisitions and releases sent as one script call.
    pub(crate) batch_max_ops: usize,
    /// Most coalesced script calls awaiting their reply at once.
    pub(crate) batch_in_flight: usize,
    /// How long a lock's fencing token counter outlives its last grant.
    pub(crate) token_ttl: Duration,
    /// Whether, and by how many replicas, every lock change is confirmed
    /// (`config/replicas.rs`).
    pub(crate) sync: SyncSetting,
    /// Command connections the confirmed changes spread over.
    pub(crate) confirmation_lanes: usize,
    /// A grant no replica could confirm is refused, not kept
    /// (`Config::refuse_unconfirmed_grants`).
    pub(crate) refuse_unconfirmed: bool,
    /// The label this manager registers under its client id, if any.
    pub(crate) label: Option<String>,
    /// Whether metrics also get per-lock series labelled by lock name.
    pub(crate) metric_lock_names: bool,
    /// Under Sentinel: the username (if any) and password of the master and
    /// replicas it names ([`Config::master_credentials`]).
    pub(crate) master_auth: Option<(Option<String>, String)>,
    /// Under Sentinel: whether the master and replicas it names speak TLS, if
    /// said ([`Config::master_tls`]); unsaid, as the Sentinels do.
    pub(crate) master_tls: Option<bool>,
    /// The certificate authority (PEM) trusted instead of the system's roots
    /// ([`Config::tls_root_cert`]), kept for the connections a Sentinel setup
    /// makes beyond `client`.
    pub(crate) tls_root: Option<Vec<u8>>,
}

impl Config {
    /// A configuration for the Redis server at `url` (`redis://host:port/db`, or
    /// `rediss://` for TLS, which needs the `tls` feature, on by default), with
    /// every other setting at its default. A TLS server's certificate is checked
    /// against the system's trusted roots (`SSL_CERT_FILE` names another bundle),
    /// or against [`Config::tls_root_cert`]. Fails with
    /// [`LockError::InvalidConfig`] if the URL cannot be parsed or asks for TLS in
    /// a build without it (nothing connects yet).
    pub fn from_url(url: &str) -> Result<Config, LockError> {
        if crate::tls::wants_tls(url) {
            crate::tls::prepare()?;
        }
        let client = redis::Client::open(url).map_err(|e| {
            LockError::InvalidConfig(format!(
                "bad Redis URL {url:?}: {e}; expected redis://[user:password@]host[:port][/db], \
                 rediss://... for TLS, or unix:///path/to/redis.sock"
            ))
        })?;
        Ok(Config {
            client,
            sentinel: None,
            cluster: None,
            watchdog_lease: Duration::from_secs(30),
            renew_interval: None,
            max_name_len: 1024,
            max_lease: MAX_LEASE,
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(2),
            release_wait: DEFAULT_RELEASE_WAIT,
            start_wait: Duration::ZERO,
            idle_timeout: Duration::from_secs(10),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            max_retry_interval: Duration::from_secs(5),
            lock_delay: Duration::ZERO,
            direct_handoff: false,
            spin_first: Duration::from_millis(1),
            spin_longest: Duration::from_millis(128),
            reconnect_min: Duration::from_millis(50),
            reconnect_max: Duration::from_secs(2),
            latch_ttl: Duration::from_secs(10),
            fair_waiter_lease: Duration::from_secs(5),
            stall_warning: Duration::from_secs(30),
            deadlock_timeout: Some(Duration::from_secs(1)),
            batch_max_ops: 32,
            batch_in_flight: 16,
            token_ttl: Duration::from_secs(3600),
            sync: SyncSetting::Default,
            confirmation_lanes: DEFAULT_LANES,
            refuse_unconfirmed: false,
            label: None,
            metric_lock_names: false,
            master_auth: None,
            master_tls: None,
            tls_root: None,
        })
    }

    /// A configuration for a Redis Cluster reached through these seed nodes (any
    /// few of its masters or replicas, `redis://host:port`; the rest of the
    /// cluster is discovered from them), with every other setting at its default.
    /// Commands follow the cluster's slots and its MOVED/ASK redirects (redis-rs's
    /// cluster client), and unlock messages travel on sharded pub/sub (SPUBLISH /
    /// SSUBSCRIBE) when the servers have it (Redis 7+), as Redisson does.
    /// Fails with [`LockError::InvalidConfig`] if no URL is given or one cannot be
    /// parsed (nothing connects yet); a seed list that is unreachable or names a
    /// server that is not in cluster mode fails at start.
    pub fn cluster<'a>(seeds: impl IntoIterator<Item = &'a str>) -> Result<Config, LockError> {
        let urls: Vec<String> = seeds.into_iter().map(str::to_string).collect();
        let Some(first) = urls.first() else {
            return Err(LockError::InvalidConfig(
                "no Redis Cluster seed URL given".into(),
            ));
        };
        for url in &urls[1..] {
            Config::from_url(url)?;
        }
        let mut config = Config::from_url(first)?;
        config.cluster = Some(urls);
        Ok(config)
    }

    /// Lease of a lock acquired without an explicit lease; the watchdog keeps
    /// renewing it while the lock is held, so a crashed holder's lock frees within
    /// this time. At least 100 milliseconds. Defaults to 30 seconds.
    pub fn watchdog_lease(mut self, lease: Duration) -> Config {
        self.watchdog_lease = lease;
        self
    }

    /// How often the watchdog renews a held lock; must be shorter than the watchdog
    /// lease. Defaults to a third of the watchdog lease.
    pub fn renew_interval(mut self, every: Duration) -> Config {
        self.renew_interval = Some(every);
        self
    }

    /// Longest accepted lock name in bytes. Defaults to 1024.
    pub fn max_name_len(mut self, bytes: usize) -> Config {
        self.max_name_len = bytes;
        self
    }

    /// Longest accepted explicit lease; longer ones are refused as a likely mistake.
    /// Defaults to 7 days ([`MAX_LEASE`]).
    pub fn max_lease(mut self, lease: Duration) -> Config {
        self.max_lease = lease;
        self
    }

    /// How long one Redis command may take before it fails with a timeout. Defaults
    /// to 2 seconds.
    pub fn response_timeout(mut self, timeout: Duration) -> Config {
        self.response_timeout = timeout;
        self
    }

    /// Longest [`LockGuard::release`](crate::LockGuard::release) (and a semaphore
    /// guard's release: [`SemaphoreGuard`](crate::SemaphoreGuard),
    /// [`PermitGuard`](crate::PermitGuard); and
    /// [`LatchHandle::count_down`](crate::LatchHandle::count_down), which answers
    /// [`LockError::InFlight`] at it) keeps its caller
    /// waiting for the answer (a request path must stay bounded while Redis is
    /// frozen or a failover runs): past it, the call answers
    /// [`ReleaseOutcome::Pending`](crate::ReleaseOutcome::Pending) and the release
    /// goes on in the background until Redis answers (it is retried while the
    /// lease lasts; the lease frees the lock at worst), logged and counted.
    /// `release_within` sets it for one call. Defaults to 2.5 seconds: one
    /// response timeout and a margin, so a release that gets an answer is not
    /// cut short.
    pub fn release_wait(mut self, wait: Duration) -> Config {
        self.release_wait = wait;
        self
    }

    /// How long one attempt to connect to Redis may take. Defaults to 2 seconds.
    pub fn connection_timeout(mut self, timeout: Duration) -> Config {
        self.connection_timeout = timeout;
        self
    }

    /// How long starting (`LockManager::start`, `Admin::connect`) waits out a
    /// deployment that is changing hands: a Sentinel failover in progress (the
    /// Sentinels monitor the master name but name no master that answers yet) or a
    /// cluster that does not serve every slot yet. Said once in the log, at warn.
    /// A master name no Sentinel monitors is refused at once whatever this says
    /// (`InvalidConfig`), and so is an unreachable standalone server (a restart
    /// and a wrong port look the same). `Duration::MAX` waits as long as the
    /// failover lasts. Defaults to zero: one try.
    pub fn start_wait(mut self, wait: Duration) -> Config {
        self.start_wait = wait;
        self
    }

    /// How long a lock's actor lingers with no holder and no waiter before it stops
    /// and leaves the registry. Defaults to 10 seconds.
    pub fn idle_timeout(mut self, idle: Duration) -> Config {
        self.idle_timeout = idle;
        self
    }

    /// Longest [`Shutdown`](crate::Shutdown) (and
    /// [`Locks::shutdown`](crate::Locks::shutdown)) waits for the manager's held
    /// locks to be given back in Redis and its leaders to step down, before it
    /// answers anyway: a deploy's stop must not hang on a Redis that is gone
    /// (what is not given back by then frees when its lease runs out, as after a
    /// crash). Zero sends the releases and answers without waiting for them.
    /// Defaults to 3 seconds: well inside the 10 s a container runtime usually
    /// grants after SIGTERM, and many times a release's round trip.
    pub fn shutdown_timeout(mut self, budget: Duration) -> Config {
        self.shutdown_timeout = budget;
        self
    }

    /// Longest a waiter goes without asking Redis again when no unlock message
    /// arrives (messages are a hint and can be lost); waiters also retry when the
    /// holder's TTL runs out, whichever is sooner. Defaults to 5 seconds.
    pub fn max_retry_interval(mut self, interval: Duration) -> Config {
        self.max_retry_interval = interval;
        self
    }

    /// Lock-delay (Consul's `lock-delay`): when an exclusive or spin lock taken
    /// through this manager ends because its lease ran out rather than by a
    /// release (the holder died, was paused or cut off), nobody may take it again
    /// for this long, so that a holder that was only paused has time to notice
    /// before anyone else acts. A release, a force-unlock and a lock never held are
    /// not delayed; a renewal or re-entry that comes after the lease ended finds
    /// the lock lost. Redis keeps it in the lock's own hash (docs/protocol.md,
    /// "Lock-delay"), so other clients, Redisson's included, see the lock held for
    /// the delay. Up to [`Config::max_lease`]. Defaults to zero: no delay (Consul
    /// uses 15 seconds).
    pub fn lock_delay(mut self, delay: Duration) -> Config {
        self.lock_delay = delay;
        self
    }

    /// Direct handoff across processes for the exclusive lock: a waiter that
    /// finds the lock held takes a place in a handoff queue beside it, and the
    /// release that frees the lock (by a manager with this option) makes the
    /// first live place the holder in the same script call and tells its
    /// process, so the waiter sends nothing before it holds (one round trip
    /// less per contended handoff between processes; with replica confirmation
    /// asked, the waiter still sends one call, whose `WAIT` confirms the
    /// handoff). Waiters with a place go first, in the order they took it; a
    /// Redisson client, or a waiter with an `Acquire::owner`, on the same lock
    /// is woken only by a release that finds no place (docs/protocol.md,
    /// "Direct handoff"). A waiter whose process died costs the lock nothing (a
    /// release skips a place nobody listens for); one whose process froze, at
    /// most the handoff's 800 ms lease. The lock's channels stay subscribed for
    /// the idle timeout after its last waiter. Only waiters whose owner was made
    /// for their wait (no `Acquire::owner`) and that wait (not a try-once) take
    /// a place; with a [`Config::lock_delay`] nobody does. Needs ACL rights on
    /// the handoff's keys (docs/operations.md). Defaults to `false` (off) until
    /// its fault runs cover every topology.
    pub fn direct_handoff(mut self, on: bool) -> Config {
        self.direct_handoff = on;
        self
    }

    /// Spin lock ([`Acquire::spin`](crate::Acquire::spin)): the first and longest
    /// delay between a waiter's attempts while the lock is busy. The delay doubles
    /// from the first up to the longest, less up to a quarter of random jitter, and
    /// starts again from the first after each grant; a waiter never waits past the
    /// moment the holder's lease ends. Pass the same value twice for a constant
    /// delay (Redisson's `ConstantBackOff` is 64 ms). Defaults to 1 millisecond and
    /// 128 milliseconds (Redisson's `ExponentialBackOff`).
    pub fn spin_backoff(mut self, first: Duration, longest: Duration) -> Config {
        self.spin_first = first;
        self.spin_longest = longest;
        self
    }

    /// First and longest delay between attempts after a connection error; the delay
    /// doubles from the first up to the longest, with jitter. Defaults to 50
    /// milliseconds and 2 seconds.
    pub fn reconnect_backoff(mut self, first: Duration, longest: Duration) -> Config {
        self.reconnect_min = first;
        self.reconnect_max = longest;
        self
    }

    /// How long Redis keeps a release's outcome so that a release retried after a
    /// lost reply is not applied twice. Defaults to 10 seconds.
    pub fn latch_ttl(mut self, ttl: Duration) -> Config {
        self.latch_ttl = ttl;
        self
    }

    /// After how long a waiter that waits without a deadline, and is kept out by
    /// another owner *of this same process* that held the lock when it asked, is
    /// reported with a warning in the log.
    /// The usual cause is a task that acquires a lock it already holds without
    /// passing the same [`Owner`](crate::Owner): it waits for itself, forever.
    /// Defaults to 30 seconds.
    pub fn stall_warning(mut self, after: Duration) -> Config {
        self.stall_warning = after;
        self
    }

    /// After how long a lock wait looks for a deadlock, and then again each
    /// time as long while it lasts (a quarter of it after a first look that
    /// found nothing; PostgreSQL's `deadlock_timeout`): it records
    /// in Redis what its owner waits for and follows the wait-for graph (the
    /// lock's holders, what they wait for, their holders ...). A wait found in a
    /// cycle that started last gives up with [`LockError::Deadlock`], naming
    /// the cycle; the other waits of the cycle go on. A wait shorter than this
    /// costs nothing. At least 10 ms. Defaults to 1 second.
    pub fn deadlock_timeout(mut self, after: Duration) -> Config {
        self.deadlock_timeout = Some(after);
        self
    }

    /// Never look for deadlocks: a wait in a cycle lasts until its deadline (or
    /// for ever without one), as with every other Redis lock library, and this
    /// manager's waits are not recorded for others' checks either (a cycle
    /// through one of them is not found by anyone). Saves the record and the walk
    /// of each wait longer than [`Config::deadlock_timeout`]. Defaults to on.
    pub fn no_deadlock_detection(mut self) -> Config {
        self.deadlock_timeout = None;
        self
    }

    /// How long a fair-lock waiter keeps its place in the queue without refreshing
    /// it. Live waiters refresh their place every third of this (on the Redis
    /// server's clock), so a waiter whose process died holds up the queue for at
    /// most this long; Redisson's waiters keep theirs for their whole wait (5
    /// minutes by default). At least 3 ms. Defaults to 5 seconds.
    pub fn fair_waiter_lease(mut self, lease: Duration) -> Config {
        self.fair_waiter_lease = lease;
        self
    }

    /// How the exclusive lock's acquisitions and releases share script calls. A call
    /// goes to Redis at once while fewer than `in_flight` calls await their reply;
    /// the ones that come meanwhile wait for a free slot and then go together, up to
    /// `max_ops` in one script call (any that are left take the next slot). Nothing
    /// is ever held back to fill a batch, so a lone call pays no delay. Fewer calls
    /// in flight make bigger batches (less Redis CPU per lock operation) at the cost
    /// of a little latency under load. `max_ops` 1 sends every call alone, but
    /// still at most `in_flight` at a time, which caps throughput: to turn
    /// coalescing off, raise `in_flight` too. `max_ops` is 1 to 1024 and
    /// `in_flight` at least 1. Defaults to 32 and 16: up to 16 calls are pipelined
    /// one by one (so Redis and this process keep working at the same time), and
    /// only what queues behind them is merged. With 2 in flight the batches were
    /// bigger but Redis and the client took turns, which measured slower at 64
    /// holders (docs/performance.md, "Reading the results": the sweep).
    pub fn batching(mut self, max_ops: usize, in_flight: usize) -> Config {
        self.batch_max_ops = max_ops;
        self.batch_in_flight = in_flight;
        self
    }

    /// How long a lock's fencing token counter (`redisson_lock_token:{<name>}`)
    /// stays in Redis after the lock's last grant; every grant sets it again. Tokens
    /// never depend on the counter surviving (each is at least the Redis server's
    /// clock in microseconds, docs/faults.md), so a name that is no longer used
    /// leaves nothing behind after this long, and a service that locks one name per
    /// request does not grow Redis without bound: it keeps about (new names per
    /// second) x this many counters, some 90 bytes each. While the counter lives, it
    /// also keeps tokens increasing if the server clock steps back by less than
    /// this. At least 1 second. Defaults to 1 hour.
    pub fn token_ttl(mut self, ttl: Duration) -> Config {
        self.token_ttl = ttl;
        self
    }

    /// A label for operators: the manager registers it in Redis beside its host
    /// name, process id, program name, start time and version, under its client
    /// id (`lockwarden:client:{<client id>}`), so that `lockwarden status`,
    /// `list`, `top` and [`Inspect`](crate::Inspect) can say who holds a lock
    /// ("billing-worker", "eu-1 cron"). Any text up to 256 bytes; control
    /// characters are kept and escaped when shown. Without one, the program name
    /// still tells processes apart. Defaults to no label.
    pub fn label(mut self, label: impl Into<String>) -> Config {
        self.label = Some(label.into());
        self
    }

    /// Also record per-lock metrics, labelled by lock name: the counter
    /// `lockwarden_lock_acquisitions_total{lock,kind}`, the histograms
    /// `lockwarden_lock_wait_seconds{lock,kind}` and
    /// `lockwarden_lock_hold_seconds{lock,kind}`, and
    /// `lockwarden_lock_lost_total{lock,reason}`, beside the usual ones (which
    /// never carry names). Each lock name becomes time series of its own in the
    /// metrics backend, so turn it on only when the names are few and fixed (not
    /// one per order or per user), and each record then allocates its labels.
    /// Defaults to off.
    pub fn metric_lock_names(mut self, on: bool) -> Config {
        self.metric_lock_names = on;
        self
    }

    /// For a `rediss://` URL: trust the certificate authority in `pem` (PEM text)
    /// instead of the system's roots, as for a private CA or a self-signed test
    /// server. Under Sentinel it is trusted for every TLS connection: to the
    /// Sentinels (`rediss://` URLs) and to the master and replicas they name
    /// ([`Config::master_tls`]). Fails with [`LockError::InvalidConfig`] if the
    /// URL is not a TLS one (under Sentinel: [`Config::validate`] refuses it when
    /// neither the Sentinels nor the master speak TLS) or the certificate cannot
    /// be used. Defaults to the system's roots.
    #[cfg(feature = "tls")]
    pub fn tls_root_cert(mut self, pem: impl Into<Vec<u8>>) -> Result<Config, LockError> {
        let pem = pem.into();
        let certs = redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        };
        let bad =
            |e: redis::RedisError| LockError::InvalidConfig(format!("TLS root certificate: {e}"));
        let info = self.client.get_connection_info().clone();
        if self.sentinel.is_some() && !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            // Plain Sentinels may name a TLS master: the certificate is for it,
            // and is only read here (redis-rs parses it as it will use it).
            redis::Client::build_with_tls("rediss://127.0.0.1/", certs).map_err(bad)?;
        } else {
            self.client = redis::Client::build_with_tls(info, certs).map_err(bad)?;
        }
        self.tls_root = Some(pem);
        Ok(self)
    }

    /// How often a fair-lock waiter refreshes its place.
    pub(crate) fn fair_refresh_every(&self) -> Duration {
        self.fair_waiter_lease / 3
    }

    /// The watchdog's renewal period in effect.
    pub(crate) fn renew_every(&self) -> Duration {
        self.renew_interval.unwrap_or(self.watchdog_lease / 3)
    }
}

/// [`Config::shutdown_timeout`]'s default.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// [`Config::release_wait`]'s default.
pub(crate) const DEFAULT_RELEASE_WAIT: Duration = Duration::from_millis(2500);
