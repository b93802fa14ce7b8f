//! Whether a trial meets the SLOs, under the chosen protocol's definitions.
//!
//! `aiperf` (the default, the fixture's method) judges from the same per-request values the
//! report's metric blocks show ([`crate::metrics`]). Any other protocol the analyzer knows
//! (`capacity-v3`, `capacity-v4-reasoning`, `vllm`, …) judges through the analyzer: the SLO's
//! metric resolved against that protocol, its statistic under the protocol's percentile method
//! and request filter. The metric blocks stay AIPerf's, since the report's keys are AIPerf's.

use crate::error::CapacityError;
use crate::metrics::TrialMetrics;
use crate::slo::{Comparison, Slo, SloMetric, SloStatistic};
use std::path::{Path, PathBuf};
use tokentrace_analyzer::analysis::{facts_options, Analysis, AnalyzeOptions};
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::protocol::{builtin, Protocol};
use tokentrace_analyzer::slo::Slo as ProtocolSlo;

/// The protocol whose definitions the report's metric blocks follow.
pub const DEFAULT_PROTOCOL: &str = "aiperf";

/// Judges trials under one protocol.
#[derive(Debug, Clone)]
pub enum Judge {
    /// AIPerf's definitions, from the report's own metric values.
    Aiperf(Vec<Slo>),
    /// Another protocol, through the analyzer.
    Protocol {
        /// The protocol.
        protocol: Box<Protocol>,
        /// The SLOs resolved against it.
        slos: Vec<ProtocolSlo>,
    },
}

impl Judge {
    /// A judge for `protocol`; fails when the protocol is unknown or lacks an SLO's metric.
    pub fn new(protocol: &str, slos: &[Slo]) -> Result<Judge, CapacityError> {
        if protocol == DEFAULT_PROTOCOL {
            return Ok(Judge::Aiperf(slos.to_vec()));
        }
        let unknown = |why: String| CapacityError::UnknownProtocol(protocol.to_string(), why);
        let found = builtin::find(protocol).map_err(|e| unknown(e.to_string()))?;
        let resolved = slos
            .iter()
            .map(|slo| {
                let spec = protocol_spec(slo).map_err(|why| CapacityError::BadSlo {
                    spec: slo.to_string(),
                    why,
                })?;
                ProtocolSlo::parse(&spec)
                    .and_then(|s| s.resolve(&found))
                    .map_err(|e| CapacityError::BadSlo {
                        spec: slo.to_string(),
                        why: e.to_string(),
                    })
            })
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

/// The analyzer's spelling of an SLO (`ttft`, `itl`, `e2e`; `mean`; `<`/`<=` only).
fn protocol_spec(slo: &Slo) -> Result<String, String> {
    let metric = match slo.metric {
        SloMetric::Ttft => "ttft",
        SloMetric::Itl => "itl",
        SloMetric::RequestLatency => "e2e",
        SloMetric::PerUserOutputThroughput => {
            return Err("per_user_tps is judged under the aiperf protocol only".into())
        }
    };
    let statistic = match slo.statistic {
        SloStatistic::Percentile(p) => format!("p{p}"),
        SloStatistic::Mean => "mean".into(),
    };
    let op = match slo.comparison {
        Comparison::Less => "<",
        Comparison::LessOrEqual => "<=",
        _ => return Err("only < and <= are supported outside the aiperf protocol".into()),
    };
    Ok(format!("{metric}:{statistic}{op}{}ms", slo.threshold))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_protocols_resolve_the_slo_or_refuse_it() {
        let slos: Vec<Slo> = vec!["ttft:p95<10000ms".parse().unwrap()];
        assert!(matches!(Judge::new("aiperf", &slos), Ok(Judge::Aiperf(_))));
        match Judge::new("capacity-v3", &slos) {
            Ok(Judge::Protocol { protocol, slos }) => {
                assert_eq!(protocol.name, "capacity-v3");
                assert_eq!(slos[0].metric, "ttft_ms");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Judge::new("no-such-protocol", &slos),
            Err(CapacityError::UnknownProtocol(..))
        ));
        let rate: Vec<Slo> = vec!["per_user_tps:p50>20".parse().unwrap()];
        assert!(matches!(
            Judge::new("capacity-v3", &rate),
            Err(CapacityError::BadSlo { .. })
        ));
    }

    #[test]
    fn specs_in_the_analyzer_spelling() {
        let slo: Slo = "request_latency:avg<=2s".parse().unwrap();
        assert_eq!(protocol_spec(&slo).unwrap(), "e2e:mean<=2000ms");
        let slo: Slo = "itl:p99.5<40ms".parse().unwrap();
        assert_eq!(protocol_spec(&slo).unwrap(), "itl:p99.5<40ms");
    }
}
