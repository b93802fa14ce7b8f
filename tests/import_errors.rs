//! Malformed imports: every problem names its file, line and field; what is sound is imported
//! (exit 1), and an input with nothing sound fails (exit 2) without writing a trace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use assert_cmd::Command;
use predicates::str::contains;
use serde_json::json;
use std::path::{Path, PathBuf};
use tokentrace_format::TraceReader;

fn fixture_lines() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/aiperf-0.13-chat/profile_export_raw.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn import(kind: &str, input: &Path, trace: &Path) -> assert_cmd::assert::Assert {
    Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["import", kind])
        .arg(input)
        .arg("-o")
        .arg(trace)
        .assert()
}

fn write_dir(lines: &[String]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::write(run.join("profile_export_raw.jsonl"), lines.join("\n")).unwrap();
    (dir, run)
}

#[test]
fn aiperf_bad_lines_are_named_and_the_rest_imported() {
    let mut lines: Vec<String> = fixture_lines().into_iter().take(4).collect();
    lines[1] = lines[1][..200].to_string(); // cut mid-record, as a killed run leaves it
    let mut bad: serde_json::Value = serde_json::from_str(&lines[2]).unwrap();
    bad["responses"][1]["perf_ns"] = json!("late");
    lines[2] = bad.to_string();
    let (dir, run) = write_dir(&lines);
    let trace = dir.path().join("t.trace");
    import("aiperf", &run, &trace)
        .code(1)
        .stderr(contains("profile_export_raw.jsonl:2: field `(line)`: invalid JSON"))
        .stderr(contains("profile_export_raw.jsonl:3: field `responses[1].perf_ns`: missing or not a non-negative integer"))
        .stdout(contains("imported 2 requests"));
    let reader = TraceReader::open(&trace).unwrap();
    assert_eq!(reader.requests().count(), 2);
    let unknown = reader.manifest().extra["import"]["unknown"].to_string();
    // Only the raw file was there: the manifest says what that leaves unknown.
    assert!(unknown.contains("client_token_counts"), "{unknown}");
    assert!(unknown.contains("phase window"), "{unknown}");
    assert_eq!(
        reader.manifest().extra["import"]["issues"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn aiperf_with_nothing_sound_fails() {
    let (dir, run) = write_dir(&["{".to_string(), "[1, 2]".to_string()]);
    let trace = dir.path().join("t.trace");
    import("aiperf", &run, &trace)
        .code(2)
        .stderr(contains("nothing could be imported"))
        .stderr(contains("profile_export_raw.jsonl:1"));
    assert!(!trace.exists());
}

#[test]
fn aiperf_missing_directory_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    import(
        "aiperf",
        &dir.path().join("nope"),
        &dir.path().join("t.trace"),
    )
    .code(2)
    .stderr(contains("nope"));
}

fn write_json(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("result.json");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn vllm_result() -> serde_json::Value {
    json!({
        "model_id": "m", "backend": "vllm", "duration": 1.0,
        "start_times": [5.0, 5.5], "ttfts": [0.1, 0.2], "itls": [[0.01, 0.02], [0.03]],
        "latencies": [0.13, 0.23], "input_lens": [10, 10], "output_lens": [3, 2],
        "generated_texts": ["abc", "de"], "errors": ["", ""]
    })
}

#[test]
fn vllm_length_mismatch_names_the_field() {
    let mut result = vllm_result();
    result["itls"] = json!([[0.01]]);
    let (dir, path) = write_json(&result.to_string());
    import("vllm", &path, &dir.path().join("t.trace"))
        .code(2)
        .stderr(contains(
            "result.json: field `itls`: has 1 entries but `ttfts` has 2",
        ));
}

#[test]
fn vllm_invalid_json_names_the_line() {
    let (dir, path) = write_json("{\n  \"ttfts\": [0.1,\n  oops\n}");
    import("vllm", &path, &dir.path().join("t.trace"))
        .code(2)
        .stderr(contains("result.json:3: invalid JSON"));
}

#[test]
fn vllm_bad_entry_skips_only_that_request() {
    let mut result = vllm_result();
    result["itls"][1][0] = json!("fast");
    let (dir, path) = write_json(&result.to_string());
    let trace = dir.path().join("t.trace");
    import("vllm", &path, &trace).code(1).stderr(contains(
        "result.json: field `itls[1][0]`: expected a number, found \"fast\"",
    ));
    assert_eq!(TraceReader::open(&trace).unwrap().requests().count(), 1);
}

#[test]
fn vllm_without_detail_is_refused() {
    let (dir, path) = write_json(r#"{"duration": 1.0, "completed": 2}"#);
    import("vllm", &path, &dir.path().join("t.trace"))
        .code(2)
        .stderr(contains(
            "field `ttfts`: missing: not a --save-detailed result",
        ));
}

#[test]
fn a_missing_input_is_named_once_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = import("aiperf", &missing, &dir.path().join("t.tt"))
        .code(2)
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let os_text = "No such file or directory";
    assert!(stderr.contains(os_text), "{stderr}");
    assert_eq!(stderr.matches(os_text).count(), 1, "{stderr}");
}
