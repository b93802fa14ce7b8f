//! One protocol applied to a set of traces: which requests count, their values, the run context.

use crate::dataset::Dataset;
use crate::facts::{FactsOptions, RequestFacts};
use crate::protocol::{Count, Protocol, Quantity, TokenSource};
use crate::quantity::{self, EvalContext};
use crate::slo::Slo;
use crate::summary::{Rows, RunContext};
use serde_json::{Map, Value};
use tokentrace_format::Phase;

/// Choices that are not part of the protocol.
#[derive(Debug, Clone, Default)]
pub struct AnalyzeOptions {
    /// Count warmup requests too.
    pub include_warmup: bool,
    /// Service-level objectives for goodput.
    pub slos: Vec<Slo>,
}

/// What the facts pass must keep for `protocol` and `options`.
pub fn facts_options(protocol: &Protocol, options: &AnalyzeOptions) -> FactsOptions {
    let slo_needs_gaps = options.slos.iter().any(|slo| {
        protocol
            .metrics
            .iter()
            .find(|m| m.name == slo.metric)
            .is_some_and(|m| matches!(m.quantity, Quantity::Gaps))
    });
    FactsOptions {
        keep_gaps: protocol.needs_gaps() || slo_needs_gaps,
        gap_chunks: protocol.gap_chunks,
        threads: 1,
    }
}

/// A protocol applied to some of a dataset's traces.
pub struct Analysis<'a> {
    /// The protocol.
    pub protocol: &'a Protocol,
    /// All loaded requests.
    pub dataset: &'a Dataset,
    /// The traces analyzed (indices into `dataset.traces`).
    pub traces: Vec<u32>,
    /// Requests entering the metrics (indices into `dataset.requests`).
    pub counted: Vec<usize>,
    /// Requests of a counted phase whose outcome does not count.
    pub failed: Vec<usize>,
    /// Requests left out for their phase.
    pub excluded_phase: usize,
    /// SLOs, resolved against the protocol's metrics.
    pub slos: Vec<Slo>,
    /// Run-level facts.
    pub run: RunContext,
    /// Bootstrap confidence intervals to add to the report (None: none).
    pub bootstrap: Option<Bootstrap>,
}

/// Bootstrap confidence intervals of each metric's mean and percentiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bootstrap {
    /// Resamples.
    pub resamples: usize,
    /// Confidence level, e.g. 0.95.
    pub confidence: f64,
    /// Seed (results are reproducible).
    pub seed: u64,
}

impl<'a> Analysis<'a> {
    /// Applies `protocol` to the requests of `traces`.
    pub fn new(
        protocol: &'a Protocol,
        dataset: &'a Dataset,
        traces: &[u32],
        options: &AnalyzeOptions,
    ) -> Analysis<'a> {
        let mut phases = protocol.requests.phases.clone();
        if options.include_warmup && !phases.contains(&Phase::Warmup) {
            phases.push(Phase::Warmup);
        }
        let (mut counted, mut failed, mut excluded_phase) = (Vec::new(), Vec::new(), 0);
        for (i, r) in dataset.requests.iter().enumerate() {
            if !traces.contains(&r.trace) {
                continue;
            }
            if !phases.contains(&r.phase) {
                excluded_phase += 1;
            } else if protocol.requests.outcomes.contains(&r.outcome) {
                counted.push(i);
            } else {
                failed.push(i);
            }
        }
        let run = run_context(dataset, traces, &counted, &failed);
        Analysis {
            protocol,
            dataset,
            traces: traces.to_vec(),
            counted,
            failed,
            excluded_phase,
            slos: options.slos.clone(),
            run,
            bootstrap: None,
        }
    }

    /// The counted request `i`.
    pub fn request(&self, i: usize) -> &RequestFacts {
        &self.dataset.requests[self.counted[i]]
    }

    /// The evaluation context of the protocol.
    pub fn context(&self) -> EvalContext<'_> {
        EvalContext {
            sources: &self.protocol.token_sources,
            gaps: &self.dataset.gaps,
            method: self.protocol.percentile_method,
            summation: self.protocol.summation,
            std: self.protocol.std,
        }
    }

    /// Value of metric `m` for any request of the dataset (failed ones too).
    pub fn value_of(&self, r: &RequestFacts, m: usize) -> Option<f64> {
        quantity::value(r, &self.protocol.metrics[m].quantity, &self.context())
    }
}

impl Rows for Analysis<'_> {
    fn len(&self) -> usize {
        self.counted.len()
    }

    fn value(&self, i: usize, metric: usize) -> Option<f64> {
        self.value_of(self.request(i), metric)
    }

    fn pooled(&self, i: usize, metric: usize, out: &mut Vec<f64>) {
        let r = self.request(i);
        if matches!(self.protocol.metrics[metric].quantity, Quantity::Gaps)
            && !self.dataset.gaps.is_empty()
        {
            out.extend(r.gaps(&self.dataset.gaps).iter().map(|&g| g as f64 / 1e6));
        } else if let Some(v) = self.value_of(r, metric) {
            out.push(v);
        }
    }

    fn weight(&self, i: usize, metric: usize) -> f64 {
        match self.protocol.metrics[metric].weight {
            None => 1.0,
            Some(w) => quantity::count(self.request(i), w.count, &self.protocol.token_sources)
                .map_or(0.0, |n| n.saturating_sub(u64::from(w.minus)) as f64),
        }
    }

    fn count(&self, i: usize, count: Count) -> Option<u64> {
        quantity::count(self.request(i), count, &self.protocol.token_sources)
    }

    fn token_source(&self, i: usize) -> Option<TokenSource> {
        quantity::output_tokens(self.request(i), &self.protocol.token_sources).map(|(_, s)| s)
    }

    fn meets_slos(&self, i: usize) -> Option<bool> {
        if self.slos.is_empty() {
            return None;
        }
        let r = self.request(i);
        Some(self.slos.iter().all(|slo| slo.request_meets(self, r)))
    }
}

/// Wall clock, counts and client health of the analyzed traces.
fn run_context(
    dataset: &Dataset,
    traces: &[u32],
    counted: &[usize],
    failed: &[usize],
) -> RunContext {
    // Map event times to the realtime clock through each trace's anchor so that shards
    // recorded on different hosts line up.
    let realtime = |r: &RequestFacts, t: u64| {
        let anchor = dataset.traces[r.trace as usize].header.anchor.realtime_ns;
        anchor.saturating_add(t)
    };
    let all = counted.iter().chain(failed).map(|&i| &dataset.requests[i]);
    let first = all.clone().map(|r| realtime(r, r.send_ns)).min();
    let last = all.map(|r| realtime(r, r.end_ns)).max();
    let measured_ms = match (first, last) {
        (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e6),
        _ => None,
    };
    // An imported run keeps the window its tool divided throughputs by; use it when the run
    // is one trace, so throughputs match the tool's own.
    let wall_clock_ms = match traces {
        [t] => imported_window_ms(&dataset.traces[*t as usize].manifest).or(measured_ms),
        _ => measured_ms,
    };
    let mut client_health = Map::new();
    let mut health_flags = Vec::new();
    for &t in traces {
        let info = &dataset.traces[t as usize];
        let prefix = if traces.len() > 1 {
            format!("{}:", info.label)
        } else {
            String::new()
        };
        if info.integrity != "ok" {
            health_flags.push(format!("{prefix}trace_integrity_{}", info.integrity));
        }
        let Some(end) = &info.run_end else {
            health_flags.push(format!("{prefix}run_not_finished"));
            continue;
        };
        for (key, value) in &end.client_health {
            client_health.insert(format!("{prefix}{key}"), value.clone());
        }
        health_flags.extend(
            health_flags_of(&end.client_health, end.end_ns)
                .into_iter()
                .map(|f| format!("{prefix}{f}")),
        );
    }
    RunContext {
        wall_clock_ms,
        completed: counted.len() as u64,
        failed: failed.len() as u64,
        client_health,
        health_flags,
    }
}

/// The measurement window an importer kept from the source tool, in ms: AIPerf's profiling
/// phase (`extra.aiperf.phase_window.profiling`), or vLLM's benchmark `duration`.
fn imported_window_ms(manifest: &tokentrace_format::Manifest) -> Option<f64> {
    if let Some(window) = manifest
        .extra
        .get("aiperf")
        .and_then(|a| a.pointer("/phase_window/profiling"))
    {
        let start = window.get("start_realtime_ns")?.as_u64()?;
        let end = window.get("end_realtime_ns")?.as_u64()?;
        return (end > start).then(|| (end - start) as f64 / 1e6);
    }
    let seconds = manifest.extra.get("vllm")?.get("duration")?.as_f64()?;
    (seconds > 0.0).then_some(seconds * 1e3)
}

/// Flags a client whose own state may have disturbed the measurement.
pub fn health_flags_of(
    health: &std::collections::BTreeMap<String, Value>,
    run_ns: u64,
) -> Vec<String> {
    let get = |key: &str| health.get(key).and_then(Value::as_f64);
    let mut flags = Vec::new();
    if health
        .iter()
        .any(|(k, v)| k.contains("backpressure") && v.as_f64().unwrap_or(0.0) > 0.0)
    {
        flags.push("writer_backpressure".to_string());
    }
    // A timer more than 10 ms late means the client could not read sockets on time either.
    if get("max_sched_lag_ns").is_some_and(|lag| lag > 10e6) {
        flags.push("scheduler_lag_over_10ms".to_string());
    }
    if get("cpu_ns").is_some_and(|cpu| run_ns > 0 && cpu / run_ns as f64 > 0.8) {
        flags.push("client_cpu_over_80pct_of_a_core".to_string());
    }
    flags
}
