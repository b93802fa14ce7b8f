//! The capacity search's SLOs. They are the analyzer's [`Slo`], written in its one grammar
//! (`ttft:p95<10000ms`, the same strings `analyze --slo` takes); what is capacity's own is
//! here: resolving them against the report's definitions (`aiperf-0.10`), judging them on a
//! trial's per-request values, and the report's `slo` block.

use crate::definitions::AiperfDefinitions;
use crate::error::CapacityError;
use crate::metrics::{TrialMetrics, KEPT_METRICS};
use serde_json::{json, Map, Value};
use std::str::FromStr;
use tokentrace_analyzer::protocol::Stat;
pub use tokentrace_analyzer::slo::{Comparison, Dimension, Slo, SloError};

/// An SLO resolved against the capacity report's definitions: its metric is one of the
/// `aiperf-0.10` metrics a trial's block keeps per-request values of, its threshold in that
/// metric's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialSlo(Slo);

impl TrialSlo {
    /// Resolves `slo`; fails when the report's definitions have no such metric or the unit
    /// does not fit it.
    pub fn resolve(slo: &Slo) -> Result<TrialSlo, CapacityError> {
        let definitions = AiperfDefinitions::builtin()?;
        let resolved = slo.clone().resolve(&definitions.protocol)?;
        if !KEPT_METRICS.contains(&resolved.metric.as_str()) {
            return Err(CapacityError::BadSlo {
                spec: slo.text.clone(),
                why: format!(
                    "the capacity report keeps no per-request `{}` (metrics: {})",
                    resolved.metric,
                    KEPT_METRICS.join(", ")
                ),
            });
        }
        Ok(TrialSlo(resolved))
    }

    /// The resolved SLO.
    pub fn slo(&self) -> &Slo {
        &self.0
    }

    /// The statistic's value in a trial, None when the trial has no value to take it of.
    pub fn observe(&self, metrics: &TrialMetrics) -> Option<f64> {
        metrics.values_of(&self.0.metric)?;
        metrics.statistics(&self.0.metric, &[self.0.stat])[0]
    }

    /// Whether the trial meets the objective. A trial with nothing to measure fails.
    pub fn holds(&self, metrics: &TrialMetrics) -> bool {
        self.observe(metrics).is_some_and(|v| self.0.passes(v))
    }

    /// The report's description of this objective (the fixture's `slo` block).
    pub fn report_block(&self) -> Value {
        let slo = &self.0;
        let mut block = Map::new();
        block.insert("metric".into(), json!(slo.metric));
        match slo.stat {
            Stat::Percentile(p) => block.insert("percentile".into(), number(p)),
            other => {
                let key = AiperfDefinitions::builtin()
                    .map_or_else(|_| other.key(), |d| d.protocol.stat_key(other));
                block.insert("statistic".into(), json!(key))
            }
        };
        let key = match slo.unit.dimension() {
            Dimension::Time => "threshold_ms",
            _ => "threshold_tps",
        };
        block.insert(key.into(), number(slo.threshold));
        block.insert("comparison".into(), json!(comparison_name(slo.comparison)));
        block.insert("all_confirmation_trials_must_pass".into(), json!(true));
        Value::Object(block)
    }
}

impl FromStr for TrialSlo {
    type Err = CapacityError;

    /// Parses and resolves one spec.
    fn from_str(spec: &str) -> Result<TrialSlo, CapacityError> {
        TrialSlo::resolve(&Slo::parse(spec)?)
    }
}

/// The name used in the report's `slo.comparison`.
pub fn comparison_name(comparison: Comparison) -> &'static str {
    match comparison {
        Comparison::Less => "strictly_less_than",
        Comparison::LessOrEqual => "less_than_or_equal",
        Comparison::Greater => "strictly_greater_than",
        Comparison::GreaterOrEqual => "greater_than_or_equal",
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

/// Parses every spec given on the command line; at least one is required.
pub fn parse_all(specs: &[String]) -> Result<Vec<Slo>, CapacityError> {
    if specs.is_empty() {
        return Err(CapacityError::BadSlo {
            spec: String::new(),
            why: "at least one --slo is required".into(),
        });
    }
    Ok(specs
        .iter()
        .map(|s| Slo::parse(s))
        .collect::<Result<_, _>>()?)
}

/// Parses the specs a search directory keeps. Searches recorded before units were required
/// everywhere wrote a per-user throughput threshold without one (`per_user_tps:avg>12`);
/// such a spec is read with `tok/s`, its only unit then, so old directories re-analyze.
pub fn parse_stored(specs: &[String]) -> Result<Vec<Slo>, CapacityError> {
    if specs.is_empty() {
        return parse_all(specs);
    }
    let parse = |spec: &String| {
        Slo::parse(spec).or_else(|e| {
            let rate = ["per_user_tps:", "output_token_throughput_per_user:"]
                .iter()
                .any(|m| spec.starts_with(m));
            let bare = spec.ends_with(|c: char| c.is_ascii_digit());
            if rate && bare {
                Slo::parse(&format!("{spec}tok/s"))
            } else {
                Err(e)
            }
        })
    };
    Ok(specs.iter().map(parse).collect::<Result<_, _>>()?)
}

/// Resolves every SLO against the report's definitions.
pub fn resolve_all(slos: &[Slo]) -> Result<Vec<TrialSlo>, CapacityError> {
    slos.iter().map(TrialSlo::resolve).collect()
}

/// The report's `slo` value: the fixture's object for one objective, an array of them for several.
pub fn report_value(slos: &[TrialSlo]) -> Value {
    match slos {
        [one] => one.report_block(),
        many => Value::Array(many.iter().map(TrialSlo::report_block).collect()),
    }
}

#[cfg(test)]
#[path = "slo_tests.rs"]
mod tests;
