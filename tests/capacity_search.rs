//! `tokentrace capacity` against the simulator: the knee the engine model predicts is found
//! exactly, the saved directory re-analyzes to the same bytes, a looser SLO moves the answer,
//! and the report has the fixture's keys.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use assert_cmd::Command;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokentrace_sim::{SimConfig, SimServer};

const ISL: u32 = 64;
const OSL: u32 = 24;
const REQUESTS: u32 = 10;

/// An engine whose only queueing is for batch slots: fast prefill, fixed decode step, one
/// token per step.
fn engine() -> SimConfig {
    SimConfig {
        slots: 5,
        prefill_tok_s: 1_000_000.0,
        prefill_base_ms: 1.0,
        step_base_ms: 20.0,
        step_per_seq_ms: 0.0,
        spec_tokens_mean: 1.0,
        ..SimConfig::default()
    }
}

/// The engine model's TTFT bounds for a closed loop of `concurrency` clients:
/// - with at most `slots` clients nobody queues for a slot: TTFT is at most every admitted
///   prefill back to back plus one decode step;
/// - with more, some request waits for a running one to finish, at least `osl` decode steps.
///   A request waits at most for one whole request (plus its own prefill and step) as long
///   as concurrency <= 2 * slots.
struct Prediction {
    unqueued_max_ms: f64,
    queued_min_ms: f64,
    queued_max_ms: f64,
}

fn predict(sim: &SimConfig) -> Prediction {
    let slots = sim.slots as f64;
    let step = sim.step_base_ms + sim.step_per_seq_ms * slots;
    let prefill = sim.prefill_base_ms + f64::from(ISL) / sim.prefill_tok_s * 1000.0;
    let request = f64::from(OSL) * step;
    Prediction {
        unqueued_max_ms: slots * prefill + step,
        queued_min_ms: request,
        queued_max_ms: request + slots * prefill + 2.0 * step,
    }
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn key_paths(value: &Value) -> BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let path = format!("{prefix}.{key}");
                    out.insert(path.clone());
                    walk(inner, &path, out);
                }
            }
            Value::Array(items) => items
                .iter()
                .for_each(|i| walk(i, &format!("{prefix}[]"), out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(value, "", &mut out);
    out
}

/// `capacity --reanalyze DIR` with `--slo` for each of `slos`, then `extra` arguments.
fn reanalyze(dir: &Path, slos: &[&str], extra: &[&str]) -> Vec<u8> {
    let mut cmd = Command::cargo_bin("tokentrace").unwrap();
    cmd.arg("capacity").arg("--reanalyze").arg(dir);
    for slo in slos {
        cmd.arg("--slo").arg(slo);
    }
    cmd.args(extra);
    let out = cmd.timeout(Duration::from_secs(60)).assert().success();
    out.get_output().stdout.clone()
}

fn bracket(report: &Value) -> (Value, Value) {
    let w = &report["workloads"][0];
    (
        w["maximum_passing_concurrency"].clone(),
        w["first_failing_concurrency"].clone(),
    )
}

#[test]
fn finds_the_predicted_knee_and_reanalysis_reproduces_it() {
    let sim_config = engine();
    let slots = sim_config.slots as u64;
    let p = predict(&sim_config);
    // The SLO sits far from both sides of the knee, so scheduling noise cannot move it.
    let threshold_ms = 150.0;
    assert!(p.unqueued_max_ms * 4.0 < threshold_ms);
    assert!(p.queued_min_ms > threshold_ms * 2.0);
    // With `slots + 1` clients, one request in every round of `slots` waits, so at least one
    // in REQUESTS = 2 * slots does: the p95 (linear, n = 10) then lies above
    // 0.55 * queued_min_ms, still over the threshold.
    assert!(0.55 * p.queued_min_ms > threshold_ms);

    let sim = SimServer::spawn_background(sim_config).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("search");
    let hook_log = tmp.path().join("hooks.log");
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture_path("capacity-slo-report.json")).unwrap(),
    )
    .unwrap();
    let mut cmd = Command::cargo_bin("tokentrace").unwrap();
    cmd.args(["capacity", "--url", &sim.base_url(), "--model", "sim-model"])
        .args(["--workload", &format!("{ISL}/{OSL}")])
        .args(["--slo", &format!("ttft:p95<{threshold_ms}ms")])
        .args(["--min-concurrency", "2", "--max-concurrency", "8"])
        .args([
            "--trials",
            "2",
            "--warmups",
            "2",
            "--requests",
            &REQUESTS.to_string(),
        ])
        .arg("--all-trials")
        .args([
            "--before-trial",
            &format!(
                "echo $TOKENTRACE_WORKLOAD $TOKENTRACE_CONCURRENCY $TOKENTRACE_TRIAL >> {}",
                hook_log.display()
            ),
        ])
        .arg("-o")
        .arg(&dir);
    // Every experiment key of the fixture, as labels.
    for (key, value) in fixture["experiment"].as_object().unwrap() {
        match value {
            Value::Object(inner) => {
                for (k, v) in inner {
                    cmd.arg("--label").arg(format!("{key}.{k}={v}"));
                }
            }
            other => {
                cmd.arg("--label").arg(format!("{key}={other}"));
            }
        }
    }
    let out = cmd.timeout(Duration::from_secs(240)).assert().success();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("[64 / 24] concurrency 8 trial 1"),
        "{stderr}"
    );
    assert!(stderr.contains("passing 5 / failing 6"), "{stderr}");

    let written = std::fs::read(dir.join("report.json")).unwrap();
    let report: Value = serde_json::from_slice(&written).unwrap();
    // Doubling 2, 4, 8 (fails), then bisecting 6 (fails), 5 (passes): the knee is `slots`.
    assert_eq!(
        bracket(&report),
        (Value::from(slots), Value::from(slots + 1))
    );
    let w = &report["workloads"][0];
    assert_eq!(w["passing_trials"].as_array().unwrap().len(), 2);
    assert_eq!(w["failing_trials"].as_array().unwrap().len(), 2);
    for trial in w["passing_trials"].as_array().unwrap() {
        assert!(trial["ttft_ms"]["p95"].as_f64().unwrap() < threshold_ms);
        let c = &trial["correctness"];
        assert_eq!(c["profiling_records"], REQUESTS);
        assert_eq!(c["warmup_records"], 2);
        assert_eq!(c["unique_prompts"], REQUESTS);
        assert_eq!(c["warmup_profile_prompt_overlap"], 0);
        assert_eq!(c["completion_tokens_total"], REQUESTS * OSL);
        assert_eq!(c["generated_chunks"], REQUESTS * OSL);
        assert_eq!(c["finish_reason_length"], REQUESTS);
        assert_eq!(c["errors"], 0);
        assert_eq!(c["output_length_mismatches"], 0.0);
    }
    for trial in w["failing_trials"].as_array().unwrap() {
        assert!(trial["ttft_ms"]["p95"].as_f64().unwrap() >= threshold_ms);
    }
    assert_eq!(
        report["correctness_total"]["profiling_records"],
        4 * REQUESTS
    );
    assert_eq!(key_paths(&report), key_paths(&fixture));
    assert_eq!(report["experiment"], fixture["experiment"]);

    // One trace per trial; the hook ran before each of them.
    let levels = [(2, 2), (4, 2), (8, 2), (6, 2), (5, 2)];
    let traces: usize = levels.iter().map(|(_, n)| n).sum();
    for (c, n) in levels {
        for k in 1..=n {
            assert!(dir.join(format!("64x24/c{c}/trial{k}.ttrace")).exists());
        }
    }
    let hooks = std::fs::read_to_string(&hook_log).unwrap();
    assert_eq!(hooks.lines().count(), traces);
    assert_eq!(hooks.lines().next(), Some("64/24 2 1"));
    drop(sim);

    // Offline: the same bytes; a looser SLO (above any queued TTFT at <= 2 * slots clients)
    // passes every level up to the maximum; an impossible one fails the minimum.
    assert_eq!(reanalyze(&dir, &[], &[]), written);
    let via_analyze = Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["analyze", "--format", "json", "--capacity"])
        .arg(&dir)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    assert_eq!(via_analyze.get_output().stdout, written);
    let loose_ms = (p.queued_max_ms * 3.0).round();
    let loose: Value =
        serde_json::from_slice(&reanalyze(&dir, &[&format!("ttft:p95<{loose_ms}ms")], &[]))
            .unwrap();
    assert_eq!(bracket(&loose), (Value::from(8), Value::Null));
    assert!(loose["workloads"][0].get("unresolved").is_none());
    assert_eq!(loose["slo"]["threshold_ms"], Value::from(loose_ms as u64));
    let strict: Value =
        serde_json::from_slice(&reanalyze(&dir, &["ttft:p95<0.001ms"], &[])).unwrap();
    assert_eq!(bracket(&strict), (Value::Null, Value::from(2)));

    // Under capacity-v3's definitions (nearest-rank percentiles) the knee is the same: the
    // queued requests dominate the p95 either way.
    let v3: Value =
        serde_json::from_slice(&reanalyze(&dir, &[], &["--protocol", "capacity-v3"])).unwrap();
    assert_eq!(bracket(&v3), (Value::from(slots), Value::from(slots + 1)));
    assert!(v3["aiperf"]["version"]
        .as_str()
        .unwrap()
        .contains("capacity-v3"));
}
