//! `analyze --protocol A --versus B`: one run under two methodologies. Every value it shows
//! must be the one each protocol's own report gives, the pairs must follow the concepts, and
//! the definitions must be the protocol pages' sentences.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;
mod synthetic;

use common::{analyze_json, json_of, stdout_of, tokentrace};
use serde_json::Value;

fn versus_json(trace: &std::path::Path, a: &str, b: &str) -> Value {
    json_of(tokentrace().arg("analyze").arg(trace).args([
        "--protocol",
        a,
        "--versus",
        b,
        "--format",
        "json",
    ]))
}

fn pair<'v>(v: &'v Value, concept: &str) -> &'v Value {
    v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["concept"] == concept)
        .unwrap_or_else(|| panic!("no {concept} pair in {v:#}"))
}

fn stat<'v>(pair: &'v Value, key: &str) -> &'v Value {
    pair["stats"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stat"] == key)
        .unwrap_or_else(|| panic!("no {key} in {pair:#}"))
}

#[test]
fn capacity_v3_versus_aiperf_pairs_ttft_and_shows_both_reports_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic::write_trace(dir.path(), "run.tt");
    let v = versus_json(&trace, "capacity-v3", "aiperf");
    assert_eq!(v["a"], "capacity-v3 v1");
    assert!(v["b"].as_str().unwrap().starts_with("aiperf v"));

    // TTFT: capacity-v3 counts to the first content delta, AIPerf to the first output delta
    // (reasoning first in the synthetic trace), so the definitions differ and so do values.
    let ttft = pair(&v, "TTFT");
    assert_eq!(ttft["a"], "ttft_ms");
    assert_eq!(ttft["b"], "time_to_first_token");
    assert_eq!(ttft["same_definition"], false);
    assert!(ttft["definition_a"]
        .as_str()
        .unwrap()
        .contains("content delta"));
    assert!(ttft["definition_b"]
        .as_str()
        .unwrap()
        .contains("reasoning, content or tool-call delta"));

    // Each side's numbers are its own report's.
    let report_a = analyze_json(&trace, "capacity-v3");
    let report_b = analyze_json(&trace, "aiperf");
    let mean = stat(ttft, "mean");
    assert_eq!(
        mean["a"], report_a["metrics"]["ttft_mean_ms"],
        "{report_a:#}"
    );
    assert_eq!(mean["b"], report_b["metrics"]["time_to_first_token"]["avg"]);
    let (a, b) = (mean["a"].as_f64().unwrap(), mean["b"].as_f64().unwrap());
    let change = mean["change_pct"].as_f64().unwrap();
    assert!((change - (b - a) / a * 100.0).abs() < 1e-9, "{change}");
    assert!(b < a, "first output comes before first content here");

    // A metric only one side defines stands alone.
    let ttst = pair(&v, "TTST");
    assert_eq!(ttst["a"], Value::Null);
    assert_eq!(ttst["b"], "time_to_second_token");
    assert!(ttst["stats"].as_array().unwrap().is_empty());

    // Protocol-wide rules are compared too: AIPerf counts missing_done streams, capacity-v3
    // does not.
    let requests = v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["topic"] == "requests")
        .unwrap();
    assert_eq!(requests["same"], false);
}

#[test]
fn the_same_protocol_on_both_sides_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic::write_trace(dir.path(), "run.tt");
    let v = versus_json(&trace, "vllm", "vllm");
    for p in v["metrics"].as_array().unwrap() {
        assert_eq!(p["same_definition"], true, "{p:#}");
        for s in p["stats"].as_array().unwrap() {
            assert_eq!(s["a"], s["b"], "{p:#}");
            if !s["a"].is_null() && s["a"] != 0.0 {
                assert_eq!(s["change_pct"], 0.0);
            }
        }
    }
    for g in v["aggregates"].as_array().unwrap() {
        assert_eq!(g["a"], g["b"]);
        assert_eq!(g["value_a"], g["value_b"]);
    }
    assert!(v["rules"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["same"] == true));
}

#[test]
fn seconds_are_compared_in_milliseconds() {
    // GuideLLM reports request latency in seconds; vLLM's E2EL is in ms.
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic::write_trace(dir.path(), "run.tt");
    let v = versus_json(&trace, "vllm", "guidellm");
    let e2e = pair(&v, "E2E latency");
    assert_eq!(e2e["unit"], "ms");
    let mean = stat(e2e, "mean");
    let report_b = analyze_json(&trace, "guidellm");
    let seconds = report_b["metrics"]["request_latency"]["mean"]
        .as_f64()
        .unwrap();
    assert!(
        (mean["b"].as_f64().unwrap() - seconds * 1000.0).abs() < 1e-9,
        "{mean}"
    );
}

#[test]
fn the_table_is_pinned_and_other_formats_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic::write_trace(dir.path(), "run.tt");
    let text = stdout_of(tokentrace().arg("analyze").arg(&trace).args([
        "--protocol",
        "capacity-v3",
        "--versus",
        "capacity-v4-reasoning",
    ]));
    insta::assert_snapshot!(
        "versus_capacity-v3_capacity-v4-reasoning",
        String::from_utf8(text).unwrap()
    );
    tokentrace()
        .arg("analyze")
        .arg(&trace)
        .args(["--versus", "aiperf", "--format", "csv"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("--versus prints a table or json"));
}
