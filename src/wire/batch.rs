//! Many exclusive-lock acquisitions and releases as one script call
//! (`lua/batch.lua`), for the node's coalescer.
//!
//! At high load most of what an acquire+release pair costs Redis is the per-call
//! overhead of EVALSHA, not the few commands inside, so calls that are ready at the
//! same moment can go together. The batch script runs `lua/acquire.lua` and
//! `lua/release.lua` unchanged, wrapped as functions, each op in `pcall`, and
//! answers one reply per op. All ops of one batch must route to one node group
//! (one slot on a cluster): the caller groups them.

use std::sync::LazyLock;

use redis::{RedisResult, Value};

use super::lua::Lua;
use super::replicas::Need;
use super::{unexpected, Arg, Invocation};

/// `lua/batch.lua`, with the scripts it runs put in front of it as functions whose
/// parameters shadow the globals KEYS and ARGV (see the script's header).
static BATCH: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(&with_lock_ops(include_str!("../../lua/batch.lua"))));

/// `tail` with `lua/acquire.lua` and `lua/release.lua` put in front of it as the
/// functions `op_acquire` and `op_release`, whose parameters shadow the globals
/// KEYS and ARGV: both scripts run unchanged inside them, and their `return`
/// returns from the function (`lua/batch.lua`, `lua/transfer.lua`). The
/// fencing token's function (`lua/token_prelude.lua`) goes first, once.
pub(super) fn with_lock_ops(tail: &str) -> String {
    [
        include_str!("../../lua/token_prelude.lua"),
        "local function op_acquire(KEYS, ARGV)\n",
        include_str!("../../lua/acquire.lua"),
        "\nend\nlocal function op_release(KEYS, ARGV)\n",
        include_str!("../../lua/release.lua"),
        "\nend\n",
        tail,
    ]
    .concat()
}

/// Which script one op of a batch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchOp {
    /// `lua/acquire.lua`
    Acquire,
    /// `lua/release.lua`
    Release,
    /// `lua/acquire.lua` with the direct handoff's keys (the waiter takes a
    /// place in the handoff queue).
    AcquirePlacing,
    /// `lua/release.lua` with the direct handoff's keys (a release that frees
    /// the lock hands it to the first live place).
    ReleaseHanding,
}

impl BatchOp {
    /// This op's code in a batch's ARGV (the code fixes its key and argument
    /// counts, so none are sent).
    fn code(self) -> &'static str {
        match self {
            BatchOp::Acquire => "a",
            BatchOp::Release => "r",
            BatchOp::AcquirePlacing => "p",
            BatchOp::ReleaseHanding => "h",
        }
    }
}

/// Where one op's keys and arguments start in its batch's KEYS and ARGV.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    keys: usize,
    args: usize,
}

/// One call of the batch script over `ops` (each one with a [`BatchOp`]): every
/// op's keys, then per op its code and arguments; with it, where each op's keys
/// and arguments start. The ops' keys and arguments are moved into the batch,
/// not copied (copies were a few allocations per op on the busiest path):
/// [`unbatch`] gives them back once it is answered.
pub(crate) fn batch_invocation<'a>(
    ops: impl Iterator<Item = &'a mut Invocation>,
) -> (Invocation, Vec<Span>) {
    let mut call = Invocation::new(&BATCH);
    let mut all_must = true;
    let mut codes_and_args = Vec::with_capacity(8);
    let mut starts = Vec::new();
    for op in ops {
        all_must &= op.need == Need::Must;
        codes_and_args.push(Arg::Word(op.batch.map_or("?", BatchOp::code)));
        starts.push(Span {
            keys: call.keys.len(),
            args: codes_and_args.len(),
        });
        call.keys.append(&mut op.keys);
        codes_and_args.append(&mut op.args);
    }
    // Every exclusive op (grant, renewal, release) must be confirmed, so a
    // batch is too; were one op content with less, the batch would go while
    // replicas are short and each op be judged by its own need.
    if all_must {
        call = call.must_replicate();
    }
    call.args = codes_and_args;
    (call, starts)
}

/// Gives `ops` (those `batch` was made of, in the same order) their keys and
/// arguments back, into the buffers they left (no allocation): what an op is
/// judged and kept by after its answer (its routing key picks a cluster
/// master's confirmation; a kept release is resent as itself) must be whole.
pub(crate) fn unbatch<'a>(
    mut batch: Invocation,
    spans: &[Span],
    ops: impl DoubleEndedIterator<Item = &'a mut Invocation>,
) {
    for (op, span) in ops.rev().zip(spans.iter().rev()) {
        op.keys.extend(batch.keys.drain(span.keys..));
        op.args.extend(batch.args.drain(span.args..));
        batch.args.pop(); // the op's code
    }
}

/// The batch script's reply, one entry per op (an error reply for an op that
/// failed alone).
pub(crate) fn split_batch_reply(reply: Value, ops: usize) -> RedisResult<Vec<Value>> {
    match reply {
        Value::Array(replies) if replies.len() == ops => Ok(replies),
        _ => Err(unexpected("batch script returned an unknown shape")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ScriptCall;

    /// A batched op is whole again once answered: a kept release is resent
    /// as itself, and its routing key picks its cluster master's confirmation.
    #[test]
    fn ops_get_their_keys_and_arguments_back() {
        let acquire = crate::wire::Acquire {
            name: "{a}",
            field: "owner:1",
            lease_ms: 30_000,
            token_ttl_ms: 60_000,
            new_owner: false,
            reentrant: true,
            delay_ms: 0,
            place_ms: 250,
        }
        .invocation();
        let release = crate::wire::Release {
            name: "{b}",
            field: "owner:2",
            lease_ms: 30_000,
            request_id: "r",
            latch_ttl_ms: 10_000,
            retry: false,
            hand_lease_ms: 0,
            token_ttl_ms: 60_000,
        }
        .invocation();
        let mut ops = [acquire.clone(), release.clone()];
        let (batch, spans) = batch_invocation(ops.iter_mut());
        assert!(ops
            .iter()
            .all(|op| op.keys.is_empty() && op.args.is_empty()));
        assert_eq!(batch.args[0], "p", "the placing acquisition's code first");
        unbatch(batch, &spans, ops.iter_mut());
        for (op, was) in ops.iter().zip([&acquire, &release]) {
            assert_eq!((&op.keys, &op.args), (&was.keys, &was.args));
        }
        assert_eq!(ops[1].routing_key(), Some("{b}"));
    }
}
