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
//! Redisson's three, in its Redis layout, so that Java services share them:
//! - the exclusive reentrant lock (the default);
//! - the fair lock, [`Acquire::fair`]: granted in the order waiters first queued,
//!   across processes; a waiter whose process died is skipped within
//!   [`Config::fair_waiter_lease`];
//! - the read-write lock, [`Acquire::read`] / [`Acquire::write`]: many readers or
//!   one writer; the writer may also read (a downgrade), a reader asking for the
//!   write lock gets [`LockError::UpgradeRefused`] at once.
//!
//! Guards and handles carry their [`AcquireKind`]; [`Inspect`] reports what a lock's
//! hash shows ([`LockKind`], with a read-write lock's mode) and a fair lock's queue.
//!
//! # What it guarantees
//! - Redis is the only truth about who holds a lock; every change is one Lua script.
//! - A lock taken without a lease is renewed by a watchdog while held and frees
//!   within one lease after its holder dies.
//! - Waiters are woken by the holder's unlock message, with a timer as fallback.
//! - Every acquisition gets a fencing token larger than all before it.
//! - A holder is told when its lock is lost ([`LockGuard::lost`]).
//! - A waiter whose caller goes away leaves the queue; a grant that reaches nobody
//!   is released at once.
//! - Bad input is refused with a typed error before anything reaches Redis.
//!
//! # Layout
//! - `config`: [`Config`], every setting and its default.
//! - `error`: [`LockError`], [`NameError`], [`LostReason`].
//! - `keys`: Redis key, channel and owner-field naming ([`Owner`]), name checks.
//! - `scripts`: the Lua scripts of `lua/`, loaded once, with typed results (one
//!   file per kind of lock).
//! - `manager`: the [`LockManager`] actor and its messages ([`Acquire`],
//!   [`Handle`], [`GetStats`]).
//! - `inspect`: its messages on one lock by name, of any kind: [`Inspect`]
//!   ([`LockInfo`], [`Holder`]) and [`ForceUnlock`].
//! - `lock`: the per-name-and-kind lock actor: waiter queue, holdings, fallback
//!   timers, the fair queue's places; [`AcquireKind`] (exclusive, fair, read, write).
//! - `renewer`: the watchdog, one per manager, renewing held locks in batches.
//! - `subscriber`: the pub/sub actor that routes unlock messages, supervised.
//! - `guard`: [`LockGuard`] and [`LockHandle`].
//! - `stats`: the manager's counters ([`Stats`]).
#![deny(missing_docs, missing_debug_implementations)]

mod admin;
mod config;
mod error;
mod guard;
mod inspect;
mod keys;
mod lock;
mod manager;
mod renewer;
mod scripts;
mod server_checks;
mod signal;
mod stats;
mod subscriber;
mod tls;

pub use admin::{check_lock_name, Admin, LockKind, LockSummary};
pub use config::Config;
pub use error::{LockError, LostReason, NameError};
pub use guard::{LockGuard, LockHandle, LockLost, ReleaseOutcome};
pub use inspect::{ForceUnlock, Holder, Inspect, LockInfo, QueuedWaiter};
pub use keys::Owner;
pub use lock::AcquireKind;
pub use manager::{Acquire, AcquireResponse, GetStats, Handle, LockManager};
pub use stats::Stats;
