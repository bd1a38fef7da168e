//! Reading what Redis answered: which errors pass by themselves, and the
//! errors of our own making that travel inside a `RedisError` (a replica
//! shortfall, a key that holds no number, a denied command).
//!
//! Every Redis answer reaches the crate as a `redis::RedisError`; these
//! functions tell its kinds apart in one place, so that the retry rules (what is
//! transient) and the words [`LockError`](super::LockError) prints agree.

/// What the error of a start that waited out a failover in vain says; see
/// [`LockError::is_failover_in_progress`](super::LockError::is_failover_in_progress).
pub(crate) const FAILOVER_IN_PROGRESS: &str = "failover in progress";

/// Whether a Redis error may go away by itself (a dropped connection, a timeout, a
/// loading or failing-over server), as opposed to one that will repeat (a wrong
/// type, a script error). Three server answers count as passing too, though
/// redis-rs does not retry them: BUSY (another client's script is running; it ends
/// or is killed), OOM (memory under `noeviction` frees as keys expire or are
/// deleted) and LOADING (a restarted server reading its data). Each is refused
/// before a script runs, or before its first write, so retrying is safe.
pub(crate) fn redis_is_transient(e: &redis::RedisError) -> bool {
    !matches!(e.retry_method(), redis::RetryMethod::NoRetry)
        || e.is_timeout()
        // UNBLOCKED: a blocking command (a WAIT) ended because its master
        // turned replica, a failover under way.
        || matches!(e.code(), Some("BUSY" | "OOM" | "LOADING" | "UNBLOCKED"))
        || replica_shortfall(e).is_some()
}

/// What the error of a grant too few replicas confirmed starts with.
pub(super) const NOT_REPLICATED: &str = "lockwarden: not confirmed by enough replicas";

/// The error the wire layer answers for a grant or renewal that only `acked` of
/// the `wanted` replicas confirmed. It travels as a `RedisError` (as every
/// answer of a script call does) and becomes [`LockError::NotReplicated`](super::LockError::NotReplicated).
pub(crate) fn not_replicated(acked: u32, wanted: u32) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Extension,
        NOT_REPLICATED,
        format!("{acked}/{wanted}"),
    ))
}

/// `(acked, wanted)` if `e` was made by [`not_replicated`].
pub(crate) fn replica_shortfall(e: &redis::RedisError) -> Option<(u32, u32)> {
    if e.kind() != redis::ErrorKind::Extension || !e.to_string().starts_with(NOT_REPLICATED) {
        return None;
    }
    let (acked, wanted) = e.detail()?.split_once('/')?;
    Some((acked.parse().ok()?, wanted.parse().ok()?))
}

/// The code of the error a synchronizer's script (or [`not_a_number`]) answers
/// when its key holds no number; its detail is `<value length>:<value> <key>`, so
/// that neither may be cut wrongly whatever it contains.
pub(super) const NOT_A_NUMBER: &str = "NOTNUMBER";

/// The error for `key` holding `value`, in the shape the scripts answer.
pub(crate) fn not_a_number(key: &str, value: &str) -> redis::RedisError {
    let value = first_bytes(value, 64);
    redis::RedisError::from((
        redis::ErrorKind::Extension,
        NOT_A_NUMBER,
        format!("{}:{value} {key}", value.len()),
    ))
}

/// `text` cut to at most `n` bytes, on a character boundary.
pub(super) fn first_bytes(text: &str, n: usize) -> &str {
    let mut end = text.len().min(n);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `(key, value)` if `e` says a key held no number.
pub(super) fn not_a_number_in(e: &redis::RedisError) -> Option<(String, String)> {
    let ours = e.code() == Some(NOT_A_NUMBER) || e.to_string().starts_with(NOT_A_NUMBER);
    if !ours {
        return None;
    }
    let detail = e.detail()?;
    let (len, rest) = detail.split_once(':')?;
    let len: usize = len.parse().ok()?;
    let value = rest.get(..len)?;
    let key = rest.get(len..)?.strip_prefix(' ')?;
    Some((key.to_string(), value.to_string()))
}

/// Whether Redis refused for want of rights (NOPERM, the script's own or Redis's).
pub(crate) fn is_noperm(error: &redis::RedisError) -> bool {
    error.code() == Some("NOPERM") || error.to_string().to_ascii_uppercase().contains("NOPERM")
}

/// The command a permission error names: ours say "... may not run PEXPIRE on
/// ...", Redis's own "... to run the 'evalsha' command"; `None` if `e` is not a
/// permission error. A denial inside a script that did not ask first comes as
/// "ERR ... can't run this command" (Redis 7.0) and names none.
pub(super) fn denied_command(e: &redis::RedisError) -> Option<String> {
    let detail = e.detail().unwrap_or("");
    if e.code() == Some("NOPERM") {
        if let Some(rest) = detail.split_once("may not run ").map(|(_, r)| r) {
            let cmd = rest.split_whitespace().next().unwrap_or("?");
            return Some(cmd.to_string());
        }
        let quoted = detail.split('\'').nth(1).filter(|c| !c.is_empty());
        return Some(quoted.unwrap_or("?").to_uppercase());
    }
    (detail.contains("can't run this command") || detail.contains("no permissions to run"))
        .then(|| "?".to_string())
}

/// Whether Redis answered in a shape our scripts never produce: local state can no
/// longer be trusted (the lock actor restarts and re-reads it).
pub(crate) fn redis_is_protocol_error(e: &redis::RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::UnexpectedReturnType | redis::ErrorKind::Parse
    )
}
