//! `tokentrace diff` against runs that failed: the failure rates side by side with their own
//! verdict, a warning for a side without a successful request or with damage, and each side
//! named by its run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::{json_of, tokentrace};
use serde_json::Value;
use std::path::Path;
use tokentrace_sim::{FaultConfig, SimConfig};

/// Records 20 requests from a simulator whose requests fail with HTTP 500 at `rate`.
fn run(dir: &Path, name: &str, rate: f64, label: &str) -> std::path::PathBuf {
    let server = sim(SimConfig {
        faults: FaultConfig {
            http_500: rate,
            ..FaultConfig::default()
        },
        seed: 3,
        ..fast_sim()
    });
    let out = dir.join(name);
    let url = format!("http://{}/v1", server.addr());
    let args = [
        "--requests",
        "20",
        "--max-tokens",
        "8",
        "--no-calibrate",
        "--label",
        label,
    ];
    record(&url, &out, &args).assert().success();
    out
}

fn diff_json(a: &Path, b: &Path) -> Value {
    json_of(tokentrace().arg("diff").arg(a).arg(b).arg("--json"))
}

fn diff_text(a: &Path, b: &Path) -> String {
    let output = tokentrace().arg("diff").arg(a).arg(b).output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn an_all_failed_run_is_no_within_noise() {
    let dir = tempfile::tempdir().unwrap();
    let good = run(dir.path(), "good.tt", 0.0, "engine=before");
    let broken = run(dir.path(), "broken.tt", 1.0, "engine=after");
    let report = diff_json(&good, &broken);
    let failures = &report["failures"];
    assert_eq!(failures["failed"], serde_json::json!([0, 20]), "{failures}");
    assert_eq!(failures["beyond_noise"], true);
    assert_eq!(failures["direction"], "higher");
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("B has no successful request")),
        "{warnings:?}"
    );
    assert_eq!(report["runs"][1]["labels"]["engine"], "after");

    let text = diff_text(&good, &broken);
    assert!(text.contains("A = good.tt (started "), "{text}");
    assert!(text.contains("engine=before"), "{text}");
    assert!(
        text.contains("failed: A 0 of 20 (0.0%), B 20 of 20 (100.0%)"),
        "{text}"
    );
    assert!(text.contains("higher (beyond noise)"), "{text}");
    assert!(text.contains("no samples on one side"), "{text}");
    assert!(
        !text.contains("within noise\n") || text.contains("failed: A"),
        "{text}"
    );
}

#[test]
fn mostly_failed_is_a_failure_rate_change_and_damage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = run(dir.path(), "good.tt", 0.0, "engine=before");
    let bad = run(dir.path(), "bad.tt", 0.9, "engine=after");
    let report = diff_json(&good, &bad);
    assert_eq!(
        report["failures"]["direction"], "higher",
        "{}",
        report["failures"]
    );

    // A flipped byte in the middle of A's data: a corrupt block the report must name.
    let damaged = dir.path().join("damaged.tt");
    let mut bytes = std::fs::read(&good).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&damaged, bytes).unwrap();
    let report = diff_json(&damaged, &good);
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("A (damaged.tt) is damaged")),
        "{warnings:?}"
    );
}
