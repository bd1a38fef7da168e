//! On the cluster of `cluster_failover.rs`: a release no replica could confirm
//! (its master's replica frozen and cut off), then the master killed and the
//! replica promoted with the old hold: the manager, living on, redoes the
//! release there (`src/wire/replicas/kept.rs`).

use crate::support;

use std::time::{Duration, Instant};

use lockwarden::{Acquire, LockManager};
use support::Cluster;

/// A lock name whose master has a running replica, and that replica's index.
fn name_with_a_replica(cluster: &Cluster) -> (String, usize, usize) {
    for i in 0..64 {
        let name = format!("{{kept{i}}}:c");
        let master = cluster.owner_of(&name);
        if cluster.nodes[master].pid().is_none() {
            continue;
        }
        let port = format!("master_port:{}", cluster.nodes[master].port());
        let replica = (0..cluster.nodes.len()).find(|&r| {
            r != master
                && cluster.nodes[r].pid().is_some()
                && cluster.nodes[r].info("replication").contains(&port)
        });
        if let Some(replica) = replica {
            return (name, master, replica);
        }
    }
    panic!("no master with a running replica")
}

/// The reproduction: the lock is free on the promoted replica within a
/// second of the takeover, not after the 30 s lease.
pub(crate) async fn a_release_no_replica_confirmed_is_redone_after_the_masters_death(
    cluster: &mut Cluster,
) {
    let (log, _logging) = support::Captured::install();
    let (name, master, replica) = name_with_a_replica(cluster);
    let config = cluster
        .config()
        .sync_replicas(1, Duration::from_millis(200));
    let m = LockManager::start(config).await.expect("started");
    let held = m
        .send(Acquire::new(&name).lease(Duration::from_secs(30)))
        .await
        .expect("running")
        .expect("granted");
    cluster.nodes[replica].pause();
    let _: redis::Value = support::raw(
        &cluster.nodes[master],
        &["CLIENT", "KILL", "TYPE", "replica"],
    );
    // Once the manager counts no replica there, a grant goes without a WAIT.
    let probe = format!("{}:probe", name.split(':').next().unwrap_or("{kept}"));
    let none = support::until_no_replica_counted(&m, &probe).await;
    assert!(
        none,
        "the frozen replica was never counted out\n{}",
        log.text()
    );
    held.release().await.expect("released on the master");

    cluster.nodes[master].kill();
    let killed = Instant::now();
    cluster.nodes[replica].resume();
    let promoted = support::eventually(Duration::from_secs(40), || {
        cluster.owner_of(&name) == replica
    })
    .await;
    let promoted_at = killed.elapsed();
    assert!(promoted, "the replica took over within 40 s");
    let freed = support::eventually(Duration::from_secs(30), || {
        support::holder_on(&cluster.nodes[replica], &name).is_none()
    })
    .await;
    let free = killed.elapsed();
    assert!(
        freed,
        "the old hold stayed on the new master\n{}",
        log.text()
    );
    eprintln!("cluster: free {free:?} after the kill; the replica took over after {promoted_at:?}");
    // Measured 0.01, 0.76 and 0.01 s after the takeover seen here: the keeper
    // resends when the replica count's look finds the slots served by another
    // master (at most a second apart), and redis-rs follows to it.
    assert!(
        free <= promoted_at + Duration::from_secs(1),
        "the lock stayed held {free:?}, the failover took {promoted_at:?}\n{}",
        log.text()
    );
    let g = m
        .send(Acquire::new(&name).wait(Duration::from_secs(5)))
        .await
        .expect("running")
        .expect("granted on the new master");
    g.release().await.expect("released");
}
