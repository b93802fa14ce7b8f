//! The recorder and the AIPerf importer classify events with one classifier: a stream of any
//! shape, fed to the recorder's SSE parser in any split into reads, and the same stream as
//! AIPerf records it in `profile_export_raw.jsonl` (comments as packets of their own), give the
//! same chunks with the same channels and text lengths.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use proptest::prelude::*;
use serde_json::{json, Value};
use tokentrace_format::Channel;
use tokentrace_import::SourceKind;
use tokentrace_sse::classify::{classify_event, OutputSink};
use tokentrace_sse::parser::SseParser;

/// One SSE message of a generated stream.
#[derive(Debug, Clone)]
enum Message {
    /// `data: <json>`, optionally with an `event:` type.
    Data { json: String, event: Option<String> },
    /// `: <text>`, a comment (sse-starlette's keep-alive ping).
    Comment(String),
    /// `data: [DONE]`.
    Done,
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z é\"\\\\\n]{1,12}"]
}

fn chunk() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(|t| json!({"choices": [{"index": 0, "delta": {"content": t}}]})),
        text().prop_map(|t| json!({"choices": [{"index": 0, "delta": {"reasoning_content": t}}]})),
        text().prop_map(|t| json!({"choices": [{"index": 0, "delta": {"reasoning": t}}]})),
        (text(), text()).prop_map(|(n, a)| json!({"choices": [{"index": 0, "delta": {
            "tool_calls": [{"index": 0, "id": "c", "type": "function",
                            "function": {"name": n, "arguments": a}}]}}]})),
        Just(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})),
        Just(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        Just(json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})),
        Just(json!({"choices": [{"index": 0, "delta": {"content": ""}}], "usage": {}})),
        text().prop_map(
            |t| json!({"error": null, "choices": [{"index": 0, "delta": {"content": t}}]})
        ),
        Just(json!({"error": {"message": "overloaded"}})),
        text().prop_map(|t| json!({"choices": [{"index": 0, "text": t, "finish_reason": null}]})),
        (text(), text()).prop_map(|(a, b)| json!({"choices": [
            {"index": 0, "delta": {"content": a}}, {"index": 1, "delta": {"content": b}}]})),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        6 => (chunk(), proptest::option::weighted(0.1, Just("error".to_string())))
            .prop_map(|(c, event)| Message::Data { json: c.to_string(), event }),
        1 => "[a-z0-9 :-]{0,20}".prop_map(Message::Comment),
        1 => Just(Message::Done),
    ]
}

/// (channel, text length) of every event, through the recorder's parser and classifier.
fn recorded(messages: &[Message], cuts: &[usize]) -> Vec<(Channel, u32)> {
    let mut wire = String::new();
    for m in messages {
        match m {
            Message::Data { json, event } => {
                if let Some(event) = event {
                    wire.push_str(&format!("event: {event}\n"));
                }
                wire.push_str(&format!("data: {json}\n\n"));
            }
            Message::Comment(text) => wire.push_str(&format!(":{text}\n\n")),
            Message::Done => wire.push_str("data: [DONE]\n\n"),
        }
    }
    let bytes = wire.as_bytes();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    let mut parser = SseParser::new(1 << 20);
    let mut sink = OutputSink::new(false);
    let mut out = Vec::new();
    for pair in points.windows(2) {
        parser
            .feed(&bytes[pair[0]..pair[1]], |event| {
                let c = classify_event(event.data, event.event_type, &mut sink).unwrap();
                out.push((c.channel, c.text_len));
            })
            .unwrap();
    }
    out
}

/// The same, as AIPerf would have recorded the stream and the importer reads it.
fn imported(messages: &[Message]) -> Vec<(Channel, u32)> {
    let responses: Vec<Value> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let packets = match m {
                Message::Data { json, event } => {
                    let mut p = Vec::new();
                    if let Some(event) = event {
                        p.push(json!({"name": "event", "value": event}));
                    }
                    p.push(json!({"name": "data", "value": json}));
                    p
                }
                Message::Comment(text) => vec![json!({"name": "comment", "value": text})],
                Message::Done => vec![json!({"name": "data", "value": "[DONE]"})],
            };
            json!({"perf_ns": 2_000 + i as u64, "packets": packets})
        })
        .collect();
    let line = json!({
        "metadata": {"x_request_id": "a", "benchmark_phase": "profiling",
                     "request_start_ns": 1_000_000, "request_end_ns": 1_100_000},
        "start_perf_ns": 1_000, "status": 200, "responses": responses,
    });
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("profile_export_raw.jsonl"),
        format!("{line}\n"),
    )
    .unwrap();
    let import = tokentrace_import::read(SourceKind::Aiperf, dir.path()).unwrap();
    import.requests[0]
        .chunks
        .iter()
        .map(|c| (c.channel, c.text_len))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn recorded_and_imported_streams_classify_alike(
        messages in proptest::collection::vec(message(), 1..12),
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        prop_assert_eq!(recorded(&messages, &cuts), imported(&messages));
    }
}
