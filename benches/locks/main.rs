//! `cargo bench --bench locks`: lockwarden against the same Lua scripts sent raw,
//! rslock (default and tuned retry) and a naive SET NX poller, on a redis-server
//! this binary starts for itself (never the one on 6379).
//!
//! The run is a grid of cells: a scenario, a parameter (holders C, waiters W and
//! clients m, locks K), an implementation. Every round visits every cell once, and
//! within a cell's parameter the implementations take turns (A B C D E, then
//! B C D E A in the next round), so that a machine that gets busier over time
//! penalises nobody in particular. Rounds are merged per cell, the tables and
//! `JSON` lines are printed at the end, then the targets, then the chart.
//! Scenarios: A uncontended (`uncontended.rs`), B contended (`contended.rs`),
//! C many held locks (`many.rs`), R contended RedLock over three servers (scenario
//! B's loop with RedLock clients, on servers of its own), P a fleet (scenario B's
//! loop with every client a process of its own, `fleet.rs`), K scenarios A and B
//! once more on a three-master Redis Cluster (`lockwarden-cluster` rows), Y A's and
//! B's loops on a master with one replica, replica confirmation on against off
//! (`lockwarden-nosync`), and A's once more with the replica a network hop
//! away (its link behind a delaying proxy), S semaphores of each kind taken and
//! given back by 16 callers (`semaphores.rs`, opt-in); settings in
//! `settings.rs`; how to read the output in `docs/performance.md`.

use lockwarden_testkit as support;

mod chart;
mod clients;
mod contended;
mod direct;
mod fleet;
mod many;
mod probe;
mod replicated;
mod report;
mod semaphores;
mod settings;
mod stats;
mod targets;
mod uncontended;

use std::time::Instant;

use clients::Impl;
use report::Results;
use settings::{Machine, Settings};

fn main() {
    // The many-locks scenario re-runs this binary as a child for a clean RSS.
    // So does the fleet scenario, once per member process.
    match std::env::var("LOCKWARDEN_BENCH_CHILD").as_deref() {
        Ok("many") => return many::child_main(),
        Ok("fleet") => return fleet::child_main(),
        _ => {}
    }
    // `cargo bench` passes `--bench` (and any filter); with harness = false there is
    // nothing to filter: scenarios and implementations are chosen by environment.
    let settings = Settings::from_env();
    let machine = Machine::detect();
    let server = support::RedisServer::start();
    let url = server.url();
    let redis_version = probe::redis_version(&url);
    eprintln!(
        "lockwarden bench: redis {redis_version} on port {}; scenarios {:?}; about {:.0} s",
        server.port(),
        settings.scenarios.iter().collect::<String>(),
        settings.estimate().as_secs_f64()
    );

    // Scenario R's independent servers, only when it runs.
    let nodes: Vec<support::RedisServer> = if settings.scenarios.contains(&'R') {
        (0..settings::REDLOCK_NODES)
            .map(|_| support::RedisServer::start())
            .collect()
    } else {
        Vec::new()
    };
    let node_urls = nodes
        .iter()
        .map(support::RedisServer::url)
        .collect::<Vec<_>>()
        .join(",");
    // Scenario K's cluster, only when it runs (it takes a few seconds to form).
    let cluster = (settings.scenarios.contains(&'K') && settings.impls.contains(&Impl::Lockwarden))
        .then(|| support::Cluster::start(3, 0));
    let cluster_url = cluster.as_ref().map(|c| c.seeds().join(","));
    // Scenario Y's master and its one replica, only when it runs: the other
    // scenarios keep a server without replicas, where no WAIT is ever sent.
    let replicated = settings.scenarios.contains(&'Y').then(|| {
        let master = support::RedisServer::start();
        let replica = support::RedisServer::start_replica_of(&master);
        (master, replica)
    });
    let replicated_url = replicated.as_ref().map(|(m, _)| m.url());
    // And a second master whose replica is a network hop away: its replication
    // link goes through a proxy that delays every byte each way (the delay set
    // once the first sync is done, which it would only slow down).
    let far = replicated
        .is_some()
        .then_some(settings.replica_delay)
        .flatten()
        .map(|delay| {
            let master = support::RedisServer::start();
            let link = support::Proxy::start(master.port());
            let replica = support::RedisServer::start_replica_through(&master, link.port());
            link.set(support::Mode::Delay(delay));
            // What such a link adds to a round trip, measured with PINGs
            // through a proxy of its own set alike.
            let beside = support::Proxy::start(master.port());
            beside.set(support::Mode::Delay(delay));
            let added =
                probe::round_trip(&beside.url()).saturating_sub(probe::round_trip(&master.url()));
            (master, link, replica, (delay, added))
        });
    let far_url = far.as_ref().map(|(m, _, _, _)| m.url());
    let far_link = far.as_ref().map(|(_, _, _, link)| *link);
    let started = Instant::now();
    let mut results = Results::default();
    let mut s_rows = Vec::new();
    for round in 0..settings.rounds {
        let mut order = settings.impls.clone();
        if !order.is_empty() {
            let turn = round % order.len();
            order.rotate_left(turn);
        }
        let progress = |what: String| {
            eprintln!(
                "[{:>5.1}s round {}/{}] {what}",
                started.elapsed().as_secs_f64(),
                round + 1,
                settings.rounds
            );
        };
        // A's and B's cells: the implementations on the standalone server, then
        // (scenario K) lockwarden on the cluster.
        let on = |scenario: char| -> Vec<(Impl, &str)> {
            let mut runs: Vec<(Impl, &str)> = Vec::new();
            if settings.scenarios.contains(&scenario) {
                runs.extend(order.iter().map(|&which| (which, url.as_str())));
            }
            if let Some(curl) = &cluster_url {
                runs.push((Impl::LockwardenCluster, curl.as_str()));
            }
            runs
        };
        let a_runs = on('A');
        for &c in settings.holders().iter().filter(|_| !a_runs.is_empty()) {
            for &(which, at) in &a_runs {
                probe::flush(at);
                let tag = format!("r{round}-c{c}-{}", which.name());
                let cell = uncontended::run(which, at, c, settings.cell, &tag);
                progress(format!(
                    "A C={c} {}: {:.0} pairs/s",
                    which.name(),
                    cell.pairs as f64 / cell.elapsed.as_secs_f64()
                ));
                results.a.entry((c, which)).or_default().add(cell);
            }
        }
        let b_runs = on('B');
        for &w in settings.waiters().iter().filter(|_| !b_runs.is_empty()) {
            for &m in settings.layouts() {
                for &(which, at) in &b_runs {
                    probe::flush(at);
                    let shape = contended::Shape {
                        waiters: w,
                        clients: m,
                        hold: settings.hold,
                        pause: settings.pause,
                    };
                    let tag = format!("r{round}-w{w}-m{m}-{}", which.name());
                    let cell = contended::run(which, at, shape, settings.cell, &tag);
                    let p50 = cell.handoff.summary().map_or(f64::NAN, |s| s.p50_us);
                    progress(format!(
                        "B W={w} m={m} {}: {} acquisitions, handoff p50 {p50:.0} us",
                        which.name(),
                        cell.acquisitions
                    ));
                    results.b.entry((w, m, which)).or_default().add(cell);
                }
            }
        }
        if settings.scenarios.contains(&'P') {
            let mut fleets = settings.fleets();
            if !fleets.is_empty() {
                let turn = round % fleets.len();
                fleets.rotate_left(turn);
            }
            for fleet in fleets {
                probe::flush(&url);
                let shape = contended::Shape {
                    waiters: fleet.waiters,
                    clients: fleet.procs,
                    hold: settings.hold,
                    pause: settings.pause,
                };
                let tag = format!(
                    "r{round}-w{}-p{}-{}",
                    fleet.waiters,
                    fleet.procs,
                    fleet.label()
                );
                let cell = fleet::run(fleet, &url, shape, settings.cell, &tag);
                progress(format!(
                    "P W={} processes={} {}: {} acquisitions, fairness {}",
                    fleet.waiters,
                    fleet.procs,
                    fleet.label(),
                    cell.acquisitions,
                    contended::fairness(&cell.per_waiter)
                        .map_or("starved".into(), |f| format!("{f:.2}"))
                ));
                results.p.entry(fleet).or_default().add(cell);
            }
        }
        if settings.scenarios.contains(&'R') {
            let mut order = Impl::REDLOCK.to_vec();
            order.rotate_left(round % Impl::REDLOCK.len());
            for &w in settings.redlock_waiters() {
                for &which in &order {
                    probe::flush(&node_urls);
                    let shape = contended::Shape {
                        waiters: w,
                        clients: w,
                        hold: settings.hold,
                        pause: settings.pause,
                    };
                    let tag = format!("r{round}-w{w}-{}", which.name());
                    let cell = contended::run(which, &node_urls, shape, settings.cell, &tag);
                    let p50 = cell.handoff.summary().map_or(f64::NAN, |s| s.p50_us);
                    progress(format!(
                        "R W={w} {}: {} acquisitions, handoff p50 {p50:.0} us",
                        which.name(),
                        cell.acquisitions
                    ));
                    results.r.entry((w, which)).or_default().add(cell);
                }
            }
        }
        if let Some(at) = &replicated_url {
            let mut order = Impl::REPLICATED.to_vec();
            order.rotate_left(round % Impl::REPLICATED.len());
            for &c in settings.replicated_holders() {
                for &which in &order {
                    probe::flush(at);
                    let tag = format!("r{round}-y-c{c}-{}", which.name());
                    let cell = uncontended::run(which, at, c, settings.cell, &tag);
                    progress(format!(
                        "Y C={c} {}: {:.0} pairs/s, {} WAITs",
                        which.name(),
                        cell.pairs as f64 / cell.elapsed.as_secs_f64(),
                        cell.redis.waits
                    ));
                    results.y_a.entry((c, which)).or_default().add(cell);
                }
            }
            for &c in settings
                .replicated_holders()
                .iter()
                .filter(|_| far_url.is_some())
            {
                let at = far_url.as_deref().unwrap_or_default();
                let mut order = Impl::FAR.to_vec();
                order.rotate_left(round % Impl::FAR.len());
                for &which in &order {
                    probe::flush(at);
                    let tag = format!("r{round}-yfar-c{c}-{}", which.name());
                    let cell = uncontended::run(which, at, c, settings.cell, &tag);
                    progress(format!(
                        "Y far C={c} {}: {:.0} pairs/s, {} WAITs",
                        which.name(),
                        cell.pairs as f64 / cell.elapsed.as_secs_f64(),
                        cell.redis.waits
                    ));
                    results.y_far.entry((c, which)).or_default().add(cell);
                }
            }
            for &w in settings.replicated_waiters() {
                for &which in &order {
                    probe::flush(at);
                    let shape = contended::Shape {
                        waiters: w,
                        clients: settings::Y_MANAGERS,
                        hold: settings.hold,
                        pause: settings.pause,
                    };
                    let tag = format!("r{round}-y-w{w}-{}", which.name());
                    let cell = contended::run(which, at, shape, settings.cell, &tag);
                    progress(format!(
                        "Y W={w} {}: {} acquisitions, {} WAITs",
                        which.name(),
                        cell.acquisitions,
                        cell.redis.waits
                    ));
                    results.y_b.entry((w, which)).or_default().add(cell);
                }
            }
        }
        if settings.scenarios.contains(&'S') {
            probe::flush(&url);
            let rows = semaphores::run(&url, 16, settings.cell);
            for r in &rows {
                progress(format!(
                    "S C={} permits={} {}: {:.0} pairs/s",
                    r.callers, r.permits, r.kind, r.per_sec
                ));
            }
            s_rows.extend(rows);
        }
        if settings.scenarios.contains(&'C') {
            for &k in &settings.lock_counts {
                probe::flush(&url);
                let cell = many::run(&url, k, settings.many_lease, settings.many_window);
                progress(format!(
                    "C K={k} {}: acquired in {:.2} s, redis cpu {:.1}%",
                    Impl::Lockwarden.name(),
                    cell.acquire_secs,
                    cell.redis_cpu_pct
                ));
                results.c.entry(k).or_default().rounds.push(cell);
            }
            if let (true, Some(&k)) = (settings.many_at_default, settings.lock_counts.iter().max())
            {
                probe::flush(&url);
                let (lease, period) = (settings::DEFAULT_LEASE, settings::DEFAULT_PERIOD);
                let cell = many::run(&url, k, lease, period);
                progress(format!(
                    "C K={k} at the default lease {}: redis cpu {:.1}%",
                    Impl::Lockwarden.name(),
                    cell.redis_cpu_pct
                ));
                results.c_default.push(cell);
            }
        }
    }

    if let Some(cluster) = &cluster {
        results.k_slots = Some(report::SlotPurity {
            script_calls: cluster.calls("evalsha") + cluster.calls("eval"),
            crossslot: cluster
                .nodes
                .iter()
                .map(|n| {
                    n.info("errorstats")
                        .lines()
                        .find_map(|l| l.strip_prefix("errorstat_CROSSSLOT:count="))
                        .and_then(|c| c.trim().parse::<u64>().ok())
                        .unwrap_or(0)
                })
                .sum(),
        });
    }
    report::header(&machine, &redis_version, &settings);
    report::uncontended(&results);
    report::contended(&results);
    report::many(&results, &settings);
    report::fleet(&results);
    report::slot_purity(&results);
    report::redlock(&results);
    semaphores::table(&s_rows);
    replicated::table(&results, far_link);
    targets::check(&results, &settings);
    if !results.b.is_empty() {
        match chart::draw(&results, &settings, &settings.chart) {
            Ok(()) => println!("\nchart: {}", settings.chart),
            Err(e) => println!("\nchart skipped: {e}"),
        }
    }
    println!(
        "\ntotal {:.0} s; load average at end {}",
        started.elapsed().as_secs_f64(),
        stats::load_average()
    );
}
