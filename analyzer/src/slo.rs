//! Service-level objectives given on the command line: `--slo ttft:p95<500ms`.
//!
//! An SLO is checked twice: over the run (the statistic of the metric over all counted
//! requests, e.g. p95 TTFT < 500 ms) and per request for goodput (the request's own value; for
//! a pooled-gap metric such as ITL, the statistic over the request's own gaps, so
//! `itl:p99<50ms` asks that 99 % of a request's gaps are under 50 ms).

use crate::analysis::Analysis;
use crate::facts::RequestFacts;
use crate::protocol::{Protocol, Quantity, Stat};
use crate::quantity;
use crate::summary::{self, Rows};

/// An SLO: `metric:stat<threshold[unit]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// As written.
    pub text: String,
    /// Metric name as written, then as resolved against the protocol.
    pub metric: String,
    /// The statistic over the run.
    pub stat: Stat,
    /// Threshold in the metric's unit (ms for times).
    pub threshold: f64,
    /// `<=` instead of `<`.
    pub inclusive: bool,
}

/// A malformed or unresolvable SLO.
#[derive(Debug, thiserror::Error)]
#[error("--slo {text}: {reason}")]
pub struct SloError {
    /// As written.
    pub text: String,
    /// What is wrong.
    pub reason: String,
}

impl Slo {
    /// Parses `metric:stat<value[ms|s|us]` (or `<=`).
    pub fn parse(text: &str) -> Result<Slo, SloError> {
        let err = |reason: &str| SloError {
            text: text.to_string(),
            reason: reason.to_string(),
        };
        let (metric, rest) = text
            .split_once(':')
            .ok_or_else(|| err("expected METRIC:STAT<VALUE, e.g. ttft:p95<500ms"))?;
        let (stat, value, inclusive) = match rest.split_once("<=") {
            Some((s, v)) => (s, v, true),
            None => {
                let (s, v) = rest
                    .split_once('<')
                    .ok_or_else(|| err("expected `<` or `<=`"))?;
                (s, v, false)
            }
        };
        let stat = Stat::try_from(stat.trim().to_string()).map_err(|e| err(&e))?;
        let value = value.trim();
        let (number, scale) = if let Some(n) = value.strip_suffix("ms") {
            (n, 1.0)
        } else if let Some(n) = value
            .strip_suffix("us")
            .or_else(|| value.strip_suffix("µs"))
        {
            (n, 1e-3)
        } else if let Some(n) = value.strip_suffix('s') {
            (n, 1e3)
        } else {
            (value, 1.0)
        };
        let threshold: f64 = number
            .trim()
            .parse()
            .map_err(|_| err("threshold is not a number"))?;
        Ok(Slo {
            text: text.to_string(),
            metric: metric.trim().to_string(),
            stat,
            threshold: threshold * scale,
            inclusive,
        })
    }

    /// Maps the metric name to one of the protocol's metrics: its own name, the name plus
    /// `_ms`, or for the common short names (ttft, tpot, itl, e2e) what each protocol calls them.
    pub fn resolve(mut self, protocol: &Protocol) -> Result<Slo, SloError> {
        let names: Vec<&str> = protocol.metrics.iter().map(|m| m.name.as_str()).collect();
        let aliases: &[&str] = match self.metric.as_str() {
            "ttft" => &["time_to_first_token", "time_to_first_token_ms"],
            "tpot" => &["time_per_output_token_ms"],
            "itl" => &["inter_token_latency", "inter_token_latency_ms"],
            "e2e" => &[
                "e2el_ms",
                "e2e_latency_ms",
                "request_latency",
                "request_latency_ms",
            ],
            _ => &[],
        };
        let mut wanted = vec![self.metric.clone(), format!("{}_ms", self.metric)];
        wanted.extend(aliases.iter().map(|a| a.to_string()));
        match names.iter().find(|n| wanted.iter().any(|w| w == *n)) {
            Some(name) => {
                self.metric = name.to_string();
                Ok(self)
            }
            None => Err(SloError {
                text: self.text.clone(),
                reason: format!(
                    "protocol `{}` has no metric `{}` (metrics: {})",
                    protocol.name,
                    self.metric,
                    names.join(", ")
                ),
            }),
        }
    }

    fn passes(&self, value: f64) -> bool {
        if self.inclusive {
            value <= self.threshold
        } else {
            value < self.threshold
        }
    }

    fn metric_index(&self, protocol: &Protocol) -> Option<usize> {
        protocol.metrics.iter().position(|m| m.name == self.metric)
    }

    /// Whether one request meets the SLO. A request without a value (e.g. no second chunk
    /// for ITL) has nothing that could break it and meets it.
    pub fn request_meets(&self, analysis: &Analysis<'_>, r: &RequestFacts) -> bool {
        let Some(m) = self.metric_index(analysis.protocol) else {
            return true;
        };
        let value = match analysis.protocol.metrics[m].quantity {
            Quantity::Gaps => quantity::value(
                r,
                &Quantity::GapStat { stat: self.stat },
                &analysis.context(),
            ),
            _ => analysis.value_of(r, m),
        };
        value.is_none_or(|v| self.passes(v))
    }

    /// The run-level value of the SLO's statistic and whether it passes.
    pub fn evaluate(&self, analysis: &Analysis<'_>) -> (Option<f64>, bool) {
        let Some(m) = self.metric_index(analysis.protocol) else {
            return (None, false);
        };
        let p = analysis.protocol;
        let values = summary::column(analysis as &dyn Rows, m);
        let v = quantity::summarize(
            values,
            &[self.stat],
            p.percentile_method,
            p.summation,
            p.std,
        )[0];
        (v, v.is_some_and(|v| self.passes(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_operators() {
        let s = Slo::parse("ttft:p95<500ms").unwrap();
        assert_eq!(
            (s.metric.as_str(), s.stat, s.threshold, s.inclusive),
            ("ttft", Stat::Percentile(95.0), 500.0, false)
        );
        assert_eq!(Slo::parse("e2e:max<=2s").unwrap().threshold, 2000.0);
        assert!(Slo::parse("e2e:max<=2s").unwrap().inclusive);
        assert_eq!(Slo::parse("itl:p99<250us").unwrap().threshold, 0.25);
        assert!(Slo::parse("ttft<5").is_err());
        assert!(Slo::parse("ttft:p101<5").is_err());
        assert!(Slo::parse("ttft:p50<fast").is_err());
    }
}
