//! Scenario Y's table: A's and B's loops on a master with one replica, and A's
//! once more with the replica a network hop away, each lockwarden setting
//! against `lockwarden-nosync` and against `redisson-layout` (Redisson's way:
//! a `WAIT` behind every call, on a pool of 64 connections) in the same run,
//! with the acknowledgement bound beside the far rows (docs/performance.md,
//! section Y).
//! Apart from `report.rs` because it reads three result maps of its own and the
//! far replica's link.

use std::time::Duration;

use serde_json::json;

use crate::clients::Impl;
use crate::report::{json_line, ratio, Results, Table};
use crate::settings::Y_MANAGERS;
use crate::stats::fmt_opt;

/// Scenario Y's table and JSON lines: A's and B's loops on a master with one
/// replica, each lockwarden setting against `lockwarden-nosync` in the same run.
/// `far` is the far replica's link: the delay set each way, and what it was
/// measured to add to a round trip.
pub fn table(results: &Results, far: Option<(Duration, Duration)>) {
    if results.y_a.is_empty() && results.y_b.is_empty() {
        return;
    }
    let (far_us, far_rtt_us) = far.map_or((0, 0), |(d, r)| (d.as_micros(), r.as_micros()));
    println!("\n## Y. replicated: confirmation on vs off (a master with one replica)");
    if far.is_some() {
        println!(
            "far rows: the replica's link delayed {far_us} us each way, measured to add \
             {:.2} ms to a round trip",
            far_rtt_us as f64 / 1000.0
        );
    }
    let mut t = Table::new(vec![
        "loop",
        "impl",
        "per s",
        "vs nosync",
        "vs redisson",
        "vs ack bound",
        "rounds per s",
        "acq p50",
        "acq p99",
        "WAITs/acq",
        "reqs/acq",
        "cmds/acq",
        "redis cpu",
    ]);
    let near = results.y_a.iter().map(|(k, m)| (k, m, false));
    let far_rows = results.y_far.iter().map(|(k, m)| (k, m, true));
    for (&(c, which), m, is_far) in near.chain(far_rows) {
        let cells = if is_far { &results.y_far } else { &results.y_a };
        let off = cells.get(&(c, Impl::LockwardenNoSync)).map(|r| r.rate());
        let redisson = cells.get(&(c, Impl::RedissonLayout)).map(|r| r.rate());
        // A closed loop of C holders pays two acknowledgements per pair: at
        // best C / (the pair's own time, unconfirmed, + 2 of the replica's
        // added round trips).
        let bound = off.filter(|_| is_far).map(|o| {
            let pair = c as f64 / o.max(1e-9);
            c as f64 / (pair + 2.0 * far_rtt_us as f64 / 1e6)
        });
        let label = match is_far {
            true => format!("A C={c} far (pairs)"),
            false => format!("A C={c} (pairs)"),
        };
        let s = m.acquire.summary();
        let rounds: Vec<String> = m.per_round.iter().map(|r| format!("{r:.0}")).collect();
        t.row(vec![
            label,
            which.name().into(),
            format!("{:.0}", m.rate()),
            ratio(Some(m.rate()), off),
            ratio(Some(m.rate()), redisson),
            ratio(Some(m.rate()), bound),
            rounds.join("/"),
            fmt_opt(s.map(|s| s.p50_us)),
            fmt_opt(s.map(|s| s.p99_us)),
            format!("{:.3}", m.per_pair(m.waits)),
            format!("{:.3}", m.per_pair(m.top_level)),
            format!("{:.2}", m.per_pair(m.commands)),
            format!("{:.0}%", m.cpu_percent()),
        ]);
        json_line(json!({
            "scenario": "Y",
            "loop": "A",
            "holders": c,
            "replica_delay_us_each_way": if is_far { far_us } else { 0 },
            "replica_added_rtt_us": if is_far { far_rtt_us } else { 0 },
            "impl": which.name(),
            "pairs_per_sec": m.rate(),
            "pairs_per_sec_rounds": m.per_round,
            "vs_nosync": off.map(|o| m.rate() / o.max(1e-9)),
            "vs_redisson_layout": redisson.map(|o| m.rate() / o.max(1e-9)),
            "ack_bound_pairs_per_sec": bound,
            "acquire_p50_us": s.map(|s| s.p50_us),
            "acquire_p99_us": s.map(|s| s.p99_us),
            "waits_per_acquisition": m.per_pair(m.waits),
            "requests_per_pair": m.per_pair(m.top_level),
            "commands_per_pair": m.per_pair(m.commands),
            "redis_cpu_pct": m.cpu_percent(),
        }));
    }
    for (&(w, which), r) in &results.y_b {
        let off = results
            .y_b
            .get(&(w, Impl::LockwardenNoSync))
            .map(|r| r.rate());
        let redisson = results
            .y_b
            .get(&(w, Impl::RedissonLayout))
            .map(|r| r.rate());
        let s = r.handoff.summary();
        let rounds: Vec<String> = r.per_round.iter().map(|v| format!("{v:.0}")).collect();
        let waits = r.waits as f64 / r.acquisitions.max(1) as f64;
        t.row(vec![
            format!("B W={w} m={Y_MANAGERS} (acq)"),
            which.name().into(),
            format!("{:.0}", r.rate()),
            ratio(Some(r.rate()), off),
            ratio(Some(r.rate()), redisson),
            "-".into(),
            rounds.join("/"),
            fmt_opt(s.map(|s| s.p50_us)),
            fmt_opt(s.map(|s| s.p99_us)),
            format!("{waits:.3}"),
            format!("{:.3}", r.requests_per_acquisition()),
            format!("{:.2}", r.commands_per_acquisition()),
            format!("{:.0}%", r.cpu_percent()),
        ]);
        json_line(json!({
            "scenario": "Y",
            "loop": "B",
            "waiters": w,
            "clients": Y_MANAGERS,
            "impl": which.name(),
            "acquisitions_per_sec": r.rate(),
            "acquisitions_per_sec_rounds": r.per_round,
            "vs_nosync": off.map(|o| r.rate() / o.max(1e-9)),
            "vs_redisson_layout": redisson.map(|o| r.rate() / o.max(1e-9)),
            "handoff_p50_us": s.map(|s| s.p50_us),
            "handoff_p99_us": s.map(|s| s.p99_us),
            "waits_per_acquisition": waits,
            "requests_per_acquisition": r.requests_per_acquisition(),
            "commands_per_acquisition": r.commands_per_acquisition(),
            "redis_cpu_pct": r.cpu_percent(),
        }));
    }
    t.print(2);
}
