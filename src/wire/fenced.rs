//! The fenced write (`lua/fenced_write.lua`): one command on a data key, run only if
//! the caller's fencing token is not below the newest token that key has seen, not
//! beyond what the server clock allows, and (optionally) only while the caller
//! still holds its lock.

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::{unexpected, Invocation, ScriptCall};
use crate::error::FENCE_TOKEN_MARGIN;
use crate::keys;

static FENCED_WRITE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/fenced_write.lua")));

/// Run `command` with `args` on `key` if `token` is at least the key's fence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FencedWrite<'a> {
    /// The data key.
    pub(crate) key: &'a str,
    /// The caller's fencing token.
    pub(crate) token: u64,
    /// The lock name and owner field that must still hold it, if any (the lock's
    /// hash must be in the data key's slot on a cluster).
    pub(crate) held: Option<(&'a str, &'a str)>,
    /// How far ahead of the server clock the token may be, in microseconds.
    pub(crate) margin_us: u64,
    /// The command to run on the key.
    pub(crate) command: &'a str,
    /// Its arguments after the key.
    pub(crate) args: &'a [String],
}

/// What a fenced write did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FencedReply {
    /// The command ran; its reply.
    Applied(Value),
    /// The token is below `newest`, the newest this key has seen: nothing written.
    Stale {
        /// The key's fence.
        newest: u64,
    },
    /// The caller no longer holds the lock: nothing written.
    NotHeld,
    /// The token is more than the margin ahead of the server clock: nothing
    /// written.
    TooHigh {
        /// The server clock (TIME) in microseconds.
        server_clock: u64,
    },
    /// The fence holds something no fenced write leaves there: nothing written.
    Damaged {
        /// What it holds, in words ("the text \"abc\"", "a hash").
        holds: String,
    },
}

impl ScriptCall for FencedWrite<'_> {
    type Reply = FencedReply;

    fn invocation(&self) -> Invocation {
        let mut call = Invocation::new(&FENCED_WRITE)
            .must_replicate()
            .key(keys::fence(self.key))
            .key(self.key);
        if let Some((lock, _)) = self.held {
            call = call.key(lock);
        }
        call = call
            .arg(self.token)
            .arg(self.held.map_or("", |(_, field)| field))
            .arg(self.margin_us)
            .arg(self.command);
        for arg in self.args {
            call = call.arg(arg);
        }
        call
    }

    fn parse(&self, reply: Value) -> RedisResult<FencedReply> {
        let Value::Array(mut parts) = reply else {
            return Err(unexpected("fenced write returned an unknown shape"));
        };
        match parts.first() {
            Some(Value::Int(1)) => Ok(FencedReply::Applied(if parts.len() > 1 {
                parts.swap_remove(1)
            } else {
                Value::Nil
            })),
            Some(Value::Int(0)) => match parts.get(1) {
                Some(Value::Int(newest)) => Ok(FencedReply::Stale {
                    newest: u64::try_from(*newest).map_err(|_| unexpected("negative fence"))?,
                }),
                _ => Err(unexpected("fenced write returned an unknown shape")),
            },
            Some(Value::Int(-1)) => Ok(FencedReply::NotHeld),
            Some(Value::Int(-2)) => match parts.get(1) {
                Some(Value::Int(clock)) => Ok(FencedReply::TooHigh {
                    server_clock: u64::try_from(*clock)
                        .map_err(|_| unexpected("negative server clock"))?,
                }),
                _ => Err(unexpected("fenced write returned an unknown shape")),
            },
            Some(Value::Int(-3)) => match (text(parts.get(1)), text(parts.get(2))) {
                (Some(what), Some(value)) => Ok(FencedReply::Damaged {
                    holds: damage(&what, &value),
                }),
                _ => Err(unexpected("fenced write returned an unknown shape")),
            },
            _ => Err(unexpected("fenced write returned an unknown shape")),
        }
    }
}

/// A bulk or status string of a reply, as text (lossy: a fence may hold bytes
/// that are not UTF-8, and the words are for a person).
fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// What a damaged fence holds, in words, from the script's `{-3, what, value}`.
fn damage(what: &str, value: &str) -> String {
    match what {
        "ahead" => format!(
            "the token {value}, more than {} min ahead of the server clock",
            FENCE_TOKEN_MARGIN.as_secs() / 60
        ),
        "type" => format!("a {value}, not a string"),
        _ => format!("the text {value:?}, not a token"),
    }
}
