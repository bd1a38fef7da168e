//! Leases: the watchdog keeps a lock with no explicit lease alive for as long as it
//! is held and lets it expire after its holder dies; an explicit lease is never
//! renewed; a holder is told when its lock is lost.

#[path = "../scenarios/watchdog.rs"]
mod scenarios;

// One standalone test per scenario of `scenarios::each!` (each named after its
// scenario; the docs are on the scenarios' bodies).
scenarios::each!(standalone!(scenarios));
