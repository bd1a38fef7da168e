//! Everything the run prints on stdout: a header naming the machine, one table per
//! scenario, and one `JSON {...}` line per table row, so that results can be
//! grepped (`cargo bench --bench locks | grep '^JSON ' | cut -c6-`).
//!
//! Progress goes to stderr while cells run; only finished results come here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::clients::Impl;
use crate::fleet::Fleet;
use crate::settings::{Machine, Settings};
use crate::stats::{fmt_opt, fmt_us};
use crate::{contended, many, uncontended};

/// All merged results of a run.
#[derive(Debug, Default)]
pub struct Results {
    /// Scenario A by (holders, implementation).
    pub a: BTreeMap<(usize, Impl), uncontended::Merged>,
    /// Scenario B by (waiters, clients, implementation).
    pub b: BTreeMap<(usize, usize, Impl), contended::Merged>,
    /// Scenario C by lock count.
    pub c: BTreeMap<usize, many::Merged>,
    /// Scenario C's largest K at the default lease, one cell per round.
    pub c_default: Vec<many::Cell>,
    /// Scenario R by (waiters, implementation).
    pub r: BTreeMap<(usize, Impl), contended::Merged>,
    /// Scenario P by fleet.
    pub p: BTreeMap<Fleet, contended::Merged>,
    /// Scenario Y's uncontended loop by (holders, implementation).
    pub y_a: BTreeMap<(usize, Impl), uncontended::Merged>,
    /// Scenario Y's contended loop (one manager) by (waiters, implementation).
    pub y_b: BTreeMap<(usize, Impl), contended::Merged>,
    /// Scenario Y's uncontended loop on the master whose replica is far, by
    /// (holders, implementation).
    pub y_far: BTreeMap<(usize, Impl), uncontended::Merged>,
    /// Scenario K: whether every script call kept to one slot.
    pub k_slots: Option<SlotPurity>,
}

/// Script calls on the cluster over the whole run, and how many Redis refused
/// for spanning slots.
#[derive(Debug, Clone, Copy)]
pub struct SlotPurity {
    /// EVALSHA and EVAL calls summed over the nodes.
    pub script_calls: u64,
    /// `errorstat_CROSSSLOT` summed over the nodes.
    pub crossslot: u64,
}

impl SlotPurity {
    /// The share of script calls that kept to one slot, in percent.
    pub fn pure_percent(&self) -> f64 {
        100.0 * (1.0 - self.crossslot as f64 / self.script_calls.max(1) as f64)
    }
}

/// Scenario K's slot check: one line and a JSON line.
pub fn slot_purity(results: &Results) {
    let Some(k) = results.k_slots else {
        return;
    };
    println!(
        "\n## K. cluster: {} script calls over the run, {} CROSSSLOT errors: {:.3}% slot-pure",
        k.script_calls,
        k.crossslot,
        k.pure_percent()
    );
    json_line(json!({
        "scenario": "K",
        "script_calls": k.script_calls,
        "crossslot_errors": k.crossslot,
        "slot_pure_pct": k.pure_percent(),
    }));
}

/// The foreign processes' share of a fleet's acquisitions over their share of
/// its waiters (1.0: exactly in proportion), or `None` without foreign ones.
pub fn foreign_share(fleet: &Fleet, r: &contended::Merged) -> Option<f64> {
    let foreign = fleet.foreign_waiters();
    if foreign == 0 || r.acquisitions == 0 {
        return None;
    }
    let theirs: u64 = r.per_waiter.iter().rev().take(foreign).sum();
    let share = theirs as f64 / r.acquisitions as f64;
    Some(share / (foreign as f64 / fleet.waiters as f64))
}

/// A plain text table with columns sized to their content.
pub struct Table {
    /// Column headings.
    head: Vec<&'static str>,
    /// Rows of cells.
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headings.
    pub fn new(head: Vec<&'static str>) -> Table {
        Table {
            head,
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Prints it: text columns left-aligned, the rest right-aligned.
    pub fn print(&self, text_columns: usize) {
        let mut width: Vec<usize> = self.head.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |cells: Vec<&str>| {
            let parts: Vec<String> = cells
                .iter()
                .zip(&width)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i < text_columns {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect();
            println!("| {} |", parts.join(" | "));
        };
        line(self.head.clone());
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        println!("|-{}-|", rule.join("-|-"));
        for row in &self.rows {
            line(row.iter().map(String::as_str).collect());
        }
    }
}

/// Prints one `JSON {...}` line.
pub fn json_line(v: Value) {
    println!("JSON {v}");
}

/// The header: machine, Redis, settings.
pub fn header(machine: &Machine, redis: &str, settings: &Settings) {
    println!();
    println!("# lockwarden benchmark (cargo bench --bench locks)");
    println!(
        "machine: {} CPUs, {}; load average at start {}",
        machine.cpus, machine.cpu_model, machine.load_before
    );
    println!(
        "redis: {redis} (own server on 127.0.0.1, persistence off); cell {:.2} s x {} rounds; \
         hold {} us, pause {} us; many-locks lease {} ms, window {:.1} s",
        settings.cell.as_secs_f64(),
        settings.rounds,
        settings.hold.as_micros(),
        settings.pause.as_micros(),
        settings.many_lease.as_millis(),
        settings.many_window.as_secs_f64()
    );
    json_line(json!({
        "scenario": "machine",
        "cpus": machine.cpus,
        "cpu_model": machine.cpu_model,
        "load_before": machine.load_before,
        "load_after": crate::stats::load_average(),
        "redis_version": redis,
        "cell_secs": settings.cell.as_secs_f64(),
        "rounds": settings.rounds,
        "hold_us": settings.hold.as_micros() as u64,
        "pause_us": settings.pause.as_micros() as u64,
        "many_lease_ms": settings.many_lease.as_millis() as u64,
        "many_window_secs": settings.many_window.as_secs_f64(),
    }));
}

/// Ratio `a / b` as `1.23x`, or `-`.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

/// Scenario A's table and JSON lines.
pub fn uncontended(results: &Results) {
    if results.a.is_empty() {
        return;
    }
    println!("\n## A. uncontended: C holders, each on its own key (one client)");
    let mut t = Table::new(vec![
        "C",
        "impl",
        "pairs/s",
        "vs raw",
        "rounds pairs/s",
        "acq p50",
        "acq p99",
        "cmds/pair",
        "reqs/pair",
        "redis cpu",
        "redis us/pair",
        "client us/pair",
    ]);
    for (&(c, which), m) in &results.a {
        let raw = results.a.get(&(c, Impl::Raw)).map(|r| r.rate());
        let s = m.acquire.summary();
        let rounds: Vec<String> = m.per_round.iter().map(|r| format!("{r:.0}")).collect();
        t.row(vec![
            c.to_string(),
            which.name().into(),
            format!("{:.0}", m.rate()),
            ratio(Some(m.rate()), raw),
            rounds.join("/"),
            fmt_opt(s.map(|s| s.p50_us)),
            fmt_opt(s.map(|s| s.p99_us)),
            format!("{:.2}", m.per_pair(m.commands)),
            format!("{:.3}", m.per_pair(m.top_level)),
            format!("{:.0}%", m.cpu_percent()),
            format!("{:.1}", m.redis_us_per_pair()),
            format!("{:.1}", m.client_us_per_pair()),
        ]);
        json_line(json!({
            "scenario": "A",
            "holders": c,
            "impl": which.name(),
            "pairs_per_sec": m.rate(),
            "pairs_per_sec_rounds": m.per_round,
            "pairs": m.pairs,
            "acquire_p50_us": s.map(|s| s.p50_us),
            "acquire_p99_us": s.map(|s| s.p99_us),
            "acquire_max_us": s.map(|s| s.max_us),
            "commands_per_pair": m.per_pair(m.commands),
            "requests_per_pair": m.per_pair(m.top_level),
            "redis_cpu_pct": m.cpu_percent(),
            "redis_cpu_us_per_pair": m.redis_us_per_pair(),
            "client_cpu_us_per_pair": m.client_us_per_pair(),
        }));
    }
    t.print(2);
}

/// Scenario B's table and JSON lines.
pub fn contended(results: &Results) {
    if results.b.is_empty() {
        return;
    }
    println!("\n## B. contended: W waiters on one key, spread over m clients");
    let mut t = Table::new(vec![
        "W",
        "m",
        "impl",
        "acq/s",
        "of ceiling",
        "mean hold",
        "handoff p50",
        "handoff p99",
        "samples",
        "p50 vs raw",
        "fairness",
        "cmds/acq",
        "reqs/acq",
        "redis cpu",
    ]);
    for (&(w, m, which), r) in &results.b {
        let s = r.handoff.summary();
        let raw = results
            .b
            .get(&(w, m, Impl::Raw))
            .and_then(|raw| raw.handoff.summary())
            .map(|s| s.p50_us);
        t.row(vec![
            w.to_string(),
            m.to_string(),
            which.name().into(),
            format!("{:.0}", r.rate()),
            format!("{:.2}", r.ceiling_ratio()),
            fmt_us(r.mean_hold().as_secs_f64() * 1e6),
            fmt_opt(s.map(|s| s.p50_us)),
            fmt_opt(s.map(|s| s.p99_us)),
            r.handoff.len().to_string(),
            ratio(s.map(|s| s.p50_us), raw),
            r.fairness().map_or("starved".into(), |f| format!("{f:.2}")),
            format!("{:.2}", r.commands_per_acquisition()),
            format!("{:.2}", r.requests_per_acquisition()),
            format!("{:.0}%", r.cpu_percent()),
        ]);
        json_line(json!({
            "scenario": "B",
            "waiters": w,
            "clients": m,
            "impl": which.name(),
            "acquisitions_per_sec": r.rate(),
            "acquisitions_per_sec_rounds": r.per_round,
            "acquisitions": r.acquisitions,
            "ceiling_ratio": r.ceiling_ratio(),
            "mean_hold_us": r.mean_hold().as_secs_f64() * 1e6,
            "handoff_p50_us": s.map(|s| s.p50_us),
            "handoff_p99_us": s.map(|s| s.p99_us),
            "handoff_max_us": s.map(|s| s.max_us),
            "handoff_samples": r.handoff.len(),
            "free_acquisitions": r.free,
            "fairness_max_over_min": r.fairness(),
            "per_waiter": r.per_waiter,
            "commands_per_acquisition": r.commands_per_acquisition(),
            "requests_per_acquisition": r.requests_per_acquisition(),
            "redis_cpu_pct": r.cpu_percent(),
        }));
    }
    t.print(3);
}

/// Scenario P's table and JSON lines: every client a process of its own.
pub fn fleet(results: &Results) {
    if results.p.is_empty() {
        return;
    }
    println!("\n## P. a fleet: W waiters on one key, spread over separate processes");
    let mut t = Table::new(vec![
        "W",
        "procs",
        "impl",
        "acq/s",
        "of ceiling",
        "handoff p50",
        "handoff p99",
        "fairness",
        "foreign share",
        "cmds/acq",
        "reqs/acq",
        "redis cpu",
    ]);
    for (fleet, r) in &results.p {
        let s = r.handoff.summary();
        let share = foreign_share(fleet, r);
        t.row(vec![
            fleet.waiters.to_string(),
            fleet.procs.to_string(),
            fleet.label(),
            format!("{:.0}", r.rate()),
            format!("{:.2}", r.ceiling_ratio()),
            fmt_opt(s.map(|s| s.p50_us)),
            fmt_opt(s.map(|s| s.p99_us)),
            r.fairness().map_or("starved".into(), |f| format!("{f:.2}")),
            share.map_or("-".into(), |v| format!("{v:.2}x")),
            format!("{:.2}", r.commands_per_acquisition()),
            format!("{:.2}", r.requests_per_acquisition()),
            format!("{:.0}%", r.cpu_percent()),
        ]);
        json_line(json!({
            "scenario": "P",
            "waiters": fleet.waiters,
            "processes": fleet.procs,
            "foreign_processes": fleet.foreign,
            "impl": fleet.label(),
            "acquisitions_per_sec": r.rate(),
            "acquisitions_per_sec_rounds": r.per_round,
            "acquisitions": r.acquisitions,
            "ceiling_ratio": r.ceiling_ratio(),
            "handoff_p50_us": s.map(|s| s.p50_us),
            "handoff_p99_us": s.map(|s| s.p99_us),
            "handoff_samples": r.handoff.len(),
            "fairness_max_over_min": r.fairness(),
            "foreign_share_over_proportional": share,
            "per_waiter": r.per_waiter,
            "commands_per_acquisition": r.commands_per_acquisition(),
            "requests_per_acquisition": r.requests_per_acquisition(),
            "redis_cpu_pct": r.cpu_percent(),
        }));
    }
    t.print(3);
}

/// Scenario R's table and JSON lines: RedLock clients contending over the same
/// independent servers; commands, requests and CPU are summed over the servers.
pub fn redlock(results: &Results) {
    if results.r.is_empty() {
        return;
    }
    println!(
        "\n## R. contended RedLock: W waiters, each its own client, on one name over {} servers",
        crate::settings::REDLOCK_NODES
    );
    let mut t = Table::new(vec![
        "W",
        "impl",
        "acq/s",
        "of ceiling",
        "handoff p50",
        "handoff p99",
        "samples",
        "fairness",
        "cmds/acq",
        "reqs/acq",
        "redis cpu",
    ]);
    for (&(w, which), r) in &results.r {
        let s = r.handoff.summary();
        t.row(vec![
            w.to_string(),
            which.name().into(),
            format!("{:.0}", r.rate()),
            format!("{:.2}", r.ceiling_ratio()),
            fmt_opt(s.map(|s| s.p50_us)),
            fmt_opt(s.map(|s| s.p99_us)),
            r.handoff.len().to_string(),
            r.fairness().map_or("starved".into(), |f| format!("{f:.2}")),
            format!("{:.2}", r.commands_per_acquisition()),
            format!("{:.2}", r.requests_per_acquisition()),
            format!("{:.0}%", r.cpu_percent()),
        ]);
        json_line(json!({
            "scenario": "R",
            "waiters": w,
            "nodes": crate::settings::REDLOCK_NODES,
            "impl": which.name(),
            "acquisitions_per_sec": r.rate(),
            "acquisitions": r.acquisitions,
            "ceiling_ratio": r.ceiling_ratio(),
            "handoff_p50_us": s.map(|s| s.p50_us),
            "handoff_p99_us": s.map(|s| s.p99_us),
            "handoff_samples": r.handoff.len(),
            "fairness_max_over_min": r.fairness(),
            "per_waiter": r.per_waiter,
            "commands_per_acquisition": r.commands_per_acquisition(),
            "requests_per_acquisition": r.requests_per_acquisition(),
            "redis_cpu_pct": r.cpu_percent(),
        }));
    }
    t.print(2);
}

/// Scenario C's tables and JSON lines: the K sweep at the short lease, then the
/// largest K at the default lease.
pub fn many(results: &Results, settings: &Settings) {
    if results.c.is_empty() && results.c_default.is_empty() {
        return;
    }
    let sweep: Vec<(usize, usize, &many::Cell)> = results
        .c
        .iter()
        .flat_map(|(&k, m)| m.rounds.iter().enumerate().map(move |(r, c)| (k, r + 1, c)))
        .collect();
    many_table(&sweep, settings.many_lease, "short lease");
    let default: Vec<(usize, usize, &many::Cell)> = results
        .c_default
        .iter()
        .enumerate()
        .map(|(r, c)| (c.locks, r + 1, c))
        .collect();
    many_table(&default, crate::settings::DEFAULT_LEASE, "default lease");
}

/// One table of scenario C: one row per (K, round), since a round that fell over
/// (locks lost) must not be averaged into one that did not.
fn many_table(rows: &[(usize, usize, &many::Cell)], lease: std::time::Duration, which: &str) {
    if rows.is_empty() {
        return;
    }
    println!(
        "\n## C. many locks held at once ({which}): lockwarden, watchdog lease {} ms (renewal every {} ms)",
        lease.as_millis(),
        lease.as_millis() / 3
    );
    let mut t = Table::new(vec![
        "K",
        "round",
        "acquire all",
        "release all",
        "redis cmds/s",
        "redis reqs/s",
        "reqs/lock/renewal",
        "redis cpu",
        "redis B/lock",
        "client B/lock",
        "client cpu",
        "lost",
    ]);
    // The watchdog renews every third of the lease.
    let period = lease.as_secs_f64() / 3.0;
    for &(k, round, c) in rows {
        let per_renewal = c.requests_per_sec * period / k as f64;
        t.row(vec![
            k.to_string(),
            round.to_string(),
            format!("{:.2}s", c.acquire_secs),
            format!("{:.2}s", c.release_secs),
            format!("{:.0}", c.commands_per_sec),
            format!("{:.0}", c.requests_per_sec),
            format!("{per_renewal:.3}"),
            format!("{:.1}%", c.redis_cpu_pct),
            format!("{:.0}", c.redis_bytes_per_lock),
            format!("{:.0}", c.client_bytes_per_lock),
            format!("{:.1}%", c.client_cpu_pct),
            c.lost.to_string(),
        ]);
        json_line(json!({
            "scenario": "C",
            "locks": k,
            "round": round,
            "impl": Impl::Lockwarden.name(),
            "lease_ms": lease.as_millis() as u64,
            "acquire_all_secs": c.acquire_secs,
            "release_all_secs": c.release_secs,
            "redis_commands_per_sec": c.commands_per_sec,
            "redis_requests_per_sec": c.requests_per_sec,
            "requests_per_lock_per_renewal": per_renewal,
            "redis_cpu_pct": c.redis_cpu_pct,
            "redis_bytes_per_lock": c.redis_bytes_per_lock,
            "client_bytes_per_lock": c.client_bytes_per_lock,
            "client_cpu_pct": c.client_cpu_pct,
            "lost": c.lost,
        }));
    }
    t.print(0);
}
