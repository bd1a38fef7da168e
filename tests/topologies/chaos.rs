//! A short run of the chaos suite's harness (`benches/chaos/`, `cargo bench --bench
//! chaos` for the whole suite) in `cargo test`: real `lockwarden run` processes loop
//! over critical sections on two locks of one server behind the TCP proxy while a
//! holder is SIGKILLed, the link is blackholed and the server restarts without its
//! data; the history must show no overlap with an unordered token, no loss left
//! untold, no token going backwards and no stuck waiter, and each lock must be
//! taken again soon after each fault.
#![cfg(feature = "cli")]

use crate::support;

#[path = "../../benches/chaos/history.rs"]
#[allow(dead_code)]
mod history;
#[path = "../../benches/chaos/workers.rs"]
#[allow(dead_code)]
mod workers;

use std::time::Duration;

use support::{Mode, Proxy, RedisServer};
use workers::{now_ns, Fleet, Plan};

#[test]
fn a_fleet_survives_a_crashed_holder_a_cut_link_and_a_restart() {
    let _heavy = support::heavy();
    let mut server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let dir = tempfile::tempdir().expect("temp dir");
    let lease = Duration::from_secs(3);
    let plan = Plan {
        bin: env!("CARGO_BIN_EXE_lockwarden").to_string(),
        connect: vec!["--redis".into(), proxy.url()],
        run_flags: Vec::new(),
        workers: 4,
        locks: 2,
        wait: Duration::from_secs(20),
        lease,
        section: Duration::from_millis(50),
        dir: dir.path().to_path_buf(),
        logs: None,
    };
    let fleet = Fleet::start(&plan);
    let pause = |d: u64| std::thread::sleep(Duration::from_secs(d));
    let mut marks = vec![("warm-up", now_ns(), Duration::from_secs(2))];
    pause(2);

    marks.push(("holder SIGKILLed", now_ns(), lease + Duration::from_secs(2)));
    let killed = fleet.kill_a_holder(Duration::from_secs(5));
    pause(5);
    marks.push(("link blackholed 2 s", now_ns(), Duration::from_secs(5)));
    proxy.set(Mode::Blackhole);
    pause(2);
    proxy.set(Mode::Pass);
    pause(3);
    marks.push((
        "server restarted, data lost",
        now_ns(),
        Duration::from_secs(5),
    ));
    server.restart();
    pause(4);
    let end = now_ns();

    let runs = fleet.stop(plan.wait + lease + Duration::from_secs(10));
    for (i, (fault, at, blind_bound)) in marks.iter().enumerate() {
        let to = marks.get(i + 1).map_or(end, |m| m.1);
        let v = history::judge(
            &runs,
            plan.locks,
            *at,
            to,
            plan.wait,
            lease + Duration::from_secs(10),
        );
        eprintln!("{fault}: {v:?}");
        assert!(v.safe(), "{fault}: {v:?}\n{}", server.log());
        // Generous: the machine may be busy with other tests.
        assert!(
            Duration::from_millis(v.blind_ms) <= *blind_bound + Duration::from_secs(5),
            "{fault}: blind for {} ms: {v:?}",
            v.blind_ms
        );
    }
    // Locks are taken again once the faults are over.
    let last = history::judge(&runs, plan.locks, marks[3].1, end, plan.wait, lease);
    assert!(
        last.holds > 0,
        "no lock was taken after the restart: {last:?}"
    );
    assert!(killed, "no holder was inside its section within 5 s");
}
