//! The waiting engine: the one loop every synchronizer runs (a queue of local
//! waiters, who asks, one Redis call in flight, what the answer means, then
//! answer, listen or wait), as a plain state machine with no actor and no
//! Redis in it, so that its rules are written once and tested alone.
//!
//! Events go in ([`Event`]: a waiter arrives, a caller leaves, a timer rings,
//! an attempt answers, a channel speaks, a subscription is made, a shutdown);
//! effects come out as data ([`Effect`]: send this waiter's attempt under its
//! op id, make this waiter's grant, undo this take, subscribe, arm the timer).
//! The runner (`actors/waiting/runner.rs`) carries them out and feeds back what
//! comes of them. Refusals and timeouts the engine answers itself through the
//! kit's [`Queue`] (a oneshot send); a grant goes out as an effect because
//! making one may take the runner's work (a permit holding and its renewal).
//! What differs between synchronizers is a [`Policy`] (`policy.rs`).
//!
//! The rules, stated here once:
//! - one attempt at a time, however many wait; a wake while it is out makes
//!   the queue look again once it is answered, since its answer may predate
//!   what the wake announced ([`Attempt`]);
//! - a waiter that will wait listens on its channel before it asks, so a
//!   release between a short answer and the subscription is not missed (one
//!   that listens only once refused, a lock's, subscribes after the short
//!   answer that keeps it waiting, and asks again once it listens); a
//!   channel the policy keeps is listened on whoever waits;
//! - every attempt of a waiter carries its op id; the waiter is `asking` while
//!   one is out and `lost` once one failed without an answer; leaving then (a
//!   deadline, a caller gone, a refusal, a shutdown) undoes its take, and so
//!   does a grant that finds its caller gone ([`Effect::Undo`]);
//! - leavers are swept and deadlines answered even while an attempt is out,
//!   and the timer is armed for the next deadline while it is; a deadline
//!   that passes while Redis is silent or failing says so (`expiry.rs`);
//! - the channels are asked for, kept and ended in `channels.rs`;
//! - for a policy whose scripts remember no op id (the lock), an attempt whose
//!   answer is lost is checked before anyone asks again, and so is one whose
//!   waiter left while it was out and whose answer says it took, or whose
//!   undo failed (`check.rs`).

mod answers;
mod channels;
mod check;
mod events;
mod expiry;
mod policy;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use super::{timeout, Attempt, Queue, Waited};
use crate::actors::listen::Channel;
use crate::actors::shared::until_first;
use crate::config::Config;
use crate::error::LockError;
pub(crate) use events::{Ask, Effect, Event, Mark, Reply, Taken, Waiter, Waiters};
pub(crate) use policy::{Found, Heard, Pick, Policy, Scope, Then};

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Engine<P: Policy> {
    policy: P,
    waiters: Waiters<P>,
    attempt: Attempt,
    channels: Vec<Channel>,
    /// The settings: the fallback interval and the backoff.
    config: Arc<Config>,
    effects: Vec<Effect<P>>,
    /// A lost attempt to check before the next one (`check.rs`).
    check: check::Check<P::Want>,
    /// What the waiter whose attempt is out wanted, once it left, for a
    /// policy that checks lost attempts: its answer may say the take ran
    /// (`check.rs`).
    orphan: Option<P::Want>,
    /// When the attempt out was sent: past [`Policy::silence`], a deadline
    /// that passes is told Redis did not answer (`expiry.rs`).
    asked_at: Option<Instant>,
}

impl<P: Policy> Engine<P> {
    /// No waiters yet.
    pub(crate) fn new(policy: P, config: Arc<Config>) -> Engine<P> {
        Engine {
            policy,
            waiters: Queue::default(),
            attempt: Attempt::default(),
            channels: Vec::new(),
            config,
            effects: Vec::new(),
            check: check::Check::Clear,
            orphan: None,
            asked_at: None,
        }
    }

    /// The policy.
    pub(crate) fn policy(&self) -> &P {
        &self.policy
    }

    /// The policy, to change its own state from outside an event (a lock's
    /// kind, told of a resync or a chore's outcome), with the waiters whose
    /// marks it may change; an [`Event::Look`] after makes it count.
    pub(crate) fn policy_mut(&mut self) -> (&mut P, &mut Waiters<P>) {
        (&mut self.policy, &mut self.waiters)
    }

    /// Nothing it sent is unsettled: no attempt out, no lost attempt to
    /// check or being checked, no answer of a leaver's attempt to come (a
    /// process about to exit waits for this, so that a take that landed
    /// after its waiter left is given back first).
    pub(crate) fn is_quiet(&self) -> bool {
        !self.attempt.in_flight() && !self.check_pending() && self.orphan.is_none()
    }

    /// Nobody waits and nothing is out or listened on: the engine may be
    /// dropped (a lock keeps none while it is only held).
    pub(crate) fn is_empty(&self) -> bool {
        self.waiters.is_empty() && self.is_quiet() && self.channels.iter().all(Channel::is_off)
    }

    /// The runner restarts (an actor's restart drops every call and timer
    /// it had): the attempt out is lost (checked before the next one, for
    /// a policy that checks lost attempts; else its waiter is marked lost),
    /// a check out is due again, and every channel is subscribed anew as the
    /// queue looks (the subscriber forgot the old routes). Then the queue
    /// looks again.
    pub(crate) fn restart(&mut self) -> Vec<Effect<P>> {
        if self.attempt.in_flight() {
            let asking = self.waiters.iter_mut().find(|w| w.want.asking);
            match asking {
                Some(w) if self.policy.checks_lost() => {
                    w.want.asking = false;
                    self.check = check::Check::Due(w.want.want.clone());
                }
                Some(w) => {
                    w.want.asking = false;
                    w.want.lost = true;
                }
                None => {
                    if let Some(want) = self.orphan.take() {
                        self.check = check::Check::Due(want);
                    }
                }
            }
            self.attempt.drop_call();
            self.asked_at = None;
        }
        self.check.restart();
        self.channels.clear();
        self.handle(Event::Look)
    }

    /// The waiters, head first.
    pub(crate) fn waiters(&self) -> impl Iterator<Item = &Waiter<P>> {
        self.waiters.iter()
    }

    /// The waits to record.
    pub(crate) fn waited(&self) -> Vec<Waited> {
        self.waiters.waited(|m| self.policy.wants(&m.want))
    }

    /// Handles one event; answers what to do.
    pub(crate) fn handle(&mut self, event: Event<P>) -> Vec<Effect<P>> {
        match event {
            Event::Arrive { want, wait, reply } => self.arrive(want, wait, reply),
            Event::Join {
                id,
                since,
                deadline,
                once,
                want,
                reply,
            } => {
                let w = Waiter::<P>::new(id, since, deadline, once, Mark::of(want), reply);
                self.join(w);
            }
            Event::Left => {
                if self.sweep() {
                    self.pump();
                }
            }
            Event::Fail { waiter, error } => self.fail(waiter, error),
            Event::Withdrawn { waiter, unknown } => self.withdrawn(waiter, unknown),
            Event::Timer | Event::Wake => {
                self.policy.woken(&mut self.waiters);
                self.pump();
            }
            Event::Answered {
                waiter,
                reply,
                sent,
            } => self.answered(waiter, reply, sent),
            Event::Heard { channel, wake_all } => {
                match self.policy.heard(&channel, wake_all, &mut self.waiters) {
                    Heard::Wake => self.pump(),
                    Heard::WakeAfter(delay) => self.effects.push(Effect::WakeAfter(delay)),
                    Heard::Open => self.open(Instant::now()),
                    Heard::Nothing => {}
                }
            }
            Event::Subscribed(name) => self.subscribed(&name),
            Event::Look => self.pump(),
            Event::UndoFailed(want) => self.undo_failed(want),
            Event::Places(stands) => {
                self.policy.placed(stands, &mut self.waiters);
                self.pump();
            }
            Event::Checked(done) => self.checked(done),
            Event::IdleOver => {
                if self.waiters.is_empty() {
                    self.unsubscribe_unkept();
                }
            }
            Event::Shutdown => self.shut_down(),
        }
        self.tidy();
        self.take_effects()
    }

    /// Effects that came of [`Engine::deliver`] since the last event.
    pub(crate) fn take_effects(&mut self) -> Vec<Effect<P>> {
        std::mem::take(&mut self.effects)
    }

    /// Answers a taken waiter with `grant`. When its caller left meanwhile,
    /// its take is undone (an [`Effect::Undo`] among the next effects, unless
    /// dropping the grant gives it back: [`Policy::grant_gives_back`]) and
    /// the grant comes back, for the runner to drop what it made for it.
    pub(crate) fn deliver(&mut self, taken: Taken<P>, grant: P::Grant) -> Result<(), P::Grant> {
        let mark = taken.waiter.want.clone();
        let Err(answer) = taken.waiter.answer(Ok(grant)) else {
            return Ok(());
        };
        debug!(name = %self.policy.name(), "{} taken for a caller that left; giving back", P::LABEL);
        if let Some(op) = mark.op.filter(|_| !self.policy.grant_gives_back()) {
            self.effects.push(Effect::Undo {
                op,
                want: Box::new(mark.want),
            });
        }
        match answer {
            Ok(grant) => Err(grant),
            Err(_) => Ok(()),
        }
    }

    /// A caller arrives.
    fn arrive(&mut self, want: P::Want, wait: Option<Duration>, reply: Reply<P>) {
        let once = self.policy.once(wait);
        if once && !self.waiters.is_empty() {
            // What frees up is promised to those queued first.
            let error = timeout(Duration::ZERO);
            self.policy.not_granted(&want, &error);
            let _ = reply.send(Err(error));
            return;
        }
        let (first, in_flight) = (self.waiters.is_empty(), self.attempt.in_flight());
        let w = self.waiters.arrive_with(Mark::of(want), wait, once, reply);
        let id = w.id;
        self.joined(id, once, wait.is_some(), (first, in_flight));
    }

    /// A waiter the runner made joins (a lock's: its id and arrival are the
    /// manager's request's), first if the policy says so.
    fn join(&mut self, w: Waiter<P>) {
        let front = self.policy.goes_first(&w.want.want);
        if w.once && !front && !self.waiters.is_empty() {
            // What frees up is promised to those queued first.
            let error = timeout(Duration::ZERO);
            self.policy.not_granted(&w.want.want, &error);
            let _ = w.answer(Err(error));
            return;
        }
        let (first, in_flight) = (self.waiters.is_empty(), self.attempt.in_flight());
        let (id, once, timed) = (w.id, w.once, w.deadline.is_some());
        self.waiters.push(w, front);
        self.joined(id, once, timed, (first, in_flight));
    }

    /// Waiter `id` is queued (`timed`: it has a deadline; `was`: whether it
    /// found nobody waiting, and an attempt out): it gets its op id, its wait
    /// is recorded, and the queue looks again if the policy says so.
    fn joined(&mut self, id: u64, once: bool, timed: bool, (first, in_flight): (bool, bool)) {
        if let Some(w) = self.waiters.get_mut(id) {
            w.want.op = self.policy.op(id);
        }
        if !once {
            self.effects.push(Effect::Watch);
        }
        if self.policy.asks_on_arrival(first, in_flight) {
            self.pump();
        }
        if timed {
            // Its deadline needs watching whether it asks now or not.
            self.arm(None);
        }
    }

    /// Lets the next waiter ask, if one may now.
    fn pump(&mut self) {
        // Leavers are answered even while an attempt is out: a caller hears
        // its deadline on time, and an asking leaver's take is undone at once.
        self.sweep();
        if let Some(name) = self.policy.kept_channel() {
            self.listening(name);
        }
        if !self.attempt.wake() || self.checking() || self.waiters.is_empty() {
            return;
        }
        let id = match self.policy.next(&mut self.waiters, Instant::now()) {
            Pick::Waiter(id) => id,
            Pick::HoldBack(delay) => return self.arm(Some(delay)),
            Pick::Blocked => {
                self.answer_once();
                return self.arm(None);
            }
            Pick::Nobody => return self.arm(None),
        };
        let Some(w) = self.waiters.get_mut(id) else {
            return;
        };
        let channels = [self.policy.channel(w), self.policy.also_listens(w)];
        // Both asked for at once (`&`, not `&&`): two subscriptions in flight
        // together, not one after the other.
        let live = channels
            .into_iter()
            .flatten()
            .fold(true, |live, name| self.listening(name) & live);
        if !live {
            return; // its confirmation looks again
        }
        if let Some(ask) = self.send(id) {
            self.effects.push(Effect::Ask(Box::new(ask)));
        }
    }

    /// The head asks now in a call the runner makes itself (a lock's
    /// hand-over: the release that frees the lock grants the head in the same
    /// call), if nothing is out or to check and `accept` takes the head. Its
    /// answer comes back as [`Event::Answered`], as any attempt's; meanwhile
    /// nobody else asks. The runner carries out [`Engine::take_effects`] after.
    pub(crate) fn ask_head(
        &mut self,
        accept: impl FnOnce(&Waiter<P>) -> bool,
    ) -> Option<Ask<P::Want>> {
        let head = self.waiters.front()?;
        if !accept(head) {
            return None;
        }
        let id = head.id;
        self.ask_for(id)
    }

    /// Waiter `id` asks now in a call the runner makes itself, as
    /// [`Engine::ask_head`] has the head ask (a lock's waiter handed the lock
    /// by a release in another process: its answer came with the message), if
    /// nothing is out or to check.
    pub(crate) fn ask_for(&mut self, id: u64) -> Option<Ask<P::Want>> {
        if self.attempt.in_flight() || self.check_pending() {
            return None;
        }
        if self.waiters.get(id)?.is_gone() {
            return None;
        }
        self.send(id)
    }

    /// The attempt of waiter `id` goes out: it is marked asking, and the
    /// attempt counted out.
    fn send(&mut self, id: u64) -> Option<Ask<P::Want>> {
        let w = self.waiters.get_mut(id)?;
        self.attempt.start();
        let sent = Instant::now();
        self.asked_at = Some(sent);
        w.want.asking = true;
        self.policy.asking(&mut w.want.want, w.once, sent);
        let ask = Ask {
            waiter: id,
            op: w.want.op.clone(),
            want: w.want.want.clone(),
            once: w.once,
            sent,
        };
        // Deadlines are kept while the attempt is out too (its answer always
        // comes: every call has a response timeout).
        if self.waiters.deadlines().next().is_some() {
            self.arm(None);
        }
        Some(ask)
    }

    /// Waiter `id` is answered `error` and leaves.
    fn fail(&mut self, id: u64, error: LockError) {
        let Some(w) = self.waiters.remove(id) else {
            return;
        };
        let mark = w.want.clone();
        self.policy.not_granted(&mark.want, &error);
        let _ = w.answer(Err(error));
        self.leave(vec![mark]);
        self.pump();
    }

    /// Answers `w` with a timeout that says how long it waited.
    fn time_out(&self, w: Waiter<P>) {
        let error = timeout(w.since.elapsed());
        self.policy.not_granted(&w.want.want, &error);
        let _ = w.answer(Err(error));
    }

    /// Nobody can win now: each waiter that tries once and is not asking is
    /// answered as if its one attempt had come back short.
    fn answer_once(&mut self) {
        let once = self.waiters.take_where(|w| w.once && !w.want.asking);
        let mut gone = Vec::with_capacity(once.len());
        for w in once {
            gone.push(w.want.clone());
            self.time_out(w);
        }
        self.leave(gone);
    }

    /// These waiters are done here: a take of theirs that may have run unseen
    /// is undone, their own channels dropped, their places left.
    fn leave(&mut self, gone: Vec<Mark<P::Want>>) {
        let mut places = Vec::new();
        for mark in gone {
            if let Some(name) = self.policy.own_channel(&mark) {
                self.drop_channel(&name);
            }
            if mark.asking {
                self.orphaned(&mark.want);
            }
            if mark.unsure() {
                // The undo leaves any place too.
                if let Some(op) = mark.op {
                    self.effects.push(Effect::Undo {
                        op,
                        want: Box::new(mark.want),
                    });
                }
            } else if let Some(place) = self.policy.place(&mark) {
                places.push(place);
            }
        }
        if !places.is_empty() {
            self.effects.push(Effect::Leave(places));
        }
    }

    /// Nobody waits and nothing is out: no timer, and the subscription ends
    /// now or after a while.
    fn tidy(&mut self) {
        if !self.waiters.is_empty() || self.attempt.in_flight() || self.check_pending() {
            return;
        }
        self.effects.push(Effect::Disarm);
        if !self.policy.lingers() {
            self.unsubscribe_unkept();
        } else if self.channels.iter().any(Channel::is_live) {
            self.effects.push(Effect::Linger);
        }
    }

    /// Arms the timer for `hint` (at most the fallback interval), or for the
    /// earliest deadline if sooner.
    fn arm(&mut self, hint: Option<Duration>) {
        let fallback = self.config.max_retry_interval;
        self.arm_in(hint.map_or(fallback, |h| h.min(fallback)));
    }

    /// Arms the timer for `delay`, or for the earliest deadline if sooner.
    fn arm_in(&mut self, delay: Duration) {
        let delay = until_first(delay, self.waiters.deadlines());
        self.effects.push(Effect::Arm(delay));
    }

    /// Every waiter is answered `ShuttingDown` and leaves.
    fn shut_down(&mut self) {
        self.leave_all(|| LockError::ShuttingDown);
        self.effects.push(Effect::Disarm);
    }

    /// Every waiter is answered `error()` and leaves (the runner stops);
    /// answers what to do about their takes.
    pub(crate) fn fail_all(&mut self, error: impl Fn() -> LockError) -> Vec<Effect<P>> {
        self.leave_all(error);
        self.take_effects()
    }

    /// Every waiter is answered `error()` and leaves.
    fn leave_all(&mut self, error: impl Fn() -> LockError) {
        let gone = self.waiters.answer_all(|| Err(error()));
        gone.iter()
            .for_each(|m| self.policy.not_granted(&m.want, &error()));
        self.leave(gone);
    }
}
