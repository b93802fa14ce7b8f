//! One protocol applied to a set of traces: which requests count, their values, the run context.

use crate::dataset::Dataset;
use crate::facts::{FactsOptions, RequestFacts, ToolCalls};
use crate::objective::Slo;
use crate::protocol::{Count, Protocol, Quantity, TokenSource, WallClockRequests};
use crate::quantity::{self, EvalContext};
use crate::summary::{Note, Rows, RunContext};
use serde_json::{Map, Value};
use tokentrace_format::{Outcome, Phase};

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
        tool_calls: protocol.tool_calls,
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
        let mut run = run_context(protocol, dataset, traces, &counted, &failed);
        let (missing_done, notes) = notes(protocol, dataset, &counted);
        run.missing_done = missing_done;
        run.notes = notes;
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
        EvalContext::new(self.protocol, &self.dataset.gaps)
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

    fn pooled_ns(&self, i: usize, metric: usize, out: &mut Vec<f64>) -> bool {
        let r = self.request(i);
        let q = &self.protocol.metrics[metric].quantity;
        if matches!(q, Quantity::Gaps) && !self.dataset.gaps.is_empty() {
            out.extend(r.gaps(&self.dataset.gaps).iter().map(|&g| g as f64));
        } else if let Some(v) = quantity::value_ns(r, q, &self.context()) {
            out.push(v);
        }
        true
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
        let (r, cx) = (self.request(i), self.context());
        Some(self.slos.iter().all(|slo| slo.meets(self.protocol, &cx, r)))
    }
}

/// The count of counted `missing_done` requests and the notes a report must show about the
/// counted requests: streams without `[DONE]` that were counted, requests re-sent after a
/// closed keep-alive connection, and tool-call deltas the protocol does not count as output.
fn notes(protocol: &Protocol, dataset: &Dataset, counted: &[usize]) -> (u64, Vec<Note>) {
    let requests = || counted.iter().map(|&i| &dataset.requests[i]);
    let missing_done = requests()
        .filter(|r| r.outcome == Outcome::MissingDone)
        .count() as u64;
    let mut notes = Vec::new();
    if missing_done > 0 {
        notes.push(Note {
            key: "missing_done".into(),
            requests: missing_done,
            text: format!(
                "{missing_done} counted request(s) ended cleanly after a finish_reason but without data: [DONE] (outcome missing_done); protocol {} counts them as successful",
                protocol.name
            ),
        });
    }
    let retried = requests().filter(|r| r.retries > 0).count() as u64;
    if retried > 0 {
        notes.push(Note {
            key: "retried".into(),
            requests: retried,
            text: format!(
                "{retried} counted request(s) were sent a second time on a fresh connection: their reused keep-alive connection had been closed by the server before any response byte; times count from the second send"
            ),
        });
    }
    if protocol.tool_calls == ToolCalls::Ignored {
        let with_tools = requests().filter(|r| r.tool_chunks > 0).count() as u64;
        let tools_only = requests()
            .filter(|r| r.tool_chunks > 0 && r.output_chunks() == 0)
            .count();
        if with_tools > 0 {
            let consequence = if crate::methodology::uses_choices(protocol) {
                "it times them as events carrying a choice, but no chunk-based output count includes their text".to_string()
            } else {
                format!("{tools_only} of them had no other output, so their TTFT and inter-token latencies are undefined")
            };
            notes.push(Note {
                key: "tool_calls_not_output".into(),
                requests: with_tools,
                text: format!(
                    "{with_tools} counted request(s) streamed tool-call deltas, which protocol {} does not count as output; {consequence}",
                    protocol.name
                ),
            });
        }
    }
    (missing_done, notes)
}

/// Wall clock, counts and client health of the analyzed traces.
fn run_context(
    protocol: &Protocol,
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
    let clock = &protocol.wall_clock;
    let spanned: &[usize] = match clock.requests {
        WallClockRequests::All => failed,
        WallClockRequests::Counted => &[],
    };
    let spans = counted
        .iter()
        .chain(spanned)
        .map(|&i| &dataset.requests[i])
        .filter_map(|r| {
            let (from, to) = quantity::span_ns(r, clock)?;
            Some((realtime(r, from), realtime(r, to)))
        });
    let first = spans.clone().map(|(from, _)| from).min();
    let last = spans.map(|(_, to)| to).max();
    let measured_ns = match (first, last) {
        (Some(a), Some(b)) if b > a => Some(b - a),
        _ => None,
    };
    // An imported run keeps the window its tool divided throughputs by; use it when the run
    // is one trace, so throughputs match the tool's own, unless the protocol spans its own.
    let wall_clock_ns = match traces {
        [t] if clock.imported_window => {
            imported_window_ns(&dataset.traces[*t as usize].manifest).or(measured_ns)
        }
        _ => measured_ns,
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
        // Sorted by key, as reports have always listed them.
        if let Ok(Value::Object(health)) = serde_json::to_value(&end.client_health) {
            let sorted: std::collections::BTreeMap<String, Value> = health.into_iter().collect();
            for (key, value) in sorted {
                client_health.insert(format!("{prefix}{key}"), value);
            }
        }
        health_flags.extend(
            health_flags_of(&end.client_health, end.end_ns)
                .into_iter()
                .map(|f| format!("{prefix}{f}")),
        );
    }
    RunContext {
        wall_clock_ms: wall_clock_ns.map(|ns| ns as f64 / 1e6),
        wall_clock_ns,
        completed: counted.len() as u64,
        failed: failed.len() as u64,
        client_health,
        health_flags,
        ..RunContext::default()
    }
}

/// The measurement window an importer kept from the source tool, in ns (AIPerf's profiling
/// phase, vLLM's benchmark `duration`).
fn imported_window_ns(manifest: &tokentrace_format::Manifest) -> Option<u64> {
    manifest
        .window()
        .map(|w| w.duration_ns)
        .filter(|&ns| ns > 0)
}

/// Flags a client whose own state may have disturbed the measurement.
pub fn health_flags_of(health: &tokentrace_format::ClientHealth, run_ns: u64) -> Vec<String> {
    let mut flags = Vec::new();
    if health.backpressure_events.is_some_and(|n| n > 0) {
        flags.push("writer_backpressure".to_string());
    }
    // A timer more than 10 ms late means the client's runtime could not send requests on time
    // either (nor, on the hyper client, read responses).
    if health.max_sched_lag_ns.is_some_and(|lag| lag > 10_000_000) {
        flags.push("scheduler_lag_over_10ms".to_string());
    }
    if health
        .cpu_ns
        .is_some_and(|cpu| run_ns > 0 && cpu as f64 / run_ns as f64 > 0.8)
    {
        flags.push("client_cpu_over_80pct_of_a_core".to_string());
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::tests::dataset_of;
    use crate::facts::tests::{chunk, record, tool_call_stream};
    use crate::protocol::builtin;
    use crate::report;
    use tokentrace_format::{Channel, RequestRecord};

    /// A complete answer whose stream ended after its finish_reason without `[DONE]`.
    pub(crate) fn without_done(id: u64) -> RequestRecord {
        let mut r = record(vec![
            chunk(3_000, Channel::Content, 4, None),
            chunk(5_000, Channel::Content, 4, None),
            chunk(6_000, Channel::Finish, 0, None),
        ]);
        r.meta.id = id;
        r.meta.outcome = Outcome::MissingDone;
        r.meta.error = Some("stream ended after 3 events without [DONE]".into());
        r
    }

    fn analyze<'a>(protocol: &'a Protocol, dataset: &'a Dataset) -> Analysis<'a> {
        Analysis::new(protocol, dataset, &[0], &AnalyzeOptions::default())
    }

    fn ok(id: u64) -> RequestRecord {
        let mut r = without_done(id);
        r.meta.outcome = Outcome::Ok;
        r.meta.error = None;
        r
    }

    #[test]
    fn missing_done_counts_where_the_peer_needs_no_done_and_every_report_says_so() {
        let records = vec![ok(1), without_done(2), ok(3)];
        for name in ["tokentrace-v1", "aiperf", "vllm", "sglang", "guidellm"] {
            let p = builtin::find(name).unwrap();
            let dataset = dataset_of(&records, p.chunk_rules());
            let a = analyze(&p, &dataset);
            assert_eq!((a.run.completed, a.run.failed), (3, 0), "{name}");
            assert_eq!(a.run.missing_done, 1, "{name}");
            assert_eq!(a.run.notes.len(), 1, "{name}");
            assert_eq!(a.run.notes[0].key, "missing_done");
            let json = report::json_report(&a);
            assert_eq!(json["notes"][0]["requests"], 1, "{name}: {json}");
            let table = report::table::render(&a, "");
            assert!(
                table.contains("note: 1 counted request(s) ended"),
                "{table}"
            );
        }
        let v1 = builtin::find("tokentrace-v1").unwrap();
        let dataset = dataset_of(&records, v1.chunk_rules());
        let json = report::json_report(&analyze(&v1, &dataset));
        assert_eq!(json["requests"]["missing_done"], 1);
        // The failure counts and aggregates stay one story.
        assert_eq!(json["aggregates"]["completed"], 3);
        assert_eq!(json["aggregates"]["failed"], 0);
    }

    #[test]
    fn the_capacity_protocols_keep_missing_done_a_failure_and_clean_reports_their_keys() {
        let records = vec![ok(1), without_done(2), ok(3)];
        for name in ["capacity-v3", "capacity-v4-reasoning"] {
            let p = builtin::find(name).unwrap();
            let dataset = dataset_of(&records, p.chunk_rules());
            let a = analyze(&p, &dataset);
            assert_eq!((a.run.completed, a.run.failed), (2, 1), "{name}");
            let json = report::json_report(&a);
            assert_eq!(json["failed"], 1);
            assert_eq!(json["failures"][0]["outcome"], "missing_done");
            // Nothing counted needs a note, so the report keeps the harness's keys.
            assert!(json.get("notes").is_none(), "{name}");
        }
        let vllm = builtin::find("vllm").unwrap();
        let clean = dataset_of(&[ok(1)], vllm.chunk_rules());
        let json = report::json_report(&analyze(&vllm, &clean));
        assert!(json.get("notes").is_none() && json.get("missing_done").is_none());
    }

    #[test]
    fn tool_calls_a_protocol_ignores_are_noted() {
        let records = vec![tool_call_stream(), ok(2)];
        let sglang = builtin::find("sglang").unwrap();
        let dataset = dataset_of(&records, sglang.chunk_rules());
        let a = analyze(&sglang, &dataset);
        assert_eq!(a.run.notes.len(), 1);
        let note = &a.run.notes[0];
        assert_eq!(
            (note.key.as_str(), note.requests),
            ("tool_calls_not_output", 1)
        );
        assert!(
            note.text.contains("1 of them had no other output"),
            "{}",
            note.text
        );
        let v3 = builtin::find("capacity-v3").unwrap();
        let dataset = dataset_of(&records, v3.chunk_rules());
        let json = report::json_report(&analyze(&v3, &dataset));
        assert_eq!(json["notes"][0]["note"], "tool_calls_not_output");
        // vLLM times them (messages with choices) but counts no output from them.
        let vllm = builtin::find("vllm").unwrap();
        let dataset = dataset_of(&records, vllm.chunk_rules());
        let a = analyze(&vllm, &dataset);
        assert!(a.run.notes[0]
            .text
            .contains("times them as events carrying a choice"));
        // A protocol that counts them as output has nothing to note.
        let v1 = builtin::find("tokentrace-v1").unwrap();
        let dataset = dataset_of(&records, v1.chunk_rules());
        assert!(analyze(&v1, &dataset).run.notes.is_empty());
    }

    #[test]
    fn tool_call_streams_have_ttft_itl_and_latency_where_the_peer_counts_them() {
        // Sent at 1 µs; tool-call text at 3 and 5 µs; the stream ends at 9 µs.
        let records = vec![tool_call_stream()];
        let cases: [(&str, &str, Option<f64>); 9] = [
            ("tokentrace-v1", "ttft_ms", Some(0.002)),
            ("tokentrace-v1", "ttft_content_ms", Some(0.002)),
            ("tokentrace-v1", "itl_request_max_ms", Some(0.002)),
            ("aiperf", "time_to_first_token", Some(0.002)),
            ("aiperf", "time_to_first_output_token", Some(0.002)),
            ("aiperf", "request_latency", Some(0.004)),
            ("guidellm", "time_to_first_output_token_ms", Some(0.002)),
            // vLLM times every message with choices: the role delta at 2 µs.
            ("vllm", "ttft_ms", Some(0.001)),
            // SGLang reads delta.content only.
            ("sglang", "ttft_ms", None),
        ];
        for (name, metric, want) in cases {
            let p = builtin::find(name).unwrap();
            let dataset = dataset_of(&records, p.chunk_rules());
            let a = analyze(&p, &dataset);
            let m = p.metrics.iter().position(|d| d.name == metric).unwrap();
            let got = a.value_of(a.request(0), m).map(|v| (v * 1e6).round() / 1e6);
            assert_eq!(got, want, "{name} {metric}");
        }
    }
}
