//! Reduces per-request values to a protocol's statistics and run-level aggregates.
//!
//! The input is anything that can answer "value of metric m for request i" ([`Rows`]), so the
//! same code summarizes requests computed from a trace and values read back from a published
//! report (which is how the capacity-v3 fixture is checked to the last bit).

use crate::protocol::{Aggregate, Count, Protocol, Stat, TokenSource};
use crate::quantity;
use crate::stats::PercentileMethod;
use serde_json::{json, Map, Value};

/// The counted requests of one analysis, as rows of values.
pub trait Rows {
    /// Number of counted requests.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Value of the protocol's metric `metric` (index into `Protocol::metrics`) for request `i`.
    fn value(&self, i: usize, metric: usize) -> Option<f64>;
    /// Every value the metric pools for request `i` (gaps); defaults to the single value.
    fn pooled(&self, i: usize, metric: usize, out: &mut Vec<f64>) {
        if let Some(v) = self.value(i, metric) {
            out.push(v);
        }
    }
    /// Weight of request `i`'s values of metric `metric` in weighted statistics.
    fn weight(&self, _i: usize, _metric: usize) -> f64 {
        1.0
    }
    /// A count for request `i`.
    fn count(&self, i: usize, count: Count) -> Option<u64>;
    /// Where request `i`'s output tokens came from.
    fn token_source(&self, i: usize) -> Option<TokenSource>;
    /// Whether request `i` met every SLO (None when no SLO was given).
    fn meets_slos(&self, _i: usize) -> Option<bool> {
        None
    }
}

/// Run-level facts the aggregates need beyond the rows.
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    /// Wall-clock span of the counted requests in ms (first send to last end).
    pub wall_clock_ms: Option<f64>,
    /// Successful counted requests.
    pub completed: u64,
    /// Failed requests in the counted phases.
    pub failed: u64,
    /// RunEnd.client_health of each trace, merged (trace label prefixes keys when several).
    pub client_health: Map<String, Value>,
    /// Flags raised from the client health.
    pub health_flags: Vec<String>,
    /// Counted requests whose stream ended after a finish_reason without `[DONE]`.
    pub missing_done: u64,
    /// What a reader of the report must know about the counted requests (empty: nothing).
    pub notes: Vec<Note>,
}

/// A remark on some of the counted requests, shown by every report layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// A stable key (`missing_done`, `retried`, `tool_calls_not_output`).
    pub key: String,
    /// How many counted requests it concerns.
    pub requests: u64,
    /// The remark in words.
    pub text: String,
}

impl Note {
    /// `{"note": key, "requests": n, "text": …}`.
    pub fn to_json(&self) -> Value {
        json!({"note": self.key, "requests": self.requests, "text": self.text})
    }
}

/// Every note as a JSON array.
pub fn notes_json(notes: &[Note]) -> Value {
    Value::Array(notes.iter().map(Note::to_json).collect())
}

/// One metric's statistics, in the protocol's order.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSummary {
    /// Index into `Protocol::metrics`.
    pub metric: usize,
    /// (statistic, value) in the protocol's order.
    pub stats: Vec<(Stat, Option<f64>)>,
}

/// Collects metric `m`'s values over all rows, in row order.
pub fn column(rows: &dyn Rows, m: usize) -> Vec<f64> {
    let mut values = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        rows.pooled(i, m, &mut values);
    }
    values
}

/// Metric `m`'s (value, weight) pairs over all rows.
pub fn weighted_column(rows: &dyn Rows, m: usize) -> Vec<(f64, f64)> {
    let mut values = Vec::with_capacity(rows.len());
    let mut pairs = Vec::with_capacity(rows.len());
    for i in 0..rows.len() {
        values.clear();
        rows.pooled(i, m, &mut values);
        let w = rows.weight(i, m);
        pairs.extend(values.iter().map(|&v| (v, w)));
    }
    pairs
}

/// Statistics of every summarized metric of `protocol`.
pub fn metrics(protocol: &Protocol, rows: &dyn Rows) -> Vec<MetricSummary> {
    protocol
        .metrics
        .iter()
        .enumerate()
        .filter(|(_, def)| def.summary)
        .map(|(m, def)| {
            let wanted = protocol.stats_of(def);
            let values = if protocol.percentile_method == PercentileMethod::CdfSearch {
                quantity::summarize_weighted(weighted_column(rows, m), wanted)
            } else {
                quantity::summarize(
                    column(rows, m),
                    wanted,
                    protocol.percentile_method,
                    protocol.summation,
                    protocol.std,
                )
            };
            MetricSummary {
                metric: m,
                stats: wanted.iter().copied().zip(values).collect(),
            }
        })
        .collect()
}

/// A float as JSON, null when absent or not finite.
pub fn number(v: Option<f64>) -> Value {
    v.filter(|v| v.is_finite()).map_or(Value::Null, Value::from)
}

/// The protocol's run-level aggregates, as (key, value) in protocol order.
pub fn aggregates(protocol: &Protocol, rows: &dyn Rows, run: &RunContext) -> Vec<(String, Value)> {
    let n = rows.len();
    let total = |c: Count| -> u64 { (0..n).filter_map(|i| rows.count(i, c)).sum() };
    let per_second = |x: f64| -> Value {
        number(
            run.wall_clock_ms
                .filter(|&ms| ms > 0.0)
                .map(|ms| x / (ms / 1000.0)),
        )
    };
    protocol
        .aggregates
        .iter()
        .map(|def| {
            let value = match &def.value {
                Aggregate::Sum { count } => json!(total(*count)),
                Aggregate::Samples { count } => {
                    json!((0..n).filter(|&i| rows.count(i, *count).is_some()).count())
                }
                Aggregate::TokenSources => token_sources(rows),
                Aggregate::PerWallSecond { count } => per_second(total(*count) as f64),
                Aggregate::RequestThroughput => per_second(run.completed as f64),
                Aggregate::Goodput => {
                    let met: Vec<bool> = (0..n).filter_map(|i| rows.meets_slos(i)).collect();
                    if met.is_empty() {
                        Value::Null
                    } else {
                        let good = met.iter().filter(|&&ok| ok).count();
                        json!({
                            "good_requests": good,
                            "good_fraction": number(Some(good as f64 / run.completed.max(1) as f64)),
                            "requests_per_s": per_second(good as f64),
                        })
                    }
                }
                Aggregate::MeanRatio { num, den } => {
                    let ratios: Vec<f64> = (0..n)
                        .filter_map(|i| {
                            let d = rows.count(i, *den).filter(|&d| d > 0)?;
                            Some(rows.count(i, *num)? as f64 / d as f64)
                        })
                        .collect();
                    number(crate::stats::mean(&ratios, protocol.summation))
                }
                Aggregate::WallClockMs => number(run.wall_clock_ms),
                Aggregate::WallClockS => number(run.wall_clock_ms.map(|ms| ms / 1000.0)),
                Aggregate::GoodputRate => {
                    let met: Vec<bool> = (0..n).filter_map(|i| rows.meets_slos(i)).collect();
                    if met.is_empty() {
                        Value::Null
                    } else {
                        per_second(met.iter().filter(|&&ok| ok).count() as f64)
                    }
                }
                Aggregate::Completed => json!(run.completed),
                Aggregate::Failed => json!(run.failed),
                Aggregate::ClientHealth => json!({
                    "flags": run.health_flags,
                    "report": Value::Object(run.client_health.clone()),
                }),
                Aggregate::Null => Value::Null,
            };
            (def.key.clone(), value)
        })
        .collect()
}

/// `{source: requests}` in the order sources are first seen by kind.
fn token_sources(rows: &dyn Rows) -> Value {
    let mut counts: Vec<(TokenSource, u64)> = Vec::new();
    for i in 0..rows.len() {
        if let Some(source) = rows.token_source(i) {
            match counts.iter_mut().find(|(s, _)| *s == source) {
                Some((_, n)) => *n += 1,
                None => counts.push((source, 1)),
            }
        }
    }
    counts.sort_by_key(|(s, _)| s.name());
    Value::Object(
        counts
            .into_iter()
            .map(|(s, n)| (s.name().to_string(), json!(n)))
            .collect(),
    )
}
