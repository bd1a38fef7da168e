//! The wire layer: the Lua scripts of `lua/` as typed calls, and nothing else.
//!
//! Each script is one struct (mini-redis's `cmd/` style): its fields are the call's
//! inputs by name, [`ScriptCall::invocation`] lays them out as the script's KEYS and
//! ARGV, and [`ScriptCall::parse`] reads the reply into a typed answer. Everything
//! that changes a lock goes through these scripts: each runs atomically in Redis,
//! which is what makes the hash, its TTL, the fencing counter and the unlock message
//! change together.
//!
//! This layer knows neither actors nor deployments. An [`Invocation`] runs on any
//! `redis::aio::ConnectionLike` (a standalone connection or whatever the node seam
//! stands behind it), sending EVALSHA and loading the script when Redis answers
//! NOSCRIPT (after a restart, a SCRIPT FLUSH, or on a cluster node that never saw
//! it). Whether a call goes alone or in a batch is the caller's choice: an
//! invocation that can share a round trip carries its [`BatchOp`] code.
//!
//! The files: `exclusive` (the plain lock's acquire, release and batched renewal),
//! `fair`, `rw`, `by_name` (inspect and force release, for every kind), and `batch`
//! (many exclusive ops as one script call), `synchronizer` (the semaphore's and
//! the count-down latch's scripts), `expirable` (the permit-expirable semaphore's),
//! `fenced` (a write on a data key, refused for a stale fencing token),
//! `registry` (the client registry: plain commands, not a script), `lua` (the
//! scripts' texts, in both publish forms) and `replicas` (replica confirmation).
//!
//! `replicas` holds the one piece of connection behaviour in this layer: the
//! budget of `WAIT`s each connection may have out. It stays here, not in
//! `node/`, because a `WAIT` only covers a script's write when it rides behind
//! that script in one pipeline on the same connection, which is this layer's
//! send; the budget is about one connection (any `ConnectionLike`), never about
//! a deployment, so the rule above holds.

mod arg;
mod batch;
mod by_name;
pub(crate) mod deadlock;
mod exclusive;
mod expirable;
mod fair;
mod fair_semaphore;
mod fenced;
mod lua;
mod registry;
mod replicas;
mod rw;
mod synchronizer;
pub(crate) mod waiting;

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, RedisResult, ServerErrorKind, Value};

pub(crate) use arg::Arg;
pub(crate) use batch::{batch_invocation, split_batch_reply, unbatch, BatchOp};
pub(crate) use by_name::{inspect_lock, ForceRelease, Inspect};
pub(crate) use exclusive::{
    Acquire, HandoffPlaces, PlacesKept, Release, RenewHashes, Transfer, TransferReply,
};
pub(crate) use expirable::{ExpirableAcquire, ExpirableRelease, ExpirableRenew, ExpirableTake};
pub(crate) use fair::{FairAcquire, FairLeave, FairRefresh, FairRelease, Place};
pub(crate) use fair_semaphore::{
    read_sem_queue, FairSemAcquire, FairSemLeave, FairSemRefresh, FairSemRelease, FairSemUndo,
};
pub(crate) use fenced::{FencedReply, FencedWrite};
pub(crate) use lua::{Lua, Publish, ScriptConn};
pub(crate) use registry::{read_clients, register};
pub(crate) use replicas::{
    confirm_with, judge, keep_if_unconfirmed, record_unconfirmed, unmark, Confirm, Confirmation,
    Confirmed, Lanes, Moves, Need, Redo, ReplicaCount,
};
pub(crate) use rw::{ReadAcquire, ReadRelease, RwRenew, WriteAcquire, WriteRelease};
pub(crate) use synchronizer::{
    key_exists, label, read_number, CountedDown, LatchCountDown, LatchSet, SemAcquire, SemAdded,
    SemDrain, SemRelease, SemTake, SemTrySet, SemUndo, SyncInspect, Undone, MAX_PERMITS,
};

/// One script call laid out for the wire: which script, its KEYS and its ARGV.
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    /// The script (compiled once per process, in both publish forms).
    pub(crate) script: &'static Lua,
    /// Its KEYS; on a cluster they all hash to one slot (`keys::validate_name`).
    pub(crate) keys: Vec<String>,
    /// Its ARGV.
    pub(crate) args: Vec<Arg>,
    /// Set when the call may share one `lua/batch.lua` call with others.
    pub(crate) batch: Option<BatchOp>,
    /// Whether its answer holds only once replicas confirmed its write (when the
    /// connection asks them, `Config::sync_replicas`).
    pub(crate) need: Need,
    /// Set on a release (and a hand-over), which is kept and sent again as a
    /// retry when no replica confirmed it (`replicas/kept.rs`).
    pub(crate) redo: Option<Redo>,
}

impl Invocation {
    /// An invocation of `script` that always goes alone. It changes something,
    /// but its answer stands whatever the replicas confirm (a counter given back,
    /// the registry): lock changes say [`Invocation::must_replicate`], reads
    /// [`Invocation::read_only`].
    fn new(script: &'static Lua) -> Invocation {
        Invocation {
            script,
            // Room for the lock scripts' keys and arguments, so that building
            // one does not grow these on every acquire and release.
            keys: Vec::with_capacity(6),
            args: Vec::with_capacity(8),
            batch: None,
            need: Need::BestEffort,
            redo: None,
        }
    }

    /// Its answer is only true once replicas confirmed it (a grant, a renewal,
    /// a release, a fenced write).
    fn must_replicate(mut self) -> Invocation {
        self.need = Need::Must;
        self
    }

    /// A release, kept and sent again under its request id when no replica
    /// confirmed it (`replicas/kept.rs`): for up to its lease (`lease_ms`, the
    /// lock is free by then anyway) and at most half the latch's lifetime
    /// (`latch_ttl_ms`, while Redis surely remembers the first outcome). The
    /// resend has its retry flag, ARGV[`flag`], set to "1" so that it reads
    /// the latch; `None` for a script that always reads it.
    fn kept(mut self, flag: Option<usize>, lease_ms: u64, latch_ttl_ms: u64) -> Invocation {
        self.redo = Some(Redo {
            again: replicas::Again::Itself { flag },
            for_ms: lease_ms.min(latch_ttl_ms / 2),
        });
        self
    }

    /// Its redo, with the resend made now, to be carried by another call
    /// (a hand-over keeps its release half: `exclusive.rs`).
    fn redo_as_other(&self) -> Option<Redo> {
        let redo = self.redo.as_ref()?;
        Some(Redo {
            again: replicas::Again::Other(redo.again(self)),
            for_ms: redo.for_ms,
        })
    }

    /// It writes nothing: no replica is asked.
    fn read_only(mut self) -> Invocation {
        self.need = Need::ReadOnly;
        self
    }

    fn key(mut self, key: impl Into<String>) -> Invocation {
        self.keys.push(key.into());
        self
    }

    fn arg(mut self, arg: impl ToString) -> Invocation {
        self.args.push(Arg::Text(arg.to_string()));
        self
    }

    /// A number argument, written as it is ([`Arg`]: no string made for it).
    fn num(mut self, n: u64) -> Invocation {
        self.args.push(Arg::Num(n));
        self
    }

    /// A fixed word argument (a flag), written as it is.
    fn word(mut self, word: &'static str) -> Invocation {
        self.args.push(Arg::Word(word));
        self
    }

    /// What kind of change it is, for the count of changes no replica
    /// confirmed: `grant` (the exclusive, fair and read-write locks'),
    /// `release` and `renew` (the exclusive lock's, which carry the most
    /// traffic), `handover` (a release that grants the next local owner) or
    /// `other`.
    pub(crate) fn op(&self) -> &'static str {
        match self.batch {
            Some(BatchOp::Acquire | BatchOp::AcquirePlacing) => "grant",
            Some(BatchOp::Release | BatchOp::ReleaseHanding) => "release",
            None if std::ptr::eq(self.script, &*exclusive::RENEW) => "renew",
            None if std::ptr::eq(self.script, &*exclusive::TRANSFER) => "handover",
            None if [&*fair::ACQUIRE, &*rw::ACQUIRE_READ, &*rw::ACQUIRE_WRITE]
                .iter()
                .any(|s| std::ptr::eq(self.script, *s)) =>
            {
                "grant"
            }
            None => "other",
        }
    }

    /// The first key: what a deployment routes the call by.
    pub(crate) fn routing_key(&self) -> Option<&str> {
        self.keys.first().map(String::as_str)
    }

    /// The EVALSHA command of this invocation, for scripts that publish with
    /// `publish`.
    fn command(&self, publish: Publish) -> Cmd {
        // Sized up front: written argument by argument, its buffer would be
        // grown several times for a batch of many ops.
        let data: usize = self.keys.iter().map(String::len).sum::<usize>()
            + self.args.iter().map(Arg::len).sum::<usize>();
        let mut cmd = redis::Cmd::with_capacity(3 + self.keys.len() + self.args.len(), 64 + data);
        cmd.arg("EVALSHA")
            .arg(self.script.get(publish).get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }

    /// Sends it, loading the script and sending again if Redis does not know it
    /// (after a restart, a SCRIPT FLUSH, or on a cluster node that never saw it;
    /// on a cluster redis-rs sends SCRIPT LOAD to every master). The reply comes
    /// back as Redis sent it: an error reply is a `Value::ServerError`, not an
    /// `Err` (a batch's reply holds one per failed op; [`into_result`] turns a
    /// lone one into an error). Not `Script::invoke_async`, which turns an error
    /// anywhere in a reply into an error for the whole reply. When the connection
    /// asks replicas to confirm, a shortfall is judged by [`Need`]
    /// (`replicas/`).
    pub(crate) async fn run<C: ScriptConn>(&self, conn: &mut C) -> RedisResult<Value> {
        let (reply, confirmed) = self.run_confirmed(conn).await?;
        judge(
            (self.need, self.op()),
            reply,
            &confirmed,
            self.routing_key().unwrap_or("?"),
        )
    }

    /// As [`Invocation::run`], but answers what the replicas confirmed beside the
    /// reply instead of judging it: a batch judges each of its ops by its own need.
    pub(crate) async fn run_confirmed<C: ScriptConn>(
        &self,
        conn: &mut C,
    ) -> RedisResult<(Value, Confirmed)> {
        let publish = conn.publish();
        let cmd = self.command(publish);
        let confirmation = conn.confirmation(self.routing_key());
        let sent = std::time::Instant::now();
        let answer = match replicas::send(conn, confirmation.clone(), &cmd, self.need).await? {
            (Value::ServerError(e), _) if e.kind() == Some(ServerErrorKind::NoScript) => {
                // Boxed, as rare: inline it would grow every call's future.
                Box::pin(self.script.get(publish).load_async(conn)).await?;
                replicas::send(conn, confirmation, &cmd, self.need).await?
            }
            answer => answer,
        };
        if !matches!(answer.0, Value::ServerError(_)) {
            keep_if_unconfirmed(conn, self, &answer.1, sent);
        }
        Ok(answer)
    }
}

/// The op id of a synchronizer's change that a retry or a late copy could
/// apply twice, and how long Redis remembers what its first copy did
/// (`lua/once_prelude.lua`, `keys::op_marker`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Once<'a> {
    /// The op id (a request id, or a fair waiter's id).
    pub(crate) id: &'a str,
    /// The marker's lifetime, in ms (`Config::latch_ttl`).
    pub(crate) ttl_ms: u64,
}

impl Once<'_> {
    /// The marker key of this op on synchronizer `name`.
    fn marker(&self, name: &str) -> String {
        crate::keys::op_marker(name, self.id)
    }
}

/// A script as a typed call: see the module documentation.
pub(crate) trait ScriptCall {
    /// What the reply means.
    type Reply;

    /// The script, KEYS and ARGV of this call.
    fn invocation(&self) -> Invocation;

    /// Reads the script's reply (an error reply already turned into an `Err`).
    fn parse(&self, reply: Value) -> RedisResult<Self::Reply>;
}

/// Runs `call` on `conn` and reads its reply.
pub(crate) async fn call<S: ScriptCall, C: ScriptConn>(
    conn: &mut C,
    call: &S,
) -> RedisResult<S::Reply> {
    call.parse(into_result(call.invocation().run(conn).await?)?)
}

/// Runs `call` as one `EVAL` carrying the script's text, sent once and never
/// again: for a give-back sent right behind the acquisition it undoes
/// (`actors/lock/acquire.rs`), which must run next to it whatever the server's
/// script cache holds (a server restarted empty answers NOSCRIPT to an EVALSHA,
/// and a resend after loading could land behind a later acquisition of the same
/// owner, or never go out if the process is gone by then). No replica is asked.
pub(crate) async fn call_once<S: ScriptCall, C: ScriptConn>(
    conn: &mut C,
    call: &S,
) -> RedisResult<S::Reply> {
    let invocation = call.invocation();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(invocation.script.code(conn.publish()))
        .arg(invocation.keys.len())
        .arg(&invocation.keys)
        .arg(&invocation.args);
    let reply = conn.req_packed_command(&cmd).await?;
    call.parse(into_result(reply)?)
}

/// An error reply as an error, anything else as it is.
pub(crate) fn into_result(reply: Value) -> RedisResult<Value> {
    match reply {
        Value::ServerError(e) => Err(e.into()),
        reply => Ok(reply),
    }
}

/// The hold count of `field` in the lock hash `name` (0 when absent): how a lock
/// actor finds out what an attempt with a lost reply did.
pub(crate) async fn hold_count<C: ConnectionLike>(
    conn: &mut C,
    name: &str,
    field: &str,
) -> RedisResult<u32> {
    let count: Option<u32> = redis::cmd("HGET")
        .arg(name)
        .arg(field)
        .query_async(conn)
        .await?;
    Ok(count.unwrap_or(0))
}

/// What an acquisition attempt found (the answer of every acquire script).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The caller holds the lock now.
    Acquired {
        /// The new fencing token.
        token: u64,
        /// The caller's hold count (of this kind) after this acquisition.
        holds: u32,
        /// False when replica confirmation is on and no replica could confirm
        /// it (`wire/replicas/unconfirmed.rs`).
        confirmed: bool,
    },
    /// Another owner holds it (or, for a fair lock, waits before the caller).
    Busy {
        /// How long until that may change at the latest: the lock frees by itself
        /// or the fair queue's head loses its place (`None`: no bound, only a
        /// release frees it).
        ttl: Option<Duration>,
        /// The owner field at the head of the fair queue, if any.
        head: Option<String>,
    },
    /// The caller holds read holds and asked for the write lock: refused.
    UpgradeRefused,
    /// The caller holds the lock and asked again without re-entry: refused.
    ReentryRefused,
}

/// What a release did (the answer of every release script).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// The owner's last hold (of this kind) was given back.
    Released {
        /// Whether an unlock message was published (the lock freed, or a write
        /// lock became readable).
        published: bool,
        /// How many subscriptions received it (the exclusive lock's release
        /// says; 0 where unknown): more than this process's own means other
        /// processes wait for the lock.
        heard: u32,
    },
    /// The caller still holds the lock this many times.
    StillHeld(u32),
    /// The caller did not hold the lock; nothing changed.
    NotHeld,
}

/// Converts a PTTL answer: a positive number of ms, or -1 (no expiry).
fn ttl_from_pttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// The error for a reply of a shape the scripts never produce; a lock actor that
/// meets one restarts (`error::redis_is_protocol_error`).
pub(crate) fn unexpected(what: &'static str) -> RedisError {
    RedisError::from((redis::ErrorKind::UnexpectedReturnType, what))
}

/// Reads `{1, token, holds}` / `{0, pttl[, head]}` / `{-1}`, the answer shape of
/// every acquire script.
fn acquire_reply(reply: Value) -> RedisResult<AcquireReply> {
    use redis::Value::Int;
    let Value::Array(reply) = reply else {
        return Err(unexpected("acquire script returned an unknown shape"));
    };
    let (reply, confirmed) = unmark(&reply);
    match reply {
        [Int(1), Int(token), Int(holds)] => Ok(AcquireReply::Acquired {
            token: u64::try_from(*token).map_err(|_| unexpected("negative fencing token"))?,
            holds: u32::try_from(*holds).map_err(|_| unexpected("hold count out of range"))?,
            confirmed,
        }),
        [Int(0), Int(pttl)] => Ok(AcquireReply::Busy {
            ttl: ttl_from_pttl(*pttl),
            head: None,
        }),
        [Int(0), Int(wait), head] => {
            let head: String = redis::from_redis_value_ref(head)?;
            Ok(AcquireReply::Busy {
                ttl: ttl_from_pttl(*wait),
                head: Some(head).filter(|h| !h.is_empty()),
            })
        }
        [Int(-1)] => Ok(AcquireReply::UpgradeRefused),
        [Int(-2)] => Ok(AcquireReply::ReentryRefused),
        _ => Err(unexpected("acquire script returned an unknown shape")),
    }
}

/// Reads the remaining hold count of a release script: 0 released (and published),
/// > 0 still held, -1 not held.
fn release_reply(left: i64, published: bool) -> ReleaseReply {
    match left {
        0 => ReleaseReply::Released {
            published,
            heard: 0,
        },
        n if n > 0 => ReleaseReply::StillHeld(u32::try_from(n).unwrap_or(u32::MAX)),
        _ => ReleaseReply::NotHeld,
    }
}

/// Reads a release script's `{left, published}` pair (the read-write lock's).
fn release_pair(reply: Value) -> RedisResult<ReleaseReply> {
    let (left, published): (i64, i64) = redis::from_redis_value_ref(&reply)?;
    Ok(release_reply(left, published == 1))
}

/// Reads a list of integers that must have `len` entries (one per key or field).
fn answers(reply: Value, len: usize, what: &'static str) -> RedisResult<Vec<i64>> {
    let answers: Vec<i64> = redis::from_redis_value_ref(&reply)?;
    if answers.len() != len {
        return Err(unexpected(what));
    }
    Ok(answers)
}

/// `"1"` or `"0"`, how the scripts take a flag.
fn flag(on: bool) -> &'static str {
    if on {
        "1"
    } else {
        "0"
    }
}
