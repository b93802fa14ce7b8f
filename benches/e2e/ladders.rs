//! `--repeat N`: the ladder run N times in a row, and per level the spread and median of what
//! the single ladder reports once. On a shared two-core host one ladder's *load ÷ floor*
//! moves by ±0.3 from run to run, so a level near a target is judged on the median of several.

use crate::{LevelResult, Side};
use std::fmt::Write as _;
use tokentrace_analyzer::stats::{self, PercentileMethod};

/// The ratio a level is judged on.
pub const TARGET_RATIO: f64 = 1.5;

/// The timestamp error p99 a level is judged on, ns.
pub const TARGET_P99_NS: i64 = 100_000;

/// Median of `values` (the mean of the middle two for an even count, as the analyzer's
/// linear percentile has it); None when empty.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    stats::sort(&mut values);
    stats::percentile(&values, 50.0, PercentileMethod::Linear)
}

/// The recorder's CPU per chunk over its load against the floor's, when both are known.
fn load_ratio(r: &LevelResult) -> Option<f64> {
    let load = r.recorder.load_cpu_ns_per_chunk()?;
    let floor = r.floor.as_ref()?.cpu_ns_per_chunk();
    (floor > 0.0).then(|| load / floor)
}

/// The levels in the order they first ran, each with its results in run order.
fn by_level(results: &[LevelResult]) -> Vec<Vec<&LevelResult>> {
    let mut levels: Vec<Vec<&LevelResult>> = Vec::new();
    for r in results {
        let same = |l: &&Vec<&LevelResult>| {
            l[0].level.streams == r.level.streams && l[0].level.step_ms == r.level.step_ms
        };
        match levels.iter().position(|l| same(&l)) {
            Some(i) => levels[i].push(r),
            None => levels.push(vec![r]),
        }
    }
    levels
}

/// The table over repeated ladders; None when no level ran more than once.
pub fn summary(results: &[LevelResult]) -> Option<String> {
    let levels = by_level(results);
    let runs = levels.iter().map(Vec::len).max()?;
    if runs < 2 {
        return None;
    }
    let mut s = format!(
        "Over {runs} ladders run in a row (`--repeat {runs}`): *load ÷ floor* of each, to two \
         decimals, and its median; *within* counts the ladders at or under \
         {TARGET_RATIO}× exactly; the medians of each client's CPU per chunk over its load; \
         each client's timestamp error p99, its median and the ladders under 100 µs (the \
         floor's is a receive time only with `--floor epoll-stamped` or `uring`; the other \
         floors' count their own wake-up after the read).\n\n"
    );
    s.push_str(
        "| streams | step ms | load ÷ floor, ladder by ladder | median | within 1.5× | \
         CPU µs/chunk rec load, median | floor, median | rec p99 µs, median | p99 < 100 µs | \
         floor p99 µs, median | p99 < 100 µs |\n",
    );
    s.push_str("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for level in &levels {
        let first = &level[0].level;
        let ratios: Vec<Option<f64>> = level.iter().map(|r| load_ratio(r)).collect();
        let known: Vec<f64> = ratios.iter().flatten().copied().collect();
        let each: Vec<String> = ratios
            .iter()
            .map(|r| r.map_or("—".into(), |r| format!("{r:.2}")))
            .collect();
        let within = known.iter().filter(|&&r| r <= TARGET_RATIO).count();
        let runs_known = known.len();
        let ratio_median = median(known);
        let cpu = |side: &Side| {
            side.load_cpu_ns_per_chunk()
                .unwrap_or(side.cpu_ns_per_chunk())
        };
        let rec_cpu = median(level.iter().map(|r| cpu(&r.recorder)).collect());
        let floor_cpu = median(
            level
                .iter()
                .filter_map(|r| r.floor.as_ref())
                .map(Side::cpu_ns_per_chunk)
                .collect(),
        );
        let (rec_p99, rec_under) = p99s(level.iter().map(|r| Some(&r.recorder)));
        let (floor_p99, floor_under) = p99s(level.iter().map(|r| r.floor.as_ref()));
        let us = |v: Option<f64>| v.map_or("—".into(), |v| format!("{:.2}", v / 1000.0));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            first.streams,
            first.step_ms,
            each.join(", "),
            ratio_median.map_or("—".into(), |m| format!("**{m:.2}**")),
            if runs_known == 0 {
                "—".into()
            } else {
                format!("{within} of {runs_known}")
            },
            us(rec_cpu),
            us(floor_cpu),
            us(rec_p99),
            rec_under,
            us(floor_p99),
            floor_under,
        );
    }
    Some(s)
}

/// The median timestamp error p99 (ns) of the sides that have one, and how many of them are
/// under [`TARGET_P99_NS`] ("—" when none has one).
fn p99s<'a>(sides: impl Iterator<Item = Option<&'a Side>>) -> (Option<f64>, String) {
    let p99s: Vec<i64> = sides
        .flatten()
        .filter_map(|s| s.error.map(|p| p.p99))
        .collect();
    let under = p99s.iter().filter(|&&p| p < TARGET_P99_NS).count();
    let count = if p99s.is_empty() {
        "—".into()
    } else {
        format!("{under} of {}", p99s.len())
    };
    (median(p99s.iter().map(|&p| p as f64).collect()), count)
}

/// Checks the median and the grouping on made-up results (`cargo test --benches`).
pub fn self_check() -> std::io::Result<()> {
    let fail = |what: String| Err(std::io::Error::other(format!("ladders self-check: {what}")));
    for (values, expected) in [
        (vec![], None),
        (vec![1.7], Some(1.7)),
        (vec![1.6, 1.2, 1.4], Some(1.4)),
        (vec![1.6, 1.2, 1.4, 1.5], Some(1.45)),
    ] {
        let got = median(values.clone());
        if got.map(|g| (g * 1000.0).round()) != expected.map(|e: f64| (e * 1000.0).round()) {
            return fail(format!("median of {values:?} is {got:?}, not {expected:?}"));
        }
    }
    let percentiles = |p99: i64| crate::accuracy::Percentiles {
        p50: 1,
        p99,
        p999: p99,
        max: p99,
        min: 0,
    };
    let result = |streams: usize, load_ns: u64, floor_ns: u64, p99: i64, floor_p99: Option<i64>| {
        LevelResult {
            level: crate::Level {
                streams,
                step_ms: 2.0,
                max_tokens: 500,
            },
            recorder: Side {
                chunks: 1000,
                cpu_ns: load_ns * 1000 + 5,
                load_cpu_ns: Some(load_ns * 1000),
                error: Some(percentiles(p99)),
                ..Side::default()
            },
            floor: Some(Side {
                chunks: 1000,
                cpu_ns: floor_ns * 1000,
                error: floor_p99.map(percentiles),
                ..Side::default()
            }),
            aiperf: None,
            load_avg: 0.0,
        }
    };
    let once = [
        result(64, 1200, 1000, 5_000, None),
        result(2048, 1600, 1000, 9_000, None),
    ];
    if summary(&once).is_some() {
        return fail("a single ladder got a summary".into());
    }
    // Two ladders of two levels, in ladder order.
    let twice = [
        result(64, 1200, 1000, 5_000, Some(4_000)),
        result(2048, 1600, 1000, 200_000, Some(150_000)),
        result(64, 1500, 1000, 7_000, Some(6_000)),
        result(2048, 1400, 1000, 9_000, None),
    ];
    let Some(table) = summary(&twice) else {
        return fail("two ladders got no summary".into());
    };
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| 64 |") || l.starts_with("| 2048 |"))
        .collect();
    let expected = [
        "| 64 | 2 | 1.20, 1.50 | **1.35** | 2 of 2 | 1.35 | 1.00 | 6.00 | 2 of 2 | 5.00 | 2 of 2 |",
        "| 2048 | 2 | 1.60, 1.40 | **1.50** | 1 of 2 | 1.50 | 1.00 | 104.50 | 1 of 2 | 150.00 | \
         0 of 1 |",
    ];
    if rows != expected {
        return fail(format!("rows {rows:#?}, expected {expected:#?}"));
    }
    Ok(())
}
