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
//! A failed round trip (timeout, dropped connection) fails every call of its batch
//! with the same error, which each lock actor already handles (a lost acquisition is
//! checked by hold count, a release is retried with its request id). An error of one
//! op inside a batch (a key of the wrong type) comes back as that op's error alone.

use std::sync::{Arc, LazyLock};

use redis::aio::ConnectionManager;
use redis::{Cmd, RedisError, RedisResult, Script, ServerErrorKind, Value};
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::SCRIPTS;

/// `lua/batch.lua`, with the scripts it runs put in front of it as functions whose
/// parameters shadow the globals KEYS and ARGV (see the script's header).
static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local function op_acquire(KEYS, ARGV)\n",
        include_str!("../../lua/acquire.lua"),
        "\nend\nlocal function op_release(KEYS, ARGV)\n",
        include_str!("../../lua/release.lua"),
        "\nend\n",
        include_str!("../../lua/batch.lua"),
    ))
});

/// Which script one op runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `lua/acquire.lua`
    Acquire,
    /// `lua/release.lua`
    Release,
}

impl Call {
    /// The script that runs this op alone.
    fn script(self) -> &'static Script {
        match self {
            Call::Acquire => &SCRIPTS.acquire,
            Call::Release => &SCRIPTS.release,
        }
    }

    /// This op's code in a batch's ARGV.
    fn code(self) -> &'static str {
        match self {
            Call::Acquire => "a",
            Call::Release => "r",
        }
    }
}

/// One script call waiting for its round trip.
#[derive(Debug)]
struct Op {
    /// The script.
    call: Call,
    /// Its KEYS.
    keys: Vec<String>,
    /// Its ARGV.
    args: Vec<String>,
    /// Where its reply goes: the script's answer, or its error.
    reply: oneshot::Sender<RedisResult<Value>>,
}

/// A handle on the coalescer (cloning it shares the driver), plus the command
/// connection for the scripts that do not go through it.
#[derive(Debug, Clone)]
pub(crate) struct Coalescer {
    /// The command connection the driver sends on.
    conn: ConnectionManager,
    /// The driver's queue. When the last handle goes, the driver ends.
    ops: mpsc::UnboundedSender<Op>,
}

impl Coalescer {
    /// Starts the driver on the current actix runtime: at most `max_batch` ops per
    /// script call and at most `in_flight` calls awaiting their reply at once.
    pub(crate) fn start(conn: ConnectionManager, max_batch: usize, in_flight: usize) -> Self {
        let (ops, queue) = mpsc::unbounded_channel();
        actix_rt::spawn(drive(
            conn.clone(),
            queue,
            max_batch.max(1),
            in_flight.max(1),
        ));
        Coalescer { conn, ops }
    }

    /// The command connection.
    pub(crate) fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Runs `call` with these keys and arguments, alone or in a batch; answers with
    /// the script's reply, an error reply of Redis as an error.
    pub(crate) async fn run(
        &self,
        call: Call,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> RedisResult<Value> {
        let (reply, answer) = oneshot::channel();
        let op = Op {
            call,
            keys,
            args,
            reply,
        };
        self.ops.send(op).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
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
/// sends them as one call. Ends when every handle is gone; calls still in flight
/// then finish in their own tasks.
async fn drive(
    conn: ConnectionManager,
    mut queue: mpsc::UnboundedReceiver<Op>,
    max_batch: usize,
    in_flight: usize,
) {
    let slots = Arc::new(Semaphore::new(in_flight));
    loop {
        // A slot first, then work: while every slot is taken, ops pile up in the
        // queue and the next free slot takes them all at once.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match queue.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let conn = conn.clone();
        actix_rt::spawn(async move {
            send(conn, batch).await;
            drop(slot);
        });
    }
}

/// Sends one batch and hands every op its reply.
async fn send(mut conn: ConnectionManager, mut batch: Vec<Op>) {
    if batch.len() == 1 {
        if let Some(op) = batch.pop() {
            let script = op.call.script();
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(script.get_hash())
                .arg(op.keys.len())
                .arg(&op.keys)
                .arg(&op.args);
            let res = eval(&mut conn, script, &cmd).await;
            let _ = op.reply.send(res.and_then(into_result));
        }
        return;
    }
    // The layout of lua/batch.lua: every op's keys, then per op its code and
    // arguments (the code fixes how many of each there are).
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(BATCH.get_hash())
        .arg(batch.iter().map(|op| op.keys.len()).sum::<usize>());
    for op in &batch {
        cmd.arg(&op.keys);
    }
    for op in &batch {
        cmd.arg(op.call.code()).arg(&op.args);
    }
    match eval(&mut conn, &BATCH, &cmd).await.and_then(into_result) {
        Ok(Value::Array(replies)) if replies.len() == batch.len() => {
            for (op, reply) in batch.into_iter().zip(replies) {
                let _ = op.reply.send(into_result(reply));
            }
        }
        Ok(_) => {
            let e = super::unexpected("batch script returned an unknown shape");
            for op in batch {
                let _ = op.reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for op in batch {
                let _ = op.reply.send(Err(e.clone()));
            }
        }
    }
}

/// Sends an EVALSHA as it is, loading the script and sending again if Redis does
/// not know it (after a restart or SCRIPT FLUSH). Not `Script::invoke_async`: that
/// turns an error anywhere in a reply into an error for the whole reply, and a
/// batch's reply holds one error per failed op.
async fn eval(conn: &mut ConnectionManager, script: &Script, cmd: &Cmd) -> RedisResult<Value> {
    match conn.send_packed_command(cmd).await? {
        Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript) => {
            script.load_async(conn).await?;
            conn.send_packed_command(cmd).await
        }
        reply => Ok(reply),
    }
}

/// An error reply as an error, anything else as it is.
fn into_result(reply: Value) -> RedisResult<Value> {
    match reply {
        Value::ServerError(e) => Err(e.into()),
        reply => Ok(reply),
    }
}

#[cfg(test)]
mod tests;
