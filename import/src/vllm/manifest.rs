//! The manifest of a vLLM import: vLLM's settings and summary, and what the file could not
//! provide.

use super::ARRAYS;
use crate::error::Issue;
use crate::issue_strings;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;
use tokentrace_format::{ClientTokenCounts, Manifest, MeasurementWindow, RequestTokenCounts};

/// The manifest: vLLM's settings and summary, and what the file could not provide.
pub(super) fn manifest(
    path: &Path,
    result: &Value,
    counts: BTreeMap<u64, RequestTokenCounts>,
    has_starts: bool,
    start_realtime: Option<u64>,
    issues: &[Issue],
) -> Manifest {
    let backend = result
        .get("backend")
        .or_else(|| result.get("endpoint_type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    // The saved result minus its per-request arrays: run settings and vLLM's own numbers.
    let summary: Map<String, Value> = result
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !ARRAYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut unknown = vec![
        "channels: every rebuilt chunk is recorded as content; vLLM timed any chunk with `choices` \
         (a role-only or reasoning chunk included)",
        "chunk tokens: vLLM keeps no per-chunk token counts",
        "chunk bytes and text: only the whole generated text is kept; text_len spreads its bytes \
         evenly over the chunks (at least 1 each)",
        "usage: vLLM keeps only output_lens (usage completion_tokens when streamed, else its \
         tokenizer's count), see client_token_counts",
        "http status and error class: failures are recorded as outcome `other` with vLLM's error text",
        "prompt: neither the prompt text nor its hash is saved",
        "response headers, intended start (equal to send), host, client health",
        "warmup requests: vLLM does not save them",
        "wall clock: from `date` (local time of the end, read as UTC) minus `duration`",
    ];
    if !has_starts {
        unknown.push("start_times: missing (older vLLM); every request starts at 0");
    }
    let mut workload = BTreeMap::new();
    for key in ["num_prompts", "tokenizer_id", "dataset_name"] {
        if let Some(v) = result.get(key) {
            workload.insert(key.to_string(), v.clone());
        }
    }
    workload.insert("source".into(), json!("vllm bench serve"));
    let mut load = BTreeMap::new();
    for key in [
        "request_rate",
        "burstiness",
        "max_concurrency",
        "ramp_up_strategy",
        "ramp_up_start_rps",
        "ramp_up_end_rps",
    ] {
        if let Some(v) = result.get(key) {
            load.insert(key.to_string(), v.clone());
        }
    }
    let mut labels = BTreeMap::new();
    labels.insert("source_tool".to_string(), "vllm".to_string());
    if let Some(label) = result.get("label").and_then(Value::as_str) {
        labels.insert("label".to_string(), label.to_string());
    }
    let mut extra = BTreeMap::new();
    extra.insert(
        "import".into(),
        json!({
            "kind": "vllm",
            "source_tool": "vllm bench serve",
            "input": path.display().to_string(),
            "files_read": [path.display().to_string()],
            "clock": "event times are vLLM's perf_counter seconds rounded to ns; chunk k at \
                      start + ttft + sum(itls[..k])",
            "unknown": unknown,
            "issues": issue_strings(issues, 100),
        }),
    );
    extra.insert("vllm".into(), json!({ "result": summary }));
    // vLLM divides its throughputs by the benchmark's `duration`.
    let measurement_window = result
        .get("duration")
        .and_then(Value::as_f64)
        .filter(|s| *s > 0.0)
        .map(|seconds| MeasurementWindow {
            source: "vllm duration".into(),
            duration_ns: (seconds * 1e9).round() as u64,
            start_realtime_ns: None,
            end_realtime_ns: None,
        });
    let client_token_counts = Some(ClientTokenCounts {
        source: "vllm".into(),
        tokenizer: result
            .get("tokenizer_id")
            .and_then(Value::as_str)
            .map(String::from),
        per_request: counts,
    });
    Manifest {
        tool_version: env!("CARGO_PKG_VERSION").into(),
        argv: vec![
            "tokentrace".into(),
            "import".into(),
            "vllm".into(),
            path.display().to_string(),
        ],
        base_url: String::new(),
        api: if backend.contains("chat") {
            "chat"
        } else {
            "completions"
        }
        .into(),
        model: result
            .get("model_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .into(),
        workload,
        load,
        seed: 0,
        labels,
        start_realtime_ns: start_realtime.unwrap_or(0),
        extra,
        measurement_window,
        client_token_counts,
        ..Manifest::default()
    }
}
