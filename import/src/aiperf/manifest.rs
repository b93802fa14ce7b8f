//! The manifest and run end of an AIPerf import: AIPerf's configuration, where the trace came
//! from, what AIPerf could not provide, and AIPerf's own per-request counts.

use super::Sources;
use crate::error::Issue;
use crate::issue_strings;
use crate::time::parse_iso;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use tokentrace_format::{
    ClientTokenCounts, Header, Manifest, MeasurementWindow, RequestRecord, RequestTokenCounts,
    RunEnd,
};

/// Everything the manifest is built from.
pub(crate) struct Inputs<'a> {
    /// The raw file imported.
    pub input: &'a Path,
    /// `profile_export_aiperf.json`, when present and valid.
    pub summary: Option<&'a Value>,
    /// The first request body, for the model and API when the summary is missing.
    pub first_payload: Option<&'a Value>,
    /// Wall-clock time of the trace anchor.
    pub anchor_realtime_ns: u64,
    /// Files read and missing.
    pub sources: &'a Sources,
    /// Whether any request has AIPerf's token counts.
    pub has_token_counts: bool,
    /// Whether `profile_export.jsonl` carried the HTTP trace.
    pub has_http_trace: bool,
    /// AIPerf's token counts per trace request id.
    pub token_counts: Map<String, Value>,
    /// AIPerf's metadata per trace request id.
    pub per_request: Map<String, Value>,
    /// Problems found.
    pub issues: &'a [Issue],
}

/// The profiling phase's wall-clock window from the summary's `start_time`/`end_time`.
fn phase_window(summary: Option<&Value>) -> Option<(u64, u64, &str, &str)> {
    let summary = summary?;
    let start = summary.get("start_time")?.as_str()?;
    let end = summary.get("end_time")?.as_str()?;
    Some((parse_iso(start)?, parse_iso(end)?, start, end))
}

/// Builds the manifest.
pub(crate) fn build(mut inputs: Inputs<'_>) -> Manifest {
    let import = provenance(
        &inputs,
        inputs
            .summary
            .and_then(|s| s.get("aiperf_version"))
            .and_then(Value::as_str),
        phase_window(inputs.summary).is_some(),
    );
    let summary = inputs.summary;
    let config = summary.and_then(|s| s.get("input_config"));
    let at = |path: &str| config.and_then(|c| c.pointer(path));
    let payload = inputs.first_payload;
    let api = at("/endpoint/type")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| {
            if payload.is_some_and(|p| p.get("messages").is_some()) {
                "chat"
            } else {
                "completions"
            }
            .into()
        });
    let model = at("/models/items/0/name")
        .or_else(|| payload.and_then(|p| p.get("model")))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let version = summary
        .and_then(|s| s.get("aiperf_version"))
        .and_then(Value::as_str);
    let window = phase_window(summary);

    let mut workload = BTreeMap::new();
    workload.insert("source".into(), json!("aiperf"));
    workload.insert("capture".into(), json!("raw"));
    for (key, path) in [
        ("streaming", "/endpoint/streaming"),
        ("input_tokens", "/datasets/0/prompts/isl/mean"),
        ("output_tokens", "/datasets/0/prompts/osl/mean"),
        ("tokenizer", "/tokenizer/name"),
        ("dataset", "/datasets/0"),
    ] {
        if let Some(v) = at(path) {
            workload.insert(key.into(), v.clone());
        }
    }
    let mut load = BTreeMap::new();
    if let Some(phases) = at("/phases").and_then(Value::as_array) {
        load.insert("phases".into(), Value::Array(phases.clone()));
        if let Some(profiling) = phases
            .iter()
            .find(|p| p.get("kind").and_then(Value::as_str) == Some("profiling"))
        {
            for key in ["type", "concurrency", "requests", "rate", "duration"] {
                if let Some(v) = profiling.get(key) {
                    load.insert(key.into(), v.clone());
                }
            }
        }
    }

    let mut aiperf = Map::new();
    aiperf.insert("version".into(), json!(version));
    for key in [
        "benchmark_id",
        "schema_version",
        "input_config",
        "run_info",
        "was_cancelled",
        "is_complete",
    ] {
        if let Some(v) = summary.and_then(|s| s.get(key)) {
            aiperf.insert(key.into(), v.clone());
        }
    }
    // The profiling phase: what AIPerf divides its throughputs by.
    let measurement_window =
        window
            .filter(|(start, end, _, _)| end > start)
            .map(|(start, end, _, _)| MeasurementWindow {
                source: "aiperf profiling phase (summary start_time .. end_time)".into(),
                duration_ns: end - start,
                start_realtime_ns: Some(start),
                end_realtime_ns: Some(end),
            });
    aiperf.insert(
        "per_request".into(),
        Value::Object(std::mem::take(&mut inputs.per_request)),
    );

    let mut extra = BTreeMap::new();
    extra.insert("import".into(), import);
    extra.insert("aiperf".into(), Value::Object(aiperf));
    let client_token_counts = inputs.has_token_counts.then(|| ClientTokenCounts {
        source: "aiperf".into(),
        tokenizer: at("/tokenizer/name")
            .and_then(Value::as_str)
            .map(String::from),
        per_request: typed_counts(std::mem::take(&mut inputs.token_counts)),
    });
    let mut labels = BTreeMap::new();
    labels.insert("source_tool".into(), "aiperf".into());
    if let Some(id) = summary
        .and_then(|s| s.get("benchmark_id"))
        .and_then(Value::as_str)
    {
        labels.insert("benchmark_id".into(), id.into());
    }
    Manifest {
        tool_version: env!("CARGO_PKG_VERSION").into(),
        argv: vec![
            "tokentrace".into(),
            "import".into(),
            "aiperf".into(),
            inputs.input.display().to_string(),
        ],
        base_url: at("/endpoint/urls/0")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .into(),
        api,
        model,
        workload,
        load,
        seed: summary
            .and_then(|s| s.pointer("/run_info/random_seed"))
            .and_then(Value::as_u64)
            .unwrap_or(0),
        labels,
        start_realtime_ns: window.map_or(inputs.anchor_realtime_ns, |w| w.0),
        extra,
        measurement_window,
        client_token_counts,
        ..Manifest::default()
    }
}

/// AIPerf's per-request counts (its metric names, plus `output_tokens`, the OSL it divides
/// ITL by) as typed counts; its other metrics are kept under their names.
fn typed_counts(counts: Map<String, Value>) -> BTreeMap<u64, RequestTokenCounts> {
    counts
        .into_iter()
        .filter_map(|(id, v)| {
            let Value::Object(mut other) = v else {
                return None;
            };
            let mut take = |key: &str| {
                other
                    .remove(key)
                    .and_then(|v| v.as_u64())
                    .and_then(|n| u32::try_from(n).ok())
            };
            let output_tokens = take("output_tokens");
            let input_tokens = take("input_sequence_length");
            let other = other.into_iter().collect();
            Some((
                id.parse().ok()?,
                RequestTokenCounts {
                    input_tokens,
                    output_tokens,
                    other,
                },
            ))
        })
        .collect()
}

/// `extra.import`: what was imported, from what, and what the source could not provide.
fn provenance(inputs: &Inputs<'_>, version: Option<&str>, has_window: bool) -> Value {
    let mut unknown = vec![
        "host: AIPerf does not record the client host".to_string(),
        "read_index: AIPerf keeps one time per event, not read boundaries; events read at the same \
         nanosecond share a read index"
            .into(),
        "chunk bytes: rebuilt from the event's fields (`name: value` lines), not counted on the wire".into(),
        "chunk tokens: AIPerf counts tokens per request with its tokenizer, not per event \
         (see client_token_counts)"
            .into(),
        "prompt hash: of the request body re-serialized compactly, not of the bytes sent".into(),
        "client_health: not recorded by AIPerf".into(),
    ];
    if !inputs.has_token_counts {
        unknown.push(format!(
            "client_token_counts: {} missing or without counts",
            super::RECORDS_FILE
        ));
    }
    if !inputs.has_http_trace {
        unknown.push("response headers: AIPerf ran without --export-http-trace; headers_ns is request_ack_ns".into());
    }
    if !has_window {
        unknown.push(format!(
            "phase window and run configuration: {} missing",
            super::SUMMARY_FILE
        ));
    }
    let paths = |v: &[std::path::PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
    };
    json!({
        "kind": "aiperf",
        "source_tool": "aiperf",
        "source_version": version,
        "input": inputs.input.display().to_string(),
        "files_read": paths(&inputs.sources.read),
        "files_missing": paths(&inputs.sources.missing),
        "clock": "event times are AIPerf's perf_counter_ns (CLOCK_MONOTONIC); wall-clock metadata \
                  moved onto it with each request's request_start_ns - start_perf_ns",
        "unknown": unknown,
        "issues": issue_strings(inputs.issues, 100),
    })
}

/// The run end: the phase's end when the summary gives it, else the last request's end.
pub(crate) fn run_end(
    requests: &[RequestRecord],
    summary: Option<&Value>,
    header: &Header,
) -> RunEnd {
    let end_ns = requests.iter().map(|r| r.meta.end_ns).max().unwrap_or(0);
    let cancelled = summary
        .and_then(|s| s.get("was_cancelled"))
        .and_then(Value::as_bool)
        == Some(true);
    RunEnd {
        end_realtime_ns: phase_window(summary)
            .map_or(header.anchor.realtime_ns.saturating_add(end_ns), |w| w.1),
        end_ns,
        reason: if cancelled {
            "interrupted"
        } else {
            "completed"
        }
        .into(),
        client_health: Default::default(),
    }
}
