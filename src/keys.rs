//! Names on the Redis side: lock keys, derived keys, channels and owner fields.
//!
//! Everything here follows the Redisson layout (`docs/protocol.md`) so that a Java
//! service using Redisson and a Rust service using lockwarden that name the same lock
//! exclude each other. Derived keys carry the lock name in a hash tag, so all keys of
//! one lock land in one cluster slot; a name for which that cannot hold is refused
//! here, before anything is sent to Redis.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::NameError;

/// Prefix of the channel on which a freed lock is announced.
const CHANNEL_PREFIX: &str = "redisson_lock__channel";
/// Prefix of the short-lived key that makes a retried release idempotent.
const LATCH_PREFIX: &str = "redisson_unlock_latch";
/// Prefix of the fencing token counter.
const TOKEN_PREFIX: &str = "redisson_lock_token";
/// Prefix of a fair lock's queue of waiting owner fields.
const QUEUE_PREFIX: &str = "redisson_lock_queue";
/// Prefix of a fair lock's zset of waiter deadlines.
const TIMEOUT_PREFIX: &str = "redisson_lock_timeout";
/// Prefix of a read-write lock's channel.
const RWLOCK_PREFIX: &str = "redisson_rwlock";
/// Prefix of a lock manager's registry entry (not Redisson's: lockwarden's own,
/// beside the lock layout, never inside a lock key).
const CLIENT_PREFIX: &str = "lockwarden:client";
/// Suffix (after the owner field) of a read hold's timeout key.
const READ_TIMEOUT_SUFFIX: &str = "rwlock_timeout";

/// Prefix of a semaphore's channel (Redisson's `RSemaphore` and
/// `RPermitExpirableSemaphore`): a release publishes the new number of permits there.
const SEMAPHORE_PREFIX: &str = "redisson_sc";
/// Prefix of a count-down latch's channel (Redisson's `RCountDownLatch`); unlike the
/// others it always wraps the name in braces, even a name that brings its own.
const LATCH_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";
/// Prefix of a synchronizer's kind label (lockwarden's own: Redisson keeps a
/// semaphore and a latch as the same integer string and records no kind).
const KIND_PREFIX: &str = "lockwarden_kind";
/// Prefix of a data key's fence (lockwarden's own, written by
/// [`FencedWrite`](crate::FencedWrite)).
const FENCE_PREFIX: &str = "lockwarden_fence";
/// Prefix of a name's waiting records (lockwarden's own, for operators: who has
/// waited long on a lock, semaphore or latch; `wire/waiting.rs`).
const WAITERS_PREFIX: &str = "lockwarden_waiters";
/// Prefix of a fair semaphore's queue of waiter ids (lockwarden's own: Redisson
/// has no fair semaphore; the layout mirrors its fair lock's queue).
const SEM_QUEUE_PREFIX: &str = "lockwarden_semaphore_queue";
/// Prefix of a fair semaphore's zset of place expiries (waiter id -> server ms).
const SEM_TIMEOUT_PREFIX: &str = "lockwarden_semaphore_timeout";
/// Prefix of a fair semaphore waiter's own channel.
const SEM_WAITER_CHANNEL_PREFIX: &str = "lockwarden_semaphore_channel";
/// Prefix of an exclusive lock's handoff queue: the fields of waiters that a
/// release makes the holder directly, head first (lockwarden's own: Redisson's
/// waiters are woken, not handed the lock).
const HANDOFF_QUEUE_PREFIX: &str = "lockwarden_handoff_queue";
/// Prefix of an exclusive lock's handoff places: a zset of field -> the server
/// time (ms) its place lapses at.
const HANDOFF_TIMEOUT_PREFIX: &str = "lockwarden_handoff_timeout";
/// Prefix of the channel on which a process is told that a release handed it
/// the lock, one per lock and process (Redisson's unlock channel carries only
/// numbers).
const HANDOFF_CHANNEL_PREFIX: &str = "lockwarden_handoff__channel";
/// Suffix of a permit-expirable semaphore's zset of taken permits.
const PERMIT_TIMEOUT_SUFFIX: &str = "timeout";
/// The part between a synchronizer's tagged name and an op id in an op marker
/// (lockwarden's own: `lua/once_prelude.lua`).
const OP_MARKER_INFIX: &str = ":lockwarden_done:";

/// The key families above, each as the text a key of it starts with and what it
/// is: the keys that only lockwarden's (and Redisson's) scripts may write, which
/// [`reserved`] refuses to [`FencedWrite`](crate::FencedWrite). A prefix added
/// above belongs here too (`every_derived_key_is_reserved` checks each key
/// builder of this file).
const RESERVED_PREFIXES: [(&str, &str, &str); 18] = [
    (CHANNEL_PREFIX, ":", "a lock's unlock channel"),
    (LATCH_PREFIX, ":", "a lock's unlock latch"),
    (TOKEN_PREFIX, ":", "a lock's fencing token counter"),
    (QUEUE_PREFIX, ":", "a fair lock's queue"),
    (TIMEOUT_PREFIX, ":", "a fair lock's waiter deadlines"),
    (RWLOCK_PREFIX, ":", "a read-write lock's channel"),
    (CLIENT_PREFIX, ":", "a lock manager's client registry entry"),
    (SEMAPHORE_PREFIX, ":", "a semaphore's channel"),
    (LATCH_CHANNEL_PREFIX, "{", "a count-down latch's channel"),
    (KIND_PREFIX, ":", "a semaphore's or latch's kind label"),
    (FENCE_PREFIX, ":", "a data key's fence"),
    (WAITERS_PREFIX, ":", "a name's waiting records"),
    (SEM_QUEUE_PREFIX, ":", "a fair semaphore's queue"),
    (SEM_TIMEOUT_PREFIX, ":", "a fair semaphore's place expiries"),
    (
        SEM_WAITER_CHANNEL_PREFIX,
        ":",
        "a fair semaphore waiter's channel",
    ),
    (
        HANDOFF_QUEUE_PREFIX,
        ":",
        "an exclusive lock's handoff queue",
    ),
    (
        HANDOFF_TIMEOUT_PREFIX,
        ":",
        "an exclusive lock's handoff places",
    ),
    (HANDOFF_CHANNEL_PREFIX, ":", "a process's handoff channel"),
];

/// Message published when a lock frees: wake one waiter.
pub(crate) const WAKE_ONE: &str = "0";
/// Message published when all waiters may proceed (a write lock freed).
pub(crate) const WAKE_ALL: &str = "1";

/// One holder inside a process, for reentrancy.
///
/// Two acquisitions with the same `Owner` on the same lock re-enter it (the hold
/// count goes up) instead of waiting for each other. Redisson uses the thread id for
/// this; an explicit token fits async code, where one task moves between threads.
/// An `Owner` is cheap to make and to copy; every call to [`Owner::new`] gives one
/// that is unique within the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(u64);

impl Owner {
    /// A new owner, different from every other made in this process.
    pub fn new() -> Owner {
        // Starts at 1 so that no owner number is 0, which reads like "unset".
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Owner(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The owner number, as it appears after the client id in the owner field.
    pub fn id(self) -> u64 {
        self.0
    }
}

impl Default for Owner {
    fn default() -> Owner {
        Owner::new()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The hash field that names a holder: `<client id>:<owner number>`.
pub(crate) fn owner_field(client_id: &str, owner: Owner) -> String {
    format!("{client_id}:{}", owner.0)
}

/// The name with its hash tag: `{<name>}`, or the name itself when it brings its
/// own. Suffixed keys are built on it, and scripts build a read hold's timeout key
/// of any owner from it.
pub(crate) fn tagged(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// `<prefix>:{<name>}`, or `<prefix>:<name>` when the name brings its own hash tag.
fn prefixed(prefix: &str, name: &str) -> String {
    prefixed_with(prefix, name, 0)
}

/// [`prefixed`], in a string with room for `more` bytes after it: each key is
/// one allocation (`format!` grows its string as it writes, a reallocation or
/// two per key, and these keys are built on every acquire and release).
fn prefixed_with(prefix: &str, name: &str, more: usize) -> String {
    let braces = !name.contains('{');
    let mut key = String::with_capacity(prefix.len() + name.len() + 3 + more);
    key.push_str(prefix);
    key.push(':');
    if braces {
        key.push('{');
    }
    key.push_str(name);
    if braces {
        key.push('}');
    }
    key
}

/// The channel on which this lock's release is published.
pub(crate) fn channel(name: &str) -> String {
    prefixed(CHANNEL_PREFIX, name)
}

/// The fencing token counter of this lock.
pub(crate) fn token(name: &str) -> String {
    prefixed(TOKEN_PREFIX, name)
}

/// The fence of a data key written with [`FencedWrite`](crate::FencedWrite): the
/// newest fencing token that key has accepted (lockwarden's own, Redisson has no
/// such key), `lockwarden_fence:{<tag>}:<key>`. `<tag>` is the part of the key
/// that Redis Cluster hashes (its hash tag, or the whole key without one), so the
/// fence lives in the key's slot; the whole key after it gives each key a fence
/// of its own (`x` and `{x}` share their tag, not their fence). `data_key` must
/// have passed [`validate_name`]: a key such as `a}b` has no tag to copy.
pub(crate) fn fence(data_key: &str) -> String {
    format!("{FENCE_PREFIX}:{{{}}}:{data_key}", hashed_part(data_key))
}

/// The latch that remembers the outcome of the release with this request id.
pub(crate) fn latch(name: &str, request_id: &str) -> String {
    let mut key = prefixed_with(LATCH_PREFIX, name, 1 + request_id.len());
    key.push(':');
    key.push_str(request_id);
    key
}

/// A semaphore's channel: `redisson_sc:{<name>}` (the semaphore's key is the name
/// itself, a string holding the available permits).
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefixed(SEMAPHORE_PREFIX, name)
}

/// A count-down latch's channel: `redisson_countdownlatch__channel__{<name>}`, braces
/// added whatever the name holds, as Redisson does (the latch's key is the name
/// itself, a string holding the count).
pub(crate) fn latch_channel(name: &str) -> String {
    format!("{LATCH_CHANNEL_PREFIX}{{{name}}}")
}

/// The kind label of a semaphore or latch that lockwarden made:
/// `lockwarden_kind:{<name>}`, a string (`semaphore`, `permit-semaphore` or
/// `latch`) in the synchronizer's slot, written once the key is made
/// (`wire::label`). Without it nobody can tell a semaphore's key from a latch's.
pub(crate) fn kind_label(name: &str) -> String {
    prefixed(KIND_PREFIX, name)
}

/// The waiting records of `name`: `lockwarden_waiters:{<name>}`, a zset of
/// waiter -> expiry (Unix ms) in the name's slot (lockwarden's own; Redisson
/// neither writes nor reads it). `wire/waiting.rs` says what a member holds.
pub(crate) fn waiters(name: &str) -> String {
    prefixed(WAITERS_PREFIX, name)
}

/// The name whose waiting records live at `key`, when `key` is one
/// ([`waiters`] read backwards).
pub(crate) fn name_of_waiters(key: &str) -> Option<&str> {
    let rest = key.strip_prefix(WAITERS_PREFIX)?.strip_prefix(':')?;
    // `{<name>}` for a name without braces; the name itself when it has its own.
    match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(inner) if !inner.contains(['{', '}']) => Some(inner),
        _ => Some(rest),
    }
}

/// A permit-expirable semaphore's taken permits: a zset of permit id -> expiry,
/// `{<name>}:timeout` (`<name>:timeout` when the name brings its own hash tag), as
/// Redisson's `RPermitExpirableSemaphore` names it.
pub(crate) fn permit_timeouts(name: &str) -> String {
    format!("{}:{PERMIT_TIMEOUT_SUFFIX}", tagged(name))
}

/// The marker of a synchronizer's change `op_id` (a permit given back, permits
/// taken for a waiter, a count-down): `{<name>}:lockwarden_done:<op id>`
/// (`<name>:lockwarden_done:<op id>` when the name brings its own hash tag), a
/// short-lived string in the name's slot that records what the change's first
/// copy did, so that a retry or a late copy changes nothing
/// (`lua/once_prelude.lua`). Under the name's tag, an ACL that lets a user work
/// a permit-expirable semaphore (`~{<prefix>*`) covers it.
pub(crate) fn op_marker(name: &str, op_id: &str) -> String {
    format!("{}{OP_MARKER_INFIX}{op_id}", tagged(name))
}

/// An exclusive lock's handoff queue: a list of waiting owner fields, head
/// first, `lockwarden_handoff_queue:{<name>}` (`lua/release.lua`).
pub(crate) fn handoff_queue(name: &str) -> String {
    prefixed(HANDOFF_QUEUE_PREFIX, name)
}

/// An exclusive lock's handoff places: a zset of owner field -> the server time
/// (ms) its place lapses at, `lockwarden_handoff_timeout:{<name>}`.
pub(crate) fn handoff_timeouts(name: &str) -> String {
    prefixed(HANDOFF_TIMEOUT_PREFIX, name)
}

/// The channel on which the process `client_id` is told that a release handed
/// it the lock `name`: `lockwarden_handoff__channel:{<name>}:<client id>`; the
/// message is `g<token>,<owner field>`.
pub(crate) fn handoff_channel(name: &str, client_id: &str) -> String {
    format!("{}:{client_id}", prefixed(HANDOFF_CHANNEL_PREFIX, name))
}

/// A fair lock's queue: a list of waiting owner fields, head first.
pub(crate) fn fair_queue(name: &str) -> String {
    prefixed(QUEUE_PREFIX, name)
}

/// A fair lock's waiter deadlines: a zset of owner field -> deadline (server ms).
pub(crate) fn fair_timeouts(name: &str) -> String {
    prefixed(TIMEOUT_PREFIX, name)
}

/// The channel on which one fair-lock waiter is told it is at the head of a free
/// lock: the unlock channel followed by `:<owner field>`.
pub(crate) fn fair_channel(name: &str, owner_field: &str) -> String {
    format!("{}:{owner_field}", channel(name))
}

/// A fair semaphore's queue: a list of waiter ids (`<client id>:<n>`), head
/// first: `lockwarden_semaphore_queue:{<name>}`.
pub(crate) fn sem_queue(name: &str) -> String {
    prefixed(SEM_QUEUE_PREFIX, name)
}

/// A fair semaphore's place expiries: a zset of waiter id -> the server time
/// (ms) its place lapses at: `lockwarden_semaphore_timeout:{<name>}`.
pub(crate) fn sem_timeouts(name: &str) -> String {
    prefixed(SEM_TIMEOUT_PREFIX, name)
}

/// The prefix of a fair semaphore waiter's own channel,
/// `lockwarden_semaphore_channel:{<name>}`; the waiter's is this followed by
/// `:<waiter id>` ([`sem_waiter_channel`]).
pub(crate) fn sem_channels(name: &str) -> String {
    prefixed(SEM_WAITER_CHANNEL_PREFIX, name)
}

/// The channel on which one fair semaphore waiter is told it is at the head
/// of the queue and permits were given back.
pub(crate) fn sem_waiter_channel(name: &str, waiter: &str) -> String {
    format!("{}:{waiter}", sem_channels(name))
}

/// The channel of a read-write lock.
pub(crate) fn rw_channel(name: &str) -> String {
    prefixed(RWLOCK_PREFIX, name)
}

/// The registry entry of the manager with this client id:
/// `lockwarden:client:{<client id>}`, a small hash in the client id's own slot.
pub(crate) fn client_key(client_id: &str) -> String {
    format!("{CLIENT_PREFIX}:{{{client_id}}}")
}

/// The prefix of one reader's hold timeout keys, `{<name>}:<owner field>:rwlock_timeout`;
/// hold n (1-based) lives at `<prefix>:<n>`.
pub(crate) fn read_timeouts(name: &str, owner_field: &str) -> String {
    format!("{}:{owner_field}:{READ_TIMEOUT_SUFFIX}", tagged(name))
}

/// What `key` is when it is one of the keys lockwarden or Redisson keep for a
/// lock, semaphore or latch beside its own key (the families of
/// [`RESERVED_PREFIXES`], a read hold's timeout key, a permit-expirable
/// semaphore's permits), or `None` for a key that is free for data. Only the
/// scripts may write these: a fenced write to a fencing counter or a fence would
/// lower it, one to a read hold's timeout would lengthen the hold. Judged on the
/// name alone, so a data key that happens to follow one of these layouts is
/// refused as well: Redisson would take it for its own too.
pub(crate) fn reserved(key: &str) -> Option<&'static str> {
    for (prefix, separator, what) in RESERVED_PREFIXES {
        if key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(separator))
        {
            return Some(what);
        }
    }
    // `<tagged name>:<owner field>:rwlock_timeout:<n>` (read_timeouts).
    if let Some((head, n)) = key.rsplit_once(':') {
        let counted = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
        if counted && head.ends_with(&format!(":{READ_TIMEOUT_SUFFIX}")) {
            return Some("a read hold's timeout key");
        }
    }
    // `{<name>}:lockwarden_done:<op id>` (op_marker).
    if hash_tag(key).is_some() && key.contains(OP_MARKER_INFIX) {
        return Some("a synchronizer's op marker");
    }
    // `{<name>}:timeout`, or `<name>:timeout` for a name with its own tag
    // (permit_timeouts): whichever, a tagged key ending in `:timeout`.
    if hash_tag(key).is_some()
        && key
            .strip_suffix(PERMIT_TIMEOUT_SUFFIX)
            .is_some_and(|head| head.ends_with(':'))
    {
        return Some("a permit-expirable semaphore's taken permits");
    }
    None
}

/// The key's hash tag: the text between the first `{` and the next `}`, when
/// there is such a pair and the text is not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The part of a key that Redis Cluster hashes to pick its slot: its hash tag
/// when it has one, else the whole key.
fn hashed_part(key: &str) -> &str {
    hash_tag(key).unwrap_or(key)
}

/// Whether two keys share a hash tag (or are equal without one), so that they live
/// in one cluster slot whatever the cluster. Keys in one slot by chance of CRC16
/// answer `false`: a script may only count on what a tag guarantees.
pub(crate) fn same_slot(a: &str, b: &str) -> bool {
    hashed_part(a) == hashed_part(b)
}

/// Checks a lock name: not empty, at most `max_len` bytes, and such that every key
/// derived from it hashes to the same cluster slot as the lock key itself.
pub(crate) fn validate_name(name: &str, max_len: usize) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max_len {
        return Err(NameError::TooLong {
            len: name.len(),
            max: max_len,
        });
    }
    // All derived keys are built by `prefixed`, so checking one of them covers all.
    // Equal hashed parts mean equal slots; names like `}x`, `a{}b` or `a{b` fail here.
    // A name without braces is its derived keys' hash tag whole: nothing to build.
    if name.contains(['{', '}']) && !same_slot(name, &channel(name)) {
        return Err(NameError::CrossSlot);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_follow_the_redisson_layout() {
        assert_eq!(channel("orders:42"), "redisson_lock__channel:{orders:42}");
        assert_eq!(token("orders:42"), "redisson_lock_token:{orders:42}");
        assert_eq!(latch("a", "r1"), "redisson_unlock_latch:{a}:r1");
        assert_eq!(
            channel("{user1}:cart"),
            "redisson_lock__channel:{user1}:cart"
        );
    }

    #[test]
    fn fair_and_read_write_keys_follow_the_redisson_layout() {
        assert_eq!(fair_queue("f"), "redisson_lock_queue:{f}");
        assert_eq!(fair_timeouts("f"), "redisson_lock_timeout:{f}");
        assert_eq!(fair_channel("f", "id:7"), "redisson_lock__channel:{f}:id:7");
        assert_eq!(rw_channel("rw"), "redisson_rwlock:{rw}");
        use crate::kind::{is_write_field, write_field};
        assert_eq!(write_field("id:7"), "id:7:write");
        assert!(is_write_field(&write_field("id:7")) && !is_write_field("id:7"));
        assert_eq!(read_timeouts("rw", "id:7"), "{rw}:id:7:rwlock_timeout");
        assert_eq!(
            read_timeouts("{u}:rw", "id:7"),
            "{u}:rw:id:7:rwlock_timeout"
        );
        for name in ["rw", "{u}:rw"] {
            let key = read_timeouts(name, "id:7");
            assert_eq!(hashed_part(&key), hashed_part(name), "{key}");
        }
    }

    #[test]
    fn names_whose_keys_would_split_across_slots_are_refused() {
        for bad in ["}x", "a{}b", "{}", "a{b", "x}y{"] {
            assert_eq!(validate_name(bad, 1024), Err(NameError::CrossSlot), "{bad}");
        }
        for good in ["orders:42", "{user1}:cart", "a{b}c", "ünïcode"] {
            assert_eq!(validate_name(good, 1024), Ok(()), "{good}");
        }
    }

    #[test]
    fn empty_and_long_names_are_refused() {
        assert_eq!(validate_name("", 8), Err(NameError::Empty));
        assert_eq!(
            validate_name("123456789", 8),
            Err(NameError::TooLong { len: 9, max: 8 })
        );
    }

    #[test]
    fn owners_are_unique() {
        assert_ne!(Owner::new(), Owner::new());
    }

    /// Each data key has a fence of its own, in the data key's slot: `x` and
    /// `{x}` (one tag, two keys) must not share `lockwarden_fence:{x}`.
    #[test]
    fn each_data_key_has_its_own_fence_in_its_slot() {
        assert_eq!(fence("x"), "lockwarden_fence:{x}:x");
        assert_eq!(fence("{x}"), "lockwarden_fence:{x}:{x}");
        assert_eq!(
            fence("{account:7}:balance"),
            "lockwarden_fence:{account:7}:{account:7}:balance"
        );
        let keys = ["x", "{x}", "{x}:y", "x:y", "a{x}", "{a{x}", "ünï", "{x}{y}"];
        for key in keys {
            assert_eq!(validate_name(key, 1024), Ok(()), "{key}");
            assert!(same_slot(key, &fence(key)), "{key}: {}", fence(key));
        }
        let fences: std::collections::HashSet<String> = keys.iter().map(|k| fence(k)).collect();
        assert_eq!(fences.len(), keys.len(), "{fences:?}");
    }

    /// Every key a lock, semaphore or latch keeps beside its own is refused as a
    /// data key, for a plain name and for one with its own hash tag.
    #[test]
    fn every_derived_key_is_reserved() {
        for name in ["job", "{t}:job"] {
            let derived = [
                channel(name),
                token(name),
                handoff_queue(name),
                handoff_timeouts(name),
                handoff_channel(name, "c1"),
                fence(name),
                latch(name, "r1"),
                semaphore_channel(name),
                latch_channel(name),
                kind_label(name),
                waiters(name),
                permit_timeouts(name),
                op_marker(name, "r1"),
                fair_queue(name),
                fair_timeouts(name),
                fair_channel(name, "id:7"),
                sem_queue(name),
                sem_timeouts(name),
                sem_waiter_channel(name, "id:7"),
                rw_channel(name),
                client_key("id"),
                format!("{}:3", read_timeouts(name, "id:7")),
            ];
            for key in derived {
                assert!(reserved(&key).is_some(), "{key} should be reserved");
            }
        }
    }

    /// Data keys that only look a little like lockwarden's are free.
    #[test]
    fn data_keys_are_not_reserved() {
        for key in [
            "job",
            "{job}",
            "account:7:balance",
            "{account:7}:balance",
            "redisson_lock_tokens",
            "lockwarden_fence",
            "lockwarden:clients",
            "job:timeout",
            "{job}:timeouts",
            "{rw}:id:7:rwlock_timeout",
        ] {
            assert_eq!(reserved(key), None, "{key}");
        }
    }

    #[test]
    fn synchronizer_channels_follow_the_redisson_layout() {
        assert_eq!(semaphore_channel("api"), "redisson_sc:{api}");
        assert_eq!(semaphore_channel("{t}:api"), "redisson_sc:{t}:api");
        assert_eq!(
            latch_channel("jobs"),
            "redisson_countdownlatch__channel__{jobs}"
        );
        assert_eq!(
            latch_channel("{t}:jobs"),
            "redisson_countdownlatch__channel__{{t}:jobs}"
        );
        assert_eq!(permit_timeouts("api"), "{api}:timeout");
        assert_eq!(waiters("api"), "lockwarden_waiters:{api}");
        assert_eq!(waiters("{t}:api"), "lockwarden_waiters:{t}:api");
        for name in ["api", "{t}:api", "a{b}c"] {
            assert_eq!(name_of_waiters(&waiters(name)), Some(name));
            assert!(same_slot(name, &waiters(name)), "{name}");
        }
        assert_eq!(permit_timeouts("{t}:api"), "{t}:api:timeout");
    }
}
