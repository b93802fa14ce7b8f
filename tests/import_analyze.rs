//! An imported AIPerf run analyzed like a recorded one: under capacity-v3 it gives a complete
//! `anvil-serving.benchmark/v1` report, key for key as the real one in the fixtures.

use assert_cmd::Command;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn imported_aiperf_run_gives_a_complete_capacity_v3_report() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("aiperf.trace");
    Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["import", "aiperf"])
        .arg(fixtures().join("aiperf-0.13-chat"))
        .arg("-o")
        .arg(&trace)
        .assert()
        .success();
    let out = Command::cargo_bin("tokentrace")
        .unwrap()
        .arg("analyze")
        .arg(&trace)
        .args(["--protocol", "capacity-v3", "--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reference: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("capacity-v3-report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(keys(&report), keys(&reference));
    assert_eq!(keys(&report["metrics"]), keys(&reference["metrics"]));
    // Every metric the protocol defines is filled; only the two it defines as null are null.
    let nulls: BTreeSet<&str> = report["metrics"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        nulls,
        BTreeSet::from(["content_chunks_s", "prefix_cache_hit_avg"])
    );
    assert_eq!(report["completed"], 20);
    assert_eq!(report["request_timings"].as_array().unwrap().len(), 20);
    assert_eq!(
        keys(&report["request_timings"][0]),
        keys(&reference["request_timings"][0])
    );
    assert_eq!(report["metrics"]["content_chunks"], 1280);
}
