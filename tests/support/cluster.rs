//! A real Redis Cluster for tests: `redis-server --cluster-enabled yes` processes on
//! free ports, joined with `redis-cli --cluster create`, ready once every node
//! reports `cluster_state:ok` and knows every other. Nodes are ordinary
//! [`RedisServer`]s, so a test can kill, pause or restart one; every node's log is
//! printed when a test panics (each server prints its own on drop).

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use super::server::RedisServer;

/// A cluster owned by a test; its processes die with it.
pub struct Cluster {
    /// Masters first (in slot order as `--cluster create` assigns them), then
    /// replicas.
    pub nodes: Vec<RedisServer>,
    /// How many of `nodes` started as masters.
    pub masters: usize,
}

impl Cluster {
    /// Starts `masters` masters with `replicas` replicas each. A node is deemed
    /// failed after 1 s without answers, so a failover takes a few seconds.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        let total = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    // A shard whose master failed keeps the rest of the cluster up.
                    "--cluster-require-full-coverage",
                    "no",
                    // A replica may always take over, however long ago it last
                    // heard from its master (the tests kill masters on purpose).
                    "--cluster-replica-validity-factor",
                    "0",
                ])
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        create
            .arg("--cluster-replicas")
            .arg(replicas.to_string())
            .arg("--cluster-yes");
        let out = create.output().unwrap_or_else(|e| {
            panic!("cannot run redis-cli ({e}); install it (apt-get install redis-tools)")
        });
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes, masters };
        cluster.wait_ok(Duration::from_secs(30));
        cluster
    }

    /// Waits until every running node says `cluster_state:ok` and knows every
    /// node, and no running replica is still syncing.
    pub fn wait_ok(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let total = self.nodes.len();
        loop {
            let ready = self.nodes.iter().filter(|n| n.pid().is_some()).all(|n| {
                let info = n.cluster_info();
                let replication = n.info("replication");
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{total}"))
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The seed URLs of every node.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// A lockwarden config for this cluster, seeded with its first two masters.
    pub fn config(&self) -> lockwarden::Config {
        let seeds = self.seeds();
        lockwarden::Config::cluster(seeds.iter().take(2).map(String::as_str))
            .expect("cluster URLs parse")
    }

    /// The node (index into `nodes`) that currently serves `key`'s slot as master.
    pub fn owner_of(&self, key: &str) -> usize {
        let asker = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut asker.conn())
            .expect("CLUSTER KEYSLOT");
        self.owner_of_slot(slot)
    }

    /// The node (index into `nodes`) that serves `slot` as master, as the first
    /// running node sees it.
    pub fn owner_of_slot(&self, slot: u16) -> usize {
        let asker = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        let shards: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut asker.conn())
            .expect("CLUSTER SLOTS");
        let redis::Value::Array(ranges) = shards else {
            panic!("CLUSTER SLOTS: unexpected reply")
        };
        for range in ranges {
            let redis::Value::Array(fields) = range else {
                continue;
            };
            let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
                (fields.first(), fields.get(1))
            else {
                continue;
            };
            if (*from..=*to).contains(&i64::from(slot)) {
                let Some(redis::Value::Array(master)) = fields.get(2) else {
                    continue;
                };
                let Some(redis::Value::Int(port)) = master.get(1) else {
                    continue;
                };
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port()) == *port)
                    .expect("the owner is one of ours");
            }
        }
        panic!("no master serves slot {slot}")
    }

    /// Whether the master serving `key`'s slot (as a running node sees it) is
    /// running, i.e. a failover is complete for that slot.
    pub fn owner_of_slot_is_running(&self, key: &str) -> bool {
        let asker = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        let Ok(slot) = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query::<u16>(&mut asker.conn())
        else {
            return false;
        };
        let owner =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.owner_of_slot(slot)));
        matches!(owner, Ok(i) if self.nodes[i].pid().is_some())
    }

    /// The sum of one `INFO commandstats` counter over every running node.
    pub fn calls(&self, command: &str) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.pid().is_some())
            .map(|n| n.commandstats().get(command).copied().unwrap_or(0))
            .sum()
    }
}

impl Cluster {
    /// The running nodes (indexes into `nodes`) that are masters now.
    pub fn running_masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| {
                self.nodes[i].pid().is_some()
                    && self.nodes[i].info("replication").contains("role:master")
            })
            .collect()
    }

    /// The node (index into `nodes`) serving each key's slot as master: two round
    /// trips whatever the number of keys (KEYSLOT pipelined, then CLUSTER SLOTS).
    pub fn owners_of(&self, keys: &[&str]) -> Vec<usize> {
        let asker = self
            .nodes
            .iter()
            .find(|n| n.pid().is_some())
            .expect("a running node");
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.cmd("CLUSTER").arg("KEYSLOT").arg(*key);
        }
        let slots: Vec<u16> = pipe.query(&mut asker.conn()).expect("CLUSTER KEYSLOT");
        let mut owners: HashMap<u16, usize> = HashMap::new();
        slots
            .into_iter()
            .map(|slot| {
                *owners
                    .entry(slot)
                    .or_insert_with(|| self.owner_of_slot(slot))
            })
            .collect()
    }

    /// Migrates the slot of `key` from node `from` to node `to`, keys included.
    pub fn move_slot_of(&self, key: &str, from: usize, to: usize) {
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let id = |n: &RedisServer| -> String {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut n.conn())
                .expect("MYID")
        };
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut src.conn())
            .expect("KEYSLOT");
        let (src_id, dst_id) = (id(src), id(dst));
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&src_id)
            .query(&mut dst.conn())
            .expect("IMPORTING");
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&dst_id)
            .query(&mut src.conn())
            .expect("MIGRATING");
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut src.conn())
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(dst.port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            let _: () = migrate.query(&mut src.conn()).expect("MIGRATE");
        }
        // Masters only: a replica refuses SETSLOT and learns it from its master.
        for node in self.running_masters().into_iter().map(|i| &self.nodes[i]) {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&dst_id)
                .query(&mut node.conn())
                .expect("SETSLOT NODE");
        }
    }
}

/// What [`Cluster::held_and_waited_for`] leaves running: the waiter's answer.
pub type Waiting = actix_rt::task::JoinHandle<
    Result<Result<lockwarden::LockGuard, lockwarden::LockError>, actix::MailboxError>,
>;

impl Cluster {
    /// `a` holds `name` (no braces in it) and `b` waits for it (up to 30 s), once
    /// `b`'s manager has subscribed to the lock's sharded channel on the master
    /// that owns its slot. Answers the guard, the waiter and that master's index.
    pub async fn held_and_waited_for(
        &self,
        a: &actix::Addr<lockwarden::LockManager>,
        b: &actix::Addr<lockwarden::LockManager>,
        name: &'static str,
    ) -> (lockwarden::LockGuard, Waiting, usize) {
        let held = a
            .send(lockwarden::Acquire::new(name))
            .await
            .expect("running")
            .expect("held");
        let waiter = actix_rt::spawn({
            let b = b.clone();
            async move {
                b.send(lockwarden::Acquire::new(name).wait(Duration::from_secs(30)))
                    .await
            }
        });
        let from = self.owner_of(name);
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let subscribed = super::eventually(Duration::from_secs(5), || {
            redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(&channel)
                .query::<(String, u64)>(&mut self.nodes[from].conn())
                .map(|(_, n)| n == 1)
                .unwrap_or(false)
        })
        .await;
        assert!(subscribed, "the waiter subscribed on the slot's owner");
        (held, waiter, from)
    }
}
