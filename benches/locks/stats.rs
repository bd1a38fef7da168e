//! The client side's measurements: latency samples and their percentiles, and
//! what the kernel says about this process and machine (RSS, CPU time, load).
//!
//! Every latency sample is kept (a cell makes at most some tens of thousands), so
//! the percentiles are exact nearest-rank values over all rounds of a cell, not an
//! average of per-round percentiles. The `/proc` readers return 0 or `unknown`
//! rather than fail: a missing reading should not cost the rest of a run.

use std::time::Duration;

/// Latency samples in nanoseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Unsorted until `sorted` is called.
    ns: Vec<u64>,
}

impl Samples {
    /// Records one sample.
    pub fn push(&mut self, d: Duration) {
        self.ns
            .push(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds another cell's samples.
    pub fn extend(&mut self, other: Samples) {
        self.ns.extend(other.ns);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.ns.len()
    }

    /// The summary, or `None` with no samples.
    pub fn summary(&self) -> Option<Summary> {
        if self.ns.is_empty() {
            return None;
        }
        let mut ns = self.ns.clone();
        ns.sort_unstable();
        let rank = |q: f64| {
            let i = ((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len()) - 1;
            ns[i] as f64 / 1_000.0
        };
        Some(Summary {
            p50_us: rank(0.50),
            p99_us: rank(0.99),
            max_us: ns[ns.len() - 1] as f64 / 1_000.0,
        })
    }
}

/// Percentiles of a set of samples, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// Formats microseconds for a table: `87us`, `1.24ms`, `210ms`.
pub fn fmt_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 10_000.0 {
        format!("{:.2}ms", us / 1_000.0)
    } else {
        format!("{:.0}ms", us / 1_000.0)
    }
}

/// Formats an optional summary field for a table.
pub fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), fmt_us)
}

/// Mean of a list (0 when empty).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// The 1, 5 and 15 minute load averages, to tell a quiet machine from a busy one.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// This process's resident set size in KiB, from `/proc/self/status`.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds this process has used, from `/proc/self/stat` (utime + stime,
/// assuming the usual 100 ticks a second).
pub fn process_cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    (tick(11) + tick(12)) / 100.0
}
