//! The AIPerf 0.13 fixture, imported and analyzed under `--protocol aiperf`, reproduces AIPerf's
//! own summary (profile_export_aiperf.json): every statistic of the per-request metrics to 1e-9
//! relative, the throughputs to 1e-6 (AIPerf prints their window to the microsecond only).

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/aiperf-0.13-chat")
}

/// AIPerf's summary and ours for the fixture.
fn reports() -> (Value, Value) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("aiperf.trace");
    Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["import", "aiperf"])
        .arg(fixture())
        .arg("-o")
        .arg(&trace)
        .assert()
        .success();
    let out = Command::cargo_bin("tokentrace")
        .unwrap()
        .arg("analyze")
        .arg(&trace)
        .args(["--protocol", "aiperf", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
    let theirs: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture().join("profile_export_aiperf.json")).unwrap(),
    )
    .unwrap();
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
