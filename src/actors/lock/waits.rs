//! The lock's waiting side on the kit's waiting engine: [`LockWaits`], the
//! policy that makes the engine a lock's, [`Side`], which keeps an engine
//! only while someone waits or listens, and [`Wait`], the actor's waiting
//! side as a whole.
//!
//! The engine (`actors/waiting/engine/`) holds every rule the synchronizers
//! share: one attempt at a time, who leaves when, what a lost answer costs.
//! What is a lock's own is here, read from its kind (`kinds/`): who asks
//! (the exclusive lock's turns, the fair lock's places), what an acquire
//! script's answer means (granted with a fencing token, busy with the
//! holder's lease, a re-entry refused), which channel a waiter listens on once
//! it was refused. A lock's scripts remember no op id, so an attempt whose
//! answer is lost is checked by the actor before anyone asks again
//! ([`Policy::checks_lost`]), and one whose waiter left is undone by a release
//! sent right behind it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::deadlock::Detector;
use super::holding::{keeps_out, Holdings};
use super::kinds::{AfterRelease, Freed, KindState, LastRelease};
use super::waiters::{Reply, Waiter, WaiterQueue, Want};
use crate::actors::waiting::engine::{
    Ask, Effect, Engine, Event, Found, Heard, Mark, Pick, Policy, Then,
};
use crate::actors::waiting::timeout;
use crate::actors::waiting::Waiting;
use crate::config::Config;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::keys::Owner;
use crate::kind::Kind;
use crate::wire::{AcquireReply, Place};

/// How long an attempt may go unanswered before a waiter whose deadline passes
/// is told that Redis did not answer rather than that the lock is held.
const SILENCE: Duration = Duration::from_millis(100);

/// What a granted attempt gave its waiter, for its guard.
#[derive(Debug)]
pub(super) struct Won {
    /// The fencing token.
    pub(super) token: u64,
    /// The owner's hold count after it.
    pub(super) holds: u32,
    /// A replica confirmed it (when confirmation is on).
    pub(super) confirmed: bool,
}

/// A lock's policy for the engine: its kind, and what the engine asks of a
/// lock beside it.
#[derive(Debug)]
pub(super) struct LockWaits {
    /// The kind, with its own state and decisions.
    pub(super) kind: KindState,
    /// The lock name (its key).
    name: Arc<str>,
    /// The settings (the spin lock's backoff).
    config: Arc<Config>,
    /// An answer showed the key a lock hash: a new owner's later attempts
    /// skip the re-entry check (which also refuses a key of another type).
    saw_lock: bool,
    /// This process holds the lock (the exclusive holder may keep listening
    /// while it takes turns). Kept current by the actor.
    pub(super) holding: bool,
}

impl Policy for LockWaits {
    type Want = Want;
    type Grant = LockGuard;
    type Won = Won;
    type Reply = AcquireReply;
    const LABEL: &'static str = "lock";

    fn name(&self) -> &str {
        &self.name
    }

    /// A lock's scripts remember no op id (its lost attempts are checked):
    /// the op only says that an attempt out changes Redis, so that a waiter
    /// leaving meanwhile has it undone. The name serves, as nothing reads it.
    fn op(&self, _local: u64) -> Option<Arc<str>> {
        Some(self.name.clone())
    }

    fn goes_first(&self, want: &Want) -> bool {
        want.first
    }

    fn wants(&self, _want: &Want) -> u64 {
        1
    }

    fn expired(
        &self,
        waited: Duration,
        last: Option<&redis::RedisError>,
    ) -> Result<LockGuard, LockError> {
        Err(last.map_or_else(|| timeout(waited), |e| LockError::from(e.clone())))
    }

    fn names_holder(&self) -> bool {
        true
    }

    fn silence(&self) -> Option<Duration> {
        Some(SILENCE)
    }

    fn not_granted(&self, want: &Want, error: &LockError) {
        crate::stats::record::failed(want.req.kind, error);
    }

    /// A newcomer while an attempt is out waits for its answer, which looks
    /// again: an arrival frees nothing, so that attempt need not be repeated.
    fn asks_on_arrival(&self, _first: bool, in_flight: bool) -> bool {
        !in_flight
    }

    fn next(&mut self, waiters: &mut WaiterQueue, now: Instant) -> Pick {
        self.kind.next(waiters, now)
    }

    fn asking(&mut self, want: &mut Want, once: bool, now: Instant) {
        want.placing = self.kind.sending(want, once, &self.config);
        // A retry (the first attempt found the key a lock hash, or got an
        // error), or an earlier attempt found it one: a key that turns into
        // another type under a live lock actor then reads as busy.
        want.new_owner_now = want.req.new_owner && (want.tried_at.is_some() || self.saw_lock);
        want.tried_at = Some(now);
    }

    fn channel(&self, w: &Waiter) -> Option<String> {
        self.kind.channel_of(&w.want, &self.name)
    }

    fn also_listens(&self, w: &Waiter) -> Option<String> {
        self.kind.also_listens(&w.want, &self.name)
    }

    fn own_channel(&self, mark: &Mark<Want>) -> Option<String> {
        self.kind.own_channel(mark, &self.name)
    }

    fn place(&self, mark: &Mark<Want>) -> Option<Arc<str>> {
        self.kind.place(mark)
    }

    fn kept_channel(&self) -> Option<String> {
        self.kind.kept_channel(&self.name)
    }

    fn keeps_listening(&self, channel: &str) -> bool {
        self.kind.keeps_listening(channel, &self.name, self.holding)
    }

    fn lingers(&self) -> bool {
        self.kind.lingers(&self.config)
    }

    fn grant_gives_back(&self) -> bool {
        true
    }

    fn checks_lost(&self) -> bool {
        true
    }

    fn classify(&mut self, reply: AcquireReply) -> Found<Won> {
        match reply {
            AcquireReply::Acquired {
                token,
                holds,
                confirmed,
            } => {
                self.saw_lock = true;
                // Held from now (its guard is made next): a holder that keeps
                // listening keeps its channel through the grant.
                self.holding = true;
                let won = Won {
                    token,
                    holds,
                    confirmed,
                };
                Found::Taken { left: 0, won }
            }
            AcquireReply::Busy { ttl, head } => {
                self.saw_lock = true;
                Found::Short {
                    retry_in: ttl,
                    missing: false,
                    first: head.map(Arc::from),
                }
            }
            AcquireReply::UpgradeRefused => Found::Refused(LockError::UpgradeRefused),
            AcquireReply::ReentryRefused => Found::Refused(LockError::ReentryRefused),
        }
    }

    /// The new holder keeps out the waiters it excludes: the queue looks
    /// again now, before the actor has made its holding.
    fn after_grant(&mut self, _left: u64, granted: &Want, waiters: &mut WaiterQueue) -> Then {
        let holder = (granted.req.owner, granted.req.kind);
        for w in waiters.iter_mut() {
            w.want.blocked |= keeps_out(holder, w.want.req.owner, w.want.req.kind);
        }
        self.kind.granted(waiters.len());
        Then::Pump
    }

    fn short(&mut self, want: &mut Want, retry_in: Option<Duration>) -> Then {
        self.kind.short(want, retry_in, &self.config)
    }

    fn woken(&mut self, waiters: &mut WaiterQueue) {
        self.kind.timer_fired(waiters);
    }

    fn heard(&mut self, channel: &str, _wake_all: bool, waiters: &mut WaiterQueue) -> Heard {
        self.kind.heard(channel, &self.name, waiters)
    }

    fn subscribed(&mut self, channel: &str, waiters: &mut WaiterQueue) {
        self.kind.subscribed(channel, &self.name, waiters);
    }

    fn placed(&mut self, stands: Vec<(Arc<str>, Place)>, waiters: &mut WaiterQueue) {
        self.kind.placed(stands, waiters, &self.name);
    }
}

/// The engine's event that queues `want`, answered on `reply`.
pub(crate) fn join(want: Want, reply: Reply) -> Event<LockWaits> {
    let req = &want.req;
    // A zero wait is answered by its one attempt, not by a timer (which would
    // fire before the attempt returns). A wait too long to represent is the
    // same as no deadline.
    let deadline = req
        .wait
        .filter(|w| !w.is_zero())
        .and_then(|w| req.since.checked_add(w));
    Event::Join {
        id: req.id,
        since: req.since,
        deadline,
        once: req.wait.is_some_and(|w| w.is_zero()),
        want,
        reply,
    }
}

/// The waiting side of a lock actor: the parts that change when a caller
/// arrives, asks, listens or leaves. Grouped apart from the holding side
/// because a held lock with nobody waiting keeps these empty (the engine and
/// the boxed parts absent), which is what keeps a held lock's actor small
/// (docs/performance.md, client bytes per held lock).
pub(super) struct Wait {
    /// The kind, and the waiting engine while anyone waits or listens (`waits.rs`).
    pub(super) side: Side,
    /// The waiting records of waits over a second (`actors/waiting/records.rs`),
    /// boxed and only while someone waits.
    pub(super) records: Option<Box<Waiting>>,
    /// Its deadlock checks (`deadlock.rs`), boxed and only while a wait is
    /// past `Config::deadlock_timeout`, for the same reason.
    pub(super) detector: Option<Box<Detector>>,
    /// The check of a lost attempt, held back while a release is out (the
    /// owner's hold count would be blurred).
    pub(super) check: Option<Box<Want>>,
}

impl Wait {
    /// Nobody waits yet on a lock of `kind`.
    pub(super) fn new(kind: Kind) -> Wait {
        Wait {
            side: Side::new(kind),
            records: None,
            detector: None,
            check: None,
        }
    }
}

/// A lock actor's waiting side: its kind alone while nobody waits or listens
/// (a held lock's actor stays as small as it was: docs/performance.md, client
/// bytes per held lock), an engine around the kind while someone does.
#[derive(Debug)]
pub(super) enum Side {
    /// Nobody waits, nothing is out, no channel is listened on; `saw_lock`
    /// as [`LockWaits`] keeps it.
    Idle { kind: KindState, saw_lock: bool },
    /// The engine, with the kind in its policy.
    Busy(Box<Engine<LockWaits>>),
}

impl Side {
    /// The side of a fresh lock actor of `kind`.
    pub(super) fn new(kind: Kind) -> Side {
        Side::Idle {
            kind: KindState::new(kind),
            saw_lock: false,
        }
    }

    /// The kind.
    pub(super) fn kind(&self) -> &KindState {
        match self {
            Side::Idle { kind, .. } => kind,
            Side::Busy(e) => &e.policy().kind,
        }
    }

    /// The kind with its waiters (none while idle), to change either.
    pub(super) fn kind_and_queue(&mut self) -> (&mut KindState, Option<&mut WaiterQueue>) {
        match self {
            Side::Idle { kind, .. } => (kind, None),
            Side::Busy(e) => {
                let (p, q) = e.policy_mut();
                (&mut p.kind, Some(q))
            }
        }
    }

    /// The engine, made around the kind if there is none.
    pub(super) fn engine(
        &mut self,
        name: &Arc<str>,
        config: &Arc<Config>,
    ) -> &mut Engine<LockWaits> {
        if let Side::Idle { kind, saw_lock } = self {
            let fresh = KindState::new(kind.kind());
            let policy = LockWaits {
                kind: std::mem::replace(kind, fresh),
                name: name.clone(),
                config: config.clone(),
                saw_lock: *saw_lock,
                holding: false,
            };
            *self = Side::Busy(Box::new(Engine::new(policy, config.clone())));
        }
        match self {
            Side::Busy(e) => e,
            Side::Idle { .. } => unreachable!("made above"),
        }
    }

    /// The engine, if there is one.
    pub(super) fn engine_mut(&mut self) -> Option<&mut Engine<LockWaits>> {
        match self {
            Side::Busy(e) => Some(e),
            Side::Idle { .. } => None,
        }
    }

    /// The waiters, head first.
    pub(super) fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        let engine = match self {
            Side::Busy(e) => Some(e),
            Side::Idle { .. } => None,
        };
        engine.into_iter().flat_map(|e| e.waiters())
    }

    /// Whether anyone waits.
    pub(super) fn has_waiters(&self) -> bool {
        self.waiters().next().is_some()
    }

    /// Whether nothing sent to acquire is unsettled (no attempt out, no lost
    /// one to check).
    pub(super) fn is_quiet(&self) -> bool {
        match self {
            Side::Idle { .. } => true,
            Side::Busy(e) => e.is_quiet(),
        }
    }

    /// The kind, and its waiters (none while nobody waits), for `f`.
    pub(super) fn with_kind<R>(
        &mut self,
        f: impl FnOnce(&mut KindState, &mut WaiterQueue) -> R,
    ) -> R {
        match self.kind_and_queue() {
            (kind, Some(queue)) => f(kind, queue),
            (kind, None) => f(kind, &mut WaiterQueue::default()),
        }
    }

    /// Tells the policy what only the actor knows: whether this process
    /// holds the lock, and which waiters a local holding keeps out.
    pub(super) fn mark(&mut self, holdings: &Holdings) {
        let Some(engine) = self.engine_mut() else {
            return;
        };
        let (policy, queue) = engine.policy_mut();
        policy.holding = !holdings.is_empty();
        for w in queue.iter_mut() {
            w.want.blocked = holdings.blocks(w.want.req.owner, w.want.req.kind);
        }
    }

    /// Whether this process listens on lock `name`'s channel (for the fair
    /// lock, the prefix of each waiter's own): the listeners a release
    /// counts include it. The channel is made when needed rather than kept:
    /// only waiters need it, and a held lock's actor should stay small.
    pub(super) fn listens(&mut self, name: &str) -> bool {
        // Without an engine nothing is listened on: an uncontended release
        // makes no channel name.
        let Side::Busy(engine) = self else {
            return false;
        };
        let channel = engine.policy().kind.scripts().channel(name);
        engine.channel_mut(&channel).is_some_and(|c| c.is_live())
    }

    /// A plain release freed lock `name`, and `published` an unlock message
    /// that `heard` listeners got: the kind's books learn it, and say whether
    /// the head waiter yields (holds back, listening for the other processes'
    /// release).
    pub(super) fn released(&mut self, published: bool, heard: u32, name: &str) -> AfterRelease {
        let listening = self.listens(name);
        let freed = Freed {
            published,
            others: heard.saturating_sub(u32::from(listening)),
            listening,
            nobody_waits: !self.has_waiters(),
            now: Instant::now(),
        };
        self.with_kind(|kind, _| kind.released(freed))
    }

    /// The waiter a release of `holder`'s last hold hands the lock to, when
    /// the kind hands over (`count`: the transfer counts the listeners) and
    /// nothing acquiring is out: the head waiter of another owner, asked now,
    /// with the effects of asking it.
    pub(super) fn hand_over_to(&mut self, holder: Owner) -> Option<HandOver> {
        if !self.is_quiet() {
            return None;
        }
        let LastRelease::HandOver { count } = self.kind().last_release() else {
            return None;
        };
        let engine = self.engine_mut()?;
        let ask = engine.ask_head(|head| head.want.req.owner != holder)?;
        let effects = engine.take_effects();
        Some(HandOver {
            ask,
            count,
            effects,
        })
    }

    /// Drops the engine once nobody waits, nothing is out and nothing is
    /// listened on, keeping the kind.
    pub(super) fn idle_if_empty(&mut self) {
        let Side::Busy(e) = self else {
            return;
        };
        if !e.is_empty() {
            return;
        }
        let (policy, _) = e.policy_mut();
        let fresh = KindState::new(policy.kind.kind());
        let kind = std::mem::replace(&mut policy.kind, fresh);
        let saw_lock = policy.saw_lock;
        *self = Side::Idle { kind, saw_lock };
    }
}

/// A hand-over [`Side::hand_over_to`] chose.
pub(super) struct HandOver {
    /// The waiter asked, and what it wants.
    pub(super) ask: Ask<Want>,
    /// The transfer counts who listens on the unlock channel.
    pub(super) count: bool,
    /// The effects of asking it, to carry out.
    pub(super) effects: Vec<Effect<LockWaits>>,
}
