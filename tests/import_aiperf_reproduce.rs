//! The AIPerf 0.13 fixture, imported and analyzed under `--protocol aiperf`, reproduces AIPerf's
//! own summary (profile_export_aiperf.json): every statistic of the per-request metrics to 1e-9
//! relative, the throughputs to 1e-6 (AIPerf prints their window to the microsecond only).

mod common;

use serde_json::Value;

/// AIPerf's summary and ours for the fixture.
fn reports() -> (Value, Value) {
    let (_dir, trace) = common::import_aiperf_fixture();
    let ours = common::analyze_json(&trace, "aiperf");
    let theirs = common::read_json(&common::aiperf_fixture().join("profile_export_aiperf.json"));
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
    let (ours, theirs) = reports();
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
        assert_eq!(got["unit"], want["unit"], "{metric}.unit");
        for (stat, value) in want.iter().filter(|(k, _)| k.as_str() != "unit") {
            assert_close(&format!("{metric}.{stat}"), &got[stat], value, 1e-9);
        }
    }
}

#[test]
fn throughputs_match_aiperf_to_1e6() {
    let (ours, theirs) = reports();
    for metric in ["request_throughput", "output_token_throughput"] {
        assert_close(
            metric,
            &ours["aggregates"][metric],
            &theirs[metric]["avg"],
            1e-6,
        );
    }
}
