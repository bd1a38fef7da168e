//! What `lockwarden run` keeps an eye on while the command runs: Redis is asked
//! about the lock once a second through each manager's own connection (the one
//! renewals use), so an outage is said when it starts, not only when the lease
//! runs out. A RedLock counts as answering while a majority of its servers do.

use std::time::Duration;

use actix::Addr;
use futures::future::join_all;
use lockwarden::{Inspect, LockManager};

use crate::duration::human;

/// How often Redis is asked about the lock while the command runs, so that an
/// outage is reported when it starts.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long a probe may take before Redis counts as not answering.
const PROBE_BUDGET: Duration = Duration::from_secs(1);

/// What `run` needs to keep an eye on Redis while the command runs.
#[derive(Debug)]
pub struct Watch<'a> {
    /// The managers holding the lock: one, or a RedLock's.
    pub managers: Vec<Addr<LockManager>>,
    /// How many of them must answer for Redis to count as answering.
    pub quorum: usize,
    /// The Redis URL, password hidden, for messages.
    pub shown_url: &'a str,
    /// The lease the lock is held with (explicit, or the watchdog's).
    pub lease: Duration,
}

impl Watch<'_> {
    /// Waits [`PROBE_EVERY`], then asks Redis about the lock through each manager's
    /// connection (the one renewals use); answers why not, if fewer than `quorum`
    /// answered within [`PROBE_BUDGET`].
    pub async fn probe(&self, name: &str) -> Result<(), String> {
        actix_rt::time::sleep(PROBE_EVERY).await;
        let asked = self.managers.iter().map(|m| async move {
            match tokio::time::timeout(PROBE_BUDGET, m.send(Inspect::new(name))).await {
                Ok(Ok(Ok(_))) => Ok(()),
                Ok(Ok(Err(e))) => Err(e.to_string()),
                Ok(Err(_)) => Err("the lock manager stopped".to_string()),
                Err(_) => Err(format!("no answer within {}", human(PROBE_BUDGET))),
            }
        });
        let answers = join_all(asked).await;
        let answered = answers.iter().filter(|a| a.is_ok()).count();
        if answered >= self.quorum {
            return Ok(());
        }
        let why = answers
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_default();
        if self.managers.len() == 1 {
            Err(why)
        } else {
            Err(format!(
                "{answered} of {} servers answered, {} needed; {why}",
                self.managers.len(),
                self.quorum
            ))
        }
    }
}
