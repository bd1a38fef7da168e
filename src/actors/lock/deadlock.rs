//! The lock actor's deadlock checks: which of its waits are due, what each
//! check found, and which wait a cycle chose to fail ([`Detector`];
//! `crate::deadlock` has the walk and the choice, `actors/waiting/deadlock.rs`
//! the check itself, and the actor's glue in `mod.rs` arms the rounds and
//! fails the chosen wait).
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::{join_all, LocalBoxFuture};
use tracing::{debug, info, warn};

use super::holding::Holdings;
use super::waiters::Waiter;
use super::LockActor;
use crate::actors::listen::Alarm;
use crate::actors::shared::Shared;
use crate::actors::waiting::engine::Event;
use crate::actors::waiting::{check, Checked, Published};
use crate::deadlock::{owner_of, victim, Deadlock, Wait};
use crate::error::{is_noperm, LockError};
use crate::kind::Kind;
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
    /// When the next round is due (`None`: no wait to check, or a round is
    /// armed or running already), for `detector` if the actor has one: a
    /// wait not checked yet is due a timeout after it began; one checked
    /// already, a timeout after the last round (a quarter of one after a
    /// first check in Redis that found nothing: [`QUICK_RECHECK`]).
    pub(super) fn next_round<'a>(
        detector: Option<&mut Detector>,
        waiters: impl Iterator<Item = &'a Waiter>,
        timeout: Duration,
    ) -> Option<Instant> {
        if detector
            .as_ref()
            .is_some_and(|d| d.checking || d.alarm.is_set())
        {
            return None;
        }
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

    /// The timer of the next round.
    pub(super) fn alarm(&mut self) -> &mut Alarm {
        &mut self.alarm
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

    /// Starts one round over the waits of `waiters` past the timeout: the
    /// waits this process's walks should see, and the checks to run (`None`:
    /// nothing is due).
    pub(super) fn round<'a>(
        &mut self,
        waiters: impl Iterator<Item = &'a Waiter>,
        name: &str,
        timeout: Duration,
        shared: &Arc<Shared>,
    ) -> (Vec<Wait>, Option<Checks>) {
        let due = self.due_waits(waiters, name, timeout);
        let seen = due.iter().map(|(_, w)| w.clone()).collect();
        if due.is_empty() {
            return (seen, None);
        }
        self.checking = true;
        self.last_round = Some(Instant::now());
        for (id, wait) in &due {
            let recorded = self.checked.get(id).is_some_and(|(_, r)| *r);
            self.checked.insert(*id, (wait.clone(), recorded));
        }
        // Refused records: this process's own waits are all a check can see.
        // Each round rewrites the records, so they need live only until the
        // next one: a record that outlives a dead waiter makes false cycles.
        let life = (!self.refused).then(|| record_life(timeout));
        let checks = due.into_iter().map(|(id, wait)| {
            let shared = shared.clone();
            async move {
                let checked = check(shared, wait.clone(), life).await;
                (id, wait, checked)
            }
        });
        (seen, Some(Box::pin(join_all(checks))))
    }

    /// What the check of waiter `id` found: the cycle this wait must break
    /// by giving up, if it is the cycle's victim.
    pub(super) fn checked(
        &mut self,
        (id, wait, checked): (u64, Wait, Checked),
        name: &str,
        shared: &Shared,
    ) -> Option<Deadlock> {
        let Checked {
            cycle,
            recorded,
            commands,
            error,
        } = checked;
        let mut first = false;
        match self.checked.get_mut(&id) {
            Some((_, r)) => {
                first = recorded && !*r;
                *r |= recorded;
            }
            // The wait ended while its check wrote the record: nobody else
            // knows it is there.
            None if recorded => forget_records(shared, name, vec![wait]),
            None => {}
        }
        self.soon |= first && cycle.is_none();
        if let Some(e) = error {
            if is_noperm(&e) && !self.refused {
                self.refused = true;
                warn!(lock = %name, error = %e, "could not record or read what this process waits for (the ACL lacks hset/hdel/hgetall on ~lockwarden:client:*, docs/operations.md): deadlocks are found only within this process");
            } else {
                debug!(lock = %name, error = %e, "deadlock check could not finish; trying again");
            }
        }
        let Some(cycle) = cycle else {
            debug!(lock = %name, waiter = id, commands, "deadlock check: no cycle");
            return None;
        };
        if victim(&cycle) != 0 {
            // Another wait of the cycle started later: it gives up, not this one.
            debug!(lock = %name, waiter = id, %cycle, "in a deadlock another wait breaks");
            return None;
        }
        Some(cycle)
    }

    /// Drops what was checked of waits that ended (`waits(id)`: waiter `id`
    /// still waits), their records in Redis too, in the background; answers
    /// the waits left, which this process's walks should see.
    pub(super) fn forget_ended(
        &mut self,
        waits: impl Fn(u64) -> bool,
        name: &str,
        shared: &Shared,
    ) -> Vec<Wait> {
        let ended: Vec<u64> = self
            .checked
            .keys()
            .filter(|id| !waits(**id))
            .copied()
            .collect();
        let mut removals = Vec::new();
        for id in ended {
            if let Some((wait, true)) = self.checked.remove(&id) {
                removals.push(wait);
            }
        }
        if !removals.is_empty() {
            forget_records(shared, name, removals);
        }
        self.checked.values().map(|(w, _)| w.clone()).collect()
    }

    /// Nothing is checked or being checked: the detector can go.
    pub(super) fn is_done(&self) -> bool {
        self.checked.is_empty() && !self.checking
    }

    /// After the actor's restart: its alarm and round belonged to the old context.
    pub(super) fn forget(&mut self) {
        self.alarm.forget();
        self.checking = false;
    }
}

/// The next round of checks is due (the detector's alarm sends it).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct Round;

impl Handler<Round> for LockActor {
    type Result = ();

    /// Each wait past the timeout is checked, the round's victims fail, and
    /// the next round is armed.
    fn handle(&mut self, _msg: Round, ctx: &mut Context<Self>) {
        let Some(timeout) = self.shared.config.deadlock_timeout else {
            return;
        };
        let detector = self.wait.detector.get_or_insert_with(Box::default);
        if detector.checking {
            // At most one round in flight: this one arms the next.
            return;
        }
        let waiters = self.wait.side.waiters();
        let (seen, checks) = detector.round(waiters, &self.name, timeout, &self.shared);
        let kind = self.wait.side.kind().kind();
        publish(&self.shared, &self.name, kind, &self.held.holdings, seen);
        let Some(checks) = checks else {
            self.reconcile(ctx);
            return self.watch_for_deadlocks(ctx);
        };
        ctx.spawn(checks.into_actor(self).map(|results, act, ctx| {
            // The round is over: the next one may be armed.
            act.wait.detector.get_or_insert_with(Box::default).checking = false;
            let mut failed = false;
            for result in results {
                let id = result.0;
                let detector = act.wait.detector.get_or_insert_with(Box::default);
                let Some(cycle) = detector.checked(result, &act.name, &act.shared) else {
                    continue;
                };
                let Some(w) = act.wait.side.waiters().find(|w| w.id == id) else {
                    continue;
                };
                let req = &w.want.req;
                let name = &act.name;
                req.span
                    .in_scope(|| info!(lock = %name, %cycle, "deadlock: this wait gives up"));
                crate::stats::record::deadlock(req.kind);
                let error = LockError::Deadlock(Box::new(cycle));
                act.run(Event::Fail { waiter: id, error }, ctx);
                failed = true;
            }
            // A wait that failed left through the engine, which looked again.
            if !failed {
                act.reconcile(ctx);
            }
            act.watch_for_deadlocks(ctx);
        }));
    }
}

/// The checks of one round, each answering with its waiter and wait.
pub(super) type Checks = LocalBoxFuture<'static, Vec<(u64, Wait, Checked)>>;

/// Publishes lock `name` (of `kind`) as this process's walks see it: its
/// holders here, its waits past the timeout.
pub(super) fn publish(
    shared: &Shared,
    name: &Arc<str>,
    kind: Kind,
    holdings: &Holdings,
    waits: Vec<Wait>,
) {
    let published = (!waits.is_empty()).then(|| Published {
        holders: holdings.iter().map(|h| h.field.to_string()).collect(),
        waits,
    });
    shared.local_waits.publish(name, kind, published);
}

/// Removes the Redis records of waits that ended, in the background.
fn forget_records(shared: &Shared, name: &str, waits: Vec<Wait>) {
    let conn = shared.node.conn();
    let name = name.to_owned();
    actix::spawn(async move {
        for wait in waits {
            if let Err(e) = forget(&conn, &wait).await {
                // Its expiry drops it from every walk.
                debug!(lock = %name, error = %e, "could not remove a wait's record");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::actors::lock::waiters::{test_request, test_waiter, Request, Waiter, WaiterQueue};
    use crate::error::LockError;

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
