//! Client memory per held lock, counted exactly: this test binary's global
//! allocator keeps a running total of live heap bytes.
//!
//! A manager holding many locks keeps, per lock, a lock actor (its state, context,
//! mailbox and task), its registry entry, its renewal-table entry and the guard the
//! caller holds. The budget is 2 KiB per held lock (issue 5); this test fails when a
//! change makes a held lock heavier than that.

// A global allocator can only be an `unsafe impl`: the one unsafe code in the
// project, allowed here alone (the crate denies it everywhere else).
#![allow(unsafe_code)]

use lockwarden_testkit as support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use support::{hold, manager, RedisServer};

/// The system allocator, counting live bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Held watchdog locks cost at most 2 KiB of client heap each, guards included.
#[actix_rt::test]
async fn a_held_lock_costs_at_most_2_kib_of_client_heap() {
    const LOCKS: usize = 4000;
    let server = RedisServer::start();
    let m = manager(&server, |c| c).await;
    // Warm-up: scripts loaded, connection buffers grown, maps sized once.
    let mut guards = Vec::with_capacity(LOCKS);
    for i in 0..LOCKS {
        guards.push(hold(&m, &format!("warm:{i}"), |a| a).await);
    }
    for g in guards.drain(..) {
        g.release().await.expect("released");
    }
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..LOCKS {
        guards.push(hold(&m, &format!("memory:lock:{i:06}"), |a| a).await);
    }
    let per_lock = (LIVE.load(Ordering::Relaxed) - before) as f64 / LOCKS as f64;
    eprintln!("client heap per held lock: {per_lock:.0} B");
    assert!(per_lock <= 2048.0, "{per_lock:.0} B of heap per held lock");
    for g in guards.drain(..) {
        g.release().await.expect("released");
    }
}
