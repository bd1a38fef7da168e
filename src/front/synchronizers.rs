//! The manager's registry of synchronizer actors: one [`SyncActor`] per name
//! and policy (a plain semaphore, a permit-expirable one, a fair one, a
//! latch), shared by every handle on that name in the process.
//!
//! One actor per name matters because the subscriber routes a channel to one
//! actor: a second actor on the same name would take the first one's messages. The
//! registry holds the actors weakly. Handles and guards hold them strongly, so an
//! actor lives while anyone can use it and stops (unsubscribing) once the last
//! handle and guard are gone; the next handle on that name starts a new one.

use std::collections::HashMap;
use std::sync::Arc;

use actix::{Actor, Addr, Recipient, WeakAddr};

use crate::actors::latch::Latch;
use crate::actors::semaphore::{Expirable, Fair, Plain};
use crate::actors::shared::{Shared, ShutDown};
use crate::actors::waiting::SyncActor;

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct Synchronizers {
    semaphores: HashMap<Arc<str>, WeakAddr<SyncActor<Plain>>>,
    expirable: HashMap<Arc<str>, WeakAddr<SyncActor<Expirable>>>,
    fair: HashMap<Arc<str>, WeakAddr<SyncActor<Fair>>>,
    latches: HashMap<Arc<str>, WeakAddr<SyncActor<Latch>>>,
}

impl Synchronizers {
    /// The running actor of semaphore `name`, started if there is none.
    pub(crate) fn semaphore(&mut self, name: &str, shared: &Arc<Shared>) -> Addr<SyncActor<Plain>> {
        find_or_start(&mut self.semaphores, name, |name| {
            SyncActor::new(name.clone(), shared.clone(), Plain::new(name)).start()
        })
    }

    /// The running actor of permit-expirable semaphore `name`, started if there is
    /// none. It shares the channel of a plain semaphore of the same name, so a
    /// process should not use both kinds on one name.
    pub(crate) fn expirable(
        &mut self,
        name: &str,
        shared: &Arc<Shared>,
    ) -> Addr<SyncActor<Expirable>> {
        find_or_start(&mut self.expirable, name, |name| {
            SyncActor::new(name.clone(), shared.clone(), Expirable::new(name)).start()
        })
    }

    /// The running actor of fair semaphore `name`, started if there is none.
    /// Its waiters listen on channels of their own, so it may run beside a
    /// plain semaphore's actor of the same name.
    pub(crate) fn fair(&mut self, name: &str, shared: &Arc<Shared>) -> Addr<SyncActor<Fair>> {
        find_or_start(&mut self.fair, name, |name| {
            let policy = Fair::new(name.clone(), shared.client_id.clone());
            SyncActor::new(name, shared.clone(), policy).start()
        })
    }

    /// Every synchronizer actor still running, to tell it of a shutdown.
    pub(crate) fn running(&self) -> Vec<Recipient<ShutDown>> {
        let semaphores = self.semaphores.values();
        let semaphores = semaphores.filter_map(|w| w.upgrade().map(Addr::recipient));
        let expirable = self.expirable.values();
        let expirable = expirable.filter_map(|w| w.upgrade().map(Addr::recipient));
        let fair = self.fair.values();
        let fair = fair.filter_map(|w| w.upgrade().map(Addr::recipient));
        let latches = self.latches.values();
        let latches = latches.filter_map(|w| w.upgrade().map(Addr::recipient));
        semaphores
            .chain(expirable)
            .chain(fair)
            .chain(latches)
            .collect()
    }

    /// The running actor of latch `name`, started if there is none.
    pub(crate) fn latch(&mut self, name: &str, shared: &Arc<Shared>) -> Addr<SyncActor<Latch>> {
        find_or_start(&mut self.latches, name, |name| {
            SyncActor::new(name.clone(), shared.clone(), Latch::new(name)).start()
        })
    }
}

/// The live actor of `name` in `map`, or a new one from `start`; entries of actors
/// that stopped are dropped whenever a new one starts, so the map does not grow
/// with every name ever used.
fn find_or_start<A: Actor>(
    map: &mut HashMap<Arc<str>, WeakAddr<A>>,
    name: &str,
    start: impl FnOnce(Arc<str>) -> Addr<A>,
) -> Addr<A> {
    if let Some(addr) = map.get(name).and_then(WeakAddr::upgrade) {
        return addr;
    }
    map.retain(|_, weak| weak.upgrade().is_some());
    let name: Arc<str> = Arc::from(name);
    let addr = start(name.clone());
    map.insert(name, addr.downgrade());
    addr
}
