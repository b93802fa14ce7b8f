//! `tokentrace capacity` argument handling, budgets and failing requests, against the simulator.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use assert_cmd::Command;
use predicates::str::contains;
use serde_json::Value;
use std::time::Duration;
use tokentrace_sim::{FaultConfig, SimConfig, SimServer};

fn capacity() -> Command {
    let mut cmd = Command::cargo_bin("tokentrace").unwrap();
    cmd.arg("capacity").timeout(Duration::from_secs(120));
    cmd
}

#[test]
fn malformed_specs_are_refused_before_any_traffic() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let cases: [(&[&str], &str); 3] = [
        (
            &["--workload", "2048", "--slo", "ttft:p95<1s"],
            "bad workload `2048`",
        ),
        (
            &["--workload", "64/8", "--slo", "ttft:p95<1000"],
            "--slo ttft:p95<1000: the threshold needs a unit, e.g. `ttft:p95<1000ms`",
        ),
        (
            &[
                "--workload",
                "64/8",
                "--slo",
                "ttft:p95<1s",
                "--protocol",
                "nope",
            ],
            "unknown protocol `nope`",
        ),
    ];
    for (args, message) in cases {
        capacity()
            .args(["--url", "http://127.0.0.1:9/v1", "--model", "m"])
            .args(args)
            .arg("-o")
            .arg(&dir)
            .assert()
            .code(2)
            .stderr(contains(message));
    }
    assert!(!dir.exists());
    capacity()
        .arg("--reanalyze")
        .arg(tmp.path().join("missing"))
        .assert()
        .code(2)
        .stderr(contains("capacity.json"));
}

#[test]
fn a_spent_budget_reports_an_unresolved_bracket_and_the_directory_is_not_reused() {
    let sim = SimServer::spawn_background(SimConfig::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let run = |dir: &std::path::Path| {
        let mut cmd = capacity();
        cmd.args(["--url", &sim.base_url(), "--model", "m"])
            .args([
                "--workload",
                "32/4",
                "--slo",
                "ttft:p95<1s",
                "--time-budget",
                "0",
            ])
            .arg("-o")
            .arg(dir);
        cmd
    };
    run(&dir).assert().success();
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let w = &report["workloads"][0];
    assert_eq!(w["maximum_passing_concurrency"], Value::Null);
    assert_eq!(w["first_failing_concurrency"], Value::Null);
    assert!(w["unresolved"]
        .as_str()
        .unwrap()
        .contains("levels 1..=1024"));
    assert_eq!(report["correctness_total"]["profiling_records"], 0);
    run(&dir)
        .assert()
        .code(2)
        .stderr(contains("already holds a capacity search"));
}

#[test]
fn a_level_with_failed_requests_fails_even_when_latency_is_fine() {
    // The 5th request the simulator receives is answered 503: it falls in the first trial
    // (after its calibration probe), which must then fail despite the loose latency SLO.
    let sim = SimServer::spawn_background(SimConfig {
        step_base_ms: 1.0,
        faults: FaultConfig {
            http_503_every: 5,
            ..FaultConfig::default()
        },
        ..SimConfig::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    capacity()
        .args(["--url", &sim.base_url(), "--model", "m"])
        .args(["--workload", "16/4", "--slo", "request_latency:p50<60s"])
        .args(["--trials", "1", "--warmups", "0", "--requests", "6"])
        .args(["--max-concurrency", "4"])
        .arg("-o")
        .arg(&dir)
        .assert()
        .success();
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let w = &report["workloads"][0];
    assert_eq!(w["maximum_passing_concurrency"], Value::Null);
    assert_eq!(w["first_failing_concurrency"], 1);
    let failing = w["failing_trials"].as_array().unwrap();
    assert_eq!(failing.len(), 1);
    assert_eq!(failing[0]["correctness"]["errors"], 1);
    assert_eq!(failing[0]["correctness"]["http_200"], 5);
    assert_eq!(failing[0]["correctness"]["profiling_records"], 6);
    assert!(failing[0]["request_latency_ms"]["p50"].as_f64().unwrap() < 60_000.0);
}

#[test]
fn experiment_labels_reach_every_trial_trace() {
    let sim = SimServer::spawn_background(SimConfig {
        step_base_ms: 1.0,
        ..SimConfig::default()
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    capacity()
        .args(["--url", &sim.base_url(), "--model", "m"])
        .args(["--workload", "16/4", "--slo", "request_latency:p50<60s"])
        .args(["--trials", "1", "--warmups", "0", "--requests", "2"])
        .args(["--max-concurrency", "1", "--label", "engine=vllm"])
        .arg("-o")
        .arg(&dir)
        .assert()
        .success();
    let trace = dir.join("16x4/c1/trial1.ttrace");
    let out = Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["analyze", "-p", "capacity-v3", "-f", "json"])
        .arg(&trace)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["engine"], "vllm");
    assert_eq!(report["concurrency"], 1);
}
