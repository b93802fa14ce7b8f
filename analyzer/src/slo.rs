//! Service-level objectives over an analysis: `--slo ttft:p95<500ms`.
//!
//! An SLO is checked twice: over the run (the statistic of the metric over all counted
//! requests, e.g. p95 TTFT < 500 ms) and per request for goodput (the request's own value; for
//! a pooled-gap metric such as ITL, the statistic over the request's own gaps, so
//! `itl:p99<50ms` asks that 99 % of a request's gaps are under 50 ms). The grammar, the
//! resolution against a protocol and the per-request check are in [`crate::objective`].

use crate::analysis::Analysis;
use crate::facts::RequestFacts;
use crate::summary::{self, Rows};

pub use crate::objective::{Comparison, Dimension, Slo, SloError, Unit};

impl Slo {
    /// Whether one request of `analysis` meets the SLO (see [`Slo::meets`]).
    pub fn request_meets(&self, analysis: &Analysis<'_>, r: &RequestFacts) -> bool {
        self.meets(analysis.protocol, &analysis.context(), r)
    }

    /// The run-level value of the SLO's statistic and whether it passes. With no value to
    /// take the statistic of, the run meets the SLO exactly when it has counted requests and
    /// each of them meets it ([`Slo::request_meets`]), so the verdict and goodput agree.
    pub fn evaluate(&self, analysis: &Analysis<'_>) -> (Option<f64>, bool) {
        let Some(m) = self.metric_index(analysis.protocol) else {
            return (None, false);
        };
        let p = analysis.protocol;
        let (values, scale) = summary::statistic_column(p, analysis as &dyn Rows, m);
        let v = summary::column_statistics(p, values, scale, &[self.stat])[0];
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
}
