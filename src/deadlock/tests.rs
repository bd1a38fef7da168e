//! The walk over a plain map: which waits form a cycle, which do not, and who
//! gives up.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::UNIX_EPOCH;

use futures::executor::block_on;

use super::*;

/// A graph in memory: lock -> state, owner -> waits; owners missing from
/// `clients` have no registry entry.
#[derive(Default)]
struct Map {
    locks: HashMap<String, LockState>,
    waits: HashMap<String, Vec<Wait>>,
    unknown: HashSet<String>,
}

impl Graph for Map {
    type Error = Infallible;

    async fn lock(&mut self, name: &str) -> Result<LockState, Infallible> {
        Ok(self.locks.get(name).cloned().unwrap_or_default())
    }

    async fn owner(&mut self, owner: &str) -> Result<Option<OwnerState>, Infallible> {
        if self.unknown.contains(owner) {
            return Ok(None);
        }
        Ok(Some(OwnerState {
            client: Some(client(owner)),
            waits: self.waits.get(owner).cloned().unwrap_or_default(),
        }))
    }
}

fn client(owner: &str) -> ClientInfo {
    ClientInfo {
        host: format!("host-{owner}"),
        pid: 7,
        program: "t".into(),
        label: None,
        started: UNIX_EPOCH,
        version: "0".into(),
    }
}

fn wait(owner: &str, lock: &str, wants: AcquireKind, since_ms: u64) -> Wait {
    Wait {
        owners: vec![owner.to_string()],
        lock: lock.to_string(),
        wants,
        field: if wants == AcquireKind::Write {
            format!("{owner}:write")
        } else {
            owner.to_string()
        },
        since_ms,
    }
}

impl Map {
    fn held(mut self, lock: &str, fields: &[&str]) -> Map {
        let state = self.locks.entry(lock.to_string()).or_default();
        state.holders = fields.iter().map(|f| f.to_string()).collect();
        self
    }

    fn queued(mut self, lock: &str, fields: &[&str]) -> Map {
        let state = self.locks.entry(lock.to_string()).or_default();
        state.queue = fields.iter().map(|f| f.to_string()).collect();
        self
    }

    fn waiting(mut self, w: Wait) -> Map {
        for o in &w.owners {
            self.waits.entry(o.clone()).or_default().push(w.clone());
        }
        self
    }

    fn cycle_from(&mut self, w: &Wait) -> Option<Deadlock> {
        block_on(find_cycle(self, w, None)).unwrap().0
    }
}

/// The two-lock cycle most tests start from: c1:1 holds x and waits for y
/// (wanting `a`, since `a_since`), c2:1 holds y and waits for x.
fn crossed(a: (AcquireKind, u64), b: (AcquireKind, u64)) -> (Map, Wait, Wait) {
    let wa = wait("c1:1", "y", a.0, a.1);
    let wb = wait("c2:1", "x", b.0, b.1);
    let map = Map::default()
        .held("x", &["c1:1"])
        .held("y", &["c2:1"])
        .waiting(wa.clone())
        .waiting(wb.clone());
    (map, wa, wb)
}

fn owners(d: &Deadlock) -> Vec<(&str, &str)> {
    d.links
        .iter()
        .map(|l| (l.owner.as_str(), l.lock.as_str()))
        .collect()
}

#[test]
fn two_owners_in_opposite_order_form_a_cycle_and_the_later_wait_gives_up() {
    let (mut map, a, b) = crossed((AcquireKind::Exclusive, 100), (AcquireKind::Exclusive, 200));
    let from_a = map.cycle_from(&a).expect("a cycle");
    assert_eq!(owners(&from_a), [("c1:1", "y"), ("c2:1", "x")]);
    let from_b = map.cycle_from(&b).expect("a cycle");
    assert_eq!(owners(&from_b), [("c2:1", "x"), ("c1:1", "y")]);
    // Both detectors name the same wait: b's, which started last.
    assert_eq!(from_a.links[victim(&from_a)].owner, "c2:1");
    assert_eq!(from_b.links[victim(&from_b)].owner, "c2:1");
    assert_eq!(victim(&from_b), 0);
}

#[test]
fn a_chain_without_a_way_back_is_no_deadlock() {
    let a = wait("c1:1", "y", AcquireKind::Exclusive, 1);
    let b = wait("c2:1", "z", AcquireKind::Exclusive, 2);
    let mut map = Map::default()
        .held("x", &["c1:1"])
        .held("y", &["c2:1"])
        .held("z", &["c3:1"])
        .waiting(a.clone())
        .waiting(b);
    assert_eq!(map.cycle_from(&a), None);
}

#[test]
fn three_owners_over_three_locks() {
    let a = wait("c1:1", "l2", AcquireKind::Exclusive, 1);
    let b = wait("c2:1", "l3", AcquireKind::Exclusive, 2);
    let c = wait("c3:1", "l1", AcquireKind::Fair, 3);
    let mut map = Map::default()
        .held("l1", &["c1:1"])
        .held("l2", &["c2:1"])
        .held("l3", &["c3:1"])
        .waiting(a.clone())
        .waiting(b)
        .waiting(c);
    let d = map.cycle_from(&a).expect("a cycle");
    assert_eq!(owners(&d), [("c1:1", "l2"), ("c2:1", "l3"), ("c3:1", "l1")]);
    assert_eq!(victim(&d), 2);
    assert_eq!(d.links[0].client.as_ref().map(|c| c.pid), None);
    assert_eq!(
        d.links[1].client.as_ref().expect("registered").host,
        "host-c2:1"
    );
}

#[test]
fn a_holder_without_a_registry_entry_ends_the_search() {
    let a = wait("c1:1", "y", AcquireKind::Exclusive, 1);
    let b = wait("redisson:1", "x", AcquireKind::Exclusive, 2);
    let mut map = Map::default()
        .held("x", &["c1:1"])
        .held("y", &["redisson:1"])
        .waiting(a.clone())
        .waiting(b);
    map.unknown.insert("redisson:1".into());
    assert_eq!(map.cycle_from(&a), None);
}

#[test]
fn readers_share_and_writers_wait_for_every_reader() {
    // c1 reads r and wants w's write lock; c2 writes w and wants to read r.
    let a = wait("c1:1", "w", AcquireKind::Write, 1);
    let b = wait("c2:1", "r", AcquireKind::Read, 2);
    let map = Map::default()
        .held("r", &["c1:1", "c3:1"])
        .held("w", &["c2:1:write"])
        .waiting(a.clone())
        .waiting(b.clone());
    // A reader waits only for a writer: readers of r do not block c2.
    assert_eq!(map.cycle_from_clone(&a), None);
    let map = map.held("r", &["c1:1:write"]);
    let d = map
        .cycle_from_clone(&a)
        .expect("writer and reader wait for each other");
    assert_eq!(owners(&d), [("c1:1", "w"), ("c2:1", "r")]);
    // A writer waits for each reader.
    let writer = wait("c2:1", "r", AcquireKind::Write, 2);
    let map = Map::default()
        .held("r", &["c3:1", "c1:1"])
        .held("w", &["c2:1:write"])
        .waiting(a.clone())
        .waiting(writer);
    assert!(map.cycle_from_clone(&a).is_some());
}

impl Map {
    fn cycle_from_clone(&self, w: &Wait) -> Option<Deadlock> {
        let mut copy = Map {
            locks: self.locks.clone(),
            waits: self.waits.clone(),
            unknown: self.unknown.clone(),
        };
        copy.cycle_from(w)
    }
}

#[test]
fn a_fair_waiter_waits_for_those_queued_ahead() {
    // Nobody holds f; c2 is ahead of c1 in its queue and waits for x, which c1
    // holds.
    let a = wait("c1:1", "f", AcquireKind::Fair, 1);
    let b = wait("c2:1", "x", AcquireKind::Exclusive, 2);
    let mut map = Map::default()
        .queued("f", &["c2:1", "c1:1"])
        .held("x", &["c1:1"])
        .waiting(a.clone())
        .waiting(b.clone());
    let d = map.cycle_from(&a).expect("a cycle through the queue");
    assert_eq!(owners(&d), [("c1:1", "f"), ("c2:1", "x")]);
    // Queued behind it, c2 is no obstacle.
    let mut map = map.queued("f", &["c1:1", "c2:1"]);
    assert_eq!(map.cycle_from(&a), None);
}

#[test]
fn a_nested_wait_for_what_its_outer_owner_holds_waits_for_itself() {
    let mut inner = wait("c9:1", "a", AcquireKind::Exclusive, 5);
    inner.owners.push("c1:4".into());
    let mut map = Map::default().held("a", &["c1:4"]).waiting(inner.clone());
    let d = map
        .cycle_from(&inner)
        .expect("waits for its own outer holder");
    assert_eq!(owners(&d), [("c1:4", "a")]);
    // Named with the outer holder's client, not the inner waiter's.
    assert_eq!(
        d.links[0].client.as_ref().map(|c| c.host.as_str()),
        Some("host-c1:4")
    );
    assert_eq!(victim(&d), 0);
}

#[test]
fn nested_pipelines_in_opposite_order_form_a_cycle() {
    // Outer c1:1 holds a, its inner command waits for b on its behalf; outer
    // c2:1 holds b, its inner waits for a.
    let mut inner1 = wait("c3:1", "b", AcquireKind::Exclusive, 10);
    inner1.owners.push("c1:1".into());
    let mut inner2 = wait("c4:1", "a", AcquireKind::Exclusive, 20);
    inner2.owners.push("c2:1".into());
    let mut map = Map::default()
        .held("a", &["c1:1"])
        .held("b", &["c2:1"])
        .waiting(inner1.clone())
        .waiting(inner2);
    let d = map.cycle_from(&inner1).expect("a cycle");
    assert_eq!(owners(&d), [("c1:1", "b"), ("c2:1", "a")]);
    assert_eq!(victim(&d), 1);
}

#[test]
fn an_owner_with_two_waits_is_followed_through_either() {
    let a = wait("c1:1", "y", AcquireKind::Exclusive, 1);
    let b1 = wait("c2:1", "x", AcquireKind::Exclusive, 2);
    let b2 = wait("c2:1", "z", AcquireKind::Exclusive, 3);
    for order in [[b1.clone(), b2.clone()], [b2.clone(), b1.clone()]] {
        let mut map = Map::default()
            .held("x", &["c1:1"])
            .held("y", &["c2:1"])
            .held("z", &["c5:1"])
            .waiting(a.clone());
        for w in order {
            map = map.waiting(w);
        }
        let d = map.cycle_from(&a).expect("found through its wait for x");
        assert_eq!(owners(&d), [("c1:1", "y"), ("c2:1", "x")]);
    }
}

#[test]
fn equal_start_times_are_decided_by_owner_field() {
    let (mut map, a, b) = crossed((AcquireKind::Exclusive, 7), (AcquireKind::Exclusive, 7));
    let from_a = map.cycle_from(&a).expect("a cycle");
    let from_b = map.cycle_from(&b).expect("a cycle");
    assert_eq!(from_a.links[victim(&from_a)].owner, "c2:1");
    assert_eq!(from_b.links[victim(&from_b)].owner, "c2:1");
}

#[test]
fn the_walk_is_bounded() {
    // A long chain that never comes back: at most WALK_LIMIT reads.
    let mut map = Map::default();
    for i in 0..200 {
        map = map
            .held(&format!("l{i}"), &[&format!("c{i}:1")])
            .waiting(wait(
                &format!("c{i}:1"),
                &format!("l{}", i + 1),
                AcquireKind::Exclusive,
                i,
            ));
    }
    let start = wait("me:1", "l0", AcquireKind::Exclusive, 0);
    let (found, reads) = block_on(find_cycle(&mut map, &start, None)).unwrap();
    assert_eq!(found, None);
    assert!(reads <= WALK_LIMIT, "{reads} reads");
}

#[test]
fn the_message_names_each_lock_and_holder_in_order() {
    let (mut map, _, b) = crossed((AcquireKind::Exclusive, 100), (AcquireKind::Write, 200));
    let d = map.cycle_from(&b).expect("a cycle");
    let text = d.to_string();
    assert!(
        text.starts_with(
            "deadlock: c2:1 waits for write lock x, held by c1:1 (host host-c1:1 pid 7 (t, lockwarden 0)), which waits for exclusive \
             lock y, held by c2:1; "
        ),
        "{text}"
    );
    assert_eq!(d.locks().collect::<Vec<_>>(), ["x", "y"]);
}
