//! The one error type of the crate, and the reasons a held lock can be lost.
//!
//! Callers should rarely need to match variants: [`LockError::is_retryable`] answers
//! "may trying again help?", and the `Display` text names the cause. Bad input is
//! always caught before anything is sent to Redis, so an error of that kind means
//! nothing changed.

use std::fmt;
use std::time::Duration;

use crate::view::Holder;

mod classify;

use classify::{denied_command, not_a_number_in};
pub(crate) use classify::{
    is_noperm, not_a_number, not_replicated, redis_is_protocol_error, redis_is_transient,
    replica_shortfall, FAILOVER_IN_PROGRESS,
};

/// Longest a wait that ran out spends reading who holds the lock
/// ([`LockError::Timeout`]'s `holder`): the caller's time is up already, and a
/// slow or frozen Redis must not make the answer much later. Two round trips
/// (the lock, then its holder's registry entry) fit in it many times over.
pub(crate) const HOLDER_READ_LIMIT: Duration = Duration::from_millis(100);

/// Why a lock name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is the empty string.
    Empty,
    /// The name is longer than the configured maximum
    /// ([`Config::max_name_len`](crate::Config::max_name_len)).
    TooLong {
        /// The name's length in bytes.
        len: usize,
        /// The maximum allowed.
        max: usize,
    },
    /// Keys derived from the name would hash to another cluster slot than the lock
    /// key itself (unbalanced braces such as `}x`, or an empty hash tag `{}`).
    CrossSlot,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("lock name is empty"),
            NameError::TooLong { len, max } => {
                write!(
                    f,
                    "lock name is {len} bytes, longer than the maximum of {max}"
                )
            }
            NameError::CrossSlot => f.write_str(
                "lock name has unbalanced or empty braces: its derived keys would land in \
                 another cluster slot than the lock (use a balanced, non-empty {tag} or no braces)",
            ),
        }
    }
}

/// Why a lock that was held stopped being held, without its holder releasing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// Redis no longer has this holder's owner field: the lock expired (for example
    /// while the process or Redis was paused), was force-unlocked, or Redis lost its
    /// data.
    OwnerGone,
    /// The explicit lease given at acquisition ran out.
    LeaseExpired,
    /// Renewal could not reach Redis before the lease ran out, counted from the last
    /// successful acquisition or renewal on this process's monotonic clock.
    Unreachable,
    /// The lock manager (or its runtime) stopped while the lock was held, so nothing
    /// renews it any more.
    ManagerStopped,
    /// The lock manager shut down ([`Shutdown`](crate::Shutdown)) and gave the
    /// lock back in Redis: whoever waits for it may hold it now.
    ShutDown,
    /// This process did not run (it was stopped, its VM paused, or the thread of
    /// the watchdog was blocked) for a whole renewal period or more, and the lease
    /// ran out meanwhile: the renewals were never sent, whether or not Redis could
    /// be reached.
    Paused {
        /// How long the watchdog did not run, on this process's monotonic clock.
        stalled: Duration,
    },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::OwnerGone => "the lock is no longer held by this owner in Redis",
            LostReason::LeaseExpired => "the lease ran out",
            LostReason::Unreachable => "Redis could not be reached before the lease ran out",
            LostReason::ManagerStopped => "the lock manager stopped",
            LostReason::ShutDown => "the lock manager shut down and gave the lock back",
            LostReason::Paused { stalled } => {
                return write!(
                    f,
                    "the process did not run for {:.1} s and the lease ran out \
                     meanwhile: stopped, a paused VM or a blocked thread",
                    stalled.as_secs_f64()
                );
            }
        })
    }
}

/// Everything that can go wrong with a lock.
///
/// With the `actix-web` feature it is an actix-web `ResponseError`, so a
/// handler's `?` answers it with a status, a one-line plain-text body and, for
/// a 503, `Retry-After` (how the body is chosen is on that impl):
///
/// | Error | Status | Why |
/// |---|---|---|
/// | `Timeout` (a wait for a lock, permits or a latch that ran out) | 503, `Retry-After` | taken elsewhere: the same request may pass later |
/// | `Deadlock` | 503, `Retry-After` | the request's wait was chosen to end a deadlock: once the handler has released what it held, the same request may pass |
/// | `NotReplicated` | 503, `Retry-After` | replicas behind: a later attempt may be confirmed |
/// | `Redis` that may pass (a dropped connection, a timeout, a failover, BUSY, LOADING, OOM) | 503, `Retry-After` | Redis is unreachable or busy for now |
/// | `InFlight` (permits given back, a count-down, sent but not answered in time) | 503, `Retry-After` | Redis is unreachable or frozen; the change applies once if it gets there |
/// | `Stopped`, `ShuttingDown` (the manager is gone or handing over: a deploy, the mailbox closed) | 503, `Retry-After` | another instance, or this one restarted, can serve it |
/// | `Lost` (any reason) | 503, `Retry-After` | this process lost its lock (paused, cut off, stopping): the request may be tried again |
/// | `StaleToken`, `NotHeld` | 409 | a later holder of the lock took over first (a fenced write that meets it is refused and writes nothing) |
/// | `ReentryRefused` | 409 | the owner holds the lock already: a concurrent request of the same owner (a double submit) |
/// | `InvalidName`, `InvalidLease`, `InvalidConfig`, `InvalidRequest`, `InvalidAmount`, `ReservedKey`, `UpgradeRefused`, `TokenTooHigh` | 500 | the application asked for something that cannot work: a bug, which a retry repeats |
/// | `NoPermission`, `NotANumber`, `DamagedFence`, any other `Redis` | 500 | the deployment needs an operator (ACL rights, a key someone else wrote) |
///
/// Bad input is 500, not 400, because lockwarden cannot know where a name or an
/// amount came from: one the application built is its own bug. A handler that
/// builds a lock name from the request checks it first with
/// [`check_lock_name`](crate::check_lock_name) and answers 400 itself.
///
/// `Retry-After` is in whole seconds. No error that answers 503 knows how long
/// the holder will keep its lock (a `Timeout` knows only how long the caller
/// waited), so it is always 1 s: long enough not to spin, short next to a
/// typical request's wait for a lock.
#[derive(Debug)]
#[non_exhaustive]
pub enum LockError {
    /// The lock name was refused; nothing was sent to Redis.
    InvalidName(NameError),
    /// A lease was zero, under a millisecond, or over the configured maximum;
    /// nothing was sent to Redis.
    InvalidLease {
        /// The lease asked for.
        lease: Duration,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The configuration is inconsistent (for example a renewal period not shorter
    /// than the lease).
    InvalidConfig(String),
    /// The lock could not be acquired within the wait budget (for a zero wait: it was
    /// held by someone else at the one attempt).
    Timeout {
        /// How long the caller waited.
        waited: Duration,
        /// Who held the lock when the wait ran out, as Redis and the client
        /// registry say (owner field, host, pid, label: [`Holder::describe`]).
        /// Read only when a wait with a deadline runs out, within
        /// 100 ms (so the answer is at most that late); `None` for
        /// a zero wait (one attempt, kept one round trip), for semaphores, when
        /// the lock was free by then, or when Redis did not answer in time.
        /// Boxed, so that the error stays small.
        holder: Option<Box<Holder>>,
    },
    /// The wait was in a deadlock and was chosen to end it: its owner holds a
    /// lock that another waits for, which (through any number of others) waits
    /// for what this one holds. Found after
    /// [`Config::deadlock_timeout`](crate::Config::deadlock_timeout) by
    /// following who waits for whom across processes; of every wait in the
    /// cycle, the one that started last gives up, and the others go on and are
    /// granted once this caller releases what it holds. Nothing was acquired.
    /// What to do is the caller's, as with a database's deadlock error: release
    /// the locks this owner holds, then try the whole unit of work again
    /// (taking locks in one global order avoids the cycle; see
    /// docs/operations.md, "Deadlocks"). Retryable.
    Deadlock(Box<crate::deadlock::Deadlock>),
    /// The release found that this owner does not hold the lock: its lease ran out
    /// or it was force-unlocked, and someone else may hold it now. Nothing changed.
    NotHeld,
    /// The lock was lost while held (see [`LostReason`]); releasing it again has no
    /// effect.
    Lost(LostReason),
    /// Redis answered with an error or could not be reached.
    Redis(redis::RedisError),
    /// The Redis user lacks a right the lock needs (ACL): a command, a key or a
    /// channel. The lock scripts ask for every right they use before their first
    /// write, so nothing was changed in Redis. docs/operations.md lists the rights.
    NoPermission {
        /// The command refused, upper case (`PEXPIRE`, `EVALSHA`), or `?` when
        /// Redis did not say which.
        command: String,
        /// Redis's message, for the log.
        detail: String,
    },
    /// The lock manager or the lock's actor is no longer running.
    Stopped,
    /// The lock manager is shutting down ([`Shutdown`](crate::Shutdown)): it
    /// takes no new waiter, and every waiter it had was answered with this.
    /// Nothing was acquired; trying again on this manager will not help.
    ShuttingDown,
    /// The owner asked for the write lock of a read-write lock while it holds read
    /// holds of it (and not the write lock): waiting would wait for its own reads
    /// to end, so it is refused at once. Release the read holds first. Nothing
    /// changed.
    UpgradeRefused,
    /// The owner asked again for a lock it holds, and the acquisition was made
    /// non-reentrant ([`Acquire::non_reentrant`](crate::Acquire::non_reentrant)),
    /// as Redisson's non-reentrant locks refuse with `IllegalMonitorStateException`.
    /// Waiting would wait for itself, so it is refused at once. Nothing changed.
    ReentryRefused,
    /// The request combines options that do not go together (a non-reentrant read
    /// or write lock, say); nothing was sent to Redis.
    InvalidRequest(&'static str),
    /// A [`FencedWrite`](crate::FencedWrite) carried a fencing token below the
    /// newest one its data key has accepted: a later holder of the lock wrote
    /// since, so this holder's lock was lost (its lease ran out while it was
    /// paused or cut off). Nothing was written.
    StaleToken {
        /// The token the write carried.
        token: u64,
        /// The newest token the key has accepted.
        newest: u64,
    },
    /// Fewer replicas than [`Config::sync_replicas`](crate::Config::sync_replicas)
    /// asks for confirmed the grant within its timeout, so a failover could lose
    /// it: it was undone (the lock hash is gone again; its fencing token is not
    /// reused). Retryable: a replica that catches up lets the next attempt through.
    ///
    /// `wanted` 0: not the replicas but the master was in doubt. Under Sentinel
    /// a master that stopped answering is not trusted again until the Sentinels
    /// name it master with no failover under way (or the manager moved to the
    /// one they name): it may have been demoted while silent, and a grant it
    /// answers then could be a second holder's.
    NotReplicated {
        /// Replicas that confirmed.
        acked: u32,
        /// Replicas required (0: the master itself was in doubt).
        wanted: u32,
    },
    /// A change that must count once (permits given back, a count-down, a
    /// drain) was sent, but Redis did not answer it within the time its op id is
    /// sure to be remembered (half of [`Config::latch_ttl`](crate::Config::latch_ttl),
    /// 5 s by default), so it is not known whether it applied. It was not sent
    /// again past that point: every copy that reaches Redis carries the same op
    /// id, so it applies at most once, and a frozen server that resumes applies
    /// it then. A [`LatchHandle::count_down`](crate::LatchHandle::count_down)
    /// answers this sooner, at its bound
    /// ([`Config::release_wait`](crate::Config::release_wait)), while the
    /// count-down goes on being sent behind the call until that point. Do not redo it by hand (adding permits again would count them
    /// twice); a server that lost it (restarted without its data) lost the
    /// semaphore's count with it. Not retryable.
    InFlight {
        /// What was sent ("giving back 1 permit of semaphore "api"").
        what: String,
        /// How long it went unanswered.
        waited: Duration,
    },
    /// A number of permits or a count was refused (zero where at least one is
    /// needed, over the limit Redisson can read, more than a guard holds), or the
    /// change would carry a semaphore past that limit; nothing was changed in
    /// Redis.
    InvalidAmount {
        /// What was asked for: `"permits"` or `"count"`.
        what: &'static str,
        /// The amount.
        amount: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A semaphore's or a latch's key holds something that is not a number (a
    /// string a person or another program wrote there). Redisson fails the same
    /// way; nothing was changed, and waiting would not help.
    NotANumber {
        /// The key.
        key: String,
        /// What it holds (at most its first 64 bytes).
        value: String,
    },
    /// A [`FencedWrite`](crate::FencedWrite) targeted one of the keys lockwarden
    /// or Redisson keep for a lock, semaphore or latch (the guard's own lock, a
    /// fence, a fencing token counter ...; docs/protocol.md lists them): only
    /// their scripts may write those. Nothing was sent to Redis.
    ReservedKey {
        /// The key.
        key: String,
        /// What it is ("a lock's fencing token counter").
        what: &'static str,
    },
    /// A [`FencedWrite`](crate::FencedWrite) carried a fencing token above any a
    /// lock can have issued yet: a token is the granting server's clock in
    /// microseconds (or one more than the last), and this one is more than
    /// [`FENCE_TOKEN_MARGIN`] ahead of the data's server clock. Accepted, it
    /// would refuse every real holder until the clock caught up. Nothing was
    /// written.
    TokenTooHigh {
        /// The token the write carried.
        token: u64,
        /// The data's server clock (TIME) in microseconds when it was checked.
        server_clock: u64,
    },
    /// The fence of a [`FencedWrite`](crate::FencedWrite)'s data key holds
    /// something no fenced write leaves there (text, another type, a token more
    /// than [`FENCE_TOKEN_MARGIN`] ahead of the server clock): someone else
    /// wrote it, and it can no longer tell a stale token from a fresh one.
    /// Nothing was written; an operator repairs it (the message says how).
    DamagedFence {
        /// The data key.
        key: String,
        /// Its fence.
        fence: String,
        /// What the fence holds, in words.
        holds: String,
    },
}

/// How far ahead of the data's server clock a fencing token may be before a
/// [`FencedWrite`](crate::FencedWrite) refuses it as
/// [`LockError::TokenTooHigh`]: a token is the granting server's clock in
/// microseconds, so only clock skew between the lock's server and the data's (or
/// a clock stepped back on one server) puts a real token ahead. An hour covers
/// any skew a working deployment has, and bounds how long a made-up token within
/// it could refuse real holders.
pub const FENCE_TOKEN_MARGIN: Duration = Duration::from_secs(3600);

impl LockError {
    /// Whether the same call may succeed if tried again later: a wait that timed
    /// out, or a Redis error that a reconnect or a pause may cure.
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::Timeout { .. }
            | LockError::NotReplicated { .. }
            | LockError::Deadlock(_) => true,
            LockError::Redis(e) => redis_is_transient(e),
            _ => false,
        }
    }

    /// Whether starting found the deployment changing hands (a Sentinel failover
    /// in progress, a cluster not serving every slot yet) and its
    /// [`Config::start_wait`](crate::Config::start_wait) ran out before it was
    /// done: worth waiting for, unlike a wrong address or master name.
    pub fn is_failover_in_progress(&self) -> bool {
        matches!(self, LockError::Redis(e) if e.to_string().contains(FAILOVER_IN_PROGRESS))
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockError::InvalidName(e) => write!(f, "invalid lock name: {e}"),
            LockError::InvalidLease { lease, reason } => {
                write!(f, "invalid lease {lease:?}: {reason}")
            }
            LockError::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            LockError::Timeout { waited, holder } => {
                write!(
                    f,
                    "lock not acquired: held elsewhere after waiting {waited:?}"
                )?;
                match holder {
                    Some(h) => write!(f, "; held by {}", h.describe()),
                    None => Ok(()),
                }
            }
            LockError::Deadlock(cycle) => write!(f, "lock not acquired: {cycle}"),
            LockError::NotHeld => f.write_str("lock is not held by this owner"),
            LockError::Lost(reason) => write!(f, "lock was lost while held: {reason}"),
            LockError::Redis(e) => write!(f, "redis error: {e}"),
            LockError::NoPermission { command, detail } => write!(
                f,
                "no permission: the Redis user may not run {command} ({detail}); nothing was changed"
            ),
            LockError::Stopped => f.write_str("the lock manager is not running"),
            LockError::ShuttingDown => f.write_str(
                "the lock manager is shutting down: it takes no new waiters (nothing was acquired)",
            ),
            LockError::UpgradeRefused => f.write_str(
                "write lock refused: this owner holds read holds of it (an upgrade would deadlock)",
            ),
            LockError::ReentryRefused => f.write_str(
                "lock refused: this owner already holds it, and a non-reentrant lock is never taken twice by one owner (it would wait for itself); nothing was changed",
            ),
            LockError::InvalidRequest(why) => write!(f, "request refused: {why}; nothing was sent to Redis"),
            LockError::StaleToken { token, newest } => write!(
                f,
                "write refused: fencing token {token} is below {newest}, the newest this key has accepted; a later holder of the lock wrote since, so this one's lock was lost (its lease ran out); nothing was written"
            ),
            LockError::NotReplicated { wanted: 0, .. } => write!(
                f,
                "lock not acquired: the master stopped answering and the Sentinels have not vouched for it since (it may have been demoted in a failover), so the grant was not taken; retry"
            ),
            LockError::NotReplicated { acked, wanted } => write!(
                f,
                "lock not acquired: only {acked} of the {wanted} replicas required confirmed the grant in time, so it was undone (are the replicas up and in sync?)"
            ),
            LockError::InFlight { what, waited } => write!(
                f,
                "{what}: Redis did not answer within {waited:?}; the change was sent and applies at most once if Redis still has it (its op id makes a repeat do nothing), so do not redo it by hand"
            ),
            LockError::InvalidAmount {
                what,
                amount,
                reason,
            } => write!(f, "invalid {what} {amount}: {reason}; nothing was changed"),
            LockError::NotANumber { key, value } => write!(
                f,
                "key {key:?} holds {value:?}, not a number: it is not a semaphore or latch \
                 this library can use (nothing was changed; delete or fix the key)"
            ),
            LockError::ReservedKey { key, what } => write!(
                f,
                "write refused: {key:?} is {what}, which only lockwarden's (and Redisson's) \
                 own scripts may write; a fenced write takes a data key; nothing was sent \
                 to Redis"
            ),
            LockError::TokenTooHigh {
                token,
                server_clock,
            } => write!(
                f,
                "write refused: fencing token {token} is more than {} min ahead of the data's \
                 server clock ({server_clock} µs), so no lock issued it (a token is the \
                 granting server's clock in µs: pass the guard's fencing_token()); accepted, \
                 it would refuse every real holder after it; nothing was written",
                FENCE_TOKEN_MARGIN.as_secs() / 60
            ),
            LockError::DamagedFence { key, fence, holds } => write!(
                f,
                "write refused: the fence {fence:?} of key {key:?} holds {holds}, which no \
                 fenced write leaves there (someone else wrote it), so it cannot tell a stale \
                 token from a fresh one; nothing was written. Start the key over by deleting \
                 the fence with the data: DEL {key:?} {fence:?} (to keep the data, see \
                 docs/faults.md, \"Fenced writes\")"
            ),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for LockError {
    /// A permission error becomes [`LockError::NoPermission`], a replica shortfall
    /// [`LockError::NotReplicated`], any other
    /// [`LockError::Redis`].
    fn from(e: redis::RedisError) -> LockError {
        if let Some((acked, wanted)) = replica_shortfall(&e) {
            return LockError::NotReplicated { acked, wanted };
        }
        if let Some((key, value)) = not_a_number_in(&e) {
            return LockError::NotANumber { key, value };
        }
        match denied_command(&e) {
            Some(command) => LockError::NoPermission {
                command,
                detail: e.detail().unwrap_or("").replace(['\r', '\n'], " "),
            },
            None => LockError::Redis(e),
        }
    }
}

impl From<NameError> for LockError {
    fn from(e: NameError) -> LockError {
        LockError::InvalidName(e)
    }
}

impl From<actix::MailboxError> for LockError {
    fn from(_: actix::MailboxError) -> LockError {
        LockError::Stopped
    }
}
