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
//! # Where to start
//! - [`LockManager::start`] with a [`Config`] (every setter says its default);
//!   [`Locks`] gives the everyday calls on the manager's address with one error
//!   type, [`LockError`] ([`LockError::is_retryable`] answers "try again?").
//! - Locks: [`Acquire`] (a message) or [`LockHandle`] (a handle on one name);
//!   the guard, [`LockGuard`], releases on [`release`](LockGuard::release) or
//!   drop and tells of a loss through [`lost`](LockGuard::lost) ([`LostReason`]).
//! - Looking: [`Inspect`] (who holds a lock: [`LockInfo`], [`Holder`] with its
//!   [`ClientInfo`]), [`WhoLeads`], [`GetStats`] ([`Stats`]); [`Admin`] for
//!   operators, without a manager.
//! - Readiness and deploys: [`Ping`] (is Redis reachable now), [`Shutdown`]
//!   (hand locks and leadership over before the process exits: call it after
//!   actix-web's `run().await`), [`Settle`].
//! - With actix-web (the `actix-web` feature): [`LockError`] is a
//!   `ResponseError`, so that a handler's `?` answers a lock error with its
//!   status (a wait that ran out 503 with `Retry-After`, a stale fencing token
//!   409; the README's "With actix-web" has the table), and [`Locks`] has
//!   [`fenced_write`](Locks::fenced_write).
//!
//! `docs/architecture.md` describes how the crate is built inside (its layers,
//! where a new lock kind or a new Redis deployment goes).
//!
//! The examples in this documentation are compiled but not run (`no_run`): they need
//! a Redis server. The same flows run against real servers in `tests/`, which start
//! their own `redis-server` processes.
#![deny(missing_docs, missing_debug_implementations)]

mod actors;
mod client;
mod config;
mod deadlock;
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
mod unit;
mod view;
#[cfg(feature = "actix-web")]
mod web;
mod wire;

pub use client::{ClientInfo, UNKNOWN_CLIENT};
pub use config::{Config, MAX_LEASE};
pub use deadlock::{Deadlock, DeadlockLink};
pub use error::{LockError, LostReason, NameError, FENCE_TOKEN_MARGIN};
pub use front::acquire::{Acquire, AcquireResponse};
pub use front::admin::{check_lease, check_lock_name, Admin, LockSummary};
pub use front::fenced::FencedWrite;
pub use front::handle::{Handle, LockHandle};
pub use front::inspect::{ForceUnlock, Inspect};
pub use front::latch::{Latch, LatchHandle};
pub use front::leader::{Deposed, DeposedReason, Elected, Leader, Leadership, Resign, WhoLeads};
pub use front::locks::Locks;
pub use front::manager::{GetReplicaConfirmation, GetStats, LockManager};
pub use front::multi::{MultiGuard, MultiLock};
pub use front::permit_semaphore::{PermitGuard, PermitSemaphore, PermitSemaphoreHandle};
pub use front::ping::Ping;
pub use front::redlock::{RedGuard, RedLock};
pub use front::semaphore::{Semaphore, SemaphoreGuard, SemaphoreHandle};
pub use front::settle::Settle;
pub use front::shutdown::Shutdown;
pub use guard::{LockGuard, LockLost, ReleaseOutcome};
pub use keys::Owner;
pub use kind::AcquireKind;
pub use node::ReplicaConfirmation;
/// The Redis client error inside [`LockError::Redis`], re-exported so that callers
/// can name it without depending on `redis` themselves.
pub use redis::RedisError;
pub use stats::Stats;
pub use sync_view::{RecordedWaiter, SynchronizerKind, SynchronizerSummary};
pub use view::{Holder, LockInfo, LockKind, QueuedWaiter};
