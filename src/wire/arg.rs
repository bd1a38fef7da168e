//! [`Arg`], one ARGV entry of a script call as it is kept until the call is
//! written: a number or a fixed word as itself, anything else as its text.
//!
//! Every acquire and release lays out five or more arguments, and most of
//! them are numbers (a lease, a time to live) or one of a few fixed words (a
//! flag, a batch code). Turned into a `String` each, they were an allocation
//! apiece on the busiest path; kept as they are, redis-rs writes them straight
//! into the command's buffer.

use redis::{RedisWrite, ToRedisArgs};

/// One argument of a script call (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    /// Text made for this call (an owner field, a command's own argument).
    Text(String),
    /// A fixed word: a flag, a batch code, an empty field.
    Word(&'static str),
    /// A number, written in decimal.
    Num(u64),
}

impl Arg {
    /// At most how many bytes it takes on the wire (for sizing the command).
    pub(crate) fn len(&self) -> usize {
        match self {
            Arg::Text(text) => text.len(),
            Arg::Word(word) => word.len(),
            // u64::MAX has 20 digits.
            Arg::Num(_) => 20,
        }
    }
}

impl ToRedisArgs for Arg {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        match self {
            Arg::Text(text) => out.write_arg(text.as_bytes()),
            Arg::Word(word) => out.write_arg(word.as_bytes()),
            Arg::Num(n) => n.write_redis_args(out),
        }
    }
}

/// Compares by what it writes, so that tests read as the scripts do.
impl PartialEq<&str> for Arg {
    fn eq(&self, other: &&str) -> bool {
        match self {
            Arg::Text(text) => text == other,
            Arg::Word(word) => word == other,
            Arg::Num(n) => other.parse() == Ok(*n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind writes the bytes its text would: the scripts read no difference.
    #[test]
    fn every_kind_writes_what_its_text_would() {
        for (arg, text) in [
            (Arg::Text("id:1".into()), "id:1"),
            (Arg::Word("0"), "0"),
            (Arg::Num(30_000), "30000"),
            (Arg::Num(u64::MAX), "18446744073709551615"),
        ] {
            let mut cmd = redis::cmd("X");
            cmd.arg(&arg);
            assert_eq!(
                cmd.get_packed_command(),
                redis::cmd("X").arg(text).get_packed_command()
            );
            assert!(
                arg.len() >= text.len(),
                "{text}: its size is not under-counted"
            );
            assert_eq!(arg, text);
        }
    }
}
