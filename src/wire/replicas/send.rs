//! Sending one lock change with its confirmation: the script alone when no
//! replica is asked, refused when the master is in doubt or the budget is
//! spent, else the script and its `WAIT` (and `WAITAOF`) in one pipeline on one
//! lane, or the fast lane's short `WAIT` (`fast.rs`).
//!
//! [`Confirmation`] decides the way (its budget, its doubts); this file only
//! carries it out and records what the `WAIT` said.

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Value};

use super::fast::send_fast;
use super::lanes::Lanes;
use super::replies::confirmed;
use super::{Confirmation, Confirmed, Need, Way};
use crate::config::ReplicaSync;
use crate::durations::millis;
use crate::error::not_replicated;

/// Sends `cmd`, followed by `WAIT` when the connection asks replicas to confirm
/// and `need` is not read-only, within the connection's budget of `WAIT`s (see
/// the module documentation); answers the script's reply as Redis sent it. A
/// call that must be confirmed while replicas are short and the budget is spent
/// is not sent: it is answered `NotReplicated` at once.
///
/// `confirmation` is the connection's own ([`ScriptConn::confirmation`]), passed
/// in rather than asked for here, so that this file needs nothing of `lua.rs`
/// (which names [`Confirmation`]).
///
/// [`ScriptConn::confirmation`]: crate::wire::ScriptConn::confirmation
pub(crate) async fn send<C: ConnectionLike + Lanes + Clone + Send + 'static>(
    conn: &mut C,
    confirmation: Option<Arc<Confirmation>>,
    cmd: &Cmd,
    need: Need,
) -> RedisResult<(Value, Confirmed)> {
    let Some(confirmation) = confirmation.filter(|_| need != Need::ReadOnly) else {
        return Ok((conn.req_packed_command(cmd).await?, Confirmed::NotAsked));
    };
    // `wanted` 0 in a shortfall says it was the master, not its replicas, that
    // could not be trusted (`LockError::NotReplicated`).
    let doubted = Confirmed::Short {
        acked: 0,
        wanted: 0,
    };
    if confirmation.master_doubted() {
        return match need {
            Need::Must => Err(not_replicated(0, 0)),
            _ => Ok((conn.req_packed_command(cmd).await?, doubted)),
        };
    }
    let doubts = confirmation.count.doubts();
    let (reply, confirmed) = if confirmation.required() == 0 && !confirmation.aof {
        // No replica can answer (none, or every one frozen or gone): a WAIT
        // would only last its timeout. `node/replicas/` made sure, under
        // Sentinel, that this master was not demoted before it lowered the count.
        let reply = conn.req_packed_command(cmd).await?;
        (reply, confirmation.no_replica())
    } else {
        // Boxed: the way through lanes and `WAIT`s is a future of a kilobyte
        // or more, which inline would make every call's future that big, and
        // a large allocation (glibc's slow path) where no replica is asked.
        Box::pin(send_confirmed(conn, &confirmation, cmd, need)).await?
    };
    if confirmation.count.doubts() != doubts {
        // The master was doubted while this call was out: its answer may be
        // a demoted master's.
        return Ok((reply, doubted));
    }
    Ok((reply, confirmed))
}

/// [`send`] to a master not in doubt, with a replica that can answer when
/// [`send`] looked.
async fn send_confirmed<C: ConnectionLike + Lanes + Clone + Send + 'static>(
    conn: &mut C,
    confirmation: &Arc<Confirmation>,
    cmd: &Cmd,
    need: Need,
) -> RedisResult<(Value, Confirmed)> {
    // The script, its WAIT and a fast lane's second WAIT all go on one lane:
    // a WAIT covers only what its own connection wrote.
    let lane = confirmation.pick();
    let conn = &mut conn.lane(lane);
    if let Some(place) = confirmation.fast_place(lane).await {
        return send_fast(conn, confirmation, cmd, place, lane).await;
    }
    let way = confirmation.way(need, lane).await;
    if confirmation.required() == 0 && !confirmation.aof {
        // No replica can answer any more (counted while this call waited for
        // its way): nothing to wait for.
        return Ok((
            conn.req_packed_command(cmd).await?,
            confirmation.no_replica(),
        ));
    }
    let _place = match way {
        Way::Wait(place) => place,
        Way::Alone => {
            let reply = conn.req_packed_command(cmd).await?;
            let (acked, wanted) = confirmation.shortfall();
            return Ok((reply, Confirmed::Short { acked, wanted }));
        }
        Way::Refused => {
            let (acked, wanted) = confirmation.shortfall();
            return Err(not_replicated(acked, wanted));
        }
    };
    with_wait(conn, confirmation, cmd).await
}

/// The script `cmd` and a `WAIT` (and `WAITAOF`) in one pipeline, recorded.
async fn with_wait<C: ConnectionLike>(
    conn: &mut C,
    confirmation: &Confirmation,
    cmd: &Cmd,
) -> RedisResult<(Value, Confirmed)> {
    let sync = ReplicaSync {
        min: confirmation.required(),
        ..confirmation.sync
    };
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone());
    let count = 1 + push_waits(&mut pipe, sync, confirmation.aof);
    let replies = match conn.req_packed_commands(&pipe, 0, count).await {
        Ok(replies) => replies,
        Err(e) => {
            // Its WAIT may still block the connection (a timeout).
            confirmation.record(&Confirmed::Failed(e.clone()));
            return Err(e);
        }
    };
    let mut replies = replies.into_iter();
    let (Some(reply), Some(wait)) = (replies.next(), replies.next()) else {
        return Err(crate::wire::unexpected(
            "a script and WAIT gave fewer than two replies",
        ));
    };
    let confirmed = confirmed(wait, replies.next(), sync);
    confirmation.record(&confirmed);
    Ok((reply, confirmed))
}

/// Appends `WAIT` (and `WAITAOF` when the master has it) for `sync` to `pipe`;
/// answers how many commands that added.
pub(super) fn push_waits(pipe: &mut redis::Pipeline, sync: ReplicaSync, aof: bool) -> usize {
    pipe.cmd("WAIT").arg(sync.min).arg(millis(sync.timeout));
    if aof {
        pipe.cmd("WAITAOF").arg(1).arg(0).arg(millis(sync.timeout));
        return 2;
    }
    1
}
