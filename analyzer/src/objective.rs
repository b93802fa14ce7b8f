//! The one grammar of a service-level objective, `METRIC:STAT OP THRESHOLD UNIT`
//! (`ttft:p95<500ms`), shared by `analyze --slo` and `capacity --slo`: parsing, resolving the
//! metric against a protocol, and the per-request check.
//!
//! It sits below [`crate::analysis`] (whose options carry SLOs) and [`crate::slo`] (which
//! evaluates them over an analysis), so neither depends on the other through it.

use crate::facts::RequestFacts;
use crate::protocol::{Anchor, Count, Protocol, Quantity, Stat};
use crate::quantity::{self, EvalContext};
use std::fmt;
use std::str::FromStr;

/// The accepted form, for error messages.
const FORM: &str = "METRIC:STAT<THRESHOLD with a unit, e.g. ttft:p95<500ms";

/// The units a threshold can be written in, for error messages.
const UNITS: &str = "ms, s or us for times; tok/s (or tps, /s) for rates; tokens or chunks for counts; % for ratios";

/// An SLO: `metric:stat OP threshold unit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// As written.
    pub text: String,
    /// Metric name as written, then as resolved against the protocol.
    pub metric: String,
    /// The statistic over the run.
    pub stat: Stat,
    /// How the statistic must compare with the threshold.
    pub comparison: Comparison,
    /// The threshold's number as written, in `unit`.
    pub value: f64,
    /// The unit the threshold was written in.
    pub unit: Unit,
    /// The threshold in the metric's unit once resolved (ms for times, s for a metric kept in
    /// seconds); before that in the unit's base (ms, per second, a count, a fraction).
    pub threshold: f64,
}

/// How a statistic must relate to its threshold.
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
    /// The operator as written.
    pub fn symbol(self) -> &'static str {
        match self {
            Comparison::Less => "<",
            Comparison::LessOrEqual => "<=",
            Comparison::Greater => ">",
            Comparison::GreaterOrEqual => ">=",
        }
    }

    /// Whether `observed` relates to `threshold` as required.
    pub fn holds(self, observed: f64, threshold: f64) -> bool {
        match self {
            Comparison::Less => observed < threshold,
            Comparison::LessOrEqual => observed <= threshold,
            Comparison::Greater => observed > threshold,
            Comparison::GreaterOrEqual => observed >= threshold,
        }
    }
}

/// A threshold's unit. Each belongs to one [`Dimension`] and converts to its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `ms`.
    Millis,
    /// `us` (or `µs`).
    Micros,
    /// `s`.
    Seconds,
    /// `tok/s` (or `tps`).
    TokensPerSecond,
    /// `/s`.
    PerSecond,
    /// `tokens`.
    Tokens,
    /// `chunks`.
    Chunks,
    /// `%`.
    Percent,
}

/// What a threshold measures; a metric's quantity has one, and the two must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    /// A time (base: ms).
    Time,
    /// Something per second.
    Rate,
    /// A count of tokens.
    Tokens,
    /// A count of chunks.
    Chunks,
    /// A ratio (base: a fraction).
    Ratio,
}

impl Unit {
    /// The unit written as `text` (case-insensitive).
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_lowercase().as_str() {
            "ms" => Unit::Millis,
            "us" | "µs" => Unit::Micros,
            "s" => Unit::Seconds,
            "tok/s" | "tps" => Unit::TokensPerSecond,
            "/s" => Unit::PerSecond,
            "tokens" => Unit::Tokens,
            "chunks" => Unit::Chunks,
            "%" => Unit::Percent,
            _ => return None,
        })
    }

    /// The canonical spelling.
    pub fn suffix(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Micros => "us",
            Unit::Seconds => "s",
            Unit::TokensPerSecond => "tok/s",
            Unit::PerSecond => "/s",
            Unit::Tokens => "tokens",
            Unit::Chunks => "chunks",
            Unit::Percent => "%",
        }
    }

    /// What the unit measures.
    pub fn dimension(self) -> Dimension {
        match self {
            Unit::Millis | Unit::Micros | Unit::Seconds => Dimension::Time,
            Unit::TokensPerSecond | Unit::PerSecond => Dimension::Rate,
            Unit::Tokens => Dimension::Tokens,
            Unit::Chunks => Dimension::Chunks,
            Unit::Percent => Dimension::Ratio,
        }
    }

    /// `value` in the dimension's base unit. The factors are the ones both former parsers
    /// used, so thresholds keep their exact values.
    pub fn to_base(self, value: f64) -> f64 {
        match self {
            Unit::Micros => value * 1e-3,
            Unit::Seconds => value * 1e3,
            Unit::Percent => value / 100.0,
            _ => value,
        }
    }
}

impl Dimension {
    /// What a metric of quantity `q` measures, and the factor from the dimension's base to
    /// the metric's own unit.
    pub fn of(q: &Quantity) -> (Dimension, f64) {
        match *q {
            Quantity::Interval { .. }
            | Quantity::PerUnit { .. }
            | Quantity::Gaps
            | Quantity::GapStat { .. } => (Dimension::Time, 1.0),
            Quantity::IntervalSeconds { .. } => (Dimension::Time, 1e-3),
            Quantity::Rate { .. } => (Dimension::Rate, 1.0),
            Quantity::Ratio { .. } => (Dimension::Ratio, 1.0),
            Quantity::Count { count } => match count {
                Count::ContentChunks
                | Count::ReasoningChunks
                | Count::OutputChunks
                | Count::AllChunks => (Dimension::Chunks, 1.0),
                _ => (Dimension::Tokens, 1.0),
            },
        }
    }

    /// The units of this dimension, for error messages.
    fn units(self) -> &'static str {
        match self {
            Dimension::Time => "ms, s or us",
            Dimension::Rate => "tok/s (or tps, /s)",
            Dimension::Tokens => "tokens",
            Dimension::Chunks => "chunks",
            Dimension::Ratio => "%",
        }
    }
}

/// A malformed or unresolvable SLO.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--slo {text}: {reason}")]
pub struct SloError {
    /// As written.
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

/// Short names and the protocol metric names each may resolve to (after the metric's own name
/// and its name plus `_ms`), so one spelling works under every protocol that has the metric.
const ALIASES: &[(&[&str], &[&str])] = &[
    (
        &["ttft", "time_to_first_token"],
        &["ttft_ms", "time_to_first_token", "time_to_first_token_ms"],
    ),
    (
        &["tpot", "time_per_output_token"],
        &["tpot_ms", "time_per_output_token_ms"],
    ),
    (
        &["itl", "inter_token_latency"],
        &["itl_ms", "inter_token_latency", "inter_token_latency_ms"],
    ),
    (
        &["e2e", "e2el", "e2e_latency", "request_latency", "latency"],
        &[
            "e2e_ms",
            "e2el_ms",
            "e2e_latency_ms",
            "request_latency",
            "request_latency_ms",
        ],
    ),
    (
        &["per_user_tps", "output_token_throughput_per_user"],
        &["output_token_throughput_per_user"],
    ),
];

impl Slo {
    /// Parses `metric:stat OP number unit`: OP is `<`, `<=`, `>` or `>=`; stat `pNN`, `mean`
    /// (or `avg`), `median`, `min`, `max`, `std`, `sum` or `samples`; the unit is required.
    /// Whitespace is ignored anywhere.
    pub fn parse(text: &str) -> Result<Slo, SloError> {
        let err = |reason: String| SloError {
            text: text.to_string(),
            reason,
        };
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let (metric, rest) = compact
            .split_once(':')
            .filter(|(m, _)| !m.is_empty())
            .ok_or_else(|| err(format!("expected {FORM}")))?;
        let op_at = rest
            .find(['<', '>'])
            .ok_or_else(|| err("expected `<`, `<=`, `>` or `>=`".into()))?;
        let (stat, after) = rest.split_at(op_at);
        let (comparison, threshold) = match after {
            s if s.starts_with("<=") => (Comparison::LessOrEqual, &s[2..]),
            s if s.starts_with(">=") => (Comparison::GreaterOrEqual, &s[2..]),
            s if s.starts_with('<') => (Comparison::Less, &s[1..]),
            s => (Comparison::Greater, &s[1..]),
        };
        let stat = match stat.to_ascii_lowercase().as_str() {
            "avg" => Stat::Mean,
            other => Stat::try_from(other.to_string()).map_err(err)?,
        };
        let digits = threshold
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || ".eE".contains(c) || (i == 0 && c == '+')))
            .map_or(threshold.len(), |(i, _)| i);
        let (number, unit) = threshold.split_at(digits);
        let value: f64 = number
            .parse()
            .map_err(|_| err(format!("threshold `{threshold}` is not a number")))?;
        if !value.is_finite() || value < 0.0 {
            return Err(err(format!(
                "threshold `{threshold}` must be a finite, non-negative number"
            )));
        }
        if unit.is_empty() {
            let suggested = suggested_unit(metric);
            return Err(err(format!(
                "the threshold needs a unit, e.g. `{compact}{suggested}` ({UNITS})"
            )));
        }
        let unit =
            Unit::parse(unit).ok_or_else(|| err(format!("unknown unit `{unit}` ({UNITS})")))?;
        Ok(Slo {
            text: text.to_string(),
            metric: metric.to_string(),
            stat,
            comparison,
            value,
            unit,
            threshold: unit.to_base(value),
        })
    }

    /// Maps the metric name to one of the protocol's metrics (its own name, the name plus
    /// `_ms`, else what the protocol calls a short name such as ttft, tpot, itl, e2e or
    /// per_user_tps; case-insensitive), checks that the threshold's unit fits that metric and
    /// expresses the threshold in the metric's unit. Resolving again gives the same SLO.
    pub fn resolve(mut self, protocol: &Protocol) -> Result<Slo, SloError> {
        let err = |reason: String| SloError {
            text: self.text.clone(),
            reason,
        };
        let names: Vec<&str> = protocol.metrics.iter().map(|m| m.name.as_str()).collect();
        let wanted = self.metric.to_ascii_lowercase();
        let own = [wanted.clone(), format!("{wanted}_ms")];
        let aliases: &[&str] = ALIASES
            .iter()
            .find(|(short, _)| short.contains(&wanted.as_str()))
            .map_or(&[], |(_, targets)| targets);
        let by_name = |candidates: &[&str]| {
            protocol
                .metrics
                .iter()
                .find(|m| candidates.iter().any(|c| m.name.eq_ignore_ascii_case(c)))
        };
        let own_refs: Vec<&str> = own.iter().map(String::as_str).collect();
        let Some(def) = by_name(&own_refs).or_else(|| by_name(aliases)) else {
            return Err(err(format!(
                "protocol `{}` has no metric `{}` (metrics: {})",
                protocol.name,
                self.metric,
                names.join(", ")
            )));
        };
        let (dimension, factor) = Dimension::of(&def.quantity);
        if self.unit.dimension() != dimension {
            return Err(err(format!(
                "unit `{}` does not fit `{}` of protocol `{}`; write its threshold in {}",
                self.unit.suffix(),
                def.name,
                protocol.name,
                dimension.units()
            )));
        }
        self.metric = def.name.clone();
        self.threshold = self.unit.to_base(self.value) * factor;
        Ok(self)
    }

    /// Whether `value` (in the metric's unit) meets the threshold.
    pub fn passes(&self, value: f64) -> bool {
        self.comparison.holds(value, self.threshold)
    }

    /// The index of the (resolved) metric among the protocol's.
    pub fn metric_index(&self, protocol: &Protocol) -> Option<usize> {
        protocol.metrics.iter().position(|m| m.name == self.metric)
    }

    /// Whether one request meets the SLO under `protocol`, whose evaluation context is `cx`.
    ///
    /// A request with a value meets it when the value passes. A request without one fails
    /// when it never reached a point the metric is timed to or from (no first output for a
    /// TTFT, no headers): what the SLO bounds never arrived. Any other request without a value
    /// (one output chunk for ITL, one token for TPOT) has nothing that could break the SLO and
    /// meets it. For a pooled-gap metric the value is the statistic over the request's own
    /// gaps, so `itl:p99<50ms` asks that 99 % of a request's gaps are under 50 ms.
    pub fn meets(&self, protocol: &Protocol, cx: &EvalContext<'_>, r: &RequestFacts) -> bool {
        let Some(m) = self.metric_index(protocol) else {
            return true;
        };
        let q = &protocol.metrics[m].quantity;
        let value = match q {
            Quantity::Gaps => quantity::value(r, &Quantity::GapStat { stat: self.stat }, cx),
            _ => quantity::value(r, q, cx),
        };
        match value {
            Some(v) => self.passes(v),
            None => !never_arrived(q, r),
        }
    }
}

impl FromStr for Slo {
    type Err = SloError;

    fn from_str(text: &str) -> Result<Slo, SloError> {
        Slo::parse(text)
    }
}

impl fmt::Display for Slo {
    /// The canonical spelling, which parses back to the same objective.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}{}{}{}",
            self.metric,
            self.stat.key(),
            self.comparison.symbol(),
            self.value,
            self.unit.suffix()
        )
    }
}

/// The unit a bare threshold most likely meant, for the error's example: a rate for a
/// throughput-like name, else milliseconds (what a bare number used to mean).
fn suggested_unit(metric: &str) -> &'static str {
    let name = metric.to_ascii_lowercase();
    let rate = ["tps", "tok_s", "per_second", "throughput"];
    if rate.iter().any(|r| name.contains(r)) {
        "tok/s"
    } else {
        "ms"
    }
}

/// Whether the quantity is timed to or from an anchor the request never reached. Only the
/// second output is exempt: a single-chunk answer has no second one to be late.
fn never_arrived(q: &Quantity, r: &RequestFacts) -> bool {
    let missing = |a: Anchor| a != Anchor::SecondOutput && quantity::anchor_ns(r, a).is_none();
    match *q {
        Quantity::Interval { from, to }
        | Quantity::IntervalSeconds { from, to }
        | Quantity::PerUnit { from, to, .. }
        | Quantity::Rate { from, to, .. } => missing(from) || missing(to),
        Quantity::Ratio { .. }
        | Quantity::Count { .. }
        | Quantity::Gaps
        | Quantity::GapStat { .. } => false,
    }
}

#[cfg(test)]
#[path = "objective_tests.rs"]
mod tests;
