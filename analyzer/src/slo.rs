//! Service-level objectives given on the command line: `--slo ttft:p95<500ms`.
//!
//! An SLO is checked twice: over the run (the statistic of the metric over all counted
//! requests, e.g. p95 TTFT < 500 ms) and per request for goodput (the request's own value; for
//! a pooled-gap metric such as ITL, the statistic over the request's own gaps, so
//! `itl:p99<50ms` asks that 99 % of a request's gaps are under 50 ms).

use crate::analysis::Analysis;
use crate::facts::RequestFacts;
use crate::protocol::{Anchor, Protocol, Quantity, Stat};
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

    /// Whether one request meets the SLO.
    ///
    /// A request with a value meets it when the value passes. A request without one fails
    /// when it never reached a point the metric is timed to or from (no first output for a
    /// TTFT, no headers): what the SLO bounds never arrived. Any other request without a value
    /// (one output chunk for ITL, one token for TPOT) has nothing that could break the SLO and
    /// meets it.
    pub fn request_meets(&self, analysis: &Analysis<'_>, r: &RequestFacts) -> bool {
        let Some(m) = self.metric_index(analysis.protocol) else {
            return true;
        };
        let q = &analysis.protocol.metrics[m].quantity;
        let value = match q {
            Quantity::Gaps => quantity::value(
                r,
                &Quantity::GapStat { stat: self.stat },
                &analysis.context(),
            ),
            _ => analysis.value_of(r, m),
        };
        match value {
            Some(v) => self.passes(v),
            None => !never_arrived(q, r),
        }
    }

    /// The run-level value of the SLO's statistic and whether it passes. With no value to
    /// take the statistic of, the run meets the SLO exactly when it has counted requests and
    /// each of them meets it ([`Slo::request_meets`]), so the verdict and goodput agree.
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
        let met = match v {
            Some(v) => self.passes(v),
            None => {
                let n = analysis.counted.len();
                n > 0 && (0..n).all(|i| self.request_meets(analysis, analysis.request(i)))
            }
        };
        (v, met)
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
mod tests {
    use super::*;
    use crate::analysis::AnalyzeOptions;
    use crate::dataset::tests::dataset_of;
    use crate::facts::tests::{chunk, record, tool_call_stream};
    use crate::protocol::builtin;
    use tokentrace_format::Channel;

    /// The run-level verdict and the goodput of `slo` over `records` under `protocol`.
    fn verdict_and_goodput(
        protocol: &str,
        slo: &str,
        records: &[tokentrace_format::RequestRecord],
    ) -> ((Option<f64>, bool), u64, usize) {
        let p = builtin::find(protocol).unwrap();
        let slo = Slo::parse(slo).unwrap().resolve(&p).unwrap();
        let dataset = dataset_of(records, p.chunk_rules());
        let options = AnalyzeOptions {
            include_warmup: false,
            slos: vec![slo.clone()],
        };
        let analysis = Analysis::new(&p, &dataset, &[0], &options);
        let good = (0..analysis.counted.len())
            .filter(|&i| slo.request_meets(&analysis, analysis.request(i)))
            .count();
        let goodput = summary::aggregates(&p, &analysis, &analysis.run)
            .into_iter()
            .find(|(k, _)| k == "goodput")
            .and_then(|(_, v)| v["good_requests"].as_u64())
            .unwrap_or(u64::MAX);
        (slo.evaluate(&analysis), goodput, good)
    }

    #[test]
    fn a_tool_call_stream_has_a_ttft_and_its_slo_agrees_with_goodput() {
        let records = vec![tool_call_stream(), tool_call_stream()];
        // Sent at 1 µs, first tool-call text at 3 µs.
        let ((value, met), goodput, _) =
            verdict_and_goodput("tokentrace-v1", "ttft:p95<1ms", &records);
        assert_eq!(value, Some(0.002));
        assert!(met);
        assert_eq!(goodput, 2);
        let ((value, met), _, _) = verdict_and_goodput("tokentrace-v1", "itl:p99<1ms", &records);
        assert_eq!((value, met), (Some(0.002), true));
    }

    #[test]
    fn a_request_that_never_reached_the_timed_point_breaks_the_slo() {
        // capacity-v3 reads no tool-call deltas: these requests never had a first content
        // delta, so they cannot meet a TTFT objective, and the run does not either.
        let records = vec![tool_call_stream()];
        let ((value, met), _, good) = verdict_and_goodput("capacity-v3", "ttft:p95<1ms", &records);
        assert_eq!((value, met, good), (None, false, 0));
    }

    #[test]
    fn a_value_undefined_for_every_request_meets_the_slo_as_goodput_says() {
        // One output chunk each: no inter-token gap could break an ITL objective.
        let one = record(vec![chunk(3_000, Channel::Content, 4, None)]);
        let ((value, met), goodput, _) =
            verdict_and_goodput("tokentrace-v1", "itl:p99<1ms", &[one.clone(), one]);
        assert_eq!((value, met, goodput), (None, true, 2));
        // With no counted request there is nothing that met it.
        let ((_, met), _, _) = verdict_and_goodput("tokentrace-v1", "itl:p99<1ms", &[]);
        assert!(!met);
    }

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
