//! `tokentrace redact IN OUT`: the copy has no captured text or payloads and no response header
//! values beyond timings and ids; everything else is identical, and it passes `inspect`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use std::path::Path;
use tokentrace_format::redact::{KEPT_HEADER_VALUES, REDACTED, UNFINISHED_REASON};
use tokentrace_format::{RequestRecord, TraceReader};
use tokentrace_sim::{FaultConfig, SimConfig};

fn redact(input: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    tokentrace_without_key()
        .arg("redact")
        .arg(input)
        .arg(output)
        .args(extra)
        .output()
        .unwrap()
}

/// What the redacted copy of `r` must be.
fn expected(mut r: RequestRecord, strip_errors: bool) -> RequestRecord {
    for c in &mut r.chunks {
        c.text = None;
    }
    for (name, value) in &mut r.meta.response_headers {
        if !KEPT_HEADER_VALUES.contains(&name.as_str()) {
            *value = REDACTED.to_string();
        }
    }
    if strip_errors && r.meta.error.is_some() {
        r.meta.error = Some(REDACTED.to_string());
    }
    r
}

/// Checks that `copy` is `original` with text removed and nothing else changed.
fn assert_redacted_copy(original: &Path, copy: &Path, strip_errors: bool) {
    let (json, code) = inspect(copy);
    assert_eq!(
        (json["integrity"].as_str(), code),
        (Some("ok"), 0),
        "{json}"
    );
    let a = TraceReader::open(original).unwrap();
    let b = TraceReader::open(copy).unwrap();
    // The copy is written in this writer's format version, everything else kept.
    let mut header = a.header().clone();
    header.minor = tokentrace_format::frame::FORMAT_MINOR;
    assert_eq!(&header, b.header());
    let mut manifest = b.manifest().clone();
    let marker = manifest.extra.remove("redaction").expect("extra.redaction");
    assert_eq!(marker["chunk_text"], "removed");
    assert_eq!(
        &manifest,
        a.manifest(),
        "the manifest is otherwise unchanged"
    );
    if let Some(end) = a.run_end() {
        assert_eq!(b.run_end(), Some(end));
    }
    let before: Vec<RequestRecord> = a.requests().map(|r| r.unwrap()).collect();
    let after: Vec<RequestRecord> = b.requests().map(|r| r.unwrap()).collect();
    assert_eq!(before.len(), after.len());
    for (x, y) in before.into_iter().zip(after) {
        assert_eq!(y, expected(x, strip_errors), "records stay in file order");
    }
}

fn recorded_with_capture(dir: &Path, capture: &str) -> std::path::PathBuf {
    let server = sim(SimConfig {
        faults: FaultConfig {
            http_500_every: 4,
            ..FaultConfig::default()
        },
        ..fast_sim()
    });
    let out = dir.join(format!("{capture}.tt"));
    record(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "12",
            "--concurrency",
            "3",
            "--max-tokens",
            "8",
            "--input-tokens",
            "30",
            "--capture",
            capture,
        ],
    )
    .assert()
    .success();
    out
}

#[test]
fn redact_strips_captured_text_and_raw_payloads() {
    let dir = tempfile::tempdir().unwrap();
    for capture in ["text", "raw"] {
        let original = recorded_with_capture(dir.path(), capture);
        let (_, records) = records_of(&original);
        let texts = records
            .iter()
            .flat_map(|r| &r.chunks)
            .filter(|c| c.text.is_some())
            .count();
        assert!(texts > 0, "--capture {capture} stored text");
        assert!(records.iter().any(|r| !r.meta.response_headers.is_empty()));

        let copy = dir.path().join(format!("{capture}-redacted.tt"));
        let output = redact(&original, &copy, &[]);
        assert!(output.status.success(), "{output:?}");
        assert!(String::from_utf8_lossy(&output.stdout).contains(&format!("{texts} chunk texts")));
        assert_redacted_copy(&original, &copy, false);

        // A raw payload of the original (a whole JSON event) is nowhere in the copy.
        if capture == "raw" {
            let sample = records
                .iter()
                .flat_map(|r| &r.chunks)
                .filter_map(|c| c.text.clone())
                .find(|t| t.len() > 20)
                .unwrap();
            let (_, redacted) = records_of(&copy);
            assert!(!format!("{redacted:?}").contains(&sample));
        }
    }
}

#[test]
fn redact_can_strip_error_texts_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let original = recorded_with_capture(dir.path(), "text");
    let copy = dir.path().join("errors-redacted.tt");
    let output = redact(&original, &copy, &["--strip-errors"]);
    assert!(output.status.success(), "{output:?}");
    assert_redacted_copy(&original, &copy, true);
    let (_, records) = records_of(&copy);
    let errors: Vec<_> = records.iter().filter(|r| r.meta.error.is_some()).collect();
    assert!(!errors.is_empty());
    assert!(errors
        .iter()
        .all(|r| r.meta.error.as_deref() == Some(REDACTED) && r.meta.http_status == 500));

    let again = redact(&original, &copy, &[]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let same = redact(&original, &original, &["--force"]);
    assert!(
        !same.status.success(),
        "redacting a file onto itself is refused"
    );
    assert_eq!(inspect(&original).0["integrity"], "ok");
}

#[test]
fn redact_of_a_killed_trace_gets_a_run_end() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/killed.trace");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("killed-redacted.tt");
    let output = redact(&golden, &copy, &[]);
    assert!(output.status.success(), "{output:?}");
    assert_redacted_copy(&golden, &copy, false);
    let reader = TraceReader::open(&copy).unwrap();
    assert_eq!(reader.run_end().unwrap().reason, UNFINISHED_REASON);
}

/// A trace with a corrupt block: refused (exit 1, nothing written), or with `--allow-damage`
/// copied with the damage recorded, so the copy never claims more than its input had.
#[test]
fn redact_refuses_a_damaged_trace_or_records_its_damage() {
    let dir = tempfile::tempdir().unwrap();
    let input = common::fixtures().join("../golden/finished.trace");
    let mut bytes = std::fs::read(&input).unwrap();
    let reader = TraceReader::open(&input).unwrap();
    let second = reader.block_info(1).unwrap().offset as usize;
    // A payload byte of the second block: its checksum no longer matches.
    bytes[second + 40] ^= 0xff;
    let damaged = dir.path().join("damaged.trace");
    std::fs::write(&damaged, bytes).unwrap();
    let (json, _) = inspect(&damaged);
    assert_eq!(json["integrity"], "corrupt", "{json}");

    let copy = dir.path().join("copy.trace");
    let refused = redact(&damaged, &copy, &[]);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("damaged") && stderr.contains("--allow-damage"),
        "{stderr}"
    );
    assert!(!copy.exists(), "nothing is written");

    let allowed = redact(&damaged, &copy, &["--allow-damage"]);
    assert_eq!(allowed.status.code(), Some(1));
    let reader = TraceReader::open(&copy).unwrap();
    let reason = &reader.run_end().unwrap().reason;
    assert!(
        reason.contains("damaged trace: 1 block(s) lost"),
        "{reason}"
    );
    let marker = &reader.manifest().extra["redaction"];
    assert!(
        marker["input_damage"].as_str().unwrap().contains("block 1"),
        "{marker}"
    );
    let (json, _) = inspect(&copy);
    let (original, _) = inspect(&damaged);
    assert_eq!(
        json["requests"], original["requests"],
        "the copy holds what could be read"
    );
}
