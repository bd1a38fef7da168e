//! The topologies of the chaos suite and the faults each gets, in order. Every
//! fault is followed by undisturbed running (`Settings::quiet`, or the lease when
//! a holder died), and its window of the history runs until the next fault.

use std::cell::RefCell;
use std::time::Duration;

use super::history::{self, Verdict};
use super::support::{Cluster, Mode, Proxy, RedisServer, Sentinel, MASTER_NAME};
use super::workers::{now_ns, Fleet};
use super::Settings;

/// One line of the table.
#[derive(Debug)]
pub struct Row {
    pub topology: &'static str,
    pub fault: &'static str,
    pub verdict: Verdict,
}

/// A fault: its name, what it does (it may take a while: a freeze lasts), and how
/// long the fleet then runs undisturbed.
struct Fault<'a> {
    name: &'static str,
    inject: Box<dyn FnMut(&Fleet) + 'a>,
    after: Duration,
}

fn fault<'a>(name: &'static str, after: Duration, inject: impl FnMut(&Fleet) + 'a) -> Fault<'a> {
    Fault {
        name,
        inject: Box::new(inject),
        after,
    }
}

/// Runs the fleet through `faults` and judges each fault's window; the first row
/// is the undisturbed warm-up.
fn run(
    topology: &'static str,
    settings: &Settings,
    connect: Vec<String>,
    faults: Vec<Fault<'_>>,
) -> Vec<Row> {
    run_with(topology, settings, connect, Vec::new(), faults)
}

/// [`run`], with more arguments for `run` (`--redlock`).
fn run_with(
    topology: &'static str,
    settings: &Settings,
    connect: Vec<String>,
    run_flags: Vec<String>,
    faults: Vec<Fault<'_>>,
) -> Vec<Row> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut plan = settings.plan(connect, dir.path());
    plan.run_flags = run_flags;
    let fleet = Fleet::start(&plan);
    let mut marks = vec![("none (warm-up)", now_ns())];
    std::thread::sleep(settings.quiet);
    for mut f in faults {
        // When, in ms since the epoch, as the kept logs' names say.
        eprintln!(
            "chaos: {topology}: {} (at {})",
            f.name,
            now_ns() / 1_000_000
        );
        marks.push((f.name, now_ns()));
        (f.inject)(&fleet);
        std::thread::sleep(f.after);
    }
    let end = now_ns();
    let runs = fleet.stop(plan.wait + plan.lease + Duration::from_secs(10));
    let slack = plan.lease + Duration::from_secs(10);
    marks
        .iter()
        .enumerate()
        .map(|(i, (fault, at))| {
            let to = marks.get(i + 1).map_or(end, |m| m.1);
            Row {
                topology,
                fault,
                verdict: history::judge(&runs, plan.locks, *at, to, plan.wait, slack),
            }
        })
        .collect()
}

/// One server behind the proxy.
pub fn standalone(settings: &Settings) -> Vec<Row> {
    let server = RefCell::new(RedisServer::start());
    let proxy = Proxy::start(server.borrow().port());
    let quiet = settings.quiet;
    let faults = vec![
        fault(
            "holder SIGKILLed",
            settings.lease + quiet,
            |fleet: &Fleet| {
                if !fleet.kill_a_holder(Duration::from_secs(2)) {
                    eprintln!("chaos: no holder to kill within 2 s");
                }
            },
        ),
        fault("link blackholed 3 s", quiet, |_: &Fleet| {
            proxy.set(Mode::Blackhole);
            std::thread::sleep(Duration::from_secs(3));
            proxy.set(Mode::Pass);
        }),
        fault("link delayed 300 ms each way, 5 s", quiet, |_: &Fleet| {
            proxy.set(Mode::Delay(Duration::from_millis(300)));
            std::thread::sleep(Duration::from_secs(5));
            proxy.set(Mode::Pass);
        }),
        fault("server frozen 3 s (SIGSTOP)", quiet, |_: &Fleet| {
            server.borrow_mut().pause();
            std::thread::sleep(Duration::from_secs(3));
            server.borrow_mut().resume();
        }),
        fault("server restarted, data lost", quiet, |_: &Fleet| {
            server.borrow_mut().restart()
        }),
    ];
    let rows = run(
        "standalone",
        settings,
        vec!["--redis".into(), proxy.url()],
        faults,
    );
    drop(proxy);
    rows
}

/// A master, a replica and three Sentinels.
pub fn sentinel(settings: &Settings) -> Vec<Row> {
    let first = RefCell::new(RedisServer::start());
    let second = RefCell::new(RedisServer::start_replica_of(&first.borrow()));
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(&first.borrow(), 2))
        .collect();
    let mut connect = Vec::new();
    for s in &sentinels {
        connect.extend(["--sentinel".to_string(), s.url()]);
    }
    connect.extend(["--master-name".to_string(), MASTER_NAME.to_string()]);
    let quiet = settings.quiet;
    let second_port = second.borrow().port();
    // Waits (at most 30 s) until the master the Sentinels name is (`true`) or
    // is not (`false`) the server at `port`.
    let named = |port: u16, is: bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while (sentinels[0].master_port() == Some(port)) != is
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // The master frozen for good by the fifth fault.
    let frozen = std::cell::Cell::new(0u16);
    // The server Sentinel names the master now, and the other one.
    let roles = || {
        let first_is_master = sentinels[0].master_port() == Some(first.borrow().port());
        match first_is_master {
            true => (&first, &second),
            false => (&second, &first),
        }
    };
    let lock = super::workers::lock_name(0);
    let faults = vec![
        fault("queued waiter SIGKILLed (direct handoff)", quiet, |_: &Fleet| {
            signal_newest_waiter(&lock, "-KILL", |_key: &str| roles().0.borrow().conn());
        }),
        fault(
            "queued waiter frozen 3 s (SIGSTOP, direct handoff)",
            quiet,
            |_: &Fleet| freeze_a_waiter(&lock, |_key: &str| roles().0.borrow().conn()),
        ),
        fault("master SIGKILLed (failover)", quiet, |_: &Fleet| {
            first.borrow_mut().kill()
        }),
        fault("old master back (as a replica)", quiet, |_: &Fleet| {
            named(second_port, true);
            first.borrow_mut().restart();
        }),
        fault(
            "master frozen 3 s with a release in flight (failover; it resumes undemoted)",
            quiet,
            |fleet: &Fleet| {
                // Once the old master has caught up as a replica; then the
                // moment a section ends, its release goes to the frozen master,
                // which runs it when it resumes, before it hears of the failover.
                std::thread::sleep(Duration::from_secs(2));
                let (master, _) = roles();
                fleet.wait_for_a_release(Duration::from_secs(5));
                master.borrow_mut().pause();
                std::thread::sleep(Duration::from_secs(3));
                master.borrow_mut().resume();
            },
        ),
        fault(
            "replica frozen 10 s (SIGSTOP, link kept)",
            quiet,
            |_: &Fleet| {
                // Once the resumed master is a replica again.
                std::thread::sleep(Duration::from_secs(8));
                let (_, replica) = roles();
                replica.borrow_mut().pause();
                std::thread::sleep(Duration::from_secs(10));
                replica.borrow_mut().resume();
            },
        ),
        fault(
            "replica cut off, a release unconfirmed, then the master SIGKILLed (failover to that replica)",
            quiet,
            |fleet: &Fleet| {
                // Once the frozen replica has caught up again: cut it off
                // (frozen, its link killed) so that no replica can confirm,
                // let a release go unconfirmed, then kill the master and let
                // the replica (resumed) be promoted. The release is kept by
                // its command and redone there (`wire/replicas/kept.rs`).
                std::thread::sleep(Duration::from_secs(8));
                let (master, replica) = roles();
                let replica_port = replica.borrow().port();
                replica.borrow_mut().pause();
                let mut conn = master.borrow().conn();
                let _: redis::RedisResult<redis::Value> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("replica")
                    .query(&mut conn);
                // The commands count replicas every second.
                std::thread::sleep(Duration::from_millis(1500));
                fleet.wait_for_a_release(Duration::from_secs(5));
                master.borrow_mut().kill();
                let killed = std::time::Instant::now();
                replica.borrow_mut().resume();
                named(replica_port, true);
                // The failover's own time, to read the row's blind time by.
                eprintln!(
                    "chaos: sentinel: the replica named master {:?} after the kill",
                    killed.elapsed()
                );
                // The old master back as a replica, for the faults after.
                for server in [&first, &second] {
                    if server.borrow().port() != replica_port {
                        server.borrow_mut().restart();
                    }
                }
            },
        ),
        fault(
            "new master frozen (SIGSTOP; failover back)",
            quiet,
            |_: &Fleet| {
                // Sentinel fails back only to a replica in sync: the old master,
                // restarted by the fault before, must first be made a replica
                // and finish its sync (a run that froze the master after a
                // fixed 2 s once got no failover at all, and 14 s blind).
                let (master, replica) = roles();
                let (master_port, deadline) = (
                    master.borrow().port(),
                    std::time::Instant::now() + Duration::from_secs(30),
                );
                let synced = format!("master_port:{master_port}");
                while std::time::Instant::now() < deadline {
                    // Not `info()`: a connection refused for a moment (Sentinel
                    // reconfiguring it) is a look again, not a panic.
                    let info: String = replica
                        .borrow()
                        .client()
                        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(1)))
                        .and_then(|mut conn| redis::cmd("INFO").arg("replication").query(&mut conn))
                        .unwrap_or_default();
                    if info.contains(&synced) && info.contains("master_link_status:up") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                std::thread::sleep(Duration::from_secs(2));
                frozen.set(master_port);
                master.borrow_mut().pause();
            },
        ),
        fault(
            "the frozen old master SIGKILLed (no replica left)",
            quiet,
            |_: &Fleet| {
                // Once the Sentinels moved away from it, it is the new master's
                // only replica.
                named(frozen.get(), false);
                for server in [&first, &second] {
                    if server.borrow().port() == frozen.get() {
                        server.borrow_mut().kill();
                    }
                }
            },
        ),
    ];
    let rows = run_with("sentinel", settings, connect, handoff(), faults);
    first.borrow_mut().resume();
    second.borrow_mut().resume();
    rows
}

/// Three masters with a replica each.
pub fn cluster(settings: &Settings) -> Vec<Row> {
    let cluster = RefCell::new(Cluster::start(3, 1));
    let mut connect = Vec::new();
    for seed in cluster.borrow().seeds() {
        connect.extend(["--cluster".to_string(), seed]);
    }
    let quiet = settings.quiet;
    let lock = super::workers::lock_name(0);
    let faults = vec![
        fault(
            "queued waiter SIGKILLed (direct handoff)",
            quiet,
            |_: &Fleet| {
                signal_newest_waiter(&lock, "-KILL", |key: &str| {
                    let cluster = cluster.borrow();
                    cluster.nodes[cluster.owner_of(key)].conn()
                });
            },
        ),
        fault(
            "queued waiter frozen 3 s (SIGSTOP, direct handoff)",
            quiet,
            |_: &Fleet| {
                freeze_a_waiter(&lock, |key: &str| {
                    let cluster = cluster.borrow();
                    cluster.nodes[cluster.owner_of(key)].conn()
                })
            },
        ),
        fault("manual failover (CLUSTER FAILOVER)", quiet, |_: &Fleet| {
            let cluster = cluster.borrow();
            let master = cluster.owner_of(&lock);
            if let Some(replica) = replica_of(&cluster, master) {
                let _: redis::RedisResult<()> = redis::cmd("CLUSTER")
                    .arg("FAILOVER")
                    .query(&mut cluster.nodes[replica].conn());
            }
        }),
        fault("slot of a held lock resharded", quiet, |_: &Fleet| {
            let cluster = cluster.borrow();
            cluster.wait_ok(Duration::from_secs(30));
            let from = cluster.owner_of(&lock);
            if let Some(to) = cluster.running_masters().into_iter().find(|m| *m != from) {
                cluster.move_slot_of(&lock, from, to);
            }
        }),
        fault(
            "master frozen 3 s with a release in flight (failover)",
            quiet,
            |fleet: &Fleet| {
                let owner = {
                    let cluster = cluster.borrow();
                    cluster.wait_ok(Duration::from_secs(30));
                    cluster.owner_of(&lock)
                };
                fleet.wait_for_a_release(Duration::from_secs(5));
                cluster.borrow_mut().nodes[owner].pause();
                std::thread::sleep(Duration::from_secs(3));
                cluster.borrow_mut().nodes[owner].resume();
                // The next fault kills the lock's master, whose replica is now
                // the resumed node: let it finish its sync first, or that shard
                // cannot fail over (a run once lost the shard for the rest).
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while std::time::Instant::now() < deadline {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut cluster.borrow().nodes[owner].conn())
                        .unwrap_or_default();
                    if info.contains("master_link_status:up") {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                cluster.borrow().wait_ok(Duration::from_secs(30));
            },
        ),
        fault("master SIGKILLed", quiet, |_: &Fleet| {
            let mut cluster = cluster.borrow_mut();
            cluster.wait_ok(Duration::from_secs(30));
            let master = cluster.owner_of(&lock);
            cluster.nodes[master].kill();
        }),
    ];
    run_with("cluster", settings, connect, handoff(), faults)
}

/// The Sentinel and Cluster fleets run with `--direct-handoff`: their waiters
/// are handed the lock through every fault, and one dies queued.
fn handoff() -> Vec<String> {
    vec!["--direct-handoff".into()]
}

/// Freezes (SIGSTOP) for 3 s the process of the newest place in `lock`'s
/// handoff queue: the releases ahead of it hand the lock on until its turn,
/// it is handed the lock (its subscription stays), which costs the others the
/// handoff's short lease; resumed, it finds that lease long gone and waits
/// again (its late message is not a grant: `actors/lock/handoff.rs`).
fn freeze_a_waiter(lock: &str, conn: impl Fn(&str) -> redis::Connection) {
    let Some(pid) = signal_newest_waiter(lock, "-STOP", conn) else {
        return;
    };
    std::thread::sleep(Duration::from_secs(3));
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid.to_string()])
        .status();
}

/// Sends `signal` to the process of the newest place in `lock`'s handoff
/// queue (a waiter behind the others, not one about to be handed the lock),
/// found within 5 s: its pid from the client registry, where `conn` reaches
/// the node serving a key. Answers the pid.
fn signal_newest_waiter(
    lock: &str,
    signal: &str,
    conn: impl Fn(&str) -> redis::Connection,
) -> Option<u32> {
    let places = format!("lockwarden_handoff_timeout:{{{lock}}}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let pid = loop {
        let newest: Vec<String> = redis::cmd("ZRANGE")
            .arg(&places)
            .arg(-1)
            .arg(-1)
            .query(&mut conn(&places))
            .unwrap_or_default();
        let client = newest
            .first()
            .and_then(|f| f.rsplit_once(':'))
            .map(|(c, _)| c);
        let entry = client.map(|c| format!("lockwarden:client:{{{c}}}"));
        let pid: Option<u32> = entry.and_then(|key| {
            redis::cmd("HGET")
                .arg(&key)
                .arg("pid")
                .query(&mut conn(&key))
                .ok()
        });
        if pid.is_some() || std::time::Instant::now() > deadline {
            break pid;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    match pid {
        Some(pid) => {
            let _ = std::process::Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
        None => eprintln!("chaos: no queued waiter to signal ({signal}) within 5 s"),
    }
    pid
}

/// Three independent servers, one lock on a majority of them.
pub fn redlock(settings: &Settings) -> Vec<Row> {
    let servers: Vec<RefCell<RedisServer>> =
        (0..3).map(|_| RefCell::new(RedisServer::start())).collect();
    let mut connect = Vec::new();
    for s in &servers {
        connect.extend(["--redis".to_string(), s.borrow().url()]);
    }
    let quiet = settings.quiet;
    let faults = vec![
        fault("one server SIGKILLed", quiet, |_: &Fleet| {
            servers[0].borrow_mut().kill()
        }),
        fault("another server frozen 3 s (SIGSTOP)", quiet, |_: &Fleet| {
            servers[1].borrow_mut().pause();
            std::thread::sleep(Duration::from_secs(3));
            servers[1].borrow_mut().resume();
        }),
        fault("the killed server back, data lost", quiet, |_: &Fleet| {
            servers[0].borrow_mut().restart()
        }),
        // All three up: the fleet goes on with the other two while the
        // acquisitions sent to the frozen one wait in its socket, and run when
        // it resumes, for processes that went on or exited (issue 37). Each is
        // followed by its give-back; left without one, they held the lock there
        // for a whole lease.
        fault(
            "third server frozen 5 s, all up (queued grants land on resume)",
            quiet,
            |_: &Fleet| {
                servers[2].borrow_mut().pause();
                std::thread::sleep(Duration::from_secs(5));
                servers[2].borrow_mut().resume();
            },
        ),
        // Within the lease of anything the resume left behind: a majority now
        // needs the third server, so a hold left there shows as blind time.
        fault(
            "first server SIGKILLed after that resume",
            quiet,
            |_: &Fleet| servers[0].borrow_mut().kill(),
        ),
    ];
    run_with(
        "redlock",
        settings,
        connect,
        vec!["--redlock".into()],
        faults,
    )
}

/// The node that replicates `master` (indexes into `nodes`), from its INFO.
fn replica_of(cluster: &Cluster, master: usize) -> Option<usize> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut cluster.nodes[master].conn())
        .ok()?;
    let port: u16 = info
        .lines()
        .find(|l| l.starts_with("slave0:"))?
        .split(',')
        .find_map(|kv| kv.strip_prefix("port="))?
        .parse()
        .ok()?;
    cluster.nodes.iter().position(|n| n.port() == port)
}
