//! The unit of work: the locks a task holds count in the deadlock graph for
//! every later wait of that task, without the caller saying so.
//!
//! A deadlock check follows waits from owner to owner (`deadlock.rs`). Two
//! locks taken one after the other in a handler are two owners, since each
//! [`Acquire`](crate::Acquire) makes a new one unless told otherwise; the
//! second wait then belongs to nobody who holds anything, and two handlers
//! that take two locks in opposite orders both wait out their whole wait,
//! told the lock is held elsewhere. Redisson gets this for free by tying an
//! owner to a thread. Here the task is the thread: a guard granted to a wait
//! made inside a tokio task (an actix-web handler, a spawned job) is noted
//! under that task's id for as long as it lives, and every later wait of the
//! same task waits on behalf of the owners noted there (as a nested command
//! does for its outer holder). Nothing else changes: each acquisition still
//! takes the lock for its own owner, so re-entry stays what `Acquire::owner`
//! says. A wait made outside any task (a `block_on`'s root future) notes
//! nothing, and `Acquire::detached` opts one acquisition out.
//!
//! One process-wide map behind a mutex: an entry per task that holds a lock,
//! touched once at a grant, once at a guard's end and once per wait (a lookup).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::task::Id;

/// Owner fields held, by task; each with the number that its guard's
/// [`Unit`] removes it by.
type Held = HashMap<Id, Vec<(u64, Arc<str>)>>;

/// The map; see the module documentation.
fn held() -> &'static Mutex<Held> {
    static HELD: OnceLock<Mutex<Held>> = OnceLock::new();
    HELD.get_or_init(Mutex::default)
}

/// The task this code runs in, if any.
pub(crate) fn current() -> Option<Id> {
    tokio::task::try_id()
}

/// The owner fields (without a writer's `:write`) that `task` holds locks
/// under now, oldest first: what its next wait waits on behalf of.
pub(crate) fn holders(task: Id) -> Vec<String> {
    // A poisoned map still holds what it held: the panic was elsewhere.
    let map = held().lock().unwrap_or_else(|e| e.into_inner());
    let Some(fields) = map.get(&task) else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::with_capacity(fields.len());
    for (_, field) in fields {
        let field = field.strip_suffix(":write").unwrap_or(field);
        if !out.iter().any(|f| f == field) {
            out.push(field.to_string());
        }
    }
    out
}

/// A guard's place in its task's unit: dropped with the guard, which takes its
/// owner field out of the task's entry.
#[derive(Debug)]
pub(crate) struct Unit {
    task: Id,
    key: u64,
}

impl Unit {
    /// Notes `field` as held by `task` until the answer is dropped.
    pub(crate) fn join(task: Id, field: Arc<str>) -> Unit {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let key = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut map = held().lock().unwrap_or_else(|e| e.into_inner());
        map.entry(task).or_default().push((key, field));
        Unit { task, key }
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        let mut map = held().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fields) = map.get_mut(&self.task) {
            fields.retain(|(key, _)| *key != self.key);
            if fields.is_empty() {
                // A task that holds nothing keeps no entry: ids are not reused,
                // so an entry left behind would stay for the process's life.
                map.remove(&self.task);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_waits_on_behalf_of_what_it_holds_until_each_guard_ends() {
        // The root future of a runtime's block_on is not a task: no unit.
        assert!(current().is_none());
        let checks = tokio::spawn(async {
            let task = current().expect("a spawned future is a task");
            assert!(holders(task).is_empty());
            let a = Unit::join(task, Arc::from("c:1"));
            let b = Unit::join(task, Arc::from("c:2:write"));
            let again = Unit::join(task, Arc::from("c:2"));
            assert_eq!(holders(task), ["c:1", "c:2"]);
            drop(a);
            assert_eq!(holders(task), ["c:2"]);
            drop((b, again));
            assert!(holders(task).is_empty());
            // Another task's holds are its own.
            let _c = Unit::join(task, Arc::from("c:3"));
            let other = tokio::spawn(async { holders(current().expect("spawned")) });
            assert!(other.await.expect("joined").is_empty());
            assert_eq!(holders(task), ["c:3"]);
        });
        checks.await.expect("the checks passed");
    }
}
