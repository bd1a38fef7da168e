//! The PNG chart of scenario B: handoff latency by waiter count, one line per
//! implementation, one panel per client layout; p50 solid with dots, p99 dashed,
//! on a log scale (rslock's and the naive client's handoffs are milliseconds,
//! lockwarden's and raw EVALSHA's are microseconds).
//!
//! Drawn with `plotters`' bitmap backend only. Its text needs a TrueType font: the
//! first of `LOCKWARDEN_BENCH_FONT` and a few usual system paths that exists is
//! read at run time; with none, the chart is skipped and the run says so.

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::clients::Impl;
use crate::report::Results;
use crate::settings::Settings;

/// Where a TrueType font is usually found on Linux.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

/// Loads and registers a font as "sans-serif".
fn load_font() -> Result<(), String> {
    let candidates = std::env::var("LOCKWARDEN_BENCH_FONT")
        .ok()
        .into_iter()
        .chain(FONTS.iter().map(|p| p.to_string()));
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            // plotters keeps fonts for the life of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            return register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{path} is not a usable TrueType font"));
        }
    }
    Err("no TrueType font found (set LOCKWARDEN_BENCH_FONT to a .ttf file)".into())
}

/// The line colour of an implementation.
fn colour(which: Impl) -> RGBColor {
    match which {
        Impl::Lockwarden => RGBColor(31, 119, 180),
        Impl::LockwardenNoDeadlock => RGBColor(174, 199, 232),
        Impl::LockwardenHandoff => RGBColor(23, 190, 207),
        Impl::Raw => RGBColor(44, 160, 44),
        Impl::LockwardenSpin => RGBColor(140, 86, 75),
        Impl::Rslock => RGBColor(214, 39, 40),
        Impl::RslockTuned => RGBColor(255, 127, 14),
        Impl::Naive => RGBColor(127, 127, 127),
        Impl::RedLock => RGBColor(148, 103, 189),
        Impl::LockwardenCluster => RGBColor(23, 190, 207),
        // scenario Y only, which the chart does not draw
        Impl::LockwardenNoSync | Impl::LockwardenWait300 | Impl::RedissonLayout => {
            RGBColor(188, 189, 34)
        }
    }
}

/// Draws the chart to `path`.
pub fn draw(results: &Results, settings: &Settings, path: &str) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    load_font()?;
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
    }
    let waiters = settings.waiters();
    let layouts = settings.layouts();
    // (implementation, layout) -> [(W index, p50, p99)]
    let series = |which: Impl, m: usize| -> Vec<(u32, f64, f64)> {
        waiters
            .iter()
            .enumerate()
            .filter_map(|(i, &w)| {
                let s = results.b.get(&(w, m, which))?.handoff.summary()?;
                Some((i as u32, s.p50_us.max(1.0), s.p99_us.max(1.0)))
            })
            .collect()
    };
    let values: Vec<f64> = Impl::ALL
        .iter()
        .flat_map(|&i| layouts.iter().flat_map(move |&m| series(i, m)))
        .flat_map(|(_, a, b)| [a, b])
        .collect();
    if values.is_empty() {
        return Err("scenario B has no handoff samples".into());
    }
    let lo = values.iter().copied().fold(f64::MAX, f64::min) / 1.5;
    // Headroom above the data for the legend.
    let hi = values.iter().copied().fold(f64::MIN, f64::max) * 8.0;

    let root = BitMapBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(
            "lockwarden benchmark, scenario B: handoff latency (p50 solid, p99 dashed)",
            ("sans-serif", 22),
        )
        .map_err(|e| err(&e))?;
    let panels = root.split_evenly((1, layouts.len()));
    for (panel, &m) in panels.iter().zip(layouts) {
        let caption = if m == 1 {
            "all waiters in 1 client".to_string()
        } else {
            format!("waiters spread over {m} clients")
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                // W as positions 0, 1, 2 (labelled with W), half a step of margin.
                -0.5f64..waiters.len() as f64 - 0.5,
                (lo..hi).log_scale(),
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("waiters W")
            .y_desc("handoff latency (us, log scale)")
            .x_labels(waiters.len())
            .x_max_light_lines(0)
            .x_label_formatter(&|x| {
                let i = x.round();
                match waiters.get(i as usize) {
                    Some(w) if (x - i).abs() < 1e-6 && i >= 0.0 => w.to_string(),
                    _ => String::new(),
                }
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| err(&e))?;
        for which in Impl::ALL {
            let points = series(which, m);
            if points.is_empty() {
                continue;
            }
            let c = colour(which);
            let p50: Vec<_> = points
                .iter()
                .map(|&(i, p50, _)| (f64::from(i), p50))
                .collect();
            let p99: Vec<_> = points
                .iter()
                .map(|&(i, _, p99)| (f64::from(i), p99))
                .collect();
            chart
                .draw_series(LineSeries::new(p50.clone(), c.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(which.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(p50.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(|e| err(&e))?;
            chart
                .draw_series(DashedLineSeries::new(p99, 6, 4, c.stroke_width(1)))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font(("sans-serif", 14))
            .border_style(BLACK)
            .background_style(WHITE.mix(0.85))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
