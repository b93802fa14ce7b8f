//! The definitions the capacity report's per-trial block is computed under: the built-in
//! `aiperf-0.10` protocol (AIPerf 0.10, the capacity fixture's version), read once.
//!
//! Everything comes from it: which requests count, how chunks are read, where output tokens
//! come from, the TTFT, request latency, ITL and per-user throughput quantities, the
//! statistics reported per metric and how they are taken (in ns, then converted), what a
//! negative time becomes and the span the throughputs divide by. [`crate::metrics`] evaluates
//! them with the analyzer's functions, so the block and `analyze --protocol aiperf-0.10` are
//! one arithmetic.
//!
//! It uses no module of the crate but [`crate::error`], so [`crate::metrics`], [`crate::slo`]
//! and [`crate::judge`] all build on it without depending on one another in a circle.

use crate::error::CapacityError;
use std::sync::OnceLock;
use tokentrace_analyzer::facts::ChunkRules;
use tokentrace_analyzer::protocol::{
    builtin, Protocol, Quantity, RequestFilter, Stat, TokenSource, WallClock,
};
use tokentrace_analyzer::quantity::EvalContext;
use tokentrace_analyzer::stats::{PercentileMethod, StdKind, Summation};
use tokentrace_analyzer::summary;
use tokentrace_format::{ChunkRecord, Outcome, RequestRecord};

/// The built-in protocol the block follows.
pub const REPORT_PROTOCOL: &str = "aiperf-0.10";

/// The protocol's TTFT metric.
pub const TTFT: &str = "time_to_first_token";
/// The protocol's request latency metric.
pub const REQUEST_LATENCY: &str = "request_latency";
/// The protocol's inter-token latency metric.
pub const ITL: &str = "inter_token_latency";
/// The protocol's output tokens per second per user.
pub const PER_USER_TPS: &str = "output_token_throughput_per_user";

/// How statistics are taken: the protocol's percentile method, summation and std.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatSettings {
    /// How percentiles are read.
    pub percentile_method: PercentileMethod,
    /// How means add values up.
    pub summation: Summation,
    /// Which standard deviation `std` is.
    pub std: StdKind,
}

/// The parts of the `aiperf-0.10` protocol the trial block is computed with.
#[derive(Debug, Clone, PartialEq)]
pub struct AiperfDefinitions {
    /// The protocol itself (SLOs resolve against it; statistics lists and keys).
    pub protocol: Protocol,
    /// Which requests count (measured and successful).
    pub requests: RequestFilter,
    /// How chunks are read (gap chunks, whether tool-call deltas are output).
    pub rules: ChunkRules,
    /// Where output tokens come from.
    pub token_sources: Vec<TokenSource>,
    /// Send to first output.
    pub ttft: Quantity,
    /// Send to last output.
    pub request_latency: Quantity,
    /// First to last output per output token after the first.
    pub itl: Quantity,
    /// Output tokens per second per user.
    pub per_user_tps: Quantity,
    /// How statistics are taken.
    pub stats: StatSettings,
    /// The span the throughputs and the benchmark duration divide by.
    pub wall_clock: WallClock,
}

impl AiperfDefinitions {
    /// Reads the definitions from the built-in `aiperf-0.10` protocol.
    pub fn from_builtin() -> Result<AiperfDefinitions, CapacityError> {
        let protocol = builtin::find(REPORT_PROTOCOL).map_err(|e| unknown(e.to_string()))?;
        AiperfDefinitions::from_protocol(protocol)
    }

    /// Reads the definitions from `protocol`; fails when it lacks a metric the block needs.
    pub fn from_protocol(protocol: Protocol) -> Result<AiperfDefinitions, CapacityError> {
        let quantity = |name: &str| {
            protocol
                .metrics
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.quantity.clone())
                .ok_or_else(|| unknown(format!("no metric `{name}`")))
        };
        Ok(AiperfDefinitions {
            ttft: quantity(TTFT)?,
            request_latency: quantity(REQUEST_LATENCY)?,
            itl: quantity(ITL)?,
            per_user_tps: quantity(PER_USER_TPS)?,
            wall_clock: protocol.wall_clock,
            requests: protocol.requests.clone(),
            rules: protocol.chunk_rules(),
            token_sources: protocol.token_sources.clone(),
            stats: StatSettings {
                percentile_method: protocol.percentile_method,
                summation: protocol.summation,
                std: protocol.std,
            },
            protocol,
        })
    }

    /// The built-in definitions, read once.
    pub fn builtin() -> Result<&'static AiperfDefinitions, CapacityError> {
        static DEFINITIONS: OnceLock<Result<AiperfDefinitions, String>> = OnceLock::new();
        DEFINITIONS
            .get_or_init(|| AiperfDefinitions::from_builtin().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|why| unknown(why.clone()))
    }

    /// Whether a record enters the block: a counted phase and a successful outcome.
    pub fn counts(&self, record: &RequestRecord) -> bool {
        self.requests.phases.contains(&record.meta.phase) && self.is_success(record.meta.outcome)
    }

    /// Whether a request that ended with `outcome` succeeded under AIPerf's definitions (a
    /// stream without `[DONE]` does: AIPerf reads a stream to its end).
    pub fn is_success(&self, outcome: Outcome) -> bool {
        self.requests.outcomes.contains(&outcome)
    }

    /// Whether a chunk is generated output under AIPerf's definitions: non-empty reasoning,
    /// content or (AIPerf parses them into response data) tool-call text.
    pub fn is_generated(&self, chunk: &ChunkRecord) -> bool {
        self.rules.counts_as_output(chunk.channel, chunk.text_len)
    }

    /// The statistics the protocol reports for `metric`, each with its key (`avg`, `p50`, …).
    pub fn reported(&self, metric: &str) -> Vec<(String, Stat)> {
        let stats = match self.protocol.metrics.iter().find(|m| m.name == metric) {
            Some(def) => self.protocol.stats_of(def),
            None => &self.protocol.stats,
        };
        stats
            .iter()
            .map(|&s| (self.protocol.stat_key(s), s))
            .collect()
    }

    /// How the protocol evaluates a request's quantities (token sources, negative times).
    pub fn context(&self) -> EvalContext<'_> {
        EvalContext::new(&self.protocol, &[])
    }

    /// The factor that brings a statistic of `metric`'s per-request values to its unit (1e-6
    /// for a time whose values are ns, `time_statistics = "ns"`); None when the values are in
    /// its unit.
    pub fn scale_of(&self, metric: &str) -> Option<f64> {
        let m = self
            .protocol
            .metrics
            .iter()
            .position(|m| m.name == metric)?;
        summary::ns_scale(&self.protocol, m)
    }

    /// `wanted` statistics of `metric`'s per-request `values` (in record order, as
    /// [`crate::metrics::TrialMetrics`] keeps them) under the protocol's settings, in the
    /// metric's unit.
    pub fn statistics(&self, metric: &str, values: &[f64], wanted: &[Stat]) -> Vec<Option<f64>> {
        let scale = self.scale_of(metric);
        summary::column_statistics(&self.protocol, values.to_vec(), scale, wanted)
    }

    /// One statistic of `metric`'s per-request `values`; None when there are none.
    pub fn statistic(&self, metric: &str, values: &[f64], stat: Stat) -> Option<f64> {
        self.statistics(metric, values, &[stat])[0]
    }
}

fn unknown(why: String) -> CapacityError {
    CapacityError::UnknownProtocol(REPORT_PROTOCOL.into(), why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_analyzer::protocol::{
        Anchor, Count, NegativeTimes, RateForm, TimeStatistics, WallClockRequests,
    };

    #[test]
    fn the_settings_are_the_aiperf_0_10_protocols() {
        let defs = AiperfDefinitions::from_builtin().unwrap();
        assert_eq!(
            defs.token_sources,
            [TokenSource::Usage, TokenSource::Chunks]
        );
        let interval = |to| Quantity::Interval {
            from: Anchor::Send,
            to,
        };
        assert_eq!(defs.ttft, interval(Anchor::FirstOutput));
        assert_eq!(defs.request_latency, interval(Anchor::LastOutput));
        assert!(matches!(
            defs.itl,
            Quantity::PerUnit {
                from: Anchor::FirstOutput,
                to: Anchor::LastOutput,
                count: Count::OutputTokens,
                minus: 1
            }
        ));
        assert_eq!(
            defs.stats,
            StatSettings {
                percentile_method: PercentileMethod::Linear,
                summation: Summation::Naive,
                std: StdKind::Population,
            }
        );
        let keys =
            |metric| -> Vec<String> { defs.reported(metric).into_iter().map(|(k, _)| k).collect() };
        assert_eq!(keys(TTFT), ["p50", "p95", "p99"]);
        assert_eq!(keys(PER_USER_TPS), ["avg", "p50", "p95"]);
        // AIPerf's arithmetic: ns statistics converted after, negative times clamped, the
        // window from the first send to the last output of a measured request, and per-user
        // throughput as the reciprocal of ITL in seconds.
        assert_eq!(defs.protocol.time_statistics, TimeStatistics::Ns);
        assert_eq!(defs.context().negative_times, NegativeTimes::Clamp);
        assert_eq!(
            (defs.scale_of(TTFT), defs.scale_of(PER_USER_TPS)),
            (Some(1e-6), None)
        );
        assert_eq!(
            defs.wall_clock,
            WallClock {
                from: Anchor::Send,
                to: Anchor::LastOutput,
                requests: WallClockRequests::Counted,
                imported_window: false,
            }
        );
        assert!(matches!(
            defs.per_user_tps,
            Quantity::Rate {
                form: RateForm::ReciprocalPerUnit,
                ..
            }
        ));
    }

    #[test]
    fn the_aiperf_0_10_request_filter_and_chunk_rules_are_the_aiperf_protocols() {
        // One copy of the 0.10 definitions AIPerf did not change in 0.13.
        let defs = AiperfDefinitions::from_builtin().unwrap();
        let aiperf = builtin::find("aiperf").unwrap();
        assert_eq!(defs.requests, aiperf.requests);
        assert_eq!(defs.rules, aiperf.chunk_rules());
        // The same quantities; 0.10 computes per-user throughput in another form (the
        // reciprocal of ITL), equal but for rounding.
        let same_form = |q: &Quantity| match q.clone() {
            Quantity::Rate {
                count,
                minus,
                from,
                to,
                ..
            } => Quantity::Rate {
                count,
                minus,
                from,
                to,
                form: RateForm::default(),
            },
            other => other,
        };
        for name in [TTFT, REQUEST_LATENCY, ITL, PER_USER_TPS] {
            let ours = defs.protocol.metrics.iter().find(|m| m.name == name);
            let theirs = aiperf.metrics.iter().find(|m| m.name == name);
            assert_eq!(
                ours.map(|m| same_form(&m.quantity)),
                theirs.map(|m| same_form(&m.quantity)),
                "{name}"
            );
        }
    }

    #[test]
    fn a_protocol_without_a_block_metric_is_refused() {
        let mut protocol = builtin::find(REPORT_PROTOCOL).unwrap();
        protocol.metrics.retain(|m| m.name != ITL);
        assert!(matches!(
            AiperfDefinitions::from_protocol(protocol),
            Err(CapacityError::UnknownProtocol(..))
        ));
    }
}
