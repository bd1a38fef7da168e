//! The bodies of `tests/one_server/deadlock.rs`'s tests (deadlocks found and
//! broken across managers and within one), written against [`Target`] so that
//! `tests/topologies/on_cluster.rs` runs them on a cluster too, where the locks
//! of a cycle live on different masters. Each scenario's doc is on its body;
//! `each!` at the end lists them once for both runs.
//!
//! Each manager stands for a process: it has a client id and a registry entry
//! of its own, and sees the others only through Redis.

use std::time::{Duration, Instant};

use actix::Addr;
use lockwarden::{Acquire, AcquireKind, Deadlock, LockError, LockGuard, LockManager, Owner};

use crate::support::{eventually, hold, Target};

/// The deadlock timeout of these tests: short, so that the trials are quick.
const TIMEOUT: Duration = Duration::from_millis(250);

/// How late after the cycle closes its victim may hear: the timeout, plus the
/// issue's 500 ms for the walk and the scheduling of a loaded machine.
const BOUND: Duration = Duration::from_millis(250 + 500);

/// A Redisson client's owner field (no registry entry).
const JAVA: &str = "0f6c2a1e-7d3b-4e8a-b1c9-2a4d6e8f0b13:31";

async fn managers(t: &Target, n: usize) -> Vec<Addr<LockManager>> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(t.manager(|c| c.deadlock_timeout(TIMEOUT)).await);
    }
    all
}

/// `n` lock names, each on a master of its own when `t` is a cluster with
/// that many (so a cycle's walk crosses masters).
fn spread(t: &Target, prefix: &str, n: usize) -> Vec<String> {
    let masters = t.masters().len();
    let mut names: Vec<String> = Vec::new();
    let mut ports = Vec::new();
    for i in 0.. {
        let name = format!("{prefix}:{i}");
        let port = t.node_for(&name).port();
        if masters >= n && ports.contains(&port) {
            continue;
        }
        ports.push(port);
        names.push(name);
        if names.len() == n {
            break;
        }
    }
    names
}

/// The waits `(manager, name, kind, owner)` start one after another; the first
/// to end must be a deadlock within [`BOUND`] of the last start, and every
/// other ends only after the victim's holds are released, granted. Answers the
/// victim's index and its cycle.
async fn one_gives_way(
    waits: Vec<(Addr<LockManager>, String, AcquireKind, Owner)>,
    holds: Vec<Option<LockGuard>>,
) -> (usize, Deadlock) {
    let asks = waits
        .into_iter()
        .map(|(m, name, kind, owner)| (m, Acquire::new(name).kind(kind).owner(owner)))
        .collect();
    one_of_these_gives_way(asks, holds).await
}

/// [`one_gives_way`] for requests made by the caller.
async fn one_of_these_gives_way(
    asks: Vec<(Addr<LockManager>, Acquire)>,
    mut holds: Vec<Option<LockGuard>>,
) -> (usize, Deadlock) {
    let mut pending = Vec::new();
    for (i, (m, ask)) in asks.into_iter().enumerate() {
        pending.push(Box::pin(
            async move { (i, m.send(ask).await.expect("running")) },
        ));
    }
    let closed = Instant::now();
    let ((victim, first), _, mut rest) = tokio::time::timeout(
        Duration::from_secs(10),
        futures::future::select_all(pending),
    )
    .await
    .expect("no wait of the cycle gave way");
    let took = closed.elapsed();
    eprintln!("deadlock broken {took:?} after the cycle closed");
    let cycle = match first {
        Err(LockError::Deadlock(cycle)) => *cycle,
        other => panic!("the first wait to end was not a deadlock: {other:?}"),
    };
    assert!(took <= BOUND, "the victim heard after {took:?}");
    // The others go on: none ends while the victim still holds.
    let early = tokio::time::timeout(
        Duration::from_millis(300),
        futures::future::select_all(&mut rest),
    )
    .await;
    assert!(
        early.is_err(),
        "another wait ended before the victim let go"
    );
    holds[victim] = None;
    // Each is granted in turn, and lets go of everything, which frees the next.
    while !rest.is_empty() {
        let ((i, granted), _, left) =
            tokio::time::timeout(Duration::from_secs(10), futures::future::select_all(rest))
                .await
                .expect("granted once the one before let go");
        let guard = granted.unwrap_or_else(|e| panic!("a second wait failed too: {e}"));
        drop(guard);
        holds[i] = None;
        rest = left;
    }
    (victim, cycle)
}

/// Two managers take two locks in opposite orders, ten times: each time exactly
/// one wait gets `LockError::Deadlock` within the timeout + 500 ms of the cycle
/// closing, naming both locks and both holders (with this process's pid), and
/// the other wait is granted once the victim releases.
pub async fn two_managers_in_opposite_order_one_gives_way(t: &Target) {
    let m = managers(t, 2).await;
    for trial in 0..10 {
        let names = spread(t, &format!("dl:ab{trial}"), 2);
        let (o1, o2) = (Owner::new(), Owner::new());
        let g1 = hold(&m[0], &names[0], |a| a.owner(o1)).await;
        let g2 = hold(&m[1], &names[1], |a| a.owner(o2)).await;
        let fields = [g1.owner_field().to_string(), g2.owner_field().to_string()];
        let waits = vec![
            (m[0].clone(), names[1].clone(), AcquireKind::Exclusive, o1),
            (m[1].clone(), names[0].clone(), AcquireKind::Exclusive, o2),
        ];
        let (victim, cycle) = one_gives_way(waits, vec![Some(g1), Some(g2)]).await;
        assert_eq!(cycle.links.len(), 2, "{cycle}");
        assert_eq!(cycle.links[0].owner, fields[victim], "{cycle}");
        assert_eq!(cycle.links[1].owner, fields[1 - victim], "{cycle}");
        assert_eq!(cycle.links[0].lock, names[1 - victim]);
        assert_eq!(cycle.links[1].lock, names[victim]);
        for link in &cycle.links {
            let client = link.client.as_ref().expect("both are registered");
            assert_eq!(client.pid, std::process::id());
        }
    }
}

/// Two owners of one manager in opposite orders: found within this process
/// (the victim never writes a record of its wait in Redis) and broken the same
/// way.
pub async fn two_owners_of_one_manager(t: &Target) {
    let m = t.manager(|c| c.deadlock_timeout(TIMEOUT)).await;
    let names = spread(t, "dl:local", 2);
    let (o1, o2) = (Owner::new(), Owner::new());
    let g1 = hold(&m, &names[0], |a| a.owner(o1)).await;
    let g2 = hold(&m, &names[1], |a| a.owner(o2)).await;
    let fields = [g1.owner_field().to_string(), g2.owner_field().to_string()];
    let waits = vec![
        (m.clone(), names[1].clone(), AcquireKind::Exclusive, o1),
        (m.clone(), names[0].clone(), AcquireKind::Exclusive, o2),
    ];
    let (victim, cycle) = one_gives_way(waits, vec![Some(g1), Some(g2)]).await;
    assert_eq!(cycle.links.len(), 2);
    let (id, n) = fields[victim].split_once(':').expect("owner field");
    let entry = format!("lockwarden:client:{{{id}}}");
    let recorded: Vec<String> = t.raw(&["HKEYS", &entry]);
    assert!(
        !recorded
            .iter()
            .any(|f| f.starts_with(&format!("wait:{n}|"))),
        "the victim asked Redis: {recorded:?}"
    );
}

/// Three managers over three locks (on three masters of a cluster): one wait
/// of the three gives way, the two others are granted in turn.
pub async fn three_managers_over_three_locks(t: &Target) {
    let m = managers(t, 3).await;
    let names = spread(t, "dl:three", 3);
    let owners = [Owner::new(), Owner::new(), Owner::new()];
    let mut holds = Vec::new();
    for i in 0..3 {
        holds.push(Some(hold(&m[i], &names[i], |a| a.owner(owners[i])).await));
    }
    let waits = (0..3)
        .map(|i| {
            (
                m[i].clone(),
                names[(i + 1) % 3].clone(),
                AcquireKind::Exclusive,
                owners[i],
            )
        })
        .collect();
    let (_, cycle) = one_gives_way(waits, holds).await;
    assert_eq!(cycle.links.len(), 3, "{cycle}");
}

/// Two managers: the first holds one lock (`held[0]`) and waits for the other
/// (`wanted[0]`); the second holds the other (`held[1]`) and waits for the
/// first (`wanted[1]`). Answers the cycle after [`one_gives_way`].
async fn crossed(
    t: &Target,
    prefix: &str,
    held: [AcquireKind; 2],
    wanted: [AcquireKind; 2],
) -> Deadlock {
    let m = managers(t, 2).await;
    let names = spread(t, prefix, 2);
    let owners = [Owner::new(), Owner::new()];
    let mut holds = Vec::new();
    let mut waits = Vec::new();
    for i in 0..2 {
        let guard = hold(&m[i], &names[i], |a| a.kind(held[i]).owner(owners[i])).await;
        holds.push(Some(guard));
        waits.push((m[i].clone(), names[1 - i].clone(), wanted[i], owners[i]));
    }
    one_gives_way(waits, holds).await.1
}

/// A writer waiting for a reader that waits for the writer's other lock.
pub async fn a_writer_and_a_reader_wait_for_each_other(t: &Target) {
    // o1 writes the first lock and wants to write the second; o2 reads the
    // second and wants to read the first.
    let kinds = [AcquireKind::Write, AcquireKind::Read];
    let cycle = crossed(t, "dl:rw", kinds, kinds).await;
    let kinds: Vec<AcquireKind> = cycle.links.iter().map(|l| l.wants).collect();
    assert!(kinds.contains(&AcquireKind::Write) && kinds.contains(&AcquireKind::Read));
}

/// Two fair locks, each held and each waited for in opposite orders.
pub async fn fair_waiters_in_a_cycle(t: &Target) {
    let fair = [AcquireKind::Fair; 2];
    let cycle = crossed(t, "dl:fair", fair, fair).await;
    assert_eq!(cycle.links[0].wants, AcquireKind::Fair);
}

/// A spin lock's waiter and a non-reentrant lock's waiter in one cycle: the
/// kinds that wait differently (a spin waiter polls; a non-reentrant one is
/// refused only when it asks for what it holds itself) deadlock the same way.
pub async fn spin_and_non_reentrant_waits_in_a_cycle(t: &Target) {
    let m = managers(t, 2).await;
    let names = spread(t, "dl:spin", 2);
    let (o1, o2) = (Owner::new(), Owner::new());
    let g1 = hold(&m[0], &names[0], |a| a.spin().owner(o1)).await;
    let g2 = hold(&m[1], &names[1], |a| a.non_reentrant().owner(o2)).await;
    let asks = vec![
        (m[0].clone(), Acquire::new(&names[1]).spin().owner(o1)),
        (
            m[1].clone(),
            Acquire::new(&names[0]).non_reentrant().owner(o2),
        ),
    ];
    let (_, cycle) = one_of_these_gives_way(asks, vec![Some(g1), Some(g2)]).await;
    assert_eq!(cycle.links.len(), 2, "{cycle}");
}

/// The read-write upgrade deadlock: two readers that both want the write lock.
/// Asked by the reading owner itself, each is refused at once
/// (`UpgradeRefused`: it would wait for its own reads), so the cycle never
/// forms. Asked for a reading owner by another (a task or a child process
/// waiting on its behalf), each write wait waits for its own reader among
/// others: each is a deadlock with itself and gets `Deadlock`, and the reads
/// stay held.
pub async fn two_readers_that_both_want_to_write(t: &Target) {
    let m = managers(t, 2).await;
    let (o1, o2) = (Owner::new(), Owner::new());
    let r1 = hold(&m[0], "dl:up", |a| a.read().owner(o1)).await;
    let r2 = hold(&m[1], "dl:up", |a| a.read().owner(o2)).await;
    for (mgr, owner) in [(&m[0], o1), (&m[1], o2)] {
        let began = Instant::now();
        let asked = mgr
            .send(
                Acquire::new("dl:up")
                    .write()
                    .owner(owner)
                    .wait(Duration::from_secs(5)),
            )
            .await
            .expect("running");
        assert!(matches!(asked, Err(LockError::UpgradeRefused)), "{asked:?}");
        assert!(began.elapsed() < Duration::from_secs(1));
    }
    let w1 = m[0].send(Acquire::new("dl:up").write().on_behalf_of(r1.owner_field()));
    let w2 = m[1].send(Acquire::new("dl:up").write().on_behalf_of(r2.owner_field()));
    let began = Instant::now();
    let (a, b) = futures::future::join(w1, w2).await;
    for asked in [a.expect("running"), b.expect("running")] {
        match asked {
            Err(LockError::Deadlock(cycle)) => assert_eq!(cycle.links.len(), 1, "{cycle}"),
            other => panic!("not a deadlock: {other:?}"),
        }
    }
    assert!(began.elapsed() <= BOUND, "{:?}", began.elapsed());
    assert!(r1.release().await.is_ok() && r2.release().await.is_ok());
}

/// A wait on behalf of the holder of the very lock it wants (a nested
/// command asking for its outer command's lock) waits for itself: it gets
/// `Deadlock` instead of waiting for ever, and the holder keeps its lock.
pub async fn a_wait_on_behalf_of_its_own_holder_gives_way(t: &Target) {
    let m = managers(t, 2).await;
    let outer = hold(&m[0], "dl:nested", |a| a).await;
    let began = Instant::now();
    let inner = m[1]
        .send(Acquire::new("dl:nested").on_behalf_of(outer.owner_field()))
        .await
        .expect("running");
    let took = began.elapsed();
    match inner {
        Err(LockError::Deadlock(cycle)) => {
            assert_eq!(cycle.links.len(), 1, "{cycle}");
            assert_eq!(cycle.links[0].owner, outer.owner_field());
        }
        other => panic!("not a deadlock: {other:?}"),
    }
    assert!(took <= BOUND, "{took:?}");
    assert!(outer.release().await.is_ok());
}

/// A holder that cannot answer (a Redisson client: a hash in Redisson's layout,
/// and a wait record with no registry entry beside it) ends the search: the
/// waiter waits until its deadline and times out, it never gets `Deadlock`.
pub async fn a_redisson_holder_ends_the_search(t: &Target) {
    let m = t.manager(|c| c.deadlock_timeout(TIMEOUT)).await;
    let names = spread(t, "dl:java", 2);
    let mine = hold(&m, &names[0], |a| a).await;
    let _: i64 = t.raw(&["HSET", &names[1], JAVA, "1"]);
    let _: i64 = t.raw(&["PEXPIRE", &names[1], "30000"]);
    // What a record of the Java thread waiting for our lock would say.
    let entry = "lockwarden:client:{0f6c2a1e-7d3b-4e8a-b1c9-2a4d6e8f0b13}";
    let far = (std::time::SystemTime::now() + Duration::from_secs(60))
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let value = format!("1|{far}|x|{JAVA}");
    let _: i64 = t.raw(&["HSET", entry, &format!("wait:31|{}", names[0]), &value]);
    let waited = m
        .send(
            Acquire::new(&names[1])
                .owner(mine.owner())
                .wait(Duration::from_millis(1500)),
        )
        .await
        .expect("running");
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    let _: i64 = t.raw(&["DEL", &names[1]]);
    let _: i64 = t.raw(&["DEL", entry]);
}

/// A wait that ends (granted, timed out) leaves no record behind, and a wait
/// shorter than the timeout never wrote one.
pub async fn ended_waits_leave_no_record(t: &Target) {
    let m = managers(t, 2).await;
    let probe = hold(&m[1], "dl:rec:probe", |a| a).await;
    let (id, _) = probe.owner_field().split_once(':').expect("owner field");
    let entry = format!("lockwarden:client:{{{id}}}");
    let has_record = |n: u64| {
        let fields: Vec<String> = t.raw(&["HKEYS", &entry]);
        fields.iter().any(|f| f.starts_with(&format!("wait:{n}|")))
    };
    // A wait granted before the timeout writes nothing.
    let held = hold(&m[0], "dl:rec", |a| a).await;
    let quick = Owner::new();
    let waiting = tokio::spawn(m[1].send(Acquire::new("dl:rec").owner(quick)));
    tokio::time::sleep(TIMEOUT / 3).await;
    drop(held);
    drop(
        waiting
            .await
            .expect("joined")
            .expect("running")
            .expect("granted"),
    );
    assert!(!has_record(quick.id()), "a short wait was recorded");
    // A longer one is recorded while it lasts, and not after.
    let held = hold(&m[0], "dl:rec", |a| a).await;
    let owner = Owner::new();
    let waiting = tokio::spawn(m[1].send(Acquire::new("dl:rec").owner(owner)));
    let recorded = eventually(Duration::from_secs(5), || has_record(owner.id())).await;
    assert!(recorded, "a long wait was never recorded");
    drop(held);
    drop(
        waiting
            .await
            .expect("joined")
            .expect("running")
            .expect("granted"),
    );
    let removed = eventually(Duration::from_secs(5), || !has_record(owner.id())).await;
    assert!(removed, "the record stayed after the wait");
    drop(probe);
}

/// The scenarios of this file that hold on any deployment, in the order the
/// cluster run takes them: the one list both runs come from.
macro_rules! each {
    ($apply:ident!($($args:tt)*)) => {
        $apply! {
            $($args)*;
            two_managers_in_opposite_order_one_gives_way,
            two_owners_of_one_manager,
            three_managers_over_three_locks,
            a_writer_and_a_reader_wait_for_each_other,
            fair_waiters_in_a_cycle,
            spin_and_non_reentrant_waits_in_a_cycle,
            two_readers_that_both_want_to_write,
            a_wait_on_behalf_of_its_own_holder_gives_way,
            a_redisson_holder_ends_the_search,
            ended_waits_leave_no_record,
        }
    };
}
pub(crate) use each;
