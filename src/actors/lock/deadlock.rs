//! The lock actor's deadlock checks: which of its waits are due, what each
//! check found, and failing the wait a cycle chose (`crate::deadlock` has the
//! walk and the choice, `actors/waiting/deadlock.rs` the check itself).
//!
//! A wait is first checked when it has lasted `Config::deadlock_timeout`, then
//! (a quarter of the timeout later when that first check found nothing, see
//! [`QUICK_RECHECK`]) again every as long while it lasts: the other members of a cycle may start
//! waiting (or write their records) after this one looked, and a victim that
//! another process named may not have seen the cycle yet. At most one round
//! of checks is in flight per actor. The actor keeps what it checked in a
//! boxed [`Detector`] that exists only while it has a wait past the timeout, so
//! a held lock's actor does not grow: it removes each record and its local
//! publication as soon as the wait ends, however it ends.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::join_all;
use tracing::{debug, info, warn};

use super::waiters::Waiter;
use super::LockActor;
use crate::actors::listen::Alarm;
use crate::actors::waiting::engine::Event;
use crate::actors::waiting::{check, Checked, Published};
use crate::deadlock::{owner_of, victim, Wait};
use crate::error::{is_noperm, LockError};
use crate::wire::deadlock::{forget, record_life};
use crate::wire::waiting::now_ms;

/// What one lock actor keeps about its checked waits; see the module docs.
#[derive(Debug, Default)]
pub(super) struct Detector {
    /// Waiter id -> its wait as checked (its start time, fixed at the first
    /// check, is what every detector compares), and whether Redis has its record.
    checked: HashMap<u64, (Wait, bool)>,
    /// The next round.
    alarm: Alarm,
    /// A round is in flight.
    checking: bool,
    /// When the last round started.
    last_round: Option<Instant>,
    /// Redis refused the records (NOPERM): checks stay within this process.
    refused: bool,
    /// A wait's first check in Redis found no cycle: the next round comes a
    /// quarter of the timeout later, not a whole one (see [`QUICK_RECHECK`]).
    soon: bool,
}

/// After a wait's first check in Redis found no cycle, the next round comes
/// after this share of the timeout. When the two waits of a cycle start
/// within a few milliseconds, their first checks run side by side, each
/// writing its record and then reading the other's, which may not be written
/// yet: then only one of them sees the cycle, and if that one is not the
/// victim, the victim would find it a whole timeout later (2 x the timeout
/// after the cycle closed: 7 trials in 100 at 1 s, `examples/deadlock.rs`).
/// By a quarter of the timeout the other's record is there; it costs one
/// check more per long wait.
const QUICK_RECHECK: u32 = 4;

impl Detector {
    /// When the next round is due (`None`: no wait to check), for `detector`
    /// if the actor has one: a wait not checked yet is due a timeout after it
    /// began; one checked already, a timeout after the last round (a quarter
    /// of one after a first check in Redis that found nothing:
    /// [`QUICK_RECHECK`]).
    fn next_round<'a>(
        detector: Option<&mut Detector>,
        waiters: impl Iterator<Item = &'a Waiter>,
        timeout: Duration,
    ) -> Option<Instant> {
        let checked = detector.map(|d| {
            let every = if std::mem::take(&mut d.soon) {
                timeout / QUICK_RECHECK
            } else {
                timeout
            };
            (&d.checked, d.last_round.map(|last| last + every))
        });
        let first_check = waiters
            .filter(|w| !w.once)
            .filter(|w| checked.as_ref().is_none_or(|(c, _)| !c.contains_key(&w.id)))
            .map(|w| w.since + timeout)
            .min();
        let recheck = checked
            .filter(|(c, _)| !c.is_empty())
            .and_then(|(_, next)| next);
        first_check.into_iter().chain(recheck).min()
    }

    /// The waits of `queue` past the timeout, as the graph shows them: as
    /// checked already, or as they are now (the lock `name`).
    fn due_waits<'a>(
        &self,
        waiters: impl Iterator<Item = &'a Waiter>,
        name: &str,
        timeout: Duration,
    ) -> Vec<(u64, Wait)> {
        let now_ms = now_ms();
        let due = waiters.filter(|w| !w.once && !w.is_gone());
        due.filter(|w| w.since.elapsed() >= timeout)
            .map(|w| {
                let wait = match self.checked.get(&w.id) {
                    Some((wait, _)) => wait.clone(),
                    None => {
                        let req = &w.want.req;
                        let since_ms = now_ms.saturating_sub(w.since.elapsed().as_millis() as u64);
                        let mut owners = vec![owner_of(&req.field).to_string()];
                        owners.extend(req.behalf.iter().cloned());
                        Wait {
                            owners,
                            lock: name.to_string(),
                            wants: req.kind,
                            field: req.field.to_string(),
                            since_ms,
                        }
                    }
                };
                (w.id, wait)
            })
            .collect()
    }

    /// After the actor's restart: its alarm and round belonged to the old context.
    pub(super) fn forget(&mut self) {
        self.alarm.forget();
        self.checking = false;
    }
}

impl LockActor {
    /// Someone waits: arms the next round of checks, if detection is on and
    /// none is armed or running.
    pub(super) fn watch_for_deadlocks(&mut self, ctx: &mut Context<Self>) {
        let Some(timeout) = self.shared.config.deadlock_timeout else {
            return;
        };
        if self
            .wait
            .detector
            .as_ref()
            .is_some_and(|d| d.checking || d.alarm.is_set())
        {
            return;
        }
        let detector = self.wait.detector.as_deref_mut();
        let waiters = self.wait.side.waiters();
        let Some(at) = Detector::next_round(detector, waiters, timeout) else {
            return;
        };
        let delay = at.saturating_duration_since(Instant::now());
        let slot: fn(&mut Self) -> &mut Alarm = |act| &mut act.detector_mut().alarm;
        self.detector_mut()
            .alarm
            .set(ctx, delay, slot, |act, ctx| act.check_deadlocks(ctx));
    }

    fn detector_mut(&mut self) -> &mut Detector {
        self.wait.detector.get_or_insert_with(Box::default)
    }

    /// This lock as this process's walks see it: its holders here, its waits
    /// past the timeout.
    fn publish(&self, waits: Vec<Wait>) {
        let published = (!waits.is_empty()).then(|| Published {
            holders: self
                .held
                .holdings
                .iter()
                .map(|h| h.field.to_string())
                .collect(),
            waits,
        });
        self.shared
            .local_waits
            .publish(&self.name, self.wait.side.kind().kind(), published);
    }

    /// One round: each wait past the timeout is checked, the rounds' victims
    /// fail, and the next round is armed.
    fn check_deadlocks(&mut self, ctx: &mut Context<Self>) {
        let Some(timeout) = self.shared.config.deadlock_timeout else {
            return;
        };
        let detector = self.wait.detector.get_or_insert_with(Box::default);
        let due = detector.due_waits(self.wait.side.waiters(), &self.name, timeout);
        self.publish(due.iter().map(|(_, w)| w.clone()).collect());
        if due.is_empty() {
            self.reconcile(ctx);
            self.watch_for_deadlocks(ctx);
            return;
        }
        let detector = self.detector_mut();
        detector.checking = true;
        detector.last_round = Some(Instant::now());
        let refused = detector.refused;
        for (id, wait) in &due {
            let recorded = detector.checked.get(id).is_some_and(|(_, r)| *r);
            detector.checked.insert(*id, (wait.clone(), recorded));
        }
        // Refused records: this process's own waits are all a check can see.
        // Each round rewrites the records, so they need live only until the
        // next one: a record that outlives a dead waiter makes false cycles.
        let life = (!refused).then(|| record_life(timeout));
        let checks = due.into_iter().map(|(id, wait)| {
            let shared = self.shared.clone();
            async move {
                let checked = check(shared, wait.clone(), life).await;
                (id, wait, checked)
            }
        });
        ctx.spawn(join_all(checks).into_actor(self).map(|results, act, ctx| {
            act.detector_mut().checking = false;
            let mut failed = false;
            for (id, wait, checked) in results {
                failed |= act.checked(id, wait, checked, ctx);
            }
            // A wait that failed left through the engine, which looked again.
            if !failed {
                act.reconcile(ctx);
            }
            act.watch_for_deadlocks(ctx);
        }));
    }

    /// What the check of waiter `id` found; answers whether it failed the wait.
    fn checked(&mut self, id: u64, wait: Wait, checked: Checked, ctx: &mut Context<Self>) -> bool {
        let Checked {
            cycle,
            recorded,
            commands,
            error,
        } = checked;
        let detector = self.detector_mut();
        let mut first = false;
        match detector.checked.get_mut(&id) {
            Some((_, r)) => {
                first = recorded && !*r;
                *r |= recorded;
            }
            // The wait ended while its check wrote the record: nobody else
            // knows it is there.
            None if recorded => self.forget_records(vec![wait]),
            None => {}
        }
        let detector = self.detector_mut();
        detector.soon |= first && cycle.is_none();
        if let Some(e) = error {
            if is_noperm(&e) && !detector.refused {
                detector.refused = true;
                warn!(lock = %self.name, error = %e, "could not record or read what this process waits for (the ACL lacks hset/hdel/hgetall on ~lockwarden:client:*, docs/operations.md): deadlocks are found only within this process");
            } else {
                debug!(lock = %self.name, error = %e, "deadlock check could not finish; trying again");
            }
        }
        let Some(cycle) = cycle else {
            debug!(lock = %self.name, waiter = id, commands, "deadlock check: no cycle");
            return false;
        };
        if victim(&cycle) != 0 {
            // Another wait of the cycle started later: it gives up, not this one.
            debug!(lock = %self.name, waiter = id, %cycle, "in a deadlock another wait breaks");
            return false;
        }
        let Some(w) = self.wait.side.waiters().find(|w| w.id == id) else {
            return false;
        };
        w.want.req.span.in_scope(
            || info!(lock = %self.name, commands, %cycle, "deadlock: this wait gives up"),
        );
        crate::stats::record::deadlock(w.want.req.kind);
        let error = LockError::Deadlock(Box::new(cycle));
        self.run(Event::Fail { waiter: id, error }, ctx);
        true
    }

    /// Removes the Redis records of waits that ended, in the background.
    fn forget_records(&self, waits: Vec<Wait>) {
        let conn = self.shared.node.conn();
        let name = self.name.clone();
        actix::spawn(async move {
            for wait in waits {
                if let Err(e) = forget(&conn, &wait).await {
                    // Its expiry drops it from every walk.
                    debug!(lock = %name, error = %e, "could not remove a wait's record");
                }
            }
        });
    }

    /// Drops what was checked of waits that ended (records in Redis, the local
    /// publication), and the detector once nothing is left.
    pub(super) fn forget_ended_waits(&mut self, ctx: &mut Context<Self>) {
        let Some(detector) = self.wait.detector.as_mut() else {
            return;
        };
        let side = &self.wait.side;
        let ended: Vec<u64> = detector
            .checked
            .keys()
            .filter(|id| {
                side.waiters()
                    .find(|w| w.id == **id)
                    .is_none_or(|w| w.is_gone())
            })
            .copied()
            .collect();
        let mut removals = Vec::new();
        for id in ended {
            if let Some((wait, true)) = detector.checked.remove(&id) {
                removals.push(wait);
            }
        }
        // Published again at each change, not only when a wait ends: the
        // holders this process's walks read must be the ones holding now.
        let left: Vec<Wait> = detector.checked.values().map(|(w, _)| w.clone()).collect();
        self.publish(left);
        if !removals.is_empty() {
            self.forget_records(removals);
        }
        let detector = self.wait.detector.as_mut().expect("checked above");
        let nobody = !self.wait.side.has_waiters();
        if nobody && detector.checked.is_empty() && !detector.checking {
            detector.alarm.cancel(ctx);
            self.wait.detector = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::actors::lock::waiters::{test_request, test_waiter, Request, Waiter, WaiterQueue};

    /// Waiter `id` of field `field`, arrived `ago`, waiting `wait`, on behalf
    /// of `behalf` too; its answer channel is kept open by the caller.
    fn waiting(
        id: u64,
        field: &str,
        ago: Duration,
        wait: Option<Duration>,
        behalf: &[&str],
    ) -> (
        Waiter,
        oneshot::Receiver<Result<crate::guard::LockGuard, LockError>>,
    ) {
        let (reply, rx) = oneshot::channel();
        let req = Request {
            behalf: behalf.iter().map(|b| b.to_string()).collect(),
            wait,
            since: Instant::now() - ago,
            ..test_request(id, field)
        };
        (test_waiter(req, reply), rx)
    }

    /// Only a wait that lasts and has passed the timeout is checked, under its
    /// owner and those it waits on behalf of; the first round comes a timeout
    /// after the oldest unchecked wait began.
    #[test]
    fn a_wait_past_the_timeout_is_due_with_its_owners() {
        let timeout = Duration::from_secs(1);
        let mut queue = WaiterQueue::default();
        let (old, _a) = waiting(1, "c:1:write", Duration::from_secs(2), None, &["c:9"]);
        let (once, _b) = waiting(2, "c:2", Duration::from_secs(5), Some(Duration::ZERO), &[]);
        let (new, _c) = waiting(3, "c:3", Duration::ZERO, None, &[]);
        let since = old.since;
        for w in [old, once, new] {
            queue.push(w, false);
        }
        let due = Detector::default().due_waits(queue.iter(), "res", timeout);
        assert_eq!(due.len(), 1, "{due:?}");
        let (id, wait) = &due[0];
        assert_eq!(*id, 1);
        assert_eq!(wait.owners, vec!["c:1".to_string(), "c:9".to_string()]);
        assert_eq!(wait.lock, "res");
        assert_eq!(
            Detector::next_round(None, queue.iter(), timeout),
            Some(since + timeout)
        );
    }

    /// A first check that found no cycle brings the next round a quarter of
    /// the timeout after it, not a whole timeout.
    #[test]
    fn a_first_clear_check_is_repeated_soon() {
        let timeout = Duration::from_secs(4);
        let mut queue = WaiterQueue::default();
        let (w, _rx) = waiting(1, "c:1", Duration::from_secs(5), None, &[]);
        queue.push(w, false);
        let mut d = Detector::default();
        let due = d.due_waits(queue.iter(), "res", timeout);
        let [(id, wait)] = <[_; 1]>::try_from(due).expect("one");
        d.checked.insert(id, (wait, true));
        let last = Instant::now();
        d.last_round = Some(last);
        d.soon = true;
        assert_eq!(
            Detector::next_round(Some(&mut d), queue.iter(), timeout),
            Some(last + timeout / 4)
        );
        assert_eq!(
            Detector::next_round(Some(&mut d), queue.iter(), timeout),
            Some(last + timeout)
        );
    }
}
