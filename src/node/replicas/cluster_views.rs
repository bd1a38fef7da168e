//! What the cluster task (`cluster.rs`) reads of the masters' answers: each
//! node as a `CLUSTER NODES` line shows it, which master serves each slot (the
//! claim with the highest config epoch wins, as in the cluster itself), and
//! whether the other masters vouch for a master before its count may go down.
//!
//! These are the rules that keep a demoted master's word out: a master frozen
//! through a failover and resumed still calls itself master of its slots and
//! its promoted successor a replica, so its claim loses to the newer epoch and
//! its vote is not counted once it serves no slot. They are plain functions of
//! the answers, so the tests below check them on views taken from a cluster in
//! the middle of such a failover.

use crate::node::cluster::SLOTS;

/// One node as a `CLUSTER NODES` line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    /// `host:port` (the client port).
    pub(super) address: String,
    /// Flags hold `master`.
    pub(super) master: bool,
    /// Flags hold `fail`, `fail?` or `noaddr`.
    pub(super) failing: bool,
    /// Flags hold `myself`: the line of the node that answered.
    pub(super) myself: bool,
    /// Its config epoch: the newest claim on a slot wins.
    pub(super) epoch: u64,
    /// The slot ranges it serves (migrating and importing marks left out).
    pub(super) slots: Vec<(u16, u16)>,
}

/// Reads a `CLUSTER NODES` reply: `<id> <ip:port@cport[,host]> <flags>
/// <master> <ping> <pong> <epoch> <link> <slot>...`.
pub(super) fn parse_nodes(text: &str) -> Vec<Seen> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let address = fields.get(1)?.split('@').next()?.to_string();
            let flags: Vec<&str> = fields.get(2)?.split(',').collect();
            let slots = fields
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|range| {
                    let (first, last) = range.split_once('-').unwrap_or((range, range));
                    Some((first.parse().ok()?, last.parse().ok()?))
                })
                .collect();
            Some(Seen {
                address,
                master: flags.contains(&"master"),
                failing: flags
                    .iter()
                    .any(|f| matches!(*f, "fail" | "fail?" | "noaddr")),
                myself: flags.contains(&"myself"),
                epoch: fields.get(6)?.parse().ok()?,
                slots,
            })
        })
        .collect()
}

/// What one master answered: its view of the cluster and its `INFO`.
#[derive(Debug)]
pub(super) struct Answer {
    /// The master asked.
    pub(super) address: String,
    /// Its `CLUSTER NODES`, read.
    pub(super) view: Vec<Seen>,
    /// Its `INFO` (default sections: replication, version, persistence).
    pub(super) info: String,
}

/// Whether every other master that answered and still serves slots (`voters`)
/// names `address` a master with no failure flag (and at least one did, unless
/// it is the only one). A master whose slots a newer claim took (demoted while
/// frozen, not told yet) still calls itself master and its successor a replica
/// or failed: its word does not count.
pub(super) fn agreed(address: &str, answers: &[Answer], voters: &[&str]) -> bool {
    let others: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.address != address && voters.contains(&a.address.as_str()))
        .collect();
    if others.is_empty() {
        return voters == [address];
    }
    others.iter().all(|a| {
        a.view
            .iter()
            .find(|s| s.address == address)
            .is_some_and(|s| s.master && !s.failing)
    })
}

/// The master serving each slot by the answered views: the newest claim.
pub(super) fn owners(answers: &[Answer]) -> Vec<(u16, u16, String)> {
    let mut claims: Vec<Option<(u64, &str)>> = vec![None; usize::from(SLOTS)];
    for seen in answers.iter().flat_map(|a| &a.view) {
        if !seen.master {
            continue;
        }
        for &(first, last) in &seen.slots {
            for s in first..=last.min(SLOTS - 1) {
                let claim = &mut claims[usize::from(s)];
                if claim.is_none_or(|(epoch, _)| seen.epoch > epoch) {
                    *claim = Some((seen.epoch, &seen.address));
                }
            }
        }
    }
    let mut ranges: Vec<(u16, u16, String)> = Vec::new();
    for (s, claim) in (0..SLOTS).zip(claims) {
        let Some((_, address)) = claim else { continue };
        match ranges.last_mut() {
            Some((_, last, owner)) if *last + 1 == s && owner == address => *last = s,
            _ => ranges.push((s, s, address.to_string())),
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node a (epoch 1) was frozen and still claims 0-5460; its replica d was
    /// promoted with epoch 7 and claims the same slots.
    const STALE_A: &str = "\
a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
d 127.0.0.1:7004@17004 slave a 0 0 1 connected
";
    const FROM_B: &str = "\
a 127.0.0.1:7001@17001 master,fail - 0 0 1 connected
b 127.0.0.1:7002@17002 myself,master - 0 0 2 connected 5461-10922 [5461->-x]
c 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
d 127.0.0.1:7004@17004 master - 0 0 7 connected 0-5460
";

    fn answer(address: &str, view: &str) -> Answer {
        Answer {
            address: address.into(),
            view: parse_nodes(view),
            info: String::new(),
        }
    }

    #[test]
    fn nodes_are_read_with_flags_epochs_and_slots() {
        let seen = parse_nodes(FROM_B);
        assert_eq!(seen.len(), 4);
        assert!(seen[0].master && seen[0].failing && seen[0].slots.is_empty());
        assert!(seen[1].myself && seen[1].slots == [(5461, 10922)]);
        assert_eq!(seen[3].epoch, 7);
        assert_eq!(seen[3].address, "127.0.0.1:7004");
    }

    #[test]
    fn the_newest_claim_serves_a_slot() {
        let answers = [
            answer("127.0.0.1:7001", STALE_A),
            answer("127.0.0.1:7002", FROM_B),
        ];
        let owned = owners(&answers);
        assert_eq!(
            owned,
            vec![
                (0, 5460, "127.0.0.1:7004".to_string()),
                (5461, 10922, "127.0.0.1:7002".to_string()),
                (10923, 16383, "127.0.0.1:7003".to_string()),
            ]
        );
    }

    #[test]
    fn a_demoted_master_neither_is_vouched_for_nor_vouches() {
        let answers = [
            answer("127.0.0.1:7001", STALE_A),
            answer("127.0.0.1:7002", FROM_B),
            answer(
                "127.0.0.1:7004",
                &FROM_B.replace("myself,", "").replace(
                    "d 127.0.0.1:7004@17004 master",
                    "d 127.0.0.1:7004@17004 myself,master",
                ),
            ),
        ];
        let voters = ["127.0.0.1:7002", "127.0.0.1:7003", "127.0.0.1:7004"];
        assert!(!agreed("127.0.0.1:7001", &answers, &voters));
        // a calls d a replica, but a serves nothing any more: d is vouched for.
        assert!(agreed("127.0.0.1:7004", &answers, &voters));
        assert!(agreed("127.0.0.1:7002", &answers, &voters));
        // With a still among the voters (before the promotion), d is not.
        let before = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"];
        assert!(!agreed("127.0.0.1:7004", &answers, &before));
        // A lone master vouches for itself.
        let alone = [answer("127.0.0.1:7001", STALE_A)];
        assert!(agreed("127.0.0.1:7001", &alone, &["127.0.0.1:7001"]));
    }
}
