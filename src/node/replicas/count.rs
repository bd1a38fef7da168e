//! Which replicas of a master can confirm a lock change, read from its `INFO
//! replication`, and which are doubted after a `WAIT` they let run out.
//!
//! A replica counts while it is online, is known to be in sync (it has
//! acknowledged something since it synced, or stood at the master's offset: 0
//! on a master that had written nothing yet, and has not fallen back to 0
//! since), and acknowledged within the last second (`lag` 0 or 1: replicas
//! acknowledge every second). One that let a `WAIT` run out is doubted until
//! it acknowledges again (`lag` 0), so a frozen replica stops counting right
//! after the first `WAIT` it missed instead of a second or two later, when its
//! `lag` shows it. The counting task (`single.rs`) asks and acts on the count; the
//! start-up check (`start.rs`) and a Sentinel move (`single.rs`'s hook,
//! [`count_new_master`]) count with the same rule, and a cluster keeps a
//! [`Doubts`] per master (`cluster.rs`).

use std::collections::HashSet;

/// Highest `lag` (seconds since the replica's last acknowledgement) of a replica
/// that can answer: replicas acknowledge every second, so 0 or 1.
const LIVE_LAG: u64 = 1;

/// One replica as `INFO replication` lists it on its master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replica {
    /// `ip:port`, which names it across looks.
    pub(crate) address: String,
    /// `state=online`: past its first full synchronisation.
    pub(crate) online: bool,
    /// Seconds since its last acknowledgement.
    pub(crate) lag: u64,
    /// The replication offset it last acknowledged.
    pub(crate) offset: u64,
}

/// What `INFO replication` (or a default `INFO`) says of replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replication {
    /// `role:master`.
    pub(crate) master: bool,
    /// Its replicas (none on a replica).
    pub(crate) replicas: Vec<Replica>,
    /// `master_repl_offset`: how far its own replication stream has gone.
    pub(crate) offset: u64,
}

/// Reads the replication fields of an `INFO` reply.
pub(crate) fn parse(info: &str) -> Replication {
    let mut replication = Replication {
        master: false,
        replicas: Vec::new(),
        offset: 0,
    };
    for line in info.lines().map(str::trim) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name == "role" {
            replication.master = value == "master";
        } else if name == "master_repl_offset" {
            replication.offset = value.parse().unwrap_or(0);
        } else if name.starts_with("slave") && name[5..].bytes().all(|b| b.is_ascii_digit()) {
            let field = |key: &str| {
                value
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            replication.replicas.push(Replica {
                address: format!(
                    "{}:{}",
                    field("ip").unwrap_or("?"),
                    field("port").unwrap_or("?")
                ),
                online: field("state") == Some("online"),
                lag: field("lag")
                    .and_then(|l| l.parse().ok())
                    .unwrap_or(u64::MAX),
                offset: field("offset").and_then(|o| o.parse().ok()).unwrap_or(0),
            });
        }
    }
    replication
}

/// The replicas doubted since they let a `WAIT` run out, those known to be in
/// sync, and the count of those that can answer. One per master, kept across
/// looks: the start-up check hands its own to the counting task (`start.rs`),
/// since a replica seen exactly in sync at start is told apart from one that
/// never acknowledged only by having been seen.
#[derive(Debug, Default)]
pub(crate) struct Doubts {
    /// Let a `WAIT` run out, not acknowledged since.
    doubted: HashSet<String>,
    /// Last seen in sync at offset 0 (the master had written nothing then).
    at_zero: HashSet<String>,
}

impl Doubts {
    /// Counts the replicas of `replication` that can answer. After a short
    /// `WAIT` that `short` replicas confirmed (`Some`), every replica that has
    /// not acknowledged this very second, or is behind what that `WAIT` needed,
    /// is doubted; what it needed is at most the master's offset when none
    /// confirmed (one frozen a moment ago still shows `lag` 0, but not the
    /// offset of the write it missed), and at most the newest replica's offset
    /// when some did. A doubted replica is trusted again once it acknowledges
    /// within the second while nothing is short.
    pub(crate) fn count(&mut self, replication: &Replication, short: Option<u32>) -> u32 {
        if !replication.master {
            return 0;
        }
        let online = || replication.replicas.iter().filter(|r| r.online);
        let needed = match short {
            Some(0) => replication.offset,
            _ => online().map(|r| r.offset).max().unwrap_or(0),
        };
        let mut live = 0;
        for r in online() {
            if short.is_some() {
                if r.lag >= 1 || r.offset < needed {
                    self.doubted.insert(r.address.clone());
                }
            } else if r.lag == 0 {
                self.doubted.remove(&r.address);
            }
            let in_sync = self.in_sync(r, replication.offset);
            if in_sync && r.lag <= LIVE_LAG && !self.doubted.contains(&r.address) {
                live += 1;
            }
        }
        let online: HashSet<&str> = online().map(|r| r.address.as_str()).collect();
        self.at_zero
            .retain(|address| online.contains(address.as_str()));
        live
    }

    /// Whether `r` is known to be in sync with a master at `offset`, and
    /// remembers it. Offset 0 on a master that has written something: the
    /// replica has not acknowledged anything since it synced, and the master
    /// streams nothing to it until it does (diskless sync), unless it was seen
    /// at 0 when the master's offset was 0 too: exactly in sync then, it has
    /// the master's first writes coming (the manager's own registration is
    /// usually one, written as it starts). Back at 0 after more: it synced
    /// again, and waits for its first acknowledgement like a new one.
    fn in_sync(&mut self, r: &Replica, offset: u64) -> bool {
        let in_sync = r.offset > 0 || r.offset == offset || self.at_zero.contains(&r.address);
        match in_sync && r.offset == 0 {
            true => self.at_zero.insert(r.address.clone()),
            false => self.at_zero.remove(&r.address),
        };
        in_sync
    }
}

/// The replicas that can answer on a master just moved to, from its `INFO
/// replication`, with nothing doubted yet (`sentinel/mod.rs` sets it as the
/// connection moves).
pub(super) fn count_new_master(info: &str) -> u32 {
    Doubts::default().count(&parse(info), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=127.0.0.1,port=7001,state=online,offset=100,lag=0\r\n\
        slave1:ip=127.0.0.1,port=7002,state=online,offset=100,lag=1\r\n\
        master_failover_state:no-failover\r\nmaster_repl_offset:100\r\n";

    #[test]
    fn replicas_are_read_from_info() {
        let r = parse(INFO);
        assert!(r.master);
        assert_eq!(r.replicas.len(), 2);
        assert_eq!(r.replicas[1].address, "127.0.0.1:7002");
        assert_eq!(r.replicas[1].lag, 1);
        let replica = parse("role:slave\r\nmaster_host:127.0.0.1\r\nslave_read_only:1\r\n");
        assert!(!replica.master && replica.replicas.is_empty());
    }

    #[test]
    fn a_replica_that_missed_a_wait_is_doubted_until_it_acknowledges() {
        let mut doubts = Doubts::default();
        let r = parse(INFO);
        assert_eq!(doubts.count(&r, None), 2, "lag 0 and 1 both count");
        assert_eq!(
            doubts.count(&r, Some(1)),
            1,
            "after a short WAIT, lag 1 is doubted"
        );
        assert_eq!(doubts.count(&r, None), 1, "and stays doubted at lag 1");
        let back = parse(&INFO.replace("lag=1", "lag=0"));
        assert_eq!(
            doubts.count(&back, None),
            2,
            "trusted again once it acknowledged"
        );
        let behind = parse(&INFO.replace("offset=100,lag=1", "offset=90,lag=0"));
        assert_eq!(
            doubts.count(&behind, Some(1)),
            1,
            "lag 0, behind the one that confirmed"
        );
        assert_eq!(doubts.count(&back, None), 2);
        let busy = INFO.replace("master_repl_offset:100", "master_repl_offset:120");
        assert_eq!(
            doubts.count(&parse(&busy), Some(1)),
            1,
            "the one that confirmed is not doubted for newer writes"
        );
        assert_eq!(doubts.count(&back, None), 2);
        let none = parse(&busy.replace("lag=1", "lag=0"));
        assert_eq!(
            doubts.count(&none, Some(0)),
            0,
            "none confirmed: all behind are doubted"
        );
        assert_eq!(doubts.count(&back, None), 2);
        let frozen = parse(&INFO.replace("lag=1", "lag=3"));
        assert_eq!(
            doubts.count(&frozen, None),
            1,
            "a silent replica does not count"
        );
        let syncing = parse(&INFO.replace("port=7002,state=online", "port=7002,state=wait_bgsave"));
        assert_eq!(doubts.count(&syncing, None), 1);
        assert_eq!(doubts.count(&parse("role:slave\r\n"), None), 0);
        let unacked = parse(&INFO.replace(
            "port=7002,state=online,offset=100",
            "port=7002,state=online,offset=0",
        ));
        assert_eq!(
            Doubts::default().count(&unacked, None),
            1,
            "not acknowledged since it synced"
        );
        let unwritten = parse(
            "role:master\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=0,lag=0\r\n\
             master_repl_offset:0\r\n",
        );
        assert_eq!(
            Doubts::default().count(&unwritten, None),
            1,
            "at 0 on a master that wrote nothing, it is in sync"
        );
    }

    /// A replica seen exactly in sync at 0 keeps counting while the master's
    /// first writes reach it; one that falls back to 0 (it synced again), or
    /// was never seen in sync, does not until it acknowledges.
    #[test]
    fn a_replica_seen_in_sync_at_zero_counts_through_the_first_writes() {
        let at = |replica: u64, master: u64| {
            parse(&format!(
                "role:master\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset={replica},lag=0\r\n\
                 master_repl_offset:{master}\r\n"
            ))
        };
        let mut doubts = Doubts::default();
        assert_eq!(doubts.count(&at(0, 0), None), 1, "exactly in sync");
        assert_eq!(
            doubts.count(&at(0, 56), None),
            1,
            "the first write on its way"
        );
        assert_eq!(doubts.count(&at(56, 56), None), 1, "acknowledged");
        assert_eq!(doubts.count(&at(0, 90), None), 0, "synced again: not yet");
        assert_eq!(doubts.count(&at(0, 90), None), 0, "and still not");
        assert_eq!(doubts.count(&at(90, 90), None), 1, "until it acknowledges");
        assert_eq!(
            Doubts::default().count(&at(0, 56), None),
            0,
            "never seen in sync"
        );
        let mut gone = Doubts::default();
        assert_eq!(gone.count(&at(0, 0), None), 1);
        assert_eq!(
            gone.count(&parse("role:master\r\nmaster_repl_offset:0\r\n"), None),
            0
        );
        assert_eq!(gone.count(&at(0, 56), None), 0, "it left and came back");
    }
}
