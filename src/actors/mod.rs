//! The actors layer: the per-lock actor and the two actors every lock of a manager
//! shares.
//!
//! - `lock`: the [`LockActor`](lock::LockActor), one per lock name and kind, owning
//!   that lock's waiters, holdings and timers; one file per kind of lock under
//!   `lock/kinds/`.
//! - `subscriber`: the pub/sub actor that routes unlock messages to lock actors.
//! - `renewer`: the watchdog, renewing every watchdog holding of a manager in
//!   batches.
//! - `semaphore`, `latch`: the synchronizers' policies (plain, permit-expirable
//!   and fair semaphore; latch), each run by one `SyncActor` per name, on the
//!   same subscriber and waiting rules as the locks; `semaphore::permits`: the
//!   give-backs, and what a permit-expirable semaphore adds (holdings, renewal,
//!   loss); `semaphore::fair`: the fair (FIFO across processes) semaphore.
//! - `waiting`, `listen`: the waiting kit (queue, attempt, Redis-queue places,
//!   waiting records; the synchronizers' engine and the `SyncActor` that runs
//!   it; channels and alarms).
//! - `registry`: the manager's entry in the client registry (who a client id
//!   is), rewritten by the renewer once per renewal period.
//! - `shared`: what a manager's lock actors share ([`Shared`](shared::Shared)).
//!
//! The actors talk to Redis only through the wire layer's typed calls on the node
//! seam. Messages that must go upward (a lapse from the renewer, an idle lock actor
//! offering to retire, a guard's release) travel as `Recipient`s of messages
//! defined here or below, never by naming a higher type.

pub(crate) mod latch;
pub(crate) mod listen;
pub(crate) mod lock;
pub(crate) mod registry;
pub(crate) mod renewer;
pub(crate) mod semaphore;
pub(crate) mod shared;
pub(crate) mod subscriber;
pub(crate) mod waiting;
