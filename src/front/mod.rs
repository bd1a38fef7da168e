//! The front: what an application talks to.
//!
//! - `manager`: the [`LockManager`](manager::LockManager) actor, its registry of
//!   lock actors and [`GetStats`](manager::GetStats);
//! - `acquire`: the [`Acquire`](acquire::Acquire) message and how its answer
//!   reaches the caller;
//! - `handle`: [`LockHandle`](handle::LockHandle) and the [`Handle`](handle::Handle)
//!   message;
//! - `locks`: [`Locks`](locks::Locks), the everyday calls as methods on the manager's
//!   address;
//! - `inspect`: [`Inspect`](inspect::Inspect) and
//!   [`ForceUnlock`](inspect::ForceUnlock);
//! - `fenced`: [`FencedWrite`](fenced::FencedWrite), a write on a data key in
//!   Redis that a stale fencing token cannot make;
//! - `multi`: [`MultiLock`](multi::MultiLock), all of several locks as one;
//! - `redlock`: [`RedLock`](redlock::RedLock), one lock on a majority of independent
//!   servers (one manager each);
//! - `semaphore`, `latch`: [`SemaphoreHandle`](semaphore::SemaphoreHandle) and
//!   [`LatchHandle`](latch::LatchHandle), Redisson's synchronizers, with the
//!   messages that make them; `permit_semaphore`:
//!   [`PermitSemaphoreHandle`](permit_semaphore::PermitSemaphoreHandle), permits
//!   with ids and expiries; `synchronizers`: the manager's registry of their
//!   actors;
//! - `leader`: [`Leader`](leader::Leader), leader election on the exclusive lock,
//!   and [`WhoLeads`](leader::WhoLeads);
//! - `settle`: [`Settle`](settle::Settle), for a process on its way out: waits
//!   until nothing the manager sent to Redis is left unsettled;
//! - `shutdown`: [`Shutdown`](shutdown::Shutdown), for a process on its way out:
//!   answers the waiters, gives every held lock back and deposes its leaders, so
//!   that another process takes over at once;
//! - `ping`: [`Ping`](ping::Ping), whether the manager reaches Redis now (for a
//!   readiness endpoint);
//! - `admin`: [`Admin`](admin::Admin), the operator's read-only views, which need no
//!   manager; `admin_waiters` and `admin_deadlocks` add who waits on what and
//!   the cycles among those waits.
//!
//! Everything here sits on the actors, the node seam and the wire layer, and
//! nothing below imports it.

pub(crate) mod acquire;
pub(crate) mod admin;
mod admin_deadlocks;
mod admin_waiters;
pub(crate) mod fenced;
pub(crate) mod handle;
pub(crate) mod inspect;
pub(crate) mod latch;
pub(crate) mod leader;
pub(crate) mod locks;
pub(crate) mod manager;
pub(crate) mod multi;
pub(crate) mod permit_semaphore;
pub(crate) mod ping;
pub(crate) mod redlock;
pub(crate) mod semaphore;
pub(crate) mod settle;
pub(crate) mod shutdown;
pub(crate) mod synchronizers;
