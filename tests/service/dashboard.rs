//! The Grafana dashboard shipped in `docs/grafana/lockwarden.json` asks only for
//! metrics the library records, each as what it is (a histogram's buckets, a
//! counter's rate), and shows every one of them: a metric renamed or added in
//! `src/stats.rs` without the dashboard following fails here. No Redis needed.

use std::collections::{BTreeMap, BTreeSet};

const DASHBOARD: &str = include_str!("../../docs/grafana/lockwarden.json");
const STATS: &str = include_str!("../../src/stats.rs");

/// The names recorded with `macro!("lockwarden_...` in `src/stats.rs`.
fn recorded(macro_name: &str) -> BTreeSet<String> {
    let opening = format!("{macro_name}!(\"lockwarden_");
    STATS
        .match_indices(&opening)
        .map(|(at, _)| {
            let name = &STATS[at + opening.len() - "lockwarden_".len()..];
            name[..name.find('"').expect("a closing quote")].to_string()
        })
        .collect()
}

/// Every `lockwarden_*` name a query mentions, as written.
fn mentioned(expr: &str) -> Vec<String> {
    expr.match_indices("lockwarden_")
        .map(|(at, _)| {
            expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect()
        })
        .collect()
}

/// Every query of the dashboard, with the title of its panel.
fn queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or("").to_string();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a PromQL expression");
            out.push((title.clone(), expr.to_string()));
        }
    }
    out
}

#[test]
fn the_dashboard_shows_every_recorded_metric_as_what_it_is() {
    let dashboard: serde_json::Value =
        serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    let counters = recorded("counter");
    let histograms = recorded("histogram");
    assert!(
        counters.contains("lockwarden_acquisitions_total"),
        "{counters:?}"
    );
    assert!(
        histograms.contains("lockwarden_hold_seconds"),
        "{histograms:?}"
    );

    let mut shown: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (title, expr) in queries(&dashboard) {
        for name in mentioned(&expr) {
            if let Some(base) = name.strip_suffix("_bucket") {
                assert!(
                    histograms.contains(base),
                    "{title}: {name} is not a recorded histogram's buckets"
                );
                shown.entry(base.into()).or_default().push(title.clone());
            } else {
                assert!(
                    counters.contains(&name),
                    "{title}: {name} is not a recorded counter"
                );
                assert!(
                    expr.contains(&format!("rate({name}"))
                        || expr.contains(&format!("increase({name}")),
                    "{title}: the counter {name} is read without rate() or increase()"
                );
                shown.entry(name).or_default().push(title.clone());
            }
        }
    }
    let missing: Vec<&String> = counters
        .iter()
        .chain(&histograms)
        .filter(|name| !shown.contains_key(*name))
        .collect();
    assert!(missing.is_empty(), "recorded but on no panel: {missing:?}");
}

#[test]
fn the_dashboard_imports_into_any_prometheus() {
    let dashboard: serde_json::Value =
        serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    assert_eq!(dashboard["__inputs"][0]["name"], "DS_PROMETHEUS");
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "two panels share an id"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${DS_PROMETHEUS}",
            "{}: a data source of this Grafana only",
            panel["title"]
        );
    }
    let kind = &dashboard["templating"]["list"][0];
    assert_eq!(kind["name"], "kind");
}
