//! One heavy test at a time in a test binary: the tests that raise a Cluster or
//! a Sentinel set, fail a master over, burn a server's core with a script, or
//! measure timing under contention start with `let _heavy = support::heavy();`,
//! and the others of that kind in the same binary wait until it is dropped.
//!
//! Why: the integration tests are grouped into a few binaries (`tests/<group>/`)
//! so that this support code compiles a few times instead of once per test file;
//! a binary runs its tests on as many threads as there are cores. Two topologies
//! at once (a 2,000-lock cluster beside a Sentinel failover, say) on 2 cores
//! slow each other past the bounds their waits were measured with; one beside a
//! light test does not. Binaries run one after another, so one slot per binary
//! is one heavy test on the machine.
//!
//! A `Mutex<bool>` and a `Condvar` rather than a held `MutexGuard`: the slot is
//! kept across `.await`s, and a std guard held there is what clippy's
//! `await_holding_lock` refuses (rightly, in general); a test that panics frees
//! the slot when its `Heavy` is dropped during the unwind.

use std::sync::{Condvar, Mutex, PoisonError};

/// Whether a heavy test of this binary is running.
static TAKEN: Mutex<bool> = Mutex::new(false);

/// Told when the slot is freed.
static FREED: Condvar = Condvar::new();

/// This binary's heavy slot, held until dropped.
#[must_use = "the slot is freed when this is dropped: bind it to `_heavy`"]
pub struct Heavy(());

/// Takes this binary's heavy slot, waiting (the thread blocked) while another
/// test holds it. Call it first, before any server starts or any clock is read.
pub fn heavy() -> Heavy {
    let mut taken = TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    while *taken {
        taken = FREED.wait(taken).unwrap_or_else(PoisonError::into_inner);
    }
    *taken = true;
    Heavy(())
}

impl Drop for Heavy {
    fn drop(&mut self) {
        *TAKEN.lock().unwrap_or_else(PoisonError::into_inner) = false;
        FREED.notify_one();
    }
}
