//! The `anvil-serving.benchmark/v1` report of capacity-v3 and capacity-v4-reasoning.
//!
//! Flat metric keys (`ttft_p50_ms`, `decode_tok_s_p50`) from each metric's key template, all
//! keys sorted as the harness writes them, run metadata from the manifest and its labels.

use super::{label_value, request_row, utc_iso8601};
use crate::analysis::Analysis;
use crate::methodology;
use crate::protocol::{Protocol, Stat};
use crate::summary::{self, number, Rows, RunContext};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::Write;

/// The `metrics` object: every summarized metric's statistics under its flat keys, and the
/// aggregates, sorted by key.
pub fn metrics(protocol: &Protocol, rows: &dyn Rows, run: &RunContext) -> Map<String, Value> {
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for m in summary::metrics(protocol, rows) {
        let def = &protocol.metrics[m.metric];
        for (stat, value) in m.stats {
            let key = protocol.flat_key(def, stat);
            let value = match stat {
                Stat::Samples => json!(value.unwrap_or(0.0) as u64),
                _ => number(value),
            };
            out.insert(key, value);
        }
    }
    for (key, value) in summary::aggregates(protocol, rows, run) {
        out.insert(key, value);
    }
    out.into_iter().collect()
}

/// Placeholder of `request_timings` while the rest of the report is built.
const TIMINGS_PLACEHOLDER: &str = "\u{0}request_timings\u{0}";

/// The whole report of one analysis.
pub fn report(analysis: &Analysis<'_>) -> Value {
    let mut report = skeleton(analysis);
    let timings: Vec<Value> = timing_rows(analysis).map(Value::Object).collect();
    if let Value::Object(map) = &mut report {
        map.insert("request_timings".into(), Value::Array(timings));
    }
    report
}

/// Writes the report as pretty JSON, streaming `request_timings` one request at a time so a
/// million-request trace never holds its rows in memory at once.
pub fn write_report(analysis: &Analysis<'_>, out: &mut dyn Write) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(&skeleton(analysis))?;
    let marker = serde_json::to_string(TIMINGS_PLACEHOLDER)?;
    let Some(at) = text.find(&marker) else {
        return out.write_all(text.as_bytes());
    };
    out.write_all(&text.as_bytes()[..at])?;
    let mut first = true;
    for row in timing_rows(analysis) {
        out.write_all(if first { b"[\n" } else { b",\n" })?;
        first = false;
        let row = serde_json::to_string_pretty(&Value::Object(row))?;
        for (n, line) in row.lines().enumerate() {
            if n > 0 {
                out.write_all(b"\n")?;
            }
            out.write_all(b"    ")?;
            out.write_all(line.as_bytes())?;
        }
    }
    out.write_all(if first { b"[]" } else { b"\n  ]" })?;
    out.write_all(&text.as_bytes()[at + marker.len()..])
}

/// Every request of the counted phases in (trace, id) order, with its index as the harness
/// numbers them and whether it counted.
fn indexed(analysis: &Analysis<'_>) -> Vec<(usize, bool)> {
    let mut all: Vec<(usize, bool)> = analysis.counted.iter().map(|&i| (i, true)).collect();
    all.extend(analysis.failed.iter().map(|&i| (i, false)));
    all.sort_unstable();
    all
}

/// `request_timings` rows, lazily.
fn timing_rows<'a>(analysis: &'a Analysis<'a>) -> impl Iterator<Item = Map<String, Value>> + 'a {
    let mut counted = analysis.counted.clone();
    counted.sort_unstable();
    indexed(analysis)
        .into_iter()
        .enumerate()
        .filter(|(_, (_, is_counted))| *is_counted)
        .map(move |(index, (i, _))| {
            let row = counted.binary_search(&i).unwrap_or(0);
            let mut fields = request_row(analysis, row);
            fields.insert("request_index".into(), json!(index));
            sorted(fields)
        })
}

/// The report with `request_timings` as a placeholder.
fn skeleton(analysis: &Analysis<'_>) -> Value {
    let protocol = analysis.protocol;
    let dataset = analysis.dataset;
    let first = analysis
        .traces
        .first()
        .map(|&t| &dataset.traces[t as usize]);
    let manifest = first.map(|t| t.manifest.clone()).unwrap_or_default();
    let label = |key: &str| manifest.labels.get(key).map(|v| label_value(v));
    // Counts are integers in the report even when a source kept them as floats (AIPerf's
    // configured ISL/OSL means are `128.0`).
    let setting = |key: &str| {
        label(key)
            .or_else(|| manifest.load.get(key).cloned())
            .or_else(|| manifest.workload.get(key).cloned())
            .map(whole_number_as_integer)
    };

    let all = indexed(analysis);
    let mut failures = Vec::new();
    let mut planned: BTreeMap<u64, u64> = BTreeMap::new();
    for (index, &(i, counted)) in all.iter().enumerate() {
        let r = &dataset.requests[i];
        if let Some(p) = r.planned_input_tokens {
            *planned.entry(u64::from(p)).or_default() += 1;
        }
        if !counted {
            failures.push(json!({
                "error": r.error,
                "http_status": r.http_status,
                "outcome": r.outcome.name(),
                "request_index": index,
            }));
        }
    }
    let most_planned = planned
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(p, _)| json!(p));
    let context_distribution: Map<String, Value> = planned
        .iter()
        .map(|(p, n)| (p.to_string(), json!(n)))
        .collect();

    let anchor = first.map(|t| t.header.anchor.realtime_ns).unwrap_or(0);
    let started_ns = if manifest.start_realtime_ns > 0 {
        manifest.start_realtime_ns
    } else {
        all.iter()
            .map(|&(i, _)| anchor + dataset.requests[i].send_ns)
            .min()
            .unwrap_or(anchor)
    };
    let finished_ns = first
        .and_then(|t| t.run_end.as_ref())
        .map(|e| e.end_realtime_ns)
        .unwrap_or_else(|| {
            all.iter()
                .map(|&(i, _)| anchor + dataset.requests[i].end_ns)
                .max()
                .unwrap_or(anchor)
        });
    let serve_flags = label("serve_flags").unwrap_or_else(|| {
        let flags: Map<String, Value> = manifest
            .labels
            .iter()
            .filter_map(|(k, v)| {
                Some((k.strip_prefix("serve_flags.")?.to_string(), label_value(v)))
            })
            .collect();
        if flags.is_empty() {
            Value::Null
        } else {
            Value::Object(flags)
        }
    });
    let methodology: Map<String, Value> = methodology::timing_methodology(protocol)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();

    let report = json!({
        "base_url": manifest.base_url,
        "completed": analysis.run.completed,
        "concurrency": setting("concurrency").or_else(|| unpaced_cap(&manifest)).unwrap_or(Value::Null),
        "context_distribution": context_distribution,
        "context_seed": label("context_seed").unwrap_or_else(|| json!(manifest.seed)),
        "context_tokens": setting("context_tokens").or_else(|| setting("input_tokens")).or(most_planned).unwrap_or(Value::Null),
        "engine": label("engine").unwrap_or(Value::Null),
        "failed": analysis.run.failed,
        "failures": failures,
        "finished_at": utc_iso8601(finished_ns),
        "gpu": label("gpu").unwrap_or(Value::Null),
        "manifest": label("manifest").unwrap_or(Value::Null),
        "max_context_tokens": label("max_context_tokens").unwrap_or(Value::Null),
        "max_tokens": setting("max_tokens").or_else(|| setting("output_tokens")).unwrap_or(Value::Null),
        "measurement_protocol": protocol.name,
        "metrics": metrics(protocol, analysis, &analysis.run),
        "model": manifest.model,
        "request_timings": TIMINGS_PLACEHOLDER,
        "requests": analysis.run.completed + analysis.run.failed,
        "run_id": label("run_id").unwrap_or_else(|| json!(format!("benchmark-{}", compact_stamp(started_ns)))),
        "schema": "anvil-serving.benchmark/v1",
        "serve_flags": serve_flags,
        "source_recipe": label("source_recipe").unwrap_or(Value::Null),
        "started_at": utc_iso8601(started_ns),
        "tier": label("tier").unwrap_or(Value::Null),
        "timing_methodology": methodology,
        "wall_clock_ms": number(analysis.run.wall_clock_ms),
    });
    match report {
        Value::Object(mut map) => {
            // Only when there is something to say, so a clean run keeps the harness's keys.
            if !analysis.run.notes.is_empty() {
                map.insert("notes".into(), summary::notes_json(&analysis.run.notes));
            }
            Value::Object(sorted(map))
        }
        other => other,
    }
}

/// A map with its keys in sorted order (the harness writes `sort_keys=True`).
fn sorted(map: Map<String, Value>) -> Map<String, Value> {
    let tree: BTreeMap<String, Value> = map.into_iter().collect();
    tree.into_iter().collect()
}

/// `20260905T034617Z` from ns since the epoch.
/// An imported `vllm bench serve` run keeps its in-flight cap as `load.max_concurrency`; with
/// requests not paced (`request_rate` "inf") that cap is the concurrency of a closed loop.
fn unpaced_cap(manifest: &tokentrace_format::Manifest) -> Option<Value> {
    let unpaced = manifest
        .load
        .get("request_rate")
        .and_then(Value::as_str)
        .is_some_and(|rate| rate.eq_ignore_ascii_case("inf"));
    let cap = manifest.load.get("max_concurrency")?;
    (unpaced && cap.is_u64()).then(|| cap.clone())
}

/// A non-negative float with no fraction as an integer; anything else unchanged.
fn whole_number_as_integer(value: Value) -> Value {
    match value.as_f64() {
        Some(x) if value.is_f64() && x >= 0.0 && x.fract() == 0.0 && x < u64::MAX as f64 => {
            json!(x as u64)
        }
        _ => value,
    }
}

fn compact_stamp(ns: u64) -> String {
    utc_iso8601(ns).replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    use crate::analysis::{Analysis, AnalyzeOptions};
    use crate::dataset::tests::dataset_of;
    use crate::facts::tests::{chunk, record};
    use crate::protocol::builtin;
    use serde_json::Value;
    use tokentrace_format::Channel;

    const V3_REPORT: &str = include_str!("../../tests/fixtures/capacity-v3-report.json");

    /// The report of one clean request under `protocol`.
    fn one_request_report(protocol: &str) -> Value {
        let p = builtin::find(protocol).unwrap();
        let r = record(vec![
            chunk(3_000, Channel::Content, 4, None),
            chunk(5_000, Channel::Content, 4, None),
        ]);
        let dataset = dataset_of(&[r], p.chunk_rules());
        let analysis = Analysis::new(&p, &dataset, &[0], &AnalyzeOptions::default());
        let report = super::report(&analysis);
        let mut written = Vec::new();
        super::write_report(&analysis, &mut written).unwrap();
        let streamed: Value = serde_json::from_slice(&written).unwrap();
        assert_eq!(
            streamed, report,
            "{protocol}: streamed and built reports differ"
        );
        report
    }

    /// The `timing_methodology` keys of `protocol`'s report of one request.
    fn methodology_keys(protocol: &str) -> Vec<String> {
        one_request_report(protocol)["timing_methodology"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }

    #[test]
    fn capacity_v4_methodology_has_exactly_the_v4_reports_keys() {
        assert_eq!(
            methodology_keys("capacity-v4-reasoning"),
            [
                "clock",
                "decode",
                "effective_prefill",
                "generation",
                "mean_inter_token_latency",
                "time_to_first_output",
                "ttft"
            ]
        );
    }

    #[test]
    fn capacity_v3_methodology_keeps_the_fixtures_keys() {
        let fixture: Value = serde_json::from_str(V3_REPORT).unwrap();
        let want: Vec<String> = fixture["timing_methodology"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(methodology_keys("capacity-v3"), want);
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&one_request_report("capacity-v3")), keys(&fixture));
    }
}
