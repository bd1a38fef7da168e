//! The unlock messages of its own that a lock still expects to hear back: a
//! kind whose waiters listen on the lock's one channel (exclusive, read-write)
//! hears its own releases' messages, and skips them, because the local release
//! has let its waiters try already.

/// How many of this process's own unlock messages are still to come.
#[derive(Debug, Default)]
pub(super) struct Echo(u32);

impl Echo {
    /// A release of this process published while it listens.
    pub(super) fn published(&mut self) {
        self.0 = self.0.saturating_add(1);
    }

    /// A message came: answers whether it is one of its own (and counts it).
    pub(super) fn heard(&mut self) -> bool {
        let own = self.0 > 0;
        self.0 = self.0.saturating_sub(1);
        own
    }

    /// A new subscription, a resync or a restart: messages in flight may be
    /// lost, so none is expected any more.
    pub(super) fn forget(&mut self) {
        self.0 = 0;
    }
}
