//! Distributed, reentrant, auto-renewed locks for Rust services on Redis, built as
//! actix actors, in the Redis layout of Redisson (Java), so that Rust and Java
//! services can share locks.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockwarden::{Acquire, Config, Handle, LockManager};
//!
//! #[actix::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let manager = LockManager::start(Config::from_url("redis://127.0.0.1:6379")?).await?;
//!
//!     // As a message: wait up to 5 s; the watchdog renews the lock while it is held.
//!     let guard = manager.send(Acquire::new("orders:42").wait(Duration::from_secs(5))).await??;
//!     println!("token {}", guard.fencing_token());
//!     guard.release().await?;
//!
//!     // Through a handle on one name.
//!     let orders = manager.send(Handle::new("orders:42")).await??;
//!     if let Some(guard) = orders.try_acquire().await? {
//!         guard.release().await?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Kinds of lock
//! Redisson's, in its Redis layout, so that Java services share them:
//! - the exclusive reentrant lock (the default; Redisson's `getLock`);
//! - the fair lock, [`Acquire::fair`]: granted in the order waiters first queued,
//!   across processes; a waiter whose process died is skipped within
//!   [`Config::fair_waiter_lease`];
//! - the read-write lock, [`Acquire::read`] / [`Acquire::write`]: many readers or
//!   one writer; the writer may also read (a downgrade), a reader asking for the
//!   write lock gets [`LockError::UpgradeRefused`] at once;
//! - the spin lock, [`Acquire::spin`]: the exclusive lock's key, with waiters that
//!   ask again after a growing delay ([`Config::spin_backoff`]) instead of
//!   subscribing, for a Redis that refuses SUBSCRIBE or very many locks waited on;
//! - the non-reentrant lock and non-reentrant fair lock,
//!   [`Acquire::non_reentrant`]: an owner that holds the lock and asks again gets
//!   [`LockError::ReentryRefused`] at once, never a wait on itself;
//! - the fenced lock (Redisson's `RFencedLock`): every kind is one here, every
//!   guard carries its token ([`LockGuard::fencing_token`]); and, beyond it, the
//!   resource's side: [`FencedWrite`] runs a write on a key in Redis only if the
//!   token is not below the newest that key has accepted.
//!
//! Guards and handles carry their [`AcquireKind`]; [`Inspect`] reports what a lock's
//! hash shows ([`LockKind`], with a read-write lock's mode) and a fair lock's queue.
//!
//! # Synchronizers
//! Redisson's, in its Redis layout, on the same subscriber, renewer and waiting
//! rules as the locks: the semaphore ([`Locks::semaphore`], [`SemaphoreHandle`],
//! [`SemaphoreGuard`]), the permit-expirable semaphore ([`PermitSemaphore`]: permits
//! with ids, expiring on the Redis clock or renewed by the watchdog,
//! [`PermitGuard::lost`]), the count-down latch ([`Locks::latch`],
//! [`LatchHandle`]); and leader election on the exclusive lock ([`Leader`], which
//! sends [`Elected`] and [`Deposed`] to an actor of yours; [`WhoLeads`]).
//!
//! # What it guarantees
//! - Redis is the only truth about who holds a lock; every change is one Lua script.
//! - A lock taken without a lease is renewed by a watchdog while held and frees
//!   within one lease after its holder dies.
//! - Waiters are woken by the holder's unlock message, with a timer as fallback.
//! - Every acquisition gets a fencing token larger than all before it.
//! - A holder is told when its lock is lost ([`LockGuard::lost`]); with
//!   [`Config::lock_delay`], a lock lost that way stays taken for the delay, so
//!   the holder learns of it before anyone else acts.
//! - A waiter whose caller goes away leaves the queue; a grant that reaches nobody
//!   is released at once.
//! - Bad input is refused with a typed error before anything reaches Redis.
//!
//! # Layout
//! The crate is built in layers; each imports only the ones below it.
//! - Words every layer uses: `config` ([`Config`]), `error` ([`LockError`],
//!   [`NameError`], [`LostReason`]), `keys` (Redis key, channel and owner-field
//!   naming; [`Owner`]), `kind` ([`AcquireKind`]), `view` (the read model of a lock:
//!   [`LockInfo`], [`Holder`], [`QueuedWaiter`], [`LockKind`]), `guard`
//!   ([`LockGuard`], [`ReleaseOutcome`], [`LockLost`]), `signal` (how a holding
//!   tells its guards it was lost), `stats` ([`Stats`], and the metrics recorded
//!   through the `metrics` facade), `client` (a manager's registry entry:
//!   [`ClientInfo`]).
//! - `wire`: the Lua scripts of `lua/` as typed calls, one struct per script, over
//!   any redis-rs connection; knows no actor and no deployment.
//! - `node`: the Redis seam, the only code that knows the deployment: it connects,
//!   hands out the command connection, the pub/sub source and the key groups that
//!   batches follow; the coalescer that merges script calls.
//! - `actors`: the lock actor (one file per kind of lock under `lock/kinds/`), the
//!   subscriber that routes unlock messages, the renewer (the watchdog).
//! - `front`: the [`LockManager`] and its messages ([`Acquire`], [`Handle`] /
//!   [`LockHandle`], [`Inspect`], [`ForceUnlock`], [`GetStats`]); [`MultiLock`] and
//!   [`RedLock`] over one or several managers; [`Admin`] for operators (locks,
//!   semaphores and latches by kind: [`LockSummary`], [`SynchronizerSummary`]).
//!
//! `docs/architecture.md` draws the layers and says where a new lock kind or a new
//! Redis deployment goes.
//!
//! The examples in this documentation are compiled but not run (`no_run`): they need
//! a Redis server. The same flows run against real servers in `tests/`, which start
//! their own `redis-server` processes.
#![deny(missing_docs, missing_debug_implementations)]

mod actors;
mod client;
mod config;
mod durations;
mod error;
mod front;
mod guard;
mod keys;
mod kind;
mod node;
mod random;
mod reply;
mod signal;
mod stats;
mod sync_view;
mod tls;
mod view;
mod wire;

pub use client::{ClientInfo, UNKNOWN_CLIENT};
pub use config::{Config, MAX_LEASE};
pub use error::{LockError, LostReason, NameError, FENCE_TOKEN_MARGIN};
pub use front::acquire::{Acquire, AcquireResponse};
pub use front::admin::{check_lease, check_lock_name, Admin, LockSummary};
pub use front::fenced::FencedWrite;
pub use front::handle::{Handle, LockHandle};
pub use front::inspect::{ForceUnlock, Inspect};
pub use front::latch::{Latch, LatchHandle};
pub use front::leader::{Deposed, DeposedReason, Elected, Leader, Leadership, Resign, WhoLeads};
pub use front::locks::Locks;
pub use front::manager::{GetStats, LockManager};
pub use front::multi::{MultiGuard, MultiLock};
pub use front::permit_semaphore::{PermitGuard, PermitSemaphore, PermitSemaphoreHandle};
pub use front::ping::Ping;
pub use front::redlock::{RedGuard, RedLock};
pub use front::semaphore::{Semaphore, SemaphoreGuard, SemaphoreHandle};
pub use front::settle::Settle;
pub use guard::{LockGuard, LockLost, ReleaseOutcome};
pub use keys::Owner;
pub use kind::AcquireKind;
/// The Redis client error inside [`LockError::Redis`], re-exported so that callers
/// can name it without depending on `redis` themselves.
pub use redis::RedisError;
pub use stats::Stats;
pub use sync_view::{RecordedWaiter, SynchronizerKind, SynchronizerSummary};
pub use view::{Holder, LockInfo, LockKind, QueuedWaiter};
