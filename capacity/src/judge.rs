//! Whether a trial meets the SLOs, under the chosen protocol's definitions.
//!
//! `aiperf` (the default, the fixture's method) judges from the same per-request values the
//! report's metric blocks show ([`crate::metrics`], under the built-in `aiperf-0.10`
//! definitions). Any other protocol the analyzer knows (`capacity-v3`,
//! `capacity-v4-reasoning`, `vllm`, …) judges through the analyzer: the same [`Slo`] value,
//! resolved against that protocol, its statistic under the protocol's percentile method and
//! request filter. The metric blocks stay AIPerf's, since the report's keys are AIPerf's.

use crate::error::CapacityError;
use crate::metrics::TrialMetrics;
use crate::slo::{self, Slo, TrialSlo};
use std::path::{Path, PathBuf};
use tokentrace_analyzer::analysis::{facts_options, Analysis, AnalyzeOptions};
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::protocol::{builtin, Protocol};

/// The protocol whose definitions the report's metric blocks follow (the name `--protocol`
/// takes; the definitions are the built-in `aiperf-0.10`, see [`crate::definitions`]).
pub const DEFAULT_PROTOCOL: &str = "aiperf";

/// Judges trials under one protocol.
#[derive(Debug, Clone)]
pub enum Judge {
    /// AIPerf's definitions, from the report's own metric values.
    Aiperf(Vec<TrialSlo>),
    /// Another protocol, through the analyzer.
    Protocol {
        /// The protocol.
        protocol: Box<Protocol>,
        /// The SLOs resolved against it.
        slos: Vec<Slo>,
    },
}

impl Judge {
    /// A judge for `protocol`; fails when the protocol is unknown or lacks an SLO's metric,
    /// or when the report's own definitions cannot describe an SLO (its `slo` block is
    /// AIPerf's under every protocol).
    pub fn new(protocol: &str, slos: &[Slo]) -> Result<Judge, CapacityError> {
        let described = slo::resolve_all(slos)?;
        if protocol == DEFAULT_PROTOCOL {
            return Ok(Judge::Aiperf(described));
        }
        let unknown = |why: String| CapacityError::UnknownProtocol(protocol.to_string(), why);
        let found = builtin::find(protocol).map_err(|e| unknown(e.to_string()))?;
        // The SLOs as given, not as resolved for the report: the analyzer resolves the
        // user's own spelling against this protocol.
        let resolved = slos
            .iter()
            .map(|slo| slo.clone().resolve(&found))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Judge::Protocol {
            protocol: Box::new(found),
            slos: resolved,
        })
    }

    /// True when every SLO holds for the trial in `trace` (whose AIPerf metrics are `metrics`)
    /// and, under another protocol, no measured request failed under that protocol's filter.
    pub fn slos_hold(&self, trace: &Path, metrics: &TrialMetrics) -> Result<bool, CapacityError> {
        match self {
            Judge::Aiperf(slos) => Ok(slos.iter().all(|s| s.holds(metrics))),
            Judge::Protocol { protocol, slos } => {
                let options = AnalyzeOptions {
                    include_warmup: false,
                    slos: slos.clone(),
                };
                let paths: [PathBuf; 1] = [trace.to_path_buf()];
                let dataset =
                    Dataset::load(&paths, facts_options(protocol, &options)).map_err(|e| {
                        CapacityError::Trace {
                            path: trace.to_path_buf(),
                            why: e.to_string(),
                        }
                    })?;
                let analysis = Analysis::new(protocol, &dataset, &[0], &options);
                // A request this protocol does not count (e.g. a stream without `[DONE]`
                // under capacity-v3) is a failed request, and a trial with one never passes.
                Ok(analysis.failed.is_empty() && slos.iter().all(|s| s.evaluate(&analysis).1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slos(specs: &[&str]) -> Vec<Slo> {
        specs.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn other_protocols_resolve_the_slo_or_refuse_it() {
        let ttft = slos(&["ttft:p95<10000ms"]);
        assert!(matches!(Judge::new("aiperf", &ttft), Ok(Judge::Aiperf(_))));
        match Judge::new("capacity-v3", &ttft) {
            Ok(Judge::Protocol { protocol, slos }) => {
                assert_eq!(protocol.name, "capacity-v3");
                assert_eq!(slos[0].metric, "ttft_ms");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Judge::new("no-such-protocol", &ttft),
            Err(CapacityError::UnknownProtocol(..))
        ));
        // capacity-v3 has no per-user throughput.
        let rate = slos(&["per_user_tps:p50>20tok/s"]);
        assert!(matches!(
            Judge::new("capacity-v3", &rate),
            Err(CapacityError::Slo(_))
        ));
        // The report's block describes AIPerf's metrics only, under every protocol.
        let decode = slos(&["decode_tok_s:p50>20tok/s"]);
        assert!(Judge::new("capacity-v3", &decode).is_err());
    }

    #[test]
    fn the_analyzer_takes_the_slo_as_it_is() {
        // Mean and seconds reach the analyzer unchanged: no spec is re-written in its
        // spelling and parsed again.
        let given = slos(&["request_latency:avg<=2s", "per_user_tps:p5>=10tok/s"]);
        match Judge::new("aiperf", &given) {
            Ok(Judge::Aiperf(trial)) => {
                assert_eq!(trial[0].slo().threshold, 2000.0);
                assert_eq!(trial[1].slo().metric, "output_token_throughput_per_user");
            }
            other => panic!("{other:?}"),
        }
        let latency = slos(&["request_latency:avg<=2s"]);
        match Judge::new("vllm", &latency) {
            Ok(Judge::Protocol { slos, .. }) => {
                assert_eq!(slos[0].metric, "e2el_ms");
                assert_eq!(slos[0].threshold, 2000.0);
            }
            other => panic!("{other:?}"),
        }
        // A lower bound, refused outside aiperf while the SLO went through text, is judged
        // by the analyzer too.
        assert!(Judge::new("capacity-v3", &slos(&["ttft:p50>1ms"])).is_ok());
    }
}
