//! Service-level objectives: `ttft:p95<10000ms`, parsed, printed back canonically, evaluated
//! against a trial's metrics and described in the report's `slo` block.

use crate::error::CapacityError;
use crate::metrics::{aiperf_statistic, TrialMetrics};
use serde_json::{json, Map, Value};
use std::fmt;
use std::str::FromStr;
use tokentrace_analyzer::protocol::Stat;

/// A per-request metric an SLO can constrain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SloMetric {
    /// Time to first token, ms.
    Ttft,
    /// Inter-token latency per request, ms.
    Itl,
    /// Request latency (send to last output), ms.
    RequestLatency,
    /// Output tokens per second per user (1 / ITL), tok/s.
    PerUserOutputThroughput,
}

impl SloMetric {
    /// Every metric, for help texts and parsing.
    pub const ALL: [SloMetric; 4] = [
        SloMetric::Ttft,
        SloMetric::Itl,
        SloMetric::RequestLatency,
        SloMetric::PerUserOutputThroughput,
    ];

    /// The short name accepted on the command line and printed in canonical specs.
    pub fn short_name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Itl => "itl",
            SloMetric::RequestLatency => "request_latency",
            SloMetric::PerUserOutputThroughput => "per_user_tps",
        }
    }

    /// The AIPerf metric tag, used in the report's `slo.metric`.
    pub fn report_name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "time_to_first_token",
            SloMetric::Itl => "inter_token_latency",
            SloMetric::RequestLatency => "request_latency",
            SloMetric::PerUserOutputThroughput => "output_token_throughput_per_user",
        }
    }

    /// True for times (thresholds in ms), false for rates (thresholds in tok/s).
    pub fn is_time(self) -> bool {
        !matches!(self, SloMetric::PerUserOutputThroughput)
    }

    fn parse_name(name: &str) -> Option<SloMetric> {
        let found = match name {
            "ttft" | "time_to_first_token" => SloMetric::Ttft,
            "itl" | "inter_token_latency" => SloMetric::Itl,
            "request_latency" | "latency" | "e2e" | "e2e_latency" => SloMetric::RequestLatency,
            "per_user_tps" | "output_token_throughput_per_user" => {
                SloMetric::PerUserOutputThroughput
            }
            _ => return None,
        };
        Some(found)
    }
}

/// Which statistic of the metric's per-request values is compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SloStatistic {
    /// A percentile in (0, 100], numpy-linear.
    Percentile(f64),
    /// The arithmetic mean.
    Mean,
}

/// How the observed statistic must relate to the threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `<`
    Less,
    /// `<=`
    LessOrEqual,
    /// `>`
    Greater,
    /// `>=`
    GreaterOrEqual,
}

impl Comparison {
    fn symbol(self) -> &'static str {
        match self {
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
        }
    }

    /// The name used in the report's `slo.comparison`.
    pub fn report_name(self) -> &'static str {
        match self {
            Comparison::Less => "strictly_less_than",
            Comparison::LessOrEqual => "less_than_or_equal",
            Comparison::Greater => "strictly_greater_than",
            Comparison::GreaterOrEqual => "greater_than_or_equal",
        }
    }

    fn holds(self, observed: f64, threshold: f64) -> bool {
        match self {
            Comparison::Less => observed < threshold,
            Comparison::LessOrEqual => observed <= threshold,
            Comparison::Greater => observed > threshold,
            Comparison::GreaterOrEqual => observed >= threshold,
        }
    }
}

/// One objective: `metric:statistic OP threshold`. Time thresholds are held in ms, rates in tok/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// The constrained metric.
    pub metric: SloMetric,
    /// The statistic compared.
    pub statistic: SloStatistic,
    /// The comparison.
    pub comparison: Comparison,
    /// The threshold in ms (times) or tok/s (rates).
    pub threshold: f64,
}

impl Slo {
    /// The statistic's value in a trial, None when the trial has no successful request.
    pub fn observe(&self, metrics: &TrialMetrics) -> Option<f64> {
        let (values, scale) = metrics.values_of(self.metric);
        let statistic = match self.statistic {
            SloStatistic::Percentile(p) => aiperf_statistic(values, Stat::Percentile(p)),
            SloStatistic::Mean => aiperf_statistic(values, Stat::Mean),
        };
        statistic.map(|v| v * scale)
    }

    /// Whether the trial meets the objective. A trial with nothing to measure fails.
    pub fn holds(&self, metrics: &TrialMetrics) -> bool {
        match self.observe(metrics) {
            Some(observed) => self.comparison.holds(observed, self.threshold),
            None => false,
        }
    }

    /// The report's description of this objective (the fixture's `slo` block).
    pub fn report_block(&self) -> Value {
        let mut block = Map::new();
        block.insert("metric".into(), json!(self.metric.report_name()));
        match self.statistic {
            SloStatistic::Percentile(p) => block.insert("percentile".into(), number(p)),
            SloStatistic::Mean => block.insert("statistic".into(), json!("avg")),
        };
        let key = if self.metric.is_time() {
            "threshold_ms"
        } else {
            "threshold_tps"
        };
        block.insert(key.into(), number(self.threshold));
        block.insert("comparison".into(), json!(self.comparison.report_name()));
        block.insert("all_confirmation_trials_must_pass".into(), json!(true));
        Value::Object(block)
    }
}

/// A JSON number that prints integral values without a fraction (`10000`, not `10000.0`).
pub(crate) fn number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

impl fmt::Display for Slo {
    /// The canonical spec, which parses back to the same objective.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let statistic = match self.statistic {
            SloStatistic::Percentile(p) => format!("p{p}"),
            SloStatistic::Mean => "avg".to_string(),
        };
        let unit = if self.metric.is_time() { "ms" } else { "" };
        write!(
            f,
            "{}:{}{}{}{}",
            self.metric.short_name(),
            statistic,
            self.comparison.symbol(),
            self.threshold,
            unit
        )
    }
}

impl FromStr for Slo {
    type Err = CapacityError;

    fn from_str(spec: &str) -> Result<Slo, CapacityError> {
        let bad = |why: String| CapacityError::BadSlo {
            spec: spec.to_string(),
            why,
        };
        let compact: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
        let (name, rest) = compact.split_once(':').ok_or_else(|| {
            bad("expected METRIC:STATISTIC<THRESHOLD, e.g. ttft:p95<10000ms".into())
        })?;
        let metric = SloMetric::parse_name(&name.to_ascii_lowercase()).ok_or_else(|| {
            let known: Vec<&str> = SloMetric::ALL.iter().map(|m| m.short_name()).collect();
            bad(format!(
                "unknown metric `{name}` (known: {})",
                known.join(", ")
            ))
        })?;
        let op_at = rest
            .find(['<', '>'])
            .ok_or_else(|| bad("missing comparison `<`, `<=`, `>` or `>=`".into()))?;
        let (statistic_text, after) = rest.split_at(op_at);
        let (comparison, threshold_text) = match after {
            s if s.starts_with("<=") => (Comparison::LessOrEqual, &s[2..]),
            s if s.starts_with(">=") => (Comparison::GreaterOrEqual, &s[2..]),
            s if s.starts_with('<') => (Comparison::Less, &s[1..]),
            s => (Comparison::Greater, &s[1..]),
        };
        let statistic = parse_statistic(statistic_text).ok_or_else(|| {
            bad(format!(
                "unknown statistic `{statistic_text}` (use pN with 0<N<=100, or avg)"
            ))
        })?;
        let threshold = parse_threshold(threshold_text, metric).map_err(bad)?;
        Ok(Slo {
            metric,
            statistic,
            comparison,
            threshold,
        })
    }
}

fn parse_statistic(text: &str) -> Option<SloStatistic> {
    let lower = text.to_ascii_lowercase();
    if lower == "avg" || lower == "mean" {
        return Some(SloStatistic::Mean);
    }
    let p: f64 = lower.strip_prefix('p')?.parse().ok()?;
    (p > 0.0 && p <= 100.0).then_some(SloStatistic::Percentile(p))
}

/// Parses `10000ms`, `10s`, `2500us` for times (into ms) and `20`, `20tok/s` for rates.
fn parse_threshold(text: &str, metric: SloMetric) -> Result<f64, String> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
        .unwrap_or(text.len());
    let (number_text, unit) = text.split_at(split);
    let value: f64 = number_text
        .parse()
        .map_err(|_| format!("threshold `{text}` is not a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!(
            "threshold `{text}` must be a finite, non-negative number"
        ));
    }
    let scale = match (metric.is_time(), unit.to_ascii_lowercase().as_str()) {
        (true, "ms") => 1.0,
        (true, "s") => 1000.0,
        (true, "us") => 0.001,
        (true, "") => return Err(format!("threshold `{text}` needs a unit: ms, s or us")),
        (false, "" | "tok/s" | "tps") => 1.0,
        (_, other) => return Err(format!("unit `{other}` does not fit this metric")),
    };
    Ok(value * scale)
}

/// Parses every spec; at least one is required.
pub fn parse_all(specs: &[String]) -> Result<Vec<Slo>, CapacityError> {
    if specs.is_empty() {
        return Err(CapacityError::BadSlo {
            spec: String::new(),
            why: "at least one --slo is required".into(),
        });
    }
    specs.iter().map(|s| s.parse()).collect()
}

/// The report's `slo` value: the fixture's object for one objective, an array of them for several.
pub fn report_value(slos: &[Slo]) -> Value {
    match slos {
        [one] => one.report_block(),
        many => Value::Array(many.iter().map(Slo::report_block).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fixture_objective() {
        let slo: Slo = "ttft:p95<10000ms".parse().unwrap();
        assert_eq!(slo.metric, SloMetric::Ttft);
        assert_eq!(slo.statistic, SloStatistic::Percentile(95.0));
        assert_eq!(slo.comparison, Comparison::Less);
        assert_eq!(slo.threshold, 10000.0);
        let block = slo.report_block();
        assert_eq!(
            block.to_string(),
            r#"{"metric":"time_to_first_token","percentile":95,"threshold_ms":10000,"comparison":"strictly_less_than","all_confirmation_trials_must_pass":true}"#
        );
    }

    #[test]
    fn units_aliases_and_inclusive_comparisons() {
        let slo: Slo = " request_latency : p99 <= 30s ".parse().unwrap();
        assert_eq!(slo.metric, SloMetric::RequestLatency);
        assert_eq!(slo.comparison, Comparison::LessOrEqual);
        assert_eq!(slo.threshold, 30000.0);
        let slo: Slo = "itl:avg<50000us".parse().unwrap();
        assert_eq!(slo.statistic, SloStatistic::Mean);
        assert_eq!(slo.threshold, 50.0);
        let slo: Slo = "per_user_tps:p50>=20".parse().unwrap();
        assert_eq!(slo.comparison, Comparison::GreaterOrEqual);
        assert_eq!(slo.threshold, 20.0);
    }

    #[test]
    fn canonical_form_round_trips() {
        for spec in [
            "ttft:p95<10000ms",
            "itl:p99.9<=45.5ms",
            "per_user_tps:avg>12",
        ] {
            let slo: Slo = spec.parse().unwrap();
            assert_eq!(slo.to_string(), spec);
            assert_eq!(slo.to_string().parse::<Slo>().unwrap(), slo);
        }
    }

    #[test]
    fn strict_and_inclusive_differ_at_the_threshold() {
        assert!(!Comparison::Less.holds(10.0, 10.0));
        assert!(Comparison::LessOrEqual.holds(10.0, 10.0));
        assert!(!Comparison::Greater.holds(10.0, 10.0));
        assert!(Comparison::GreaterOrEqual.holds(10.0, 10.0));
    }

    #[test]
    fn rejects_malformed_specs() {
        for spec in [
            "ttft",
            "ttft:p95",
            "bogus:p95<1ms",
            "ttft:p0<1ms",
            "ttft:p101<1ms",
            "ttft:q95<1ms",
            "ttft:p95<10000",
            "ttft:p95<abcms",
            "per_user_tps:p50>20ms",
        ] {
            assert!(spec.parse::<Slo>().is_err(), "{spec} should be rejected");
        }
        assert!(parse_all(&[]).is_err());
    }
}
