//! The two clients that talk to Redis directly, with no lock library: the ceiling
//! and the floor that lockwarden is measured between.
//!
//! `Raw` runs lockwarden's own `lua/acquire.lua` and `lua/release.lua` (each behind
//! `lua/token_prelude.lua`, as the library sends them) with the same
//! KEYS and ARGV as lockwarden's exclusive lock in `src/wire` (same owner field
//! shape, a fresh request id per release) over one multiplexed connection: what the
//! Lua path costs with no actors in front of it. To wait for a busy lock it does what lockwarden does minus the
//! actors: one pub/sub connection per client, subscribed to the lock's unlock
//! channel, wakes one local waiter per message, with a timer as fallback.
//!
//! `Naive` is what one writes in an afternoon: `SET key value NX PX` polled every
//! 10 ms, and a compare-and-delete script to release.

use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Script};
use tokio::sync::Notify;

use crate::support;

/// Lease used by every implementation that takes one per acquisition; lockwarden
/// uses its watchdog, whose default lease is the same 30 s.
pub const LEASE: Duration = Duration::from_secs(30);

/// lockwarden's acquire and release scripts, byte for byte as it sends them.
static SCRIPTS: LazyLock<(Script, Script)> = LazyLock::new(|| {
    let (acquire, release) = support::exclusive_scripts();
    (Script::new(&acquire), Script::new(&release))
});
/// The naive release: delete the key only if it still holds our value.
static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then \
           return redis.call('del', KEYS[1]) \
         else return 0 end",
    )
});

/// lockwarden's default latch lifetime, in ms (`Config::latch_ttl`).
const LATCH_TTL_MS: u64 = 10_000;
/// How often the naive client polls a busy lock.
const NAIVE_POLL: Duration = Duration::from_millis(10);
/// Longest a raw waiter sleeps without an unlock message before asking again.
const RAW_FALLBACK: Duration = Duration::from_millis(100);

/// Owner numbers, unique in the process like `lockwarden::Owner`.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A random id per client, like lockwarden's per-manager client id.
fn client_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A multiplexed connection with the same response timeout as lockwarden's default.
async fn connect(url: &str) -> MultiplexedConnection {
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(2)));
    redis::Client::open(url)
        .expect("redis url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("redis connect")
}

/// `<prefix>:{<name>}`, as `src/keys.rs` builds it for names without a hash tag.
fn derived(prefix: &str, name: &str) -> String {
    format!("{prefix}:{{{name}}}")
}

/// Connections in Redisson's pool (`masterConnectionPoolSize`'s default).
const REDISSON_POOL: usize = 64;
/// The `WAIT` timeout behind each call of the pooled client, in ms:
/// lockwarden's default confirmation timeout, so both wait as long.
const REDISSON_WAIT_MS: u64 = 1_000;

/// Connections a call checks out for the whole call, its `WAIT` included (a
/// `WAIT` blocks its connection), as Redisson's pool does.
struct Pool {
    /// The free connections.
    free: std::cell::RefCell<Vec<MultiplexedConnection>>,
    /// One permit per free connection.
    permits: tokio::sync::Semaphore,
}

/// lockwarden's scripts straight over a multiplexed connection; or, pooled,
/// in Redisson's layout: each call on a connection of its own, followed by its
/// own `WAIT` for one replica.
pub struct Raw {
    /// The command connection (clones share its socket).
    conn: MultiplexedConnection,
    /// Redisson's layout: the pool each call checks a connection out of.
    pool: Option<Pool>,
    /// First half of every owner field.
    client_id: String,
    /// Woken once per unlock message on the contended lock's channel, if any.
    wake: Option<Rc<Notify>>,
}

/// A lock held by the raw client.
pub struct RawHeld {
    /// The lock name.
    key: String,
    /// The owner field holding it.
    field: String,
}

impl Raw {
    /// Connects; with `contended`, also subscribes to that lock's unlock channel.
    pub async fn connect(url: &str, contended: Option<&str>) -> Raw {
        let conn = connect(url).await;
        let wake = match contended {
            Some(name) => {
                let mut pubsub = redis::Client::open(url)
                    .expect("redis url")
                    .get_async_pubsub()
                    .await
                    .expect("redis pub/sub connect");
                pubsub
                    .subscribe(derived("redisson_lock__channel", name))
                    .await
                    .expect("subscribe");
                let wake = Rc::new(Notify::new());
                let notify = wake.clone();
                // Ends when the connection does, or when the runtime is dropped.
                actix_rt::spawn(async move {
                    let mut messages = pubsub.into_on_message();
                    while messages.next().await.is_some() {
                        notify.notify_one();
                    }
                });
                Some(wake)
            }
            None => None,
        };
        Raw {
            conn,
            pool: None,
            client_id: client_id(),
            wake,
        }
    }

    /// As [`Raw::connect`], each call then made in Redisson's layout: on a
    /// connection of a pool of [`REDISSON_POOL`], followed by `WAIT 1`.
    pub async fn pooled(url: &str, contended: Option<&str>) -> Raw {
        let mut raw = Raw::connect(url, contended).await;
        let mut conns = Vec::with_capacity(REDISSON_POOL);
        for _ in 0..REDISSON_POOL {
            conns.push(connect(url).await);
        }
        raw.pool = Some(Pool {
            free: std::cell::RefCell::new(conns),
            permits: tokio::sync::Semaphore::new(REDISSON_POOL),
        });
        raw
    }

    /// Runs one script call: on the shared connection, or, pooled, on a
    /// checked-out connection followed by its `WAIT`.
    async fn call<T: redis::FromRedisValue>(&self, call: redis::ScriptInvocation<'_>) -> T {
        let Some(pool) = &self.pool else {
            return call
                .invoke_async(&mut self.conn.clone())
                .await
                .expect("raw script call");
        };
        let _permit = pool.permits.acquire().await.expect("the pool stays open");
        let mut conn = pool.free.borrow_mut().pop().expect("a free connection");
        let reply = call
            .invoke_async(&mut conn)
            .await
            .expect("pooled script call");
        let _acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(REDISSON_WAIT_MS)
            .query_async(&mut conn)
            .await
            .expect("WAIT");
        pool.free.borrow_mut().push(conn);
        reply
    }

    /// Runs the acquire script until it succeeds.
    pub async fn acquire(&self, key: &str) -> RawHeld {
        let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
        let field = format!("{}:{owner}", self.client_id);
        let token_key = derived("redisson_lock_token", key);
        let lease_ms = LEASE.as_millis() as u64;
        loop {
            let mut call = SCRIPTS.0.prepare_invoke();
            call.key(key)
                .key(&token_key)
                .arg(lease_ms)
                .arg(&field)
                // The token counter's lifetime: the library's default, an hour.
                .arg(3_600_000u64)
                // A new owner field per acquisition, as lockwarden's default owner.
                .arg("1");
            let reply: Vec<i64> = self.call(call).await;
            let pttl = match reply.as_slice() {
                [1, _token, _holds] => {
                    return RawHeld {
                        key: key.to_string(),
                        field,
                    }
                }
                [0, pttl] => *pttl,
                other => panic!("acquire script answered {other:?}"),
            };
            let fallback = u64::try_from(pttl)
                .map(Duration::from_millis)
                .map_or(RAW_FALLBACK, |ttl| ttl.min(RAW_FALLBACK));
            match &self.wake {
                Some(wake) => {
                    let _ = tokio::time::timeout(fallback, wake.notified()).await;
                }
                None => actix_rt::time::sleep(fallback.min(NAIVE_POLL)).await,
            }
        }
    }

    /// Runs the release script once, with a fresh request id as lockwarden does.
    pub async fn release(&self, held: RawHeld) {
        let request_id = uuid::Uuid::new_v4().to_string();
        let mut call = SCRIPTS.1.prepare_invoke();
        call.key(&held.key)
            .key(derived("redisson_lock__channel", &held.key))
            .key(format!(
                "{}:{request_id}",
                derived("redisson_unlock_latch", &held.key)
            ))
            .arg(LEASE.as_millis() as u64)
            .arg(&held.field)
            .arg(LATCH_TTL_MS)
            .arg("0")
            // First attempt: the script skips reading the latch.
            .arg("0");
        let reply: redis::Value = self.call(call).await;
        // {0, heard} when freed (heard: who received the unlock message).
        let freed = match &reply {
            redis::Value::Array(v) => v.first() == Some(&redis::Value::Int(0)),
            other => *other == redis::Value::Int(0),
        };
        assert!(freed, "raw release of {} answered {reply:?}", held.key);
    }
}

/// `SET NX PX` with polling.
pub struct Naive {
    /// The command connection.
    conn: MultiplexedConnection,
    /// Prefix of every value, so that values are unique across clients.
    client_id: String,
}

/// A lock held by the naive client.
pub struct NaiveHeld {
    /// The key.
    key: String,
    /// The value only this holder wrote.
    value: String,
}

impl Naive {
    /// Connects.
    pub async fn connect(url: &str) -> Naive {
        Naive {
            conn: connect(url).await,
            client_id: client_id(),
        }
    }

    /// Polls `SET NX PX` every 10 ms until it succeeds.
    pub async fn acquire(&self, key: &str) -> NaiveHeld {
        let owner = NEXT_OWNER.fetch_add(1, Ordering::Relaxed);
        let value = format!("{}:{owner}", self.client_id);
        loop {
            let set: Option<String> = redis::cmd("SET")
                .arg(key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(LEASE.as_millis() as u64)
                .query_async(&mut self.conn.clone())
                .await
                .expect("naive SET NX");
            if set.is_some() {
                return NaiveHeld {
                    key: key.to_string(),
                    value,
                };
            }
            actix_rt::time::sleep(NAIVE_POLL).await;
        }
    }

    /// Deletes the key if it still holds our value.
    pub async fn release(&self, held: NaiveHeld) {
        let deleted: i64 = COMPARE_AND_DELETE
            .key(&held.key)
            .arg(&held.value)
            .invoke_async(&mut self.conn.clone())
            .await
            .expect("naive release script");
        assert_eq!(
            deleted, 1,
            "naive release of {} found another value",
            held.key
        );
    }
}
