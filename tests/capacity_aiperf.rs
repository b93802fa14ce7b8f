//! The capacity report's per-trial metrics follow AIPerf's definitions: measured on the AIPerf
//! 0.13 fixture run (imported as a trace), they match AIPerf's own summary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use serde_json::Value;
use tokentrace_capacity::metrics::TrialMetrics;
use tokentrace_capacity::reanalyze::load_trial;

/// Relative difference within `tolerance`.
fn close(ours: f64, theirs: f64, tolerance: f64) -> bool {
    ((ours - theirs) / theirs).abs() < tolerance
}

#[test]
fn trial_block_matches_aiperf_on_its_own_run() {
    let (_dir, trace) = common::import_aiperf_fixture();
    let summary = common::read_json(&common::aiperf_fixture().join("profile_export_aiperf.json"));
    let trial = load_trial(&trace).unwrap();
    let block = Value::Object(
        TrialMetrics::from_records(&trial.records)
            .unwrap()
            .to_json(),
    );

    // Per-request statistics: AIPerf's to the last bit (ITL and its inverse may differ in the
    // last bits where AIPerf sums in another order).
    for (ours, theirs) in [
        ("ttft_ms", "time_to_first_token"),
        ("request_latency_ms", "request_latency"),
    ] {
        for p in ["p50", "p95", "p99"] {
            assert_eq!(block[ours][p], summary[theirs][p], "{ours}.{p}");
        }
    }
    for p in ["p50", "p95", "p99"] {
        let a = block["itl_ms"][p].as_f64().unwrap();
        let b = summary["inter_token_latency"][p].as_f64().unwrap();
        assert!(close(a, b, 1e-14), "itl_ms.{p}: {a} vs AIPerf {b}");
    }
    for stat in ["avg", "p50", "p95"] {
        let a = block["per_user_output_throughput_tps"][stat]
            .as_f64()
            .unwrap();
        let b = summary["output_token_throughput_per_user"][stat]
            .as_f64()
            .unwrap();
        assert!(close(a, b, 1e-14), "per-user {stat}: {a} vs AIPerf {b}");
    }
    // AIPerf's duration is max(start + latency) - min(start) with each start read from the
    // wall clock; the trace has the monotonic send times, a few microseconds apart from those.
    let duration = block["benchmark_duration_s"].as_f64().unwrap();
    let theirs = summary["benchmark_duration"]["avg"].as_f64().unwrap();
    assert!(
        close(duration, theirs, 1e-5),
        "duration {duration} vs {theirs}"
    );
    // Rates over that duration, as AIPerf 0.10 (the capacity fixture's version) computes them;
    // 0.13 divides by its profiling-phase window instead, 0.2 % longer on this run.
    let requests = block["request_throughput_rps"].as_f64().unwrap();
    assert!(close(requests, 20.0 / duration, 1e-15));
    let tokens = block["output_throughput_tps"].as_f64().unwrap();
    assert!(close(tokens, 1280.0 / duration, 1e-15));
    let window_rps = summary["request_throughput"]["avg"].as_f64().unwrap();
    assert!(close(requests, window_rps, 3e-3));
}
