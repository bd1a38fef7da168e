//! Durations on the command line (`250ms`, `30s`, `5m`, `1h`) and how they are shown
//! back to the operator.
//!
//! A handful of lines do not justify a dependency. The grammar is deliberately
//! small: a whole number followed by one unit, no spaces, no fractions, no bare
//! numbers. A bare `30` is refused because `flock -w 30` means seconds while a
//! millisecond-minded operator may mean milliseconds; one letter settles it. Errors
//! are one line and name what was wrong, since clap shows them to the operator as is.

use std::time::Duration;

/// Parses `<whole number><unit>` with unit `ms`, `s`, `m` or `h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration (write e.g. 500ms, 30s, 5m or 1h)".into());
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "'{text}' does not start with a number (write e.g. 500ms, 30s, 5m or 1h)"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is too large"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => {
            return Err(format!(
                "'{text}' has no unit (write {n}ms, {n}s, {n}m or {n}h)"
            ))
        }
        other => {
            return Err(format!(
                "'{text}' has an unknown unit '{other}' (use ms, s, m or h)"
            ))
        }
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// `--deadlock-timeout`: look for deadlocks after this long, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeadlockTimeout {
    /// After this long.
    After(Duration),
    /// `off`: never.
    Off,
}

/// Parses `--deadlock-timeout`: `off`, or a duration of at least 10 ms (a
/// check costs Redis round trips; the library refuses less).
pub fn parse_deadlock_timeout(text: &str) -> Result<DeadlockTimeout, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(DeadlockTimeout::Off);
    }
    let after = parse_duration(text).map_err(|e| format!("{e}, or off"))?;
    if after < Duration::from_millis(10) {
        return Err(format!(
            "'{}' is under 10ms: each check costs Redis round trips (write off to \
             turn deadlock detection off)",
            text.trim()
        ));
    }
    Ok(DeadlockTimeout::After(after))
}

/// A Unix time as `HH:MM:SS` (UTC), for a line that says when.
pub fn clock(at: Duration) -> String {
    let s = at.as_secs();
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// Parses an explicit `--lease`: a duration of at least 1 ms. A zero lease is
/// refused here, in the operator's own words (`0s`), with the reason, before
/// anything connects: Redis would delete the lock at once (`PEXPIRE 0`).
pub fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = parse_duration(text)?;
    if lease.is_zero() {
        return Err(format!(
            "'{}' is no lease: the lock would expire at once (give at least 1ms, \
             or leave --lease out for a lock renewed while held)",
            text.trim()
        ));
    }
    Ok(lease)
}

/// Parses `--sync-timeout`: a duration of at least 1 ms. A zero wait leaves
/// the replicas no time to confirm anything, so every grant would go
/// unconfirmed and be retried until `--wait` ran out; refused here, with what
/// to give instead.
pub fn parse_sync_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err(format!(
            "'{}' leaves the replicas no time to confirm a lock change (give at least \
             1ms, below 1900ms; --sync-replicas 0 turns confirmation off)",
            text.trim()
        ));
    }
    Ok(timeout)
}

/// Parses `--connect-timeout`: a duration of at least 1 ms (`0s` would give up
/// before the first byte).
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if timeout.is_zero() {
        return Err(format!(
            "'{}' leaves no time to connect (give at least 1ms, or leave the option out)",
            text.trim()
        ));
    }
    Ok(timeout)
}

/// A duration for people: `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{}.{}s", ms / 1_000, (ms % 1_000) / 100)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms % 3_600_000) / 60_000)
    }
}

/// Whole milliseconds, saturating (for JSON output).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_parses() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_duration(" 10s "), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn malformed_durations_are_refused_with_a_reason() {
        for (bad, says) in [
            ("10x", "unknown unit 'x'"),
            ("10", "no unit"),
            ("", "empty"),
            ("s", "does not start with a number"),
            ("-5s", "does not start with a number"),
            ("1.5s", "unknown unit '.5s'"),
            ("10 s", "unknown unit ' s'"),
            ("99999999999999999999s", "too large"),
            ("18446744073709551615h", "too large"),
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
            assert!(!err.contains('\n'), "{bad}: one line");
        }
    }

    #[test]
    fn a_zero_lease_is_refused_as_typed() {
        assert_eq!(parse_lease("1ms"), Ok(Duration::from_millis(1)));
        for zero in ["0s", "0ms", "0h"] {
            let err = parse_lease(zero).expect_err(zero);
            assert!(err.starts_with(&format!("'{zero}' is no lease")), "{err}");
            assert!(!err.contains("ns"), "{err}");
        }
    }

    #[test]
    fn a_zero_sync_timeout_is_refused_in_its_own_words() {
        assert_eq!(parse_sync_timeout("5ms"), Ok(Duration::from_millis(5)));
        let err = parse_sync_timeout("0ms").expect_err("0ms");
        assert!(
            err.starts_with("'0ms' leaves the replicas no time"),
            "{err}"
        );
        assert!(!err.contains("lease"), "{err}");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(human(Duration::from_secs(245)), "4m05s");
        assert_eq!(human(Duration::from_secs(7_380)), "2h03m");
    }
}
