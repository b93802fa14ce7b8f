//! The capacity-v3 summary code, fed the per-request values of a real capacity-v3 report,
//! reproduces that report's `metrics` object exactly: every key and every value to the bit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use serde_json::{Map, Value};
use tokentrace_analyzer::protocol::{builtin, Count, TokenSource};
use tokentrace_analyzer::report::anvil;
use tokentrace_analyzer::summary::{Rows, RunContext};
use tokentrace_analyzer::{methodology, protocol::Protocol};

const REPORT: &str = include_str!("fixtures/capacity-v3-report.json");

/// The report's `request_timings`, read back as rows of the protocol's metrics.
struct ReportRows<'a> {
    protocol: &'a Protocol,
    timings: &'a [Value],
}

impl Rows for ReportRows<'_> {
    fn len(&self) -> usize {
        self.timings.len()
    }

    fn value(&self, i: usize, metric: usize) -> Option<f64> {
        self.timings[i][&self.protocol.metrics[metric].name].as_f64()
    }

    fn count(&self, i: usize, count: Count) -> Option<u64> {
        let key = match count {
            Count::OutputTokens => "output_tokens",
            Count::PromptTokens => "prompt_tokens",
            Count::ContentChunks => "content_chunks",
            Count::ReasoningChunks => "reasoning_chunks",
            Count::PlannedInputTokens => "planned_context_tokens",
            _ => return None,
        };
        self.timings[i][key].as_u64()
    }

    fn token_source(&self, i: usize) -> Option<TokenSource> {
        match self.timings[i]["output_token_source"].as_str()? {
            "usage" => Some(TokenSource::Usage),
            "chunk_usage" => Some(TokenSource::ChunkTokens),
            "chunks" => Some(TokenSource::Chunks),
            _ => None,
        }
    }
}

fn report() -> Value {
    serde_json::from_str(REPORT).unwrap()
}

#[test]
fn capacity_v3_metrics_are_reproduced_to_the_bit() {
    let report = report();
    let protocol = builtin::find("capacity-v3").unwrap();
    let rows = ReportRows {
        protocol: &protocol,
        timings: report["request_timings"].as_array().unwrap(),
    };
    let run = RunContext {
        wall_clock_ms: report["wall_clock_ms"].as_f64(),
        completed: report["completed"].as_u64().unwrap(),
        failed: report["failed"].as_u64().unwrap(),
        ..RunContext::default()
    };
    let ours = Value::Object(anvil::metrics(&protocol, &rows, &run));
    let theirs = &report["metrics"];
    let (ours_map, theirs_map) = (ours.as_object().unwrap(), theirs.as_object().unwrap());
    let our_keys: Vec<&String> = ours_map.keys().collect();
    let their_keys: Vec<&String> = theirs_map.keys().collect();
    assert_eq!(our_keys, their_keys, "keys and their order");
    for (key, want) in theirs_map {
        assert_eq!(&ours_map[key], want, "{key}");
        // Printed identically, too (3614.0 stays a float, 16 an integer).
        assert_eq!(ours_map[key].to_string(), want.to_string(), "{key}");
    }
    assert_eq!(&ours, theirs);
}

#[test]
fn capacity_v3_methodology_matches_the_report_except_the_clock() {
    let report = report();
    let protocol = builtin::find("capacity-v3").unwrap();
    let ours: Map<String, Value> = methodology::timing_methodology(&protocol)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let theirs = report["timing_methodology"].as_object().unwrap();
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        theirs.keys().collect::<Vec<_>>()
    );
    for (key, want) in theirs {
        // The harness timed with Python's perf_counter; a tokentrace trace says what it used.
        if key != "clock" {
            assert_eq!(&ours[key], want, "{key}");
        }
    }
}
