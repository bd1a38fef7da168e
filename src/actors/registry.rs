//! [`Registration`]: a lock manager's entry in the client registry, kept alive by
//! its renewer.
//!
//! The entry (`crate::client::ClientInfo` under `lockwarden:client:{<client id>}`)
//! is written when the manager starts and rewritten by the renewer once per renewal
//! period, with a TTL of one watchdog lease: the renewer lives exactly as long as
//! the manager or any of its lock actors, so the entry disappears within one lease
//! after the process dies or drops its manager. It costs one small extra call per
//! renewal period per manager, never one per lock; it is not piggybacked on the
//! renewal calls because those exist only while watchdog locks are held (a manager
//! holding only leased locks, or only waiting in a fair queue, still needs its
//! entry) and, on a cluster, each is bound to one slot the entry is not in.
//!
//! The registry is for operators only: a failure to write it (an ACL without the
//! `lockwarden:client:*` keys answers NOPERM) is logged, never a failed lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::{debug, info, warn};

use crate::client::ClientInfo;
use crate::config::Config;
use crate::durations::millis;
use crate::keys;
use crate::node::Conn;
use crate::wire;

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Registration {
    /// `lockwarden:client:{<client id>}`.
    key: String,
    /// The entry's fields, written whole each time.
    fields: Vec<(&'static str, String)>,
    /// Its TTL: one watchdog lease.
    ttl: Duration,
    /// The last write failed (so the next failure is not logged as a warning
    /// again, and a success is logged as a recovery).
    failing: AtomicBool,
}

impl Registration {
    /// The entry of the manager with `client_id`, started now with `config`.
    pub(crate) fn new(client_id: &str, config: &Config) -> Registration {
        Registration {
            key: keys::client_key(client_id),
            fields: ClientInfo::this_process(config.label.as_deref()).to_fields(),
            ttl: config.watchdog_lease,
            failing: AtomicBool::new(false),
        }
    }

    /// Writes the entry with its TTL; a failure is logged (a warning the first
    /// time), never returned: nothing about a lock depends on it.
    pub(crate) async fn refresh(&self, mut conn: Conn) {
        match wire::register(&mut conn, &self.key, &self.fields, millis(self.ttl)).await {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    info!(key = %self.key, "client registry entry written again");
                }
            }
            Err(error) => {
                if self.failing.swap(true, Ordering::Relaxed) {
                    debug!(key = %self.key, %error, "client registry entry still not written");
                } else if crate::error::is_noperm(&error) {
                    warn!(key = %self.key, %error, "the ACL does not allow the client registry (keys lockwarden:client:*, commands hset, pexpire): locks work, but operators see this manager's holders as unknown");
                } else {
                    warn!(key = %self.key, %error, "cannot write the client registry entry; retrying every renewal period (locks are not affected)");
                }
            }
        }
    }
}
