//! `tokentrace import aiperf` on the AIPerf 0.13 fixture: every response becomes a chunk at its
//! own perf_counter time, and AIPerf's own numbers follow from the trace's timestamps.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use serde_json::Value;
use tokentrace_format::{Channel, Outcome, Phase, RequestRecord, TraceReader};

fn jsonl(name: &str) -> Vec<Value> {
    common::read_jsonl(&common::aiperf_fixture().join(name))
}

fn summary() -> Value {
    common::read_json(&common::aiperf_fixture().join("profile_export_aiperf.json"))
}

/// Imports the fixture and returns the reader and the records in id order.
fn import() -> (tempfile::TempDir, TraceReader, Vec<RequestRecord>) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("aiperf.trace");
    common::import("aiperf", &common::aiperf_fixture(), &trace).stdout(predicates::str::contains(
        "imported 20 requests, 1340 chunks",
    ));
    let (reader, records) = common::records_of(&trace);
    (dir, reader, records)
}

#[test]
fn every_response_is_a_chunk_at_its_own_time() {
    let (_dir, reader, records) = import();
    let raw = jsonl("profile_export_raw.jsonl");
    assert_eq!(records.len(), raw.len());
    let anchor = reader.header().anchor.mono_ns;
    for (record, line) in records.iter().zip(&raw) {
        assert_eq!(
            record.meta.send_ns + anchor,
            line["start_perf_ns"].as_u64().unwrap()
        );
        let responses = line["responses"].as_array().unwrap();
        assert_eq!(record.chunks.len(), responses.len());
        for (chunk, response) in record.chunks.iter().zip(responses) {
            assert_eq!(
                chunk.arrival_ns + anchor,
                response["perf_ns"].as_u64().unwrap()
            );
            assert_eq!(
                chunk.text.as_deref(),
                response["packets"][0]["value"].as_str()
            );
        }
        assert_eq!(record.meta.phase, Phase::Measured);
        assert_eq!(record.meta.outcome, Outcome::Ok);
        assert_eq!(record.meta.http_status, 200);
        // Role chunk, 64 tokens, usage chunk, [DONE].
        assert_eq!(record.chunks[0].channel, Channel::Role);
        assert_eq!(
            record
                .chunks
                .iter()
                .filter(|c| c.channel == Channel::Content)
                .count(),
            64
        );
        assert_eq!(record.chunks[65].channel, Channel::Usage);
        assert_eq!(record.chunks[66].channel, Channel::Done);
        assert_eq!(record.meta.usage.completion_tokens, Some(64));
        assert_eq!(record.meta.finish_reason.as_deref(), Some("length"));
        // Wall-clock metadata lands on the monotonic clock in order: credit, send, headers, end.
        assert!(record.meta.intended_ns <= record.meta.send_ns);
        assert!(record
            .meta
            .headers_ns
            .is_some_and(|h| h > record.meta.send_ns && h < record.chunks[1].arrival_ns));
        assert!(record.meta.end_ns >= record.chunks[64].arrival_ns);
    }
}

#[test]
fn manifest_keeps_aiperf_counts_configuration_and_window() {
    let (_dir, reader, records) = import();
    let manifest = reader.manifest();
    assert_eq!(
        (manifest.api.as_str(), manifest.model.as_str()),
        ("chat", "mock-model")
    );
    assert_eq!(manifest.base_url, "http://127.0.0.1:8000");
    assert_eq!(manifest.extra["import"]["source_version"], "0.13.0");
    assert!(!manifest.extra["import"]["unknown"]
        .as_array()
        .unwrap()
        .is_empty());
    let summary = summary();
    assert_eq!(
        manifest.extra["aiperf"]["input_config"],
        summary["input_config"]
    );
    // The profiling phase, from the summary's start_time 22:10:05.546442 and end_time
    // 22:10:09.236886 (same day).
    assert_eq!(summary["start_time"], "2026-11-29T22:10:05.546442");
    assert_eq!(summary["end_time"], "2026-11-29T22:10:09.236886");
    let window = manifest.measurement_window.as_ref().unwrap();
    assert_eq!(window.duration_ns, 3_690_444_000);
    assert_eq!(
        window.end_realtime_ns.unwrap() - window.start_realtime_ns.unwrap(),
        window.duration_ns
    );
    // The per-request OSL AIPerf used, keyed by trace id, matches profile_export.jsonl.
    let per_request = &manifest.client_token_counts.as_ref().unwrap().per_request;
    let metrics = jsonl("profile_export.jsonl");
    for record in &records {
        let id = manifest.extra["aiperf"]["per_request"][record.meta.id.to_string()]
            ["x_request_id"]
            .as_str()
            .unwrap();
        let line = metrics
            .iter()
            .find(|m| m["metadata"]["x_request_id"] == id)
            .unwrap();
        let osl = line["metrics"]["output_sequence_length"]["value"].as_u64();
        assert_eq!(
            per_request[&record.meta.id].output_tokens.map(u64::from),
            osl,
            "request {}",
            record.meta.id
        );
    }
}

/// AIPerf's TTFT, TTST and request latency need only the trace: its anchor is the send time,
/// its content responses are the chunks with text, statistics in ns then × 1e-6.
#[test]
fn trace_timestamps_give_aiperf_latencies() {
    let (_dir, _reader, records) = import();
    let summary = summary();
    let mut ttft = Vec::new();
    let mut ttst = Vec::new();
    let mut latency = Vec::new();
    for r in &records {
        let content: Vec<u64> = r
            .chunks
            .iter()
            .filter(|c| {
                matches!(
                    c.channel,
                    Channel::Content | Channel::Reasoning | Channel::Tool
                ) && c.text_len > 0
            })
            .map(|c| c.arrival_ns)
            .collect();
        ttft.push((content[0] - r.meta.send_ns) as f64);
        ttst.push((content[1] - content[0]) as f64);
        latency.push((content[content.len() - 1] - r.meta.send_ns) as f64);
    }
    for (key, values) in [
        ("time_to_first_token", ttft),
        ("time_to_second_token", ttst),
        ("request_latency", latency),
    ] {
        let n = values.len() as f64;
        let avg = values.iter().sum::<f64>() / n * 1e-6;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min) * 1e-6;
        let max = values.iter().copied().fold(0.0, f64::max) * 1e-6;
        for (stat, got) in [("avg", avg), ("min", min), ("max", max)] {
            let want = summary[key][stat].as_f64().unwrap();
            assert!(
                (got - want).abs() <= 1e-9 * want.abs(),
                "{key}.{stat}: {got} vs {want}"
            );
        }
    }
}
