//! `tokentrace diff` tells a real regression from noise; `tokentrace protocols` lists and
//! prints definitions; a user-defined protocol file is analyzed like a built-in one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::{json_of, tokentrace};
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokentrace_format::{
    Channel, ChunkRecord, ClockAnchor, Header, Manifest, Outcome, Phase, RequestMeta,
    RequestRecord, RunEnd, TraceWriter, Usage, WriterConfig,
};

const MS: u64 = 1_000_000;

/// 60 requests, one every 100 ms: first content after `ttft_ms` (+0..10 ms jitter), then 9 more
/// content chunks 10 ms apart (+0..4 ms jitter).
fn write_trace(path: &Path, ttft_ms: u64) {
    let header = Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 0,
            realtime_ns: 1_788_580_000_000_000_000,
        },
        host: "testhost".into(),
        shard: 0,
    };
    let manifest = Manifest {
        model: "sim-model".into(),
        ..Manifest::default()
    };
    let writer = TraceWriter::create(
        path,
        header,
        &manifest,
        // Small blocks, so that a trace has many and parallel decoding is exercised.
        WriterConfig {
            block_target_bytes: 512,
            ..WriterConfig::default()
        },
    )
    .unwrap();
    let sender = writer.sender();
    for i in 0..60u64 {
        let send = i * 100 * MS;
        let mut t = send + (ttft_ms + (i * 7) % 11) * MS;
        let mut chunks = Vec::new();
        for c in 0..10u64 {
            if c > 0 {
                t += (10 + (i * 3 + c) % 5) * MS;
            }
            chunks.push(ChunkRecord {
                arrival_ns: t,
                read_index: c as u32,
                bytes: 30,
                channel: Channel::Content,
                text_len: 4,
                tokens: None,
                text: None,
            });
        }
        sender
            .send(RequestRecord {
                meta: RequestMeta {
                    id: i,
                    phase: Phase::Measured,
                    trial: 0,
                    intended_ns: send,
                    send_ns: send,
                    headers_ns: Some(send + MS),
                    end_ns: t + MS,
                    http_status: 200,
                    outcome: Outcome::Ok,
                    error: None,
                    usage: Usage {
                        prompt_tokens: Some(50),
                        completion_tokens: Some(10),
                        ..Usage::default()
                    },
                    finish_reason: Some("stop".into()),
                    prompt_hash: 0,
                    prompt_bytes: 200,
                    output_hash: 0,
                    output_bytes: 40,
                    planned_input_tokens: Some(50),
                    response_headers: vec![],
                    retries: 0,
                },
                chunks,
            })
            .unwrap();
    }
    drop(sender);
    writer
        .finish(RunEnd {
            end_ns: 6_100 * MS,
            reason: "completed".into(),
            ..RunEnd::default()
        })
        .unwrap();
}

fn traces(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (a, a2, b) = (dir.join("a.tt"), dir.join("a2.tt"), dir.join("b.tt"));
    write_trace(&a, 50);
    write_trace(&a2, 50);
    write_trace(&b, 80);
    (a, a2, b)
}

fn diff(a: &Path, b: &Path) -> Value {
    json_of(tokentrace().arg("diff").arg(a).arg(b).arg("--json"))
}

fn metric<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == name)
        .unwrap()
}

#[test]
fn diff_flags_a_ttft_regression_and_not_the_unchanged_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let (a, a2, b) = traces(dir.path());
    let r = diff(&a, &b);
    let ttft = metric(&r, "ttft_ms");
    assert_eq!(ttft["beyond_noise"], true);
    assert_eq!(ttft["direction"], "higher");
    let ci = ttft["median_diff_ci"].as_array().unwrap();
    assert!(
        ci[0].as_f64().unwrap() > 20.0 && ci[1].as_f64().unwrap() < 40.0,
        "{ci:?}"
    );
    let itl = metric(&r, "itl_ms");
    assert_eq!(itl["beyond_noise"], false);
    assert_eq!(itl["direction"], "same");
    // The same run twice: nothing is beyond noise.
    let same = diff(&a, &a2);
    assert!(same["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["beyond_noise"] == false));
    let table = tokentrace().arg("diff").arg(&a).arg(&b).output().unwrap();
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("ttft_ms") && l.contains("higher (beyond noise)")),
        "{text}"
    );
}

#[test]
fn protocols_lists_and_prints_every_definition() {
    let out = tokentrace().arg("protocols").output().unwrap();
    let list = String::from_utf8(out.stdout).unwrap();
    for name in common::BUILTIN_PROTOCOLS {
        assert!(
            list.lines().any(|l| l.starts_with(name)),
            "{name} missing from\n{list}"
        );
    }
    let out = tokentrace().args(["protocols", "vllm"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("name = \"vllm\""));
    assert!(text.contains("gap_chunks = \"choices\""));
    assert!(text
        .contains("# ttft_ms: request start through the first streamed event carrying a choice"));
}

#[test]
fn a_protocol_file_is_analyzed_like_a_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _, _) = traces(dir.path());
    let file = dir.path().join("mine.toml");
    std::fs::write(
        &file,
        r#"
name = "mine"
version = 3
description = "p90 TTFT and the slowest gap of each request"
percentile_method = "nearest_rank"
stats = ["p90", "samples"]

[[metrics]]
name = "ttft_ms"
unit = "ms"
quantity = { kind = "interval", from = "send", to = "first_content" }

[[metrics]]
name = "worst_gap_ms"
unit = "ms"
quantity = { kind = "gap_stat", stat = "max" }
stats = ["max"]
"#,
    )
    .unwrap();
    let r = json_of(
        tokentrace()
            .arg("analyze")
            .arg(&a)
            .args(["--format", "json", "--protocol-file"])
            .arg(&file),
    );
    assert_eq!(r["protocol"], "mine");
    // TTFT is 50 + (7i mod 11) ms: nearest-rank p90 of 60 values is the 54th smallest = 59 ms.
    assert_eq!(r["metrics"]["ttft_ms"]["p90"], 59.0);
    assert_eq!(r["metrics"]["ttft_ms"]["samples"], 60);
    // Gaps are 10 + (3i + c) mod 5 ms: the slowest is 14 ms.
    assert_eq!(r["metrics"]["worst_gap_ms"]["max"], 14.0);
    assert!(r["timing_methodology"]["distributions"]
        .as_str()
        .unwrap()
        .contains("nearest-rank"));

    std::fs::write(&file, "name = \"broken\"\nversion = 1\n").unwrap();
    let out = tokentrace()
        .arg("analyze")
        .arg(&a)
        .arg("--protocol-file")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("mine.toml"));
}

#[test]
fn threads_and_bootstrap_do_not_change_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _, _) = traces(dir.path());
    let run = |threads: &str| {
        json_of(tokentrace().arg("analyze").arg(&a).args([
            "--format",
            "json",
            "--bootstrap",
            "200",
            "--threads",
            threads,
        ]))
    };
    let (one, three) = (run("1"), run("3"));
    assert_eq!(one, three);
    let ttft = &one["metrics"]["ttft_ms"];
    let (mean, ci) = (
        ttft["mean"].as_f64().unwrap(),
        ttft["ci"]["mean"].as_array().unwrap(),
    );
    assert!(
        ci[0].as_f64().unwrap() < mean && mean < ci[1].as_f64().unwrap(),
        "{ttft}"
    );
    assert_eq!(ttft["ci"]["confidence"], 0.95);
    assert_eq!(one["metrics"]["itl_ms"]["samples"], 540);
}
