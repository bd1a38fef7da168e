//! The front: what an application talks to.
//!
//! - `manager`: the [`LockManager`](manager::LockManager) actor, its registry of
//!   lock actors and [`GetStats`](manager::GetStats);
//! - `acquire`: the [`Acquire`](acquire::Acquire) message and how its answer
//!   reaches the caller;
//! - `handle`: [`LockHandle`](handle::LockHandle) and the [`Handle`](handle::Handle)
//!   message;
//! - `inspect`: [`Inspect`](inspect::Inspect) and
//!   [`ForceUnlock`](inspect::ForceUnlock);
//! - `admin`: [`Admin`](admin::Admin), the operator's read-only views, which need no
//!   manager.
//!
//! Everything here sits on the actors, the node seam and the wire layer, and
//! nothing below imports it.

pub(crate) mod acquire;
pub(crate) mod admin;
pub(crate) mod handle;
pub(crate) mod inspect;
pub(crate) mod manager;
