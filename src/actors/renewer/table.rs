//! The watchdog's table: the watchdog holdings of one manager, which its lock
//! actors enter and take out and its renewer sweeps, slot by slot.
//!
//! Apart from the renewer's actor (`mod.rs`) because it changes for other reasons:
//! what a holding records and how the slots are kept, not when and how Redis is
//! asked. The table is a plain mutex-guarded map (see [`RenewTable`]); each method
//! takes the lock once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::WeakRecipient;

use crate::error::LostReason;

/// Slots per renewal period: a tick every period / `SLOTS` renews one slot.
pub(super) const SLOTS: usize = 10;

/// A watchdog holding's lease ran out or its owner no longer holds it (sent to the
/// lock actor, which reports the loss to the guards).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct Lapsed {
    /// The holding.
    pub(crate) epoch: u64,
    /// Why it is lost.
    pub(crate) reason: LostReason,
}

/// Which script renews a holding (the lock kind decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// `lua/renew.lua`, many holdings per call: exclusive and fair locks.
    Hash,
    /// `lua/rw_renew.lua`, one holder per call: a read-write lock's reader, or
    /// its writer (`write`).
    ReadWrite {
        /// Whether it is the write side.
        write: bool,
    },
    /// `lua/expirable_renew.lua`, one holder per call: the permits one guard holds of
    /// a permit-expirable semaphore (the `field` is their ids, comma-separated).
    Permits,
}

/// One watchdog holding to renew.
#[derive(Debug)]
pub(crate) struct Watched {
    /// The lock name (the hash key).
    pub(crate) name: Arc<str>,
    /// The holder's hash field.
    pub(crate) field: Arc<str>,
    /// Which script renews it.
    pub(crate) renewal: Renewal,
    /// Who to tell when it is lost. Weakly: renewal must not keep a lock actor
    /// alive, and only a lapse needs to reach it.
    pub(crate) lock: WeakRecipient<Lapsed>,
    /// Until when it is surely held (send time of the last success plus its lease).
    pub(crate) valid_until: Instant,
}

#[derive(Debug)]
struct Entry {
    held: Watched,
    /// The slot it is swept in.
    slot: usize,
    /// A renewal of it is in flight.
    renewing: bool,
    /// Its lease has run out here and one last renewal was tried (see `collect`).
    late: bool,
}

#[derive(Debug, Default)]
struct Table {
    /// Holding epoch (unique in the process) -> entry.
    entries: HashMap<u64, Entry>,
    /// The epochs of each slot. Removal is lazy: a sweep drops epochs that are no
    /// longer entries, so taking a holding out costs one hash removal.
    slots: [Vec<u64>; SLOTS],
    /// The slot swept last.
    current: usize,
}

/// The watchdog holdings of one manager, shared by its lock actors (which add and
/// remove them) and its renewer (which sweeps them). A plain mutex rather than
/// messages: entering a holding is on every watchdog acquisition's path, and a
/// table insert is far cheaper than a mailbox round.
#[derive(Debug, Default)]
pub(crate) struct RenewTable {
    table: Mutex<Table>,
}

impl RenewTable {
    fn lock(&self) -> MutexGuard<'_, Table> {
        // Nothing can panic while the table is locked; if it ever did, the data
        // (plain maps) is still consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts renewing a holding, or, if it is renewed already, notes a later
    /// `valid_until` (a re-entry set the lease again).
    pub(crate) fn watch(&self, epoch: u64, held: Watched) {
        let mut t = self.lock();
        if let Some(e) = t.entries.get_mut(&epoch) {
            e.held.valid_until = e.held.valid_until.max(held.valid_until);
            return;
        }
        // Of the slots swept in the last half period (so the first renewal comes
        // between half a period and a period after the grant), the emptiest: a
        // burst of acquisitions is spread over several ticks instead of one.
        let slot = (0..SLOTS / 2)
            .map(|back| (t.current + SLOTS - back) % SLOTS)
            .min_by_key(|&s| t.slots[s].len())
            .unwrap_or(t.current);
        t.slots[slot].push(epoch);
        t.entries.insert(
            epoch,
            Entry {
                held,
                slot,
                renewing: false,
                late: false,
            },
        );
    }

    /// Stops renewing a holding (released or lost). Unknown epochs are ignored.
    pub(crate) fn unwatch(&self, epoch: u64) {
        self.lock().entries.remove(&epoch);
    }

    /// Takes one slot's due holdings out of the table.
    pub(super) fn collect(&self, now: Instant) -> Due {
        let mut t = self.lock();
        let t = &mut *t;
        t.current = (t.current + 1) % SLOTS;
        let slot = t.current;
        let mut due = Due::default();
        let mut ids = std::mem::take(&mut t.slots[slot]);
        ids.retain(|id| {
            let Some(e) = t.entries.get_mut(id) else {
                return false;
            };
            if e.slot != slot {
                return false;
            }
            if e.held.valid_until <= now {
                if e.late && !e.renewing {
                    due.lapsed
                        .push((*id, e.held.valid_until, e.held.lock.clone()));
                    return true; // removed below
                }
                // valid_until counts from when the grant or renewal was sent; if
                // the request waited in Redis (CLIENT PAUSE), Redis's TTL runs out
                // later than that. One renewal is tried before declaring the loss:
                // only Redis knows whether the owner still holds it.
                e.late = true;
            }
            if !e.renewing {
                e.renewing = true;
                let (name, field) = (e.held.name.clone(), e.held.field.clone());
                match e.held.renewal {
                    Renewal::Hash => due.hashes.push((*id, name, field)),
                    Renewal::ReadWrite { write } => due.rw.push((*id, write, name, field)),
                    Renewal::Permits => due.permits.push((*id, name, field)),
                }
            }
            true
        });
        for (id, _, _) in &due.lapsed {
            t.entries.remove(id);
        }
        ids.retain(|id| t.entries.contains_key(id));
        t.slots[slot] = ids;
        due
    }

    /// Every holding not being renewed already, whatever its slot (after a
    /// reconnect, when any of them may have been lost).
    pub(super) fn collect_all(&self) -> Due {
        let mut t = self.lock();
        let mut due = Due::default();
        for (id, e) in t.entries.iter_mut().filter(|(_, e)| !e.renewing) {
            e.renewing = true;
            let (name, field) = (e.held.name.clone(), e.held.field.clone());
            match e.held.renewal {
                Renewal::Hash => due.hashes.push((*id, name, field)),
                Renewal::ReadWrite { write } => due.rw.push((*id, write, name, field)),
                Renewal::Permits => due.permits.push((*id, name, field)),
            }
        }
        due
    }

    /// Applies one renewal call's `answer` for `ids`, sent at `sent`: a holding
    /// still held is valid until `sent + lease`; one Redis says is gone is
    /// answered (the caller takes it out and reports it); after a failed call,
    /// with `soon`, each moves to the next tick's slot.
    pub(super) fn apply_answer(
        &self,
        ids: &[u64],
        sent: Instant,
        lease: Duration,
        answer: &redis::RedisResult<Vec<bool>>,
        soon: bool,
    ) -> Vec<u64> {
        let mut gone = Vec::new();
        let mut t = self.lock();
        let next = (t.current + 1) % SLOTS;
        for (i, id) in ids.iter().enumerate() {
            let Some(e) = t.entries.get_mut(id) else {
                continue;
            };
            e.renewing = false;
            match answer {
                Ok(held) if held[i] => {
                    e.held.valid_until = e.held.valid_until.max(sent + lease);
                    e.late = false;
                }
                Ok(_) => gone.push(*id),
                Err(_) => {
                    if soon && e.slot != next {
                        // Moved: its old slot drops it lazily.
                        e.slot = next;
                        t.slots[next].push(*id);
                    }
                }
            }
        }
        gone
    }

    /// Takes a holding out, answering until when it was surely held and whom to
    /// tell of its loss.
    pub(super) fn take(&self, epoch: u64) -> Option<(Instant, WeakRecipient<Lapsed>)> {
        self.lock()
            .entries
            .remove(&epoch)
            .map(|e| (e.held.valid_until, e.held.lock))
    }

    /// The earliest `valid_until` among `ids` still in the table.
    pub(crate) fn earliest(&self, ids: &[u64]) -> Option<Instant> {
        let t = self.lock();
        ids.iter()
            .filter_map(|id| t.entries.get(id).map(|e| e.held.valid_until))
            .min()
    }

    /// Of `ids`, takes out those whose lease ran out by `now` (answered with when
    /// it ran out and whom to tell), and answers those still valid but not past `renewed_until` (the
    /// lease a renewal sent then would have set), which need a timer of their own.
    pub(super) fn take_expired(
        &self,
        ids: Vec<u64>,
        now: Instant,
        renewed_until: Instant,
    ) -> (Vec<Lapsing>, Vec<u64>) {
        let mut t = self.lock();
        let (due, rest): (Vec<u64>, Vec<u64>) = ids
            .into_iter()
            .filter(|id| t.entries.contains_key(id))
            .partition(|id| t.entries.get(id).is_some_and(|e| e.held.valid_until <= now));
        let waiting: Vec<u64> = rest
            .into_iter()
            .filter(|id| {
                t.entries
                    .get(id)
                    .is_some_and(|e| e.held.valid_until < renewed_until)
            })
            .collect();
        let lapsed: Vec<Lapsing> = due
            .into_iter()
            .filter_map(|id| {
                t.entries
                    .remove(&id)
                    .map(|e| (id, e.held.valid_until, e.held.lock))
            })
            .collect();
        (lapsed, waiting)
    }
}

/// A holding taken out of the table because its lease ran out unrenewed: (epoch,
/// when the lease ran out here, whom to tell).
pub(super) type Lapsing = (u64, Instant, WeakRecipient<Lapsed>);

/// A holding that `renew.lua` renews: (epoch, lock name, owner field).
pub(super) type HashHolding = (u64, Arc<str>, Arc<str>);

/// What one tick sends: the renewable holdings of one slot, by script.
#[derive(Default)]
pub(super) struct Due {
    /// Exclusive and fair holdings: `renew.lua` takes many at once (of one group).
    pub(super) hashes: Vec<HashHolding>,
    /// Read-write holdings: one `rw_renew.lua` call each.
    pub(super) rw: Vec<(u64, bool, Arc<str>, Arc<str>)>,
    /// Holdings whose lease ran out unrenewed.
    pub(super) lapsed: Vec<Lapsing>,
    /// Permit-expirable semaphore holders: one `expirable_renew.lua` call each.
    pub(super) permits: Vec<HashHolding>,
}
