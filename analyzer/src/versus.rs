//! One run under two protocols side by side (`analyze --protocol A --versus B`): which metrics
//! correspond, how their definitions differ, and how far each number moves when the
//! methodology changes.
//!
//! Metrics pair by their [`Concept`] (capacity-v3 `ttft_ms` with AIPerf `time_to_first_token`),
//! then metrics without one by an identical definition; the rest stand alone. Definitions are
//! the protocol pages' own sentences ([`methodology`]), so the comparison cannot drift from the
//! arithmetic.

use crate::analysis::Analysis;
use crate::methodology;
use crate::protocol::{Aggregate, Concept, Protocol, Stat};
use crate::summary::{self, number};
use serde_json::{json, Value};

/// One statistic of a metric pair.
#[derive(Debug, Clone, PartialEq)]
pub struct StatPair {
    /// The statistic (a median and a p50 are the same statistic).
    pub stat: Stat,
    /// Under protocol A, in A's unit.
    pub a: Option<f64>,
    /// Under protocol B, converted to A's unit when both are time units.
    pub b: Option<f64>,
}

impl StatPair {
    /// (B - A) / A in percent; None when either is absent or A is 0.
    pub fn change_pct(&self) -> Option<f64> {
        change(self.a, self.b)
    }
}

/// A metric of A, of B, or of both.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricPair {
    /// What both stand for, when the protocols say.
    pub concept: Option<Concept>,
    /// Index into A's metrics.
    pub a: Option<usize>,
    /// Index into B's metrics.
    pub b: Option<usize>,
    /// A's definition sentence.
    pub definition_a: Option<String>,
    /// B's definition sentence.
    pub definition_b: Option<String>,
    /// Statistics both protocols report (empty when only one side has the metric).
    pub stats: Vec<StatPair>,
    /// The unit of the values (A's, or B's when only B has it).
    pub unit: String,
}

impl MetricPair {
    /// Whether both sides define the metric in the same words.
    pub fn same_definition(&self) -> bool {
        self.a.is_some() && self.b.is_some() && self.definition_a == self.definition_b
    }
}

/// A run-level value both protocols compute the same way (the same aggregate kind over the
/// same count), each over its own requests and wall clock.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregatePair {
    /// A's key.
    pub key_a: String,
    /// B's key.
    pub key_b: String,
    /// The unit (A's).
    pub unit: &'static str,
    /// A's value.
    pub a: Option<f64>,
    /// B's value, in A's unit.
    pub b: Option<f64>,
}

impl AggregatePair {
    /// (B - A) / A in percent.
    pub fn change_pct(&self) -> Option<f64> {
        change(self.a, self.b)
    }
}

/// (B - A) / |A| in percent; None when either is absent or A is 0.
fn change(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 => Some((b - a) / a.abs() * 100.0),
        _ => None,
    }
}

/// A protocol-wide rule both pages state, and whether they state it alike.
#[derive(Debug, Clone, PartialEq)]
pub struct RulePair {
    /// What the rule is about (`requests`, `distributions`, `output tokens`, `tool calls`).
    pub topic: &'static str,
    /// A's sentence.
    pub a: String,
    /// B's sentence.
    pub b: String,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Versus {
    /// A's name and version.
    pub protocol_a: String,
    /// B's name and version.
    pub protocol_b: String,
    /// Requests counted (A, B).
    pub counted: (usize, usize),
    /// Requests failed (A, B).
    pub failed: (usize, usize),
    /// The metric pairs, concepts first in [`Concept::ALL`] order.
    pub metrics: Vec<MetricPair>,
    /// Run-level values computed alike, in A's order.
    pub aggregates: Vec<AggregatePair>,
    /// Protocol-wide rules.
    pub rules: Vec<RulePair>,
}

/// Compares the same traces analyzed under two protocols.
pub fn versus(a: &Analysis<'_>, b: &Analysis<'_>) -> Versus {
    let (pa, pb) = (a.protocol, b.protocol);
    let sa = summary::metrics(pa, a);
    let sb = summary::metrics(pb, b);
    let summarized_a: Vec<usize> = sa.iter().map(|s| s.metric).collect();
    let summarized_b: Vec<usize> = sb.iter().map(|s| s.metric).collect();
    let mut pairs: Vec<(Option<usize>, Option<usize>, Option<Concept>)> = Vec::new();
    for concept in Concept::ALL {
        let find = |p: &Protocol, summarized: &[usize]| {
            summarized
                .iter()
                .copied()
                .find(|&m| p.metrics[m].concept == Some(concept))
        };
        let (ma, mb) = (find(pa, &summarized_a), find(pb, &summarized_b));
        if ma.is_some() || mb.is_some() {
            pairs.push((ma, mb, Some(concept)));
        }
    }
    // Metrics without a shared concept: the same name and definition first (even when that B
    // metric already stands in a concept pair), then the same definition under another name.
    let mut used_b: Vec<usize> = pairs.iter().filter_map(|p| p.1).collect();
    for &ma in &summarized_a {
        if pairs.iter().any(|p| p.0 == Some(ma)) {
            continue;
        }
        let def = methodology::describe_metric(pa, &pa.metrics[ma]);
        let same_definition = |mb: usize| methodology::describe_metric(pb, &pb.metrics[mb]) == def;
        let mb = summarized_b
            .iter()
            .copied()
            .find(|&mb| pb.metrics[mb].name == pa.metrics[ma].name && same_definition(mb))
            .or_else(|| {
                summarized_b
                    .iter()
                    .copied()
                    .find(|&mb| !used_b.contains(&mb) && same_definition(mb))
            });
        used_b.extend(mb);
        pairs.push((Some(ma), mb, None));
    }
    pairs.extend(
        summarized_b
            .iter()
            .filter(|mb| !used_b.contains(mb))
            .map(|&mb| (None, Some(mb), None)),
    );
    let metrics = pairs
        .into_iter()
        .map(|(ma, mb, concept)| {
            let stats_a = ma.and_then(|m| sa.iter().find(|s| s.metric == m));
            let stats_b = mb.and_then(|m| sb.iter().find(|s| s.metric == m));
            let unit_a = ma.map(|m| pa.metrics[m].unit.clone());
            let unit_b = mb.map(|m| pb.metrics[m].unit.clone());
            let scale = match (&unit_a, &unit_b) {
                (Some(ua), Some(ub)) => time_scale(ub)
                    .zip(time_scale(ua))
                    .map_or(1.0, |(b, a)| b / a),
                _ => 1.0,
            };
            let mut stats = Vec::new();
            if let (Some(x), Some(y)) = (stats_a, stats_b) {
                for &(stat, va) in &x.stats {
                    if stat == Stat::Samples {
                        continue;
                    }
                    if let Some(&(_, vb)) = y.stats.iter().find(|(s, _)| same_stat(*s, stat)) {
                        stats.push(StatPair {
                            stat,
                            a: va,
                            b: vb.map(|v| v * scale),
                        });
                    }
                }
            }
            MetricPair {
                concept,
                a: ma,
                b: mb,
                definition_a: ma.map(|m| methodology::describe_metric(pa, &pa.metrics[m])),
                definition_b: mb.map(|m| methodology::describe_metric(pb, &pb.metrics[m])),
                stats,
                unit: unit_a.or(unit_b).unwrap_or_default(),
            }
        })
        .collect();
    let rule = |topic, f: fn(&Protocol) -> String| RulePair {
        topic,
        a: f(pa),
        b: f(pb),
    };
    Versus {
        protocol_a: format!("{} v{}", pa.name, pa.version),
        protocol_b: format!("{} v{}", pb.name, pb.version),
        counted: (a.counted.len(), b.counted.len()),
        failed: (a.failed.len(), b.failed.len()),
        metrics,
        aggregates: aggregate_pairs(a, b),
        rules: vec![
            rule("requests", methodology::requests),
            rule("distributions", methodology::distributions),
            rule("output tokens", methodology::token_sources),
            rule("tool calls", methodology::tool_calls),
        ],
    }
}

/// The numeric aggregates of A and B computed the same way, paired in A's order.
fn aggregate_pairs(a: &Analysis<'_>, b: &Analysis<'_>) -> Vec<AggregatePair> {
    let numeric = |x: &Analysis<'_>| -> Vec<(Aggregate, String, Option<f64>)> {
        x.protocol
            .aggregates
            .iter()
            .zip(summary::aggregates(x.protocol, x, &x.run))
            .filter(|(_, (_, v))| v.is_number() || v.is_null())
            .map(|(def, (key, v))| (def.value.clone(), key, v.as_f64()))
            .collect()
    };
    let mut rest_b = numeric(b);
    let mut pairs = Vec::new();
    for (kind, key_a, va) in numeric(a) {
        let Some(i) = rest_b.iter().position(|(k, _, _)| same_aggregate(&kind, k)) else {
            continue;
        };
        let (kind_b, key_b, vb) = rest_b.remove(i);
        let scale = match (&kind, &kind_b) {
            (Aggregate::WallClockMs, Aggregate::WallClockS) => 1000.0,
            (Aggregate::WallClockS, Aggregate::WallClockMs) => 1e-3,
            _ => 1.0,
        };
        pairs.push(AggregatePair {
            key_a,
            key_b,
            unit: summary::aggregate_unit(&kind),
            a: va,
            b: vb.map(|v| v * scale),
        });
    }
    pairs
}

/// The same run-level quantity: equal kinds, or the wall clock in ms and in s.
fn same_aggregate(x: &Aggregate, y: &Aggregate) -> bool {
    let wall = |a: &Aggregate| matches!(a, Aggregate::WallClockMs | Aggregate::WallClockS);
    x == y || (wall(x) && wall(y))
}

/// Seconds per unit of a time unit; None for anything else.
fn time_scale(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1e-9),
        "us" | "µs" => Some(1e-6),
        "ms" => Some(1e-3),
        "s" => Some(1.0),
        _ => None,
    }
}

/// A median and a p50 are one statistic.
fn same_stat(x: Stat, y: Stat) -> bool {
    let fifty = |s: Stat| matches!(s, Stat::Median) || s == Stat::Percentile(50.0);
    x == y || (fifty(x) && fifty(y))
}

impl Versus {
    /// The metric names of a pair under A and B.
    pub fn names<'p>(
        &self,
        pair: &MetricPair,
        a: &'p Protocol,
        b: &'p Protocol,
    ) -> (Option<&'p str>, Option<&'p str>) {
        (
            pair.a.map(|m| a.metrics[m].name.as_str()),
            pair.b.map(|m| b.metrics[m].name.as_str()),
        )
    }

    /// The comparison as JSON (`analyze --versus B --format json`).
    pub fn to_json(&self, a: &Protocol, b: &Protocol) -> Value {
        let metrics: Vec<Value> = self
            .metrics
            .iter()
            .map(|pair| {
                let (na, nb) = self.names(pair, a, b);
                let stats: Vec<Value> = pair
                    .stats
                    .iter()
                    .map(|s| {
                        json!({
                            "stat": a.stat_key(s.stat),
                            "a": number(s.a),
                            "b": number(s.b),
                            "change_pct": number(s.change_pct()),
                        })
                    })
                    .collect();
                json!({
                    "concept": pair.concept.map(Concept::title),
                    "a": na,
                    "b": nb,
                    "unit": pair.unit,
                    "same_definition": pair.same_definition(),
                    "definition_a": pair.definition_a,
                    "definition_b": pair.definition_b,
                    "stats": stats,
                })
            })
            .collect();
        let aggregates: Vec<Value> = self
            .aggregates
            .iter()
            .map(|g| {
                json!({
                    "a": g.key_a,
                    "b": g.key_b,
                    "unit": g.unit,
                    "value_a": number(g.a),
                    "value_b": number(g.b),
                    "change_pct": number(g.change_pct()),
                })
            })
            .collect();
        let rules: Vec<Value> = self
            .rules
            .iter()
            .map(|r| json!({ "topic": r.topic, "same": r.a == r.b, "a": r.a, "b": r.b }))
            .collect();
        json!({
            "a": self.protocol_a,
            "b": self.protocol_b,
            "counted": { "a": self.counted.0, "b": self.counted.1 },
            "failed": { "a": self.failed.0, "b": self.failed.1 },
            "metrics": metrics,
            "aggregates": aggregates,
            "rules": rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_p50s_pair() {
        assert!(same_stat(Stat::Median, Stat::Percentile(50.0)));
        assert!(same_stat(Stat::Percentile(99.0), Stat::Percentile(99.0)));
        assert!(!same_stat(Stat::Median, Stat::Mean));
    }

    #[test]
    fn change_is_relative_to_a() {
        let s = StatPair {
            stat: Stat::Mean,
            a: Some(200.0),
            b: Some(150.0),
        };
        assert_eq!(s.change_pct(), Some(-25.0));
        let zero = StatPair { a: Some(0.0), ..s };
        assert_eq!(zero.change_pct(), None);
    }

    #[test]
    fn seconds_convert_to_milliseconds() {
        let scale = time_scale("s").zip(time_scale("ms")).map(|(b, a)| b / a);
        assert_eq!(scale, Some(1000.0));
        assert_eq!(time_scale("tok/s"), None);
    }
}
