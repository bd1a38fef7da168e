//! What the library logs, captured for a test to read back: one process-wide
//! `tracing` subscriber that writes each event into the buffer of the thread it
//! was logged on (an actix test runs its actors on its own thread), and drops the
//! events of threads that capture nothing.
//!
//! Why not a thread-local subscriber per test (`set_default`): tracing caches, per
//! call site, whether any subscriber wants its events. With tests running side by
//! side, a call site first reached on a thread with no subscriber, at the moment
//! another thread installs its own, could keep "nobody wants this" and lose that
//! thread's events (a capture missing "lock manager started" and the resync line it
//! waited for, about one run in five with three busy loops on the 2 cores). One
//! global subscriber, set once and never changed, wants every call site.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, Once};

/// The captured log; cloning shares the buffer.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

thread_local! {
    /// The buffer of this thread's capture, if it has one.
    static CAPTURE: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Ends this thread's capture when dropped.
pub struct Capturing(());

impl Drop for Capturing {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

/// Writes an event to the capture of the thread that logged it, if any.
struct ThisThread;

impl std::io::Write for ThisThread {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(log) = c.borrow().as_ref() {
                log.0.lock().expect("log buffer").extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures everything logged on this thread until the guard is dropped.
    pub fn install() -> (Captured, Capturing) {
        static GLOBAL: Once = Once::new();
        GLOBAL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| ThisThread)
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global tracing subscriber in the tests");
        });
        let log = Captured::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(log.clone()));
        (log, Capturing(()))
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}
