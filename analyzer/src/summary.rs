//! Reduces per-request values to a protocol's statistics and run-level aggregates.
//!
//! The input is anything that can answer "value of metric m for request i" ([`Rows`]), so the
//! same code summarizes requests computed from a trace and values read back from a published
//! report (which is how the capacity-v3 fixture is checked to the last bit).

use crate::protocol::{Aggregate, Count, Protocol, Stat, TimeStatistics, TokenSource};
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
    /// Every ns value metric `metric` pools for request `i`, for a time metric of a protocol
    /// that takes statistics of ns values (`time_statistics = "ns"`, [`quantity::value_ns`]);
    /// false when the rows know only values in the metric's unit, whose statistics are then
    /// taken instead.
    fn pooled_ns(&self, _i: usize, _metric: usize, _out: &mut Vec<f64>) -> bool {
        false
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
    /// Wall-clock span of the requests in ms (the protocol's `wall_clock`, first send to last
    /// end unless it says otherwise, or an imported run's window).
    pub wall_clock_ms: Option<f64>,
    /// The same span in ns, when known (`time_statistics = "ns"` converts it from these).
    pub wall_clock_ns: Option<u64>,
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

impl RunContext {
    /// The wall clock in seconds as `time` converts it: ns × 1e-9 under `ns` (as AIPerf
    /// converts its benchmark duration), else ms / 1000.
    pub fn span_s(&self, time: TimeStatistics) -> Option<f64> {
        match (time, self.wall_clock_ns) {
            (TimeStatistics::Ns, Some(ns)) => Some(ns as f64 * 1e-9),
            _ => self.wall_clock_ms.map(|ms| ms / 1000.0),
        }
    }

    /// The wall clock in ms as `time` converts it: ns × 1e-6 under `ns`, else as measured.
    pub fn span_ms(&self, time: TimeStatistics) -> Option<f64> {
        match (time, self.wall_clock_ns) {
            (TimeStatistics::Ns, Some(ns)) => Some(ns as f64 * 1e-6),
            _ => self.wall_clock_ms,
        }
    }

    /// `x` per wall-clock second; None without a positive wall clock.
    pub fn per_second(&self, time: TimeStatistics, x: f64) -> Option<f64> {
        self.span_s(time).filter(|&s| s > 0.0).map(|s| x / s)
    }
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

/// The factor that brings a statistic of metric `m`'s ns values to its unit when `protocol`
/// takes the statistics of times in ns (`time_statistics = "ns"`) and the metric is a time
/// ([`quantity::ns_factor`]); None when its statistics are of its values in its unit.
pub fn ns_scale(protocol: &Protocol, m: usize) -> Option<f64> {
    match protocol.time_statistics {
        TimeStatistics::Converted => None,
        TimeStatistics::Ns => quantity::ns_factor(&protocol.metrics.get(m)?.quantity),
    }
}

/// The values metric `m`'s statistics are taken of, over all rows in row order, and the
/// factor that brings a statistic of them to the metric's unit: its ns values and
/// [`ns_scale`] when that applies and the rows know them, else [`column()`] and None.
pub fn statistic_column(protocol: &Protocol, rows: &dyn Rows, m: usize) -> (Vec<f64>, Option<f64>) {
    if let Some(scale) = ns_scale(protocol, m) {
        let mut values = Vec::with_capacity(rows.len());
        if (0..rows.len()).all(|i| rows.pooled_ns(i, m, &mut values)) {
            return (values, Some(scale));
        }
    }
    (column(rows, m), None)
}

/// As [`statistic_column`], with each value's weight (see [`weighted_column`]).
fn statistic_pairs(
    protocol: &Protocol,
    rows: &dyn Rows,
    m: usize,
) -> (Vec<(f64, f64)>, Option<f64>) {
    if let Some(scale) = ns_scale(protocol, m) {
        let (mut values, mut pairs) = (Vec::new(), Vec::with_capacity(rows.len()));
        let known = (0..rows.len()).all(|i| {
            values.clear();
            let known = rows.pooled_ns(i, m, &mut values);
            let w = rows.weight(i, m);
            pairs.extend(values.iter().map(|&v| (v, w)));
            known
        });
        if known {
            return (pairs, Some(scale));
        }
    }
    (weighted_column(rows, m), None)
}

/// Multiplies every statistic but `samples` by `scale` (ns statistics to the metric's unit:
/// AIPerf converts its results, not its values).
pub fn scale_statistics(
    mut values: Vec<Option<f64>>,
    wanted: &[Stat],
    scale: Option<f64>,
) -> Vec<Option<f64>> {
    if let Some(scale) = scale {
        for (value, stat) in values.iter_mut().zip(wanted) {
            if *stat != Stat::Samples {
                *value = value.map(|v| v * scale);
            }
        }
    }
    values
}

/// `wanted` statistics of `values` (in request order, as [`statistic_column`] gives them)
/// under `protocol`'s percentile method, summation and std, brought to the metric's unit by
/// `scale`.
pub fn column_statistics(
    protocol: &Protocol,
    values: Vec<f64>,
    scale: Option<f64>,
    wanted: &[Stat],
) -> Vec<Option<f64>> {
    let stats = quantity::summarize(
        values,
        wanted,
        protocol.percentile_method,
        protocol.summation,
        protocol.std,
    );
    scale_statistics(stats, wanted, scale)
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
                let (pairs, scale) = statistic_pairs(protocol, rows, m);
                scale_statistics(quantity::summarize_weighted(pairs, wanted), wanted, scale)
            } else {
                let (values, scale) = statistic_column(protocol, rows, m);
                column_statistics(protocol, values, scale, wanted)
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
    let time = protocol.time_statistics;
    let per_second = |x: f64| -> Value { number(run.per_second(time, x)) };
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
                        let [(requests, _), (fraction, _), (rate, _)] = GOODPUT_FIELDS;
                        let mut fields = Map::new();
                        fields.insert(requests.into(), json!(good));
                        fields.insert(
                            fraction.into(),
                            number(Some(good as f64 / run.completed.max(1) as f64)),
                        );
                        fields.insert(rate.into(), per_second(good as f64));
                        Value::Object(fields)
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
                Aggregate::WallClockMs => number(run.span_ms(time)),
                Aggregate::WallClockS => number(run.span_s(time)),
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

/// The fields of the goodput aggregate's object, in report order, with the unit of each as
/// tables show it.
pub const GOODPUT_FIELDS: [(&str, &str); 3] = [
    ("good_requests", "requests"),
    ("good_fraction", "ratio"),
    ("requests_per_s", "req/s"),
];

/// What a count counts, as tables name its unit: `tokens` or `chunks`.
pub fn count_unit(count: Count) -> &'static str {
    match count {
        Count::OutputTokens
        | Count::PromptTokens
        | Count::CachedTokens
        | Count::ReasoningTokens
        | Count::PlannedInputTokens
        | Count::InputTokens
        | Count::TotalTokens => "tokens",
        Count::ContentChunks | Count::ReasoningChunks | Count::OutputChunks | Count::AllChunks => {
            "chunks"
        }
    }
}

/// The unit of an aggregate's value as tables show it, from how the value is computed;
/// empty for a value that is not a number (an object, or always null). The fields of the
/// goodput object have theirs in [`GOODPUT_FIELDS`]; token sources count requests.
pub fn aggregate_unit(value: &Aggregate) -> &'static str {
    match value {
        Aggregate::Sum { count } => count_unit(*count),
        Aggregate::PerWallSecond { count } => match count_unit(*count) {
            "tokens" => "tok/s",
            _ => "chunks/s",
        },
        Aggregate::Samples { .. }
        | Aggregate::TokenSources
        | Aggregate::Completed
        | Aggregate::Failed => "requests",
        Aggregate::RequestThroughput | Aggregate::GoodputRate => "req/s",
        Aggregate::MeanRatio { .. } => "ratio",
        Aggregate::WallClockMs => "ms",
        Aggregate::WallClockS => "s",
        Aggregate::Goodput | Aggregate::ClientHealth | Aggregate::Null => "",
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::builtin;

    /// TTFT rows of a protocol whose first metric is a time: `ms` in its unit, `ns` (when
    /// known) the same times in ns.
    struct Times {
        ms: Vec<f64>,
        ns: Option<Vec<f64>>,
    }

    impl Rows for Times {
        fn len(&self) -> usize {
            self.ms.len()
        }
        fn value(&self, i: usize, _metric: usize) -> Option<f64> {
            Some(self.ms[i])
        }
        fn pooled_ns(&self, i: usize, _metric: usize, out: &mut Vec<f64>) -> bool {
            self.ns.as_ref().map(|ns| out.push(ns[i])).is_some()
        }
        fn count(&self, _i: usize, _count: Count) -> Option<u64> {
            Some(1)
        }
        fn token_source(&self, _i: usize) -> Option<TokenSource> {
            None
        }
    }

    fn ttft(protocol: &Protocol, rows: &Times, wanted: &[Stat]) -> Vec<Option<f64>> {
        let (values, scale) = statistic_column(protocol, rows, 0);
        column_statistics(protocol, values, scale, wanted)
    }

    #[test]
    fn ns_statistics_are_taken_of_ns_values_and_scaled_but_the_count() {
        let ns = vec![51_123_869.0, 59_382_738.0, 63_714_350.0];
        let rows = Times {
            ms: ns.iter().map(|v| v / 1e6).collect(),
            ns: Some(ns.clone()),
        };
        let p = builtin::find("aiperf-0.10").unwrap();
        assert_eq!(p.metrics[0].name, "time_to_first_token");
        let wanted = [Stat::Percentile(95.0), Stat::Mean, Stat::Samples];
        let mean_ns = (ns[0] + ns[1] + ns[2]) / 3.0;
        let p95_ns = crate::stats::percentile(&ns, 95.0, p.percentile_method).unwrap();
        assert_eq!(
            ttft(&p, &rows, &wanted),
            [Some(p95_ns * 1e-6), Some(mean_ns * 1e-6), Some(3.0)],
            "p95 and mean of the ns values, times 1e-6; the count as it is"
        );
        // Rows that know only ms values: their statistics, unscaled.
        let ms_only = Times { ns: None, ..rows };
        let converted = quantity::summarize(
            ms_only.ms.clone(),
            &wanted,
            p.percentile_method,
            p.summation,
            p.std,
        );
        assert_eq!(ttft(&p, &ms_only, &wanted), converted);
        // A protocol converting first never reads ns values.
        let mut first = p.clone();
        first.time_statistics = TimeStatistics::Converted;
        assert_eq!(ns_scale(&first, 0), None);
        assert_eq!(ns_scale(&p, 3), None, "per-user throughput is no time");
    }

    #[test]
    fn the_wall_clock_is_converted_from_ns_under_ns_statistics() {
        let run = RunContext {
            wall_clock_ns: Some(3_683_411_306),
            wall_clock_ms: Some(3_683_411_306.0 / 1e6),
            ..RunContext::default()
        };
        assert_eq!(run.span_s(TimeStatistics::Ns), Some(3_683_411_306.0 * 1e-9));
        assert_eq!(
            run.span_s(TimeStatistics::Converted),
            Some(3_683_411_306.0 / 1e6 / 1000.0)
        );
        assert_eq!(
            run.per_second(TimeStatistics::Ns, 20.0),
            Some(20.0 / (3_683_411_306.0 * 1e-9))
        );
        // Without the ns span (values read back from a report) the ms one is used.
        let ms_only = RunContext {
            wall_clock_ns: None,
            ..run
        };
        assert_eq!(ms_only.span_ms(TimeStatistics::Ns), ms_only.wall_clock_ms);
        assert_eq!(
            RunContext::default().per_second(TimeStatistics::Ns, 1.0),
            None
        );
    }
}
