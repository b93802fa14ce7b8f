//! `tokentrace inspect` on the golden traces, a damaged copy and a missing file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use assert_cmd::Command;
use serde_json::Value;
use std::path::PathBuf;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn inspect_json(path: &std::path::Path, expected_code: i32) -> Value {
    let output = Command::cargo_bin("tokentrace")
        .unwrap()
        .arg("inspect")
        .arg(path)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(expected_code),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `tokentrace inspect` of `path` as text, which must succeed.
#[track_caller]
fn inspect_text(path: &std::path::Path) -> String {
    String::from_utf8(common::stdout_of(
        common::tokentrace().arg("inspect").arg(path),
    ))
    .unwrap()
}

#[test]
fn inspect_reports_a_finished_trace() {
    let v = inspect_json(&golden("finished.trace"), 0);
    assert_eq!(v["format_version"], "1.0");
    assert_eq!(v["integrity"], "ok");
    assert_eq!(v["blocks"], 3);
    assert_eq!(v["requests"], 6);
    assert_eq!(v["measured_requests"], 5);
    assert_eq!(v["chunks"], 44);
    assert_eq!(
        v["checkpointed_chunks"], 0,
        "a 1.0 trace has no checkpoints"
    );
    assert_eq!(v["host"], "golden-host");
    assert_eq!(v["manifest"]["model"], "tiny");
    assert_eq!(v["run_end"]["reason"], "completed");
    assert_eq!(v["first_send_ns"], 10_000_000);
    assert_eq!(v["last_end_ns"], 310_072_168u64);

    let text = inspect_text(&golden("finished.trace"));
    let lines = words(&text);
    assert!(lines.contains(&"integrity: ok".to_string()), "{text}");
    assert!(
        lines.contains(&"requests: 6 5 measured, 0 retried on a fresh connection".to_string()),
        "{text}"
    );
    assert!(lines.contains(&"blocks: 3".to_string()), "{text}");
    // Wall-clock times are dates, durations and sizes have units, counts line up.
    assert!(
        lines.contains(&"started: 2025-11-29T00:00:00Z".to_string()),
        "{text}"
    );
    assert!(
        text.contains("run end:        completed at 2025-11-29T00:00:01Z (1.000 s after"),
        "{text}"
    );
    assert!(
        text.contains("time span:      300.1 ms, 2025-11-29T00:00:00Z to"),
        "{text}"
    );
    assert!(text.contains("finished.trace (1.457 KiB)"), "{text}");
    // Blocks (3) and chunks (44) end in the same column.
    let end = |key: &str| text.lines().find(|l| l.starts_with(key)).map(str::len);
    assert_eq!(end("blocks:"), end("chunks:"), "{text}");
}

/// Each line of `text` with its runs of spaces collapsed to one.
fn words(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn inspect_reports_a_killed_trace_as_recovered() {
    let v = inspect_json(&golden("killed.trace"), 0);
    assert_eq!(v["integrity"], "recovered");
    assert_eq!(v["integrity_detail"], "recovered 2 blocks");
    assert_eq!(v["blocks"], 2);
    assert_eq!(v["run_end"], Value::Null);
    assert!(v["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("incomplete last frame"));
}

#[test]
fn inspect_reports_a_damaged_block_and_fails() {
    let mut bytes = std::fs::read(golden("finished.trace")).unwrap();
    // The middle of the second block's compressed payload.
    let finished = inspect_json(&golden("finished.trace"), 0);
    let total = finished["file_bytes"].as_u64().unwrap() as usize;
    assert_eq!(total, bytes.len());
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("damaged.trace");
    let target = bytes.len() / 2;
    bytes[target] ^= 0x55;
    std::fs::write(&damaged, &bytes).unwrap();
    let v = inspect_json(&damaged, 1);
    assert_eq!(v["integrity"], "corrupt");
    assert!(
        v["integrity_detail"]
            .as_str()
            .unwrap()
            .starts_with("corrupt block"),
        "{v}"
    );
    assert!(v["requests"].as_u64().unwrap() < 6);
}

#[test]
fn inspect_of_a_missing_file_is_a_clear_error() {
    let output = Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["inspect", "/nonexistent/x.trace"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/x.trace"));
}

/// A block whose checksums are valid but whose columns are not (as a faulty writer would
/// leave it): integrity checks pass, decoding fails, and inspect must still call it corrupt.
#[test]
fn inspect_reports_a_block_that_passes_checksums_but_does_not_decode() {
    use tokentrace_format::frame::{encode_frame, FrameKind, CODEC_NONE};
    let original = std::fs::read(golden("killed.trace")).unwrap();
    let reader = tokentrace_format::TraceReader::open(&golden("killed.trace")).unwrap();
    let first = *reader.block_info(0).unwrap();
    let start = first.offset as usize;
    let end = start + 32 + first.frame.stored_len as usize;
    let garbage = [0xfdu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    let mut bytes = original[..start].to_vec();
    bytes.extend(encode_frame(
        FrameKind::Block,
        CODEC_NONE,
        0,
        garbage.len() as u32,
        &garbage,
    ));
    bytes.extend_from_slice(&original[end..]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-columns.trace");
    std::fs::write(&path, &bytes).unwrap();

    let v = inspect_json(&path, 1);
    assert_eq!(v["integrity"], "corrupt");
    let detail = v["integrity_detail"].as_str().unwrap();
    assert!(
        detail.starts_with("corrupt block 0:") && detail.contains("column"),
        "{detail}"
    );
    // The block after it is still read.
    assert_eq!(v["blocks"], 2);
    assert!(v["requests"].as_u64().unwrap() > 0);
}

#[test]
fn inspect_names_an_unknown_host_of_an_imported_run() {
    let (_dir, trace) = common::import_aiperf_fixture();
    let text = inspect_text(&trace);
    assert!(
        words(&text).contains(&"host: unknown (shard 0)".to_string()),
        "{text}"
    );
}

/// Chunks in checkpoints are counted apart: in `killed-1.2.trace` the reasoning stream's 24
/// chunks are in its three checkpoints (0–9, 10–19, 20–23) and in no final record.
#[test]
fn inspect_counts_the_chunks_written_in_checkpoints() {
    let v = inspect_json(&golden("killed-1.2.trace"), 0);
    assert_eq!(v["interrupted_requests"], 1);
    assert_eq!(v["checkpointed_chunks"], 24);
    let text = inspect_text(&golden("killed-1.2.trace"));
    assert!(
        words(&text).contains(
            &"checkpointed: 24 chunks also written in checkpoints while their requests streamed"
                .to_string()
        ),
        "{text}"
    );
}
