//! [`FencedWrite`]: the resource side of fencing tokens, for data kept in Redis.
//!
//! A fencing token protects nothing unless the resource refuses a stale one. For a
//! key in Redis, that check can run where the data lives: one script reads the
//! newest token the key has accepted (its fence, `lockwarden_fence:{<tag>}:<key>`,
//! in the key's own slot), refuses a lower one, runs the write, and raises the
//! fence, all atomically. It is one round trip, as the plain write would be, and it
//! works on a cluster where the lock and the data live on different masters,
//! because only the token travels from one to the other. [`FencedWrite::while_held`]
//! also checks that the guard's hold is still in the lock's hash, which needs the
//! lock and the data in one slot (a shared hash tag).
//!
//! The fence is only as good as what reaches it, so the write also refuses what
//! would bend it: a key that is lockwarden's own (a fence written as data would
//! lower it), a token no lock can have issued yet (it would refuse every real
//! holder after it), and a fence that someone else wrote (it can no longer tell
//! stale from fresh).
//!
//! For data elsewhere (SQL and the like) the same rule is a token column and a
//! conditional update; docs/faults.md, "Fenced writes", shows it.

use actix::prelude::*;
use redis::Value;
use tracing::{debug, warn};

use super::manager::LockManager;
use crate::error::{LockError, FENCE_TOKEN_MARGIN};
use crate::guard::LockGuard;
use crate::keys;
use crate::wire::{self, FencedReply};

/// Run one command on a data key in Redis, only if this fencing token is not below
/// the newest token the key has accepted; the token then becomes the newest. A
/// stale token gets [`LockError::StaleToken`] and nothing is written. Answers the
/// command's own reply.
///
/// Each data key written this way leaves a second key beside it, its fence
/// `lockwarden_fence:{<tag>}:<key>` (`<tag>`: the key's hash tag, or the whole key
/// without one), which has no expiry: it must outlive every holder that could
/// still write with an old token. When the data goes for good, delete the fence
/// with it, in one command: `DEL account:7:balance
/// lockwarden_fence:{account:7:balance}:account:7:balance` (both keys share a
/// slot, so this works on a cluster too). A data key that expires, or that a
/// fenced `DEL` removes, leaves its fence behind (it still refuses the old
/// tokens, as it should); one small string per data key ever written.
///
/// Refused with nothing written, besides a stale token: a key that lockwarden or
/// Redisson keep for a lock ([`LockError::ReservedKey`]: the guard's own lock, a
/// fence, a fencing token counter ...), a token more than
/// [`FENCE_TOKEN_MARGIN`] ahead of the server clock, which no lock issued
/// ([`LockError::TokenTooHigh`]), and a fence that holds something no fenced
/// write leaves there ([`LockError::DamagedFence`], which says how to repair it).
///
/// ```no_run
/// # async fn demo(manager: actix::Addr<lockwarden::LockManager>) -> Result<(), lockwarden::LockError> {
/// use lockwarden::{Acquire, FencedWrite, Locks};
/// let guard = manager.acquire(Acquire::new("account:7")).await?;
/// // ... a long pause here (GC, a stopped VM) may let the lease run out ...
/// manager
///     .fenced_write(FencedWrite::new(&guard, "account:7:balance", "SET").arg(120))
///     .await?; // Err(StaleToken) if a later holder wrote meanwhile
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Message, Clone, Debug)]
#[rtype(result = "Result<Value, LockError>")]
#[doc(alias = "fenced lock")]
pub struct FencedWrite {
    /// The data key.
    key: String,
    /// The caller's fencing token.
    token: u64,
    /// The guard's lock name and owner field (when made from a guard).
    holder: Option<(String, String)>,
    /// Check that the holder still holds the lock.
    while_held: bool,
    /// The command to run on the key.
    command: String,
    /// Its arguments after the key.
    args: Vec<String>,
}

impl FencedWrite {
    /// Run `command` (SET, HSET, INCRBY, any command whose first argument is the
    /// key) on `key`, fenced by `guard`'s token.
    pub fn new(
        guard: &LockGuard,
        key: impl Into<String>,
        command: impl Into<String>,
    ) -> FencedWrite {
        FencedWrite {
            holder: Some((guard.name().to_string(), guard.owner_field().to_string())),
            ..FencedWrite::with_token(guard.fencing_token(), key, command)
        }
    }

    /// The same, fenced by a token you carry yourself (from a
    /// [`RedGuard`](crate::RedGuard), or one passed along to another process). It
    /// must be a token a lock issued: one more than [`FENCE_TOKEN_MARGIN`] ahead
    /// of the server clock is refused with [`LockError::TokenTooHigh`].
    pub fn with_token(
        token: u64,
        key: impl Into<String>,
        command: impl Into<String>,
    ) -> FencedWrite {
        FencedWrite {
            key: key.into(),
            token,
            holder: None,
            while_held: false,
            command: command.into(),
            args: Vec::new(),
        }
    }

    /// The command's next argument after the key (text: a number, a string, JSON).
    pub fn arg(mut self, arg: impl ToString) -> FencedWrite {
        self.args.push(arg.to_string());
        self
    }

    /// Also refuse the write, with [`LockError::NotHeld`], unless the guard's hold
    /// is still in the lock's hash at that moment. On a cluster the lock and the
    /// key must share a hash tag (`{account:7}` and `{account:7}:balance`), else
    /// the request is refused with [`LockError::InvalidRequest`]; on one server
    /// any two keys go. Only for a write made with [`FencedWrite::new`]. Defaults
    /// to the token check alone.
    pub fn while_held(mut self) -> FencedWrite {
        self.while_held = true;
        self
    }
}

impl Handler<FencedWrite> for LockManager {
    type Result = ResponseFuture<Result<Value, LockError>>;

    fn handle(&mut self, msg: FencedWrite, _ctx: &mut Context<Self>) -> Self::Result {
        let checked = self
            .check_name(&msg.key)
            .and_then(|()| check(&msg, self.shared().config.cluster.is_some()));
        let mut conn = self.shared().node.conn();
        Box::pin(async move {
            checked?;
            let held = match (&msg.holder, msg.while_held) {
                (Some((lock, field)), true) => Some((lock.as_str(), field.as_str())),
                _ => None,
            };
            let call = wire::FencedWrite {
                key: &msg.key,
                token: msg.token,
                held,
                margin_us: u64::try_from(FENCE_TOKEN_MARGIN.as_micros()).unwrap_or(u64::MAX),
                command: &msg.command,
                args: &msg.args,
            };
            match wire::call(&mut conn, &call).await? {
                FencedReply::Applied(reply) => Ok(reply),
                FencedReply::Stale { newest } => Err(LockError::StaleToken {
                    token: msg.token,
                    newest,
                }),
                FencedReply::NotHeld => Err(LockError::NotHeld),
                FencedReply::TooHigh { server_clock } => {
                    debug!(key = %msg.key, server_clock, "fenced write refused: token ahead of the server clock");
                    Err(LockError::TokenTooHigh {
                        token: msg.token,
                        server_clock,
                    })
                }
                FencedReply::Damaged { holds } => {
                    let fence = keys::fence(&msg.key);
                    // An operator must act: every fenced write to this key is
                    // refused until the fence is repaired.
                    warn!(key = %msg.key, %fence, %holds, "fenced write refused: the key's fence is damaged");
                    Err(LockError::DamagedFence {
                        key: msg.key,
                        fence,
                        holds,
                    })
                }
            }
        })
    }
}

/// What can be refused before anything is sent: a key of lockwarden's own, an
/// empty or spaced command, a zero token, `while_held` without a guard or across
/// slots on a cluster.
fn check(msg: &FencedWrite, cluster: bool) -> Result<(), LockError> {
    if msg
        .holder
        .as_ref()
        .is_some_and(|(lock, _)| *lock == msg.key)
    {
        return Err(LockError::ReservedKey {
            key: msg.key.clone(),
            what: "the lock this write is fenced by",
        });
    }
    if let Some(what) = keys::reserved(&msg.key) {
        return Err(LockError::ReservedKey {
            key: msg.key.clone(),
            what,
        });
    }
    if msg.command.is_empty() || msg.command.contains(char::is_whitespace) {
        return Err(LockError::InvalidRequest(
            "a fenced write needs one command name (SET, HSET ...), its arguments go in arg()",
        ));
    }
    if msg.token == 0 {
        return Err(LockError::InvalidRequest(
            "fencing tokens start at 1; 0 is no token",
        ));
    }
    if msg.while_held {
        match &msg.holder {
            None => {
                return Err(LockError::InvalidRequest(
                    "while_held() needs the guard: make the write with FencedWrite::new",
                ))
            }
            Some((lock, _)) if cluster && !keys::same_slot(lock, &msg.key) => {
                return Err(LockError::InvalidRequest(
                    "while_held() on a cluster needs the lock and the data key in one slot: give both the same hash tag ({account:7} and {account:7}:balance)",
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}
