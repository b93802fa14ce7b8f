//! The AIPerf 0.13 fixtures, imported and analyzed under `--protocol aiperf`, reproduce AIPerf's
//! own summary (profile_export_aiperf.json): every statistic of the per-request metrics to 1e-9
//! relative, the throughputs to 1e-6 (AIPerf prints their window to the microsecond only).
//!
//! Two runs: one against a mock server, and one against llama-cpp-python's server with a real
//! model, whose stream carries sse-starlette's `: ping - <time>` comments (recorded by AIPerf
//! as packets named `comment`; they once made the three slowest requests fail the import).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use serde_json::Value;

/// The fixture runs: a mock server's and a real engine's.
const RUNS: [&str; 2] = ["aiperf-0.13-chat", "aiperf-0.13-llama-cpp-python"];

/// AIPerf's summary and ours for fixture run `name` (its import must succeed, exit 0).
fn reports(name: &str) -> (Value, Value) {
    let fixture = common::fixtures().join(name);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("aiperf.trace");
    common::import("aiperf", &fixture, &trace);
    let ours = common::analyze_json(&trace, "aiperf");
    let theirs = common::read_json(&fixture.join("profile_export_aiperf.json"));
    (ours, theirs)
}

fn assert_close(what: &str, got: &Value, want: &Value, rel: f64) {
    let (Some(got), Some(want)) = (got.as_f64(), want.as_f64()) else {
        panic!("{what}: got {got}, want {want}");
    };
    let err = if want == 0.0 {
        got.abs()
    } else {
        ((got - want) / want).abs()
    };
    assert!(
        err <= rel,
        "{what}: got {got}, want {want} (relative error {err:e})"
    );
}

#[test]
fn per_request_metrics_match_aiperf_to_1e9() {
    for run in RUNS {
        per_request_metrics_match(run);
    }
}

fn per_request_metrics_match(run: &str) {
    let (ours, theirs) = reports(run);
    for metric in [
        "time_to_first_token",
        "time_to_second_token",
        "request_latency",
        "inter_token_latency",
        "output_token_throughput_per_user",
        "output_sequence_length",
    ] {
        let want = theirs[metric].as_object().unwrap();
        let got = &ours["metrics"][metric];
        assert_eq!(got["unit"], want["unit"], "{run}: {metric}.unit");
        for (stat, value) in want.iter().filter(|(k, _)| k.as_str() != "unit") {
            assert_close(&format!("{run}: {metric}.{stat}"), &got[stat], value, 1e-9);
        }
    }
}

#[test]
fn throughputs_match_aiperf_to_1e6() {
    for run in RUNS {
        throughputs_match(run);
    }
}

fn throughputs_match(run: &str) {
    let (ours, theirs) = reports(run);
    for metric in ["request_throughput", "output_token_throughput"] {
        assert_close(
            &format!("{run}: {metric}"),
            &ours["aggregates"][metric],
            &theirs[metric]["avg"],
            1e-6,
        );
    }
}
