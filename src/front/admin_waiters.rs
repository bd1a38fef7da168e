//! What [`Admin`] reads of the waiting records (`wire/waiting.rs`): who waits on
//! each lock and synchronizer it shows, and the semaphores whose key is gone while
//! waiters wait on them, which a SCAN for integer strings cannot find (there is
//! no key) and which are the ones an operator most needs to see.
//!
//! Reading the records is best effort: a Redis user whose ACL predates them
//! (NOPERM on `lockwarden_waiters:*`) sees no waiters, as before, rather than
//! an error.

use std::time::{Duration, UNIX_EPOCH};

use futures::future::join_all;

use super::admin::{Admin, LockSummary};
use crate::error::{is_noperm, LockError};
use crate::keys;
use crate::sync_view::{RecordedWaiter, SynchronizerKind, SynchronizerSummary};
use crate::wire;
use crate::wire::waiting::{self, WaitKind};

impl Admin {
    /// The recorded waiters of each of `names`, with who each is (registry).
    pub(super) async fn recorded_waiters(
        &self,
        names: &[&str],
    ) -> Result<Vec<Vec<RecordedWaiter>>, LockError> {
        let reads = join_all(names.iter().map(|name| {
            let mut conn = self.conn.clone();
            async move { waiting::read(&mut conn, name).await }
        }))
        .await;
        let mut all = Vec::with_capacity(names.len());
        for read in reads {
            let records = match read {
                Ok(r) => r,
                Err(e) if is_noperm(&e) => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            all.push(
                records
                    .into_iter()
                    .map(|(r, left)| RecordedWaiter {
                        owner_field: r.owner_field,
                        wants: r.wants,
                        since: UNIX_EPOCH + Duration::from_millis(r.since_ms),
                        expires_in: left,
                        client: None,
                        candidate: r.candidate,
                    })
                    .collect::<Vec<_>>(),
            );
        }
        let ids: Vec<&str> = all
            .iter()
            .flatten()
            .filter_map(RecordedWaiter::client_id)
            .collect();
        if !ids.is_empty() {
            let clients = wire::read_clients(&self.conn, &ids).await?;
            for w in all.iter_mut().flatten() {
                w.client = w.client_id().and_then(|id| clients.get(id)).cloned();
            }
        }
        Ok(all)
    }

    /// Fills in the recorded waiters of `syncs`.
    pub(super) async fn attach_waiters(
        &self,
        syncs: &mut [SynchronizerSummary],
    ) -> Result<(), LockError> {
        let names: Vec<&str> = syncs.iter().map(|s| s.name.as_str()).collect();
        let found = self.recorded_waiters(&names).await?;
        for (sync, waiters) in syncs.iter_mut().zip(found) {
            sync.waiters = waiters;
        }
        Ok(())
    }

    /// Fills in the recorded waiters of `locks`.
    pub(super) async fn attach_lock_waiters(
        &self,
        locks: &mut [LockSummary],
    ) -> Result<(), LockError> {
        let names: Vec<&str> = locks.iter().map(|l| l.name.as_str()).collect();
        let found = self.recorded_waiters(&names).await?;
        for (lock, waiters) in locks.iter_mut().zip(found) {
            lock.waiters = waiters;
        }
        Ok(())
    }

    /// `name` has no key but recorded waiters: the summary that says so (kind
    /// from the records, value 0, `key_missing`); `None` when nobody waits.
    pub(super) async fn missing(
        &self,
        name: &str,
    ) -> Result<Option<SynchronizerSummary>, LockError> {
        let mut found = self.recorded_waiters(&[name]).await?;
        let waiters = found.pop().unwrap_or_default();
        if waiters.is_empty() {
            return Ok(None);
        }
        let Some(kinds) = self.records_kinds(name).await else {
            // A lock's waiters on a free lock: one of them is about to take it.
            return Ok(None);
        };
        let channel = match kinds {
            SynchronizerKind::Latch => keys::latch_channel(name),
            _ => keys::semaphore_channel(name),
        };
        let listening = self.listeners(&[channel]).await?;
        Ok(Some(SynchronizerSummary {
            name: name.to_string(),
            kind: kinds,
            labelled: false,
            value: 0,
            taken: None,
            ttl: None,
            waiting: listening.first().copied().unwrap_or(0),
            waiters,
            key_missing: true,
            queue: Vec::new(),
        }))
    }

    /// The synchronizer kind the records of `name` name (the first readable
    /// one's); `None` when they are a lock's.
    async fn records_kinds(&self, name: &str) -> Option<SynchronizerKind> {
        let read = waiting::read(&mut self.conn.clone(), name).await;
        match read.ok().and_then(|r| r.first().map(|(r, _)| r.kind)) {
            Some(WaitKind::Lock) => None,
            Some(WaitKind::Sync(kind)) => Some(kind),
            None => Some(SynchronizerKind::Semaphore),
        }
    }

    /// The names matching `pattern` that have waiting records but no key: one
    /// SCAN for the records' zsets (on every master), then EXISTS for each.
    pub(super) async fn missing_keys(
        &self,
        pattern: &str,
    ) -> Result<Vec<SynchronizerSummary>, LockError> {
        let named = self
            .scan_each("lockwarden_waiters:*", "zset", async |keys| {
                Ok(keys
                    .into_iter()
                    .filter_map(|k| keys::name_of_waiters(&k).map(str::to_string))
                    .filter(|n| glob(pattern.as_bytes(), n.as_bytes()))
                    .collect())
            })
            .await?;
        let mut out = Vec::new();
        for name in named {
            if keys::validate_name(&name, self.max_name_len).is_err() {
                continue;
            }
            let exists: i64 = redis::cmd("EXISTS")
                .arg(&name)
                .query_async(&mut self.conn.clone())
                .await?;
            if exists == 0 {
                out.extend(self.missing(&name).await?);
            }
        }
        Ok(out)
    }
}

/// Whether `text` matches the Redis glob `pattern` (`*`, `?`, `[...]` with
/// `^` and ranges, `\` escapes), as SCAN's MATCH would.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some(end) = rest.iter().position(|&c| c == b']') else {
                return text.first() == Some(&b'[') && glob(rest, &text[1..]);
            };
            let Some(&c) = text.first() else {
                return false;
            };
            let (negate, class) = match rest[..end].split_first() {
                Some((b'^', class)) => (true, class),
                _ => (false, &rest[..end]),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob(&rest[end + 1..], &text[1..])
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob(&rest[1..], &text[1..])
        }
        Some((&p, rest)) => text.first() == Some(&p) && glob(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs_match_as_scan_does() {
        let m = |p: &str, t: &str| glob(p.as_bytes(), t.as_bytes());
        assert!(m("*", "anything"));
        assert!(m("job*", "job:1"));
        assert!(!m("job*", "jo"));
        assert!(m("j?b", "jab"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[^a-c]x", "bx"));
        assert!(m("a\\*", "a*"));
        assert!(!m("a\\*", "ab"));
        assert!(m("{t}:*", "{t}:api"));
    }
}
