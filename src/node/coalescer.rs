//! The coalescer: exclusive-lock acquisitions and releases that are ready at the same
//! moment go to Redis as one script call.
//!
//! At high load most of what an acquire+release pair costs Redis is the per-call
//! overhead of EVALSHA (parsing the request, looking up the script, setting up Lua),
//! not the few commands inside. So every lock actor hands its exclusive acquire and
//! release calls to one driver task instead of sending them itself. The driver sends
//! a call at once when fewer than the configured number of batches are in flight;
//! otherwise the calls wait in its channel and leave together, as one call of
//! `lua/batch.lua` over all their keys, when a batch returns. Each lock keeps its own
//! queue, timers and decisions; only the round trip is shared. Nothing is delayed on
//! purpose: with nothing in flight, a call leaves at once as its plain script
//! (`lua/acquire.lua` or `lua/release.lua`), so an idle acquire+release still costs
//! exactly two round trips, and the batching only starts when calls queue up anyway.
//!
//! A call made while nothing else is out or queued does not even go through the
//! driver: the caller takes a slot and sends the call itself, in its own task.
//! That is the lone holder's case, the most common one, and it saves two task
//! switches (the driver's wake-up and the task it spawns per batch) on each of
//! its two round trips. Only then: a call sent directly carries one op, so taking
//! slots this way while others are out would leave fewer slots to batches, and
//! under load Redis would run more, smaller calls (the coalescing test counts
//! them).
//!
//! A failed round trip (timeout, dropped connection) fails every call of its batch
//! with the same error, which each lock actor already handles (a lost acquisition is
//! checked by hold count, a release is retried with its request id). An error of one
//! op inside a batch (a key of the wrong type) comes back as that op's error alone.
//! Ops are batched only with ops of the same node group ([`super::Group`]), so a
//! batch never spans two cluster slots.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use redis::{RedisError, RedisResult, Value};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::{Conn, Group, Topology};
use crate::wire::{self, Invocation, ScriptCall};

/// One script call waiting for its round trip.
#[derive(Debug)]
struct Op {
    /// The call (with a batch code when it may share a round trip).
    call: Invocation,
    /// Where its reply goes: the script's answer, or its error.
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// A handle on the coalescer (cloning it shares the driver).
#[derive(Debug, Clone)]
pub(crate) struct Coalescer {
    /// The driver's queue. When the last handle goes, the driver ends.
    ops: mpsc::UnboundedSender<Op>,
    /// What the driver and the callers that pass it by share.
    lane: Arc<Lane>,
}

/// The in-flight bound, shared by the driver and the calls sent directly.
#[derive(Debug)]
struct Lane {
    /// One permit per call (or batch) awaiting its reply. The driver holds one
    /// while it waits for work.
    slots: Arc<Semaphore>,
    /// Ops sent to the driver that it has not taken yet: while there are any, a
    /// new call queues behind them rather than overtaking them.
    queued: AtomicUsize,
    /// The bound on calls in flight (`slots`' size).
    in_flight: usize,
    /// The connection direct calls go on.
    conn: Conn,
}

impl Coalescer {
    /// Starts the driver on the current actix runtime: at most `max_batch` ops per
    /// script call and at most `in_flight` calls awaiting their reply at once.
    pub(crate) fn start(
        conn: Conn,
        topology: Topology,
        max_batch: usize,
        in_flight: usize,
    ) -> Self {
        let (ops, queue) = mpsc::unbounded_channel();
        let lane = Arc::new(Lane {
            // The driver keeps one while it waits for work, so direct calls get
            // at most `in_flight - 1` (none with a bound of 1: then everything
            // goes through the driver, as the bound asks).
            slots: Arc::new(Semaphore::new(in_flight.max(1))),
            queued: AtomicUsize::new(0),
            in_flight: in_flight.max(1),
            conn: conn.clone(),
        });
        actix_rt::spawn(drive(conn, topology, queue, lane.clone(), max_batch.max(1)));
        Coalescer { ops, lane }
    }

    /// Runs `call`, alone or in a batch with others that are ready at the same
    /// moment, and reads its reply. A call without a batch code always goes alone.
    pub(crate) async fn call<S: ScriptCall>(&self, call: &S) -> RedisResult<S::Reply> {
        // Only the idle driver's slot is taken and nothing is queued: the
        // driver would send this at once, alone; send it from here instead.
        let idle = self.lane.slots.available_permits() + 1 == self.lane.in_flight;
        if idle && self.lane.queued.load(Ordering::Acquire) == 0 {
            if let Ok(slot) = self.lane.slots.try_acquire() {
                crate::stats::record::batch(1);
                let mut conn = self.lane.conn.clone();
                let value = call.invocation().run(&mut conn).await;
                drop(slot);
                return call.parse(value.and_then(wire::into_result)?);
            }
        }
        let (reply, answer) = oneshot::channel();
        let op = Op {
            call: call.invocation(),
            reply,
        };
        self.lane.queued.fetch_add(1, Ordering::AcqRel);
        if self.ops.send(op).is_err() {
            self.lane.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(stopped());
        }
        let value = answer.await.map_err(|_| stopped())??;
        call.parse(value)
    }
}

/// The error of an op whose driver is gone (its runtime is shutting down).
fn stopped() -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "lockwarden: the script coalescer has stopped",
    ))
}

/// The driver: takes the ops that are queued when a slot for a call is free and
/// sends them, one call per node group. Ends when every handle is gone; calls
/// still in flight then finish in their own tasks.
async fn drive(
    conn: Conn,
    topology: Topology,
    mut queue: mpsc::UnboundedReceiver<Op>,
    lane: Arc<Lane>,
    max_batch: usize,
) {
    loop {
        // A slot first, then work: while every slot is taken, ops pile up in the
        // queue and the next free slot takes them all at once.
        let Ok(slot) = lane.slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut taken = vec![first];
        while taken.len() < max_batch {
            match queue.try_recv() {
                Ok(op) => taken.push(op),
                Err(_) => break,
            }
        }
        lane.queued.fetch_sub(taken.len(), Ordering::AcqRel);
        // A call that cannot be batched goes alone; the rest by group. On a
        // standalone server that is one batch, as before grouping existed.
        let mut groups: BTreeMap<Option<Group>, Vec<Op>> = BTreeMap::new();
        for op in taken {
            let group = op
                .call
                .batch
                .and(op.call.routing_key())
                .map(|k| topology.group(k));
            groups.entry(group).or_default().push(op);
        }
        let mut batches: Vec<Vec<Op>> = Vec::new();
        for (group, ops) in groups {
            match group {
                Some(_) => batches.push(ops),
                None => batches.extend(ops.into_iter().map(|op| vec![op])),
            }
        }
        // The slot is shared by this round's calls and freed when the last ends.
        let slot = Arc::new(slot);
        for batch in batches {
            let (conn, slot) = (conn.clone(), slot.clone());
            actix_rt::spawn(async move {
                send(conn, batch).await;
                drop(slot);
            });
        }
    }
}

/// Sends one batch and hands every op its reply.
async fn send(mut conn: Conn, mut batch: Vec<Op>) {
    crate::stats::record::batch(batch.len());
    if batch.len() == 1 {
        if let Some(op) = batch.pop() {
            let res = op.call.run(&mut conn).await.and_then(wire::into_result);
            let _ = op.reply.send(res);
        }
        return;
    }
    let (call, spans) = wire::batch_invocation(batch.iter_mut().map(|op| &mut op.call));
    let sent = std::time::Instant::now();
    // One WAIT behind the batch covers every op in it; each op is then judged by
    // its own need (a grant fails on a shortfall, a release stands).
    let res = call
        .run_confirmed(&mut conn)
        .await
        .and_then(|(reply, confirmed)| {
            let replies = wire::split_batch_reply(wire::into_result(reply)?, batch.len())?;
            Ok((replies, confirmed))
        });
    wire::unbatch(call, &spans, batch.iter_mut().map(|op| &mut op.call));
    match res {
        Ok((replies, confirmed)) => {
            for (op, reply) in batch.into_iter().zip(replies) {
                let key = op.call.routing_key().unwrap_or("?");
                wire::keep_if_unconfirmed(&conn, &op.call, &confirmed, sent);
                let judged = wire::judge((op.call.need, op.call.op()), reply, &confirmed, key);
                let _ = op.reply.send(judged.and_then(wire::into_result));
            }
        }
        Err(e) => {
            for op in batch {
                let _ = op.reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
