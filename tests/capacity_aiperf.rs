//! The capacity report's per-trial metrics follow AIPerf's definitions: measured on the AIPerf
//! 0.13 fixture run (imported as a trace), they match AIPerf's own summary.

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokentrace_capacity::metrics::TrialMetrics;
use tokentrace_capacity::reanalyze::load_trial;

fn fixture() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let local = root.join("tests/fixtures/aiperf-0.13-chat");
    if local.exists() {
        local
    } else {
        root.join("../shared/fixtures/aiperf-0.13-chat")
    }
}

/// Relative difference, for values AIPerf derives through a different order of operations.
fn close(ours: f64, theirs: f64) -> bool {
    ((ours - theirs) / theirs).abs() < 1e-12
}

#[test]
fn trial_block_matches_aiperf_on_its_own_run() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("aiperf.ttrace");
    Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["import", "aiperf"])
        .arg(fixture())
        .arg("-o")
        .arg(&trace)
        .assert()
        .success();
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture().join("profile_export_aiperf.json")).unwrap(),
    )
    .unwrap();
    let trial = load_trial(&trace).unwrap();
    let block = Value::Object(TrialMetrics::from_records(&trial.records).to_json());

    // Percentiles of per-request values: exactly AIPerf's.
    for (ours, theirs) in [
        ("ttft_ms", "time_to_first_token"),
        ("request_latency_ms", "request_latency"),
        ("itl_ms", "inter_token_latency"),
    ] {
        for p in ["p50", "p95", "p99"] {
            let a = block[ours][p].as_f64().unwrap();
            let b = summary[theirs][p].as_f64().unwrap();
            assert!(close(a, b), "{ours}.{p}: {a} vs AIPerf {b}");
        }
    }
    let per_user = &block["per_user_output_throughput_tps"];
    for stat in ["avg", "p50", "p95"] {
        let a = per_user[stat].as_f64().unwrap();
        let b = summary["output_token_throughput_per_user"][stat]
            .as_f64()
            .unwrap();
        assert!(close(a, b), "per-user {stat}: {a} vs AIPerf {b}");
    }
    // Run-level rates share AIPerf's benchmark duration (first send to last response).
    let duration = block["benchmark_duration_s"].as_f64().unwrap();
    let theirs = summary["benchmark_duration"]["avg"].as_f64().unwrap();
    assert!(close(duration, theirs), "duration {duration} vs {theirs}");
    for (ours, theirs) in [
        ("output_throughput_tps", "output_token_throughput"),
        ("request_throughput_rps", "request_throughput"),
    ] {
        let a = block[ours].as_f64().unwrap();
        let b = summary[theirs]["avg"].as_f64().unwrap();
        assert!(close(a, b), "{ours}: {a} vs AIPerf {b}");
    }
}
