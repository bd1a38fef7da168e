//! Cheap random numbers for ids and jitter, drawn without a system call.
//!
//! Every release carries a request id (the key of Redisson's unlock latch, so that
//! a retried release is recognised), and waiters woken by another process draw a
//! random delay. `Uuid::new_v4` asks the kernel for each one (`getrandom`): one
//! system call per release, about 4% of a lone holder's client CPU in scenario A.
//! Neither use needs the kernel's strength: a request id must only differ from
//! the other ids of the same lock while its latch key lives (seconds), and a
//! jitter must only spread. So each thread runs a SplitMix64 generator, seeded
//! once from the kernel, and a request id is 128 bits of it written as a UUID
//! (the shape Redisson's ids have).

use std::cell::Cell;

thread_local! {
    /// The generator's state; seeded from the kernel on first use in a thread.
    static STATE: Cell<u64> = Cell::new(seed());
}

/// A seed from the kernel, with the thread's id mixed in so that two threads
/// never share a sequence even if their seeds met.
fn seed() -> u64 {
    let (high, low) = uuid::Uuid::new_v4().as_u64_pair();
    let thread = std::thread::current().id();
    let mut mixed = high ^ low.rotate_left(17);
    for b in format!("{thread:?}").bytes() {
        mixed = mixed.rotate_left(8) ^ u64::from(b);
    }
    mixed
}

/// The next 64 random bits (SplitMix64: an additive sequence through a strong
/// mixing function; every seed gives a full period of 2^64).
pub(crate) fn next_u64() -> u64 {
    STATE.with(|state| {
        let s = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        state.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// A number in `0..bound` (0 when `bound` is 0); the bias of a 64-bit remainder
/// is far below anything a jitter could show.
pub(crate) fn below(bound: u64) -> u64 {
    next_u64().checked_rem(bound).unwrap_or(0)
}

/// A fresh request id, written as a UUID (version 4 layout).
pub(crate) fn request_id() -> String {
    uuid::Builder::from_random_bytes(
        (u128::from(next_u64()) << 64 | u128::from(next_u64())).to_be_bytes(),
    )
    .into_uuid()
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_look_like_uuids_and_do_not_repeat() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 10_000);
        let one = ids.iter().next().expect("ids");
        let parsed = uuid::Uuid::parse_str(one).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
    }

    #[test]
    fn threads_draw_different_sequences() {
        let here: Vec<u64> = (0..4).map(|_| next_u64()).collect();
        let there = std::thread::spawn(|| (0..4).map(|_| next_u64()).collect::<Vec<u64>>())
            .join()
            .expect("thread");
        assert_ne!(here, there);
    }

    #[test]
    fn below_stays_below_and_spreads() {
        let draws: Vec<u64> = (0..1_000).map(|_| below(60)).collect();
        assert!(draws.iter().all(|d| *d < 60));
        assert!(draws.iter().any(|d| *d < 10) && draws.iter().any(|d| *d >= 50));
        assert_eq!(below(0), 0);
    }
}
