//! The engine's vocabulary: what goes in ([`Event`]), what comes out
//! ([`Effect`], with an [`Ask`] or a [`Taken`] waiter), and the [`Mark`] it
//! keeps on every waiter. Plain data, so that the runner and the tests speak
//! to the engine the same way, and a test reads an effect as the runner would.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

#[cfg(doc)]
use super::Engine;
use super::Policy;
use crate::actors::waiting::{queue, Queue};
use crate::error::LockError;
use crate::wire::Place;

/// What the engine keeps on each waiter beside what it wants.
#[derive(Debug, Clone)]
pub(crate) struct Mark<W> {
    /// What it wants, in the policy's terms.
    pub(crate) want: W,
    /// The op id all its attempts carry (`None`: they change nothing).
    pub(crate) op: Option<Arc<str>>,
    /// Its attempt is out.
    pub(crate) asking: bool,
    /// An attempt of its op id failed without an answer: a copy may have run,
    /// or may still run.
    pub(crate) lost: bool,
}

impl<W> Mark<W> {
    /// The mark of a waiter that just came, wanting `want`.
    pub(crate) fn of(want: W) -> Mark<W> {
        Mark {
            want,
            op: None,
            asking: false,
            lost: false,
        }
    }

    /// Whether a copy of its take may have run unseen: leaving now undoes it.
    pub(crate) fn unsure(&self) -> bool {
        self.op.is_some() && (self.asking || self.lost)
    }
}

/// A mark reads as its want: a policy's hooks name what the waiter wants
/// (`w.want.field`) and the engine's notes (`w.want.asking`) alike.
impl<W> std::ops::Deref for Mark<W> {
    type Target = W;

    fn deref(&self) -> &W {
        &self.want
    }
}

impl<W> std::ops::DerefMut for Mark<W> {
    fn deref_mut(&mut self) -> &mut W {
        &mut self.want
    }
}

/// One waiter of policy `P`.
pub(crate) type Waiter<P> = queue::Waiter<Mark<<P as Policy>::Want>, <P as Policy>::Grant>;

/// The waiters of policy `P`, in arrival order.
pub(crate) type Waiters<P> = Queue<Mark<<P as Policy>::Want>, <P as Policy>::Grant>;

/// Where a waiter's answer goes.
pub(crate) type Reply<P> = oneshot::Sender<Result<<P as Policy>::Grant, LockError>>;

/// One attempt to send.
#[derive(Debug, Clone)]
pub(crate) struct Ask<W> {
    /// The waiter it is for (its local id).
    pub(crate) waiter: u64,
    /// Its op id.
    pub(crate) op: Option<Arc<str>>,
    /// What it wants.
    pub(crate) want: W,
    /// It makes this one attempt only.
    pub(crate) once: bool,
    /// When it went out (one clock read for the engine, the policy and the
    /// runner, each of which needs it).
    pub(crate) sent: Instant,
}

/// A waiter whose wait ended in a grant, out of the queue: the runner makes
/// its grant and hands both to [`Engine::deliver`].
#[derive(Debug)]
pub(crate) struct Taken<P: Policy> {
    /// The waiter.
    pub(crate) waiter: Waiter<P>,
    /// When the attempt that took was sent (a lease counts from then).
    pub(crate) sent: Instant,
    /// What its own answer gave it (`None`: its wait ended without one, a
    /// latch opened for everyone).
    pub(crate) won: Option<P::Won>,
}

/// What happens to the engine.
#[derive(Debug)]
pub(crate) enum Event<P: Policy> {
    /// A caller waits for `want`, up to `wait` (`None`: for ever).
    Arrive {
        want: P::Want,
        wait: Option<Duration>,
        reply: Reply<P>,
    },
    /// A caller whose wait the runner counts itself (a lock's: its id and
    /// arrival are the manager's request's) waits for `want` until `deadline`
    /// (`None`: for ever); `once`: it makes one attempt, answered by it. It
    /// goes first when the policy says so ([`Policy::goes_first`]).
    Join {
        id: u64,
        since: Instant,
        deadline: Option<Instant>,
        once: bool,
        want: P::Want,
        reply: Reply<P>,
    },
    /// A caller stopped waiting (or got its answer).
    Left,
    /// Waiter `waiter` is answered `error` and leaves, whatever it was doing
    /// (a lock's wait found in a deadlock): its take is undone if one is out.
    Fail { waiter: u64, error: LockError },
    /// The attempt of `waiter` that the runner made itself
    /// ([`Engine::ask_head`]) ended without a grant for it (`unknown`: it may
    /// have taken, so it is checked as a lost one is).
    Withdrawn { waiter: u64, unknown: bool },
    /// The timer rang (fallback or deadline).
    Timer,
    /// The attempt of `waiter`, sent at `sent`, answered.
    Answered {
        waiter: u64,
        reply: redis::RedisResult<P::Reply>,
        sent: Instant,
    },
    /// A message on `channel`.
    Heard { channel: String, wake_all: bool },
    /// The subscription to this channel is made.
    Subscribed(String),
    /// Something may have been freed (a resubscription, a local give-back).
    Wake,
    /// Look at the queue again (an undo or a give-back is done).
    Look,
    /// The undo of a take for this want ([`Effect::Undo`]) failed: it is not
    /// known to have run. A policy that checks lost attempts has what the
    /// take did checked before anyone asks again; then, as [`Event::Look`].
    UndoFailed(P::Want),
    /// A refresh of the Redis queue said where each place stands.
    Places(Vec<(Arc<str>, Place)>),
    /// The check of a lost attempt ([`Effect::Check`]) is done (`Err`: it
    /// could not tell yet).
    Checked(redis::RedisResult<()>),
    /// Nobody waited for the idle timeout.
    IdleOver,
    /// The manager shuts down.
    Shutdown,
}

/// What the runner is to do.
#[derive(Debug)]
pub(crate) enum Effect<P: Policy> {
    /// Send this attempt; answer with [`Event::Answered`].
    ///
    /// Boxed, as are the other variants that carry a waiter or what it
    /// wants: they are hundreds of bytes, and an effect as big as its largest
    /// variant made every event's list of effects a large allocation (glibc
    /// serves those from its slow path, which was measured among the largest
    /// costs of an uncontended acquire+release).
    Ask(Box<Ask<P::Want>>),
    /// Make this waiter's grant and [`Engine::deliver`] it.
    Grant(Box<Taken<P>>),
    /// Undo the take under `op` (in the background, counted as unsettled);
    /// then [`Event::Look`], or [`Event::UndoFailed`] if it failed.
    Undo { op: Arc<str>, want: Box<P::Want> },
    /// Take these places out of the Redis queue.
    Leave(Vec<Arc<str>>),
    /// Find out what a lost attempt for `want` did and give back a take no
    /// grant accounts for; then [`Event::Checked`]. Nobody asks meanwhile.
    Check { want: Box<P::Want> },
    /// These waiters' deadlines passed (each waited this long) with nothing
    /// to tell them but a timeout: answer each with one, naming who holds
    /// (only for a policy that [`Policy::names_holder`]). They left already.
    TimedOut(Vec<(Waiter<P>, Duration)>),
    /// Subscribe to this channel; then [`Event::Subscribed`].
    Subscribe(String),
    /// Tell the subscriber this channel is not wanted here any more.
    Unsubscribe(String),
    /// Send [`Event::Look`] after this long, beside the timer (a delay that
    /// may be shorter than the runtime's timers tick).
    WakeAfter(Duration),
    /// Ring [`Event::Timer`] after this long, in place of the timer set before.
    Arm(Duration),
    /// Unset the timer.
    Disarm,
    /// Nobody waits: ring [`Event::IdleOver`] after the idle timeout, unless
    /// already set; an arrival cancels it.
    Linger,
    /// A waiter that lasts arrived: keep its waiting record.
    Watch,
    /// The key exists.
    KeyFound,
    /// The key is missing while `waiting` wait, the head for `waited`.
    KeyMissing { waiting: usize, waited: Duration },
}
