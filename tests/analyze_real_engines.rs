//! What real engines send that a simulator's plain text stream does not: a stream made only of
//! `delta.tool_calls`, and a stream that ends after its `finish_reason` without `[DONE]`.
//! `tokentrace analyze` measures the first where the protocol's tool does, notes it where the
//! tool does not, counts the second where the tool needs no `[DONE]`, and says so in every
//! report layout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::{json_of, stdout_of, tokentrace};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokentrace_format::{
    Channel, ChunkRecord, ClockAnchor, Header, Manifest, Outcome, Phase, RequestMeta,
    RequestRecord, RunEnd, TraceWriter, Usage, WriterConfig,
};

const MS: u64 = 1_000_000;

fn chunk(at_ms: u64, channel: Channel, text_len: u32) -> ChunkRecord {
    ChunkRecord {
        arrival_ns: at_ms * MS,
        read_index: 0,
        bytes: 60,
        channel,
        text_len,
        tokens: None,
        text: None,
    }
}

/// Request `id` sent at `100 * id` ms: role, then `channel` deltas 20, 30 and 40 ms after the
/// send, finish, usage and (unless `done` is false) `[DONE]`.
fn request(id: u64, channel: Channel, done: bool) -> RequestRecord {
    let send = 100 * id;
    let mut chunks = vec![chunk(send + 5, Channel::Role, 0)];
    for at in [20, 30, 40] {
        chunks.push(chunk(send + at, channel, 12));
    }
    chunks.push(chunk(send + 41, Channel::Finish, 0));
    chunks.push(chunk(send + 42, Channel::Usage, 0));
    if done {
        chunks.push(chunk(send + 43, Channel::Done, 0));
    }
    RequestRecord {
        meta: RequestMeta {
            id,
            phase: Phase::Measured,
            trial: 0,
            intended_ns: send * MS,
            send_ns: send * MS,
            headers_ns: Some((send + 2) * MS),
            end_ns: (send + 44) * MS,
            http_status: 200,
            outcome: if done {
                Outcome::Ok
            } else {
                Outcome::MissingDone
            },
            error: (!done).then(|| "stream ended after 6 events without [DONE]".to_string()),
            usage: Usage {
                prompt_tokens: Some(50),
                completion_tokens: Some(6),
                reasoning_tokens: None,
                cached_tokens: None,
            },
            finish_reason: Some(
                if channel == Channel::Tool {
                    "tool_calls"
                } else {
                    "stop"
                }
                .into(),
            ),
            prompt_hash: id,
            prompt_bytes: 200,
            output_hash: 1000 + id,
            output_bytes: 36,
            planned_input_tokens: Some(50),
            response_headers: vec![],
            retries: 0,
        },
        chunks,
    }
}

/// Two tool-call-only streams, one plain answer, one answer without `[DONE]`.
fn write_trace(dir: &Path) -> PathBuf {
    let path = dir.join("engines.tt");
    let header = Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 0,
            realtime_ns: 1_788_580_000_000_000_000,
        },
        host: "testhost".into(),
        shard: 0,
    };
    let manifest = Manifest {
        model: "agent-model".into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        ..Manifest::default()
    };
    let writer = TraceWriter::create(&path, header, &manifest, WriterConfig::default()).unwrap();
    let sender = writer.sender();
    for r in [
        request(1, Channel::Tool, true),
        request(2, Channel::Tool, true),
        request(3, Channel::Content, true),
        request(4, Channel::Content, false),
    ] {
        sender.send(r).unwrap();
    }
    drop(sender);
    let end = RunEnd {
        end_ns: 500 * MS,
        reason: "completed".into(),
        ..RunEnd::default()
    };
    writer.finish(end).unwrap();
    path
}

fn analyze(trace: &Path, protocol: &str, extra: &[&str]) -> Value {
    json_of(
        tokentrace()
            .args(["analyze", "--format", "json", "--protocol", protocol])
            .arg(trace)
            .args(extra),
    )
}

fn note<'a>(report: &'a Value, key: &str) -> Option<&'a Value> {
    report["notes"]
        .as_array()?
        .iter()
        .find(|n| n["note"] == key)
}

#[test]
fn tool_call_streams_are_measured_and_the_slo_agrees_with_goodput() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path());
    let r = analyze(&trace, "tokentrace-v1", &["--slo", "ttft:p95<25ms"]);
    // Every request has a TTFT of 20 ms, tool-call streams included, and ITLs of 10 ms.
    assert_eq!(r["metrics"]["ttft_ms"]["samples"], 4, "{r}");
    assert_eq!(r["metrics"]["ttft_ms"]["max"], 20.0);
    assert_eq!(r["metrics"]["itl_ms"]["samples"], 8);
    assert_eq!(r["metrics"]["e2e_ms"]["samples"], 4);
    assert_eq!(r["slo"][0]["met"], true);
    assert_eq!(r["aggregates"]["goodput"]["good_requests"], 4);
    // The stream without [DONE] counted, and the report says so.
    assert_eq!(r["requests"]["counted"], 4);
    assert_eq!(r["requests"]["failed"], 0);
    assert_eq!(r["requests"]["missing_done"], 1);
    assert_eq!(note(&r, "missing_done").unwrap()["requests"], 1);
    assert!(note(&r, "tool_calls_not_output").is_none());

    let table = String::from_utf8(stdout_of(
        tokentrace()
            .args(["analyze", "--protocol", "tokentrace-v1"])
            .arg(&trace),
    ))
    .unwrap();
    assert!(
        table.contains("note: 1 counted request(s) ended cleanly"),
        "{table}"
    );
}

#[test]
fn protocols_whose_tool_ignores_tool_calls_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path());
    // SGLang reads delta.content only: the two tool-call streams have no TTFT there.
    let sglang = analyze(&trace, "sglang", &[]);
    assert_eq!(sglang["completed"], 4, "{sglang}");
    assert_eq!(sglang["missing_done"], 1);
    let tools = note(&sglang, "tool_calls_not_output").unwrap();
    assert_eq!(tools["requests"], 2);
    assert!(tools["text"]
        .as_str()
        .unwrap()
        .contains("2 of them had no other output"));
    // capacity-v3 keeps a stream without [DONE] a failure, and a TTFT objective cannot be met
    // by requests that never sent a content delta.
    let v3 = analyze(&trace, "capacity-v3", &[]);
    assert_eq!(
        (v3["completed"].as_u64(), v3["failed"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(v3["failures"][0]["outcome"], "missing_done");
    assert_eq!(v3["metrics"]["ttft_samples"], 1);
    assert_eq!(note(&v3, "tool_calls_not_output").unwrap()["requests"], 2);
    // AIPerf turns tool_calls into response data: TTFT and TTFO for every request.
    let aiperf = analyze(&trace, "aiperf", &[]);
    assert_eq!(
        aiperf["metrics"]["time_to_first_token"]["count"], 4,
        "{aiperf}"
    );
    assert_eq!(aiperf["metrics"]["time_to_first_output_token"]["count"], 4);
}
