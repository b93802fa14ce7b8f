//! A client that is not tokentrace's recorder (`format/examples/foreign_client.rs`: blocking
//! std networking, its own HTTP and SSE handling) records a run against the simulator with the
//! format crate alone, and tokentrace reads the trace like one of its own: `inspect` finds it
//! whole, `analyze` counts every request, and each TTFT is what the chunks say.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::{fast_sim, inspect, sim, tokentrace_without_key, wait_bounded};
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokentrace_format::{Channel, Outcome, Phase};

const REQUESTS: u64 = 5;
/// The example's default `max_tokens`; the simulator's outputs are longer, so every request
/// stops at exactly this many tokens.
const MAX_TOKENS: u32 = 16;
/// Building the example compiles it (and, on a cold target directory, what it depends on).
const BUILD_LIMIT: Duration = Duration::from_secs(900);
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Builds the example with the cargo running this test, into the target directory, profile
/// and target triple this test binary was built for, and returns the executable. A failed
/// build fails the test, with cargo's output.
fn build_example(scratch: &Path) -> PathBuf {
    // This binary is TARGET_DIR[/TRIPLE]/PROFILE/deps/format_embedding-HASH.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let name = |dir: &Path| dir.file_name().unwrap().to_str().unwrap().to_string();
    let profile = name(&profile_dir);
    let mut target_dir = profile_dir.parent().unwrap().to_path_buf();
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "-p",
        "tokentrace-format",
        "--example",
        "foreign_client",
    ]);
    // Cargo tags the root of every target directory: a tag one level further up means this
    // level is a target triple.
    let tagged = |dir: &Path| dir.join("CACHEDIR.TAG").exists();
    if !tagged(&target_dir) && target_dir.parent().is_some_and(tagged) {
        cmd.args(["--target", &name(&target_dir)]);
        target_dir = target_dir.parent().unwrap().to_path_buf();
    }
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let log = scratch.join("build.log");
    let file = File::create(&log).unwrap();
    cmd.env("CARGO_TARGET_DIR", &target_dir)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    let status = wait_bounded(&mut cmd.spawn().unwrap(), BUILD_LIMIT);
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        status.success(),
        "building the example failed ({status}):\n{output}"
    );
    let example = profile_dir
        .join("examples")
        .join(format!("foreign_client{}", std::env::consts::EXE_SUFFIX));
    assert!(example.is_file(), "no example at {}", example.display());
    example
}

/// Runs the example against `url`, writing `trace`; fails the test unless it succeeds.
fn run_example(example: &Path, url: &str, trace: &Path, scratch: &Path) {
    let log = scratch.join("example.log");
    let file = File::create(&log).unwrap();
    let mut child = Command::new(example)
        .args(["--url", url, "--model", "tokentrace-sim"])
        .args(["--requests", &REQUESTS.to_string(), "-o"])
        .arg(trace)
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let status = wait_bounded(&mut child, RUN_LIMIT);
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "the example failed ({status}):\n{output}");
}

/// `tokentrace analyze TRACE --protocol tokentrace-v1 --format jsonl`: one row per request.
fn rows(trace: &Path) -> Vec<Value> {
    let mut cmd = tokentrace_without_key();
    cmd.arg("analyze")
        .arg(trace)
        .args(["--protocol", "tokentrace-v1", "--format", "jsonl"]);
    let out = String::from_utf8(common::stdout_of(&mut cmd)).unwrap();
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_foreign_client_writes_traces_tokentrace_reads() {
    let dir = tempfile::tempdir().unwrap();
    let example = build_example(dir.path());
    let server = sim(fast_sim());
    let trace = dir.path().join("foreign.trace");
    run_example(&example, &server.base_url(), &trace, dir.path());

    // inspect: a whole file, every request in it, the client's own manifest.
    let (v, status) = inspect(&trace);
    assert_eq!(status, 0, "{v}");
    assert_eq!(v["integrity"], "ok", "{v}");
    assert_eq!(v["requests"], REQUESTS);
    assert_eq!(v["measured_requests"], REQUESTS);
    assert_eq!(v["run_end"]["reason"], "completed");
    let tool = v["manifest"]["tool_version"].as_str().unwrap();
    assert!(tool.starts_with("foreign_client "), "{tool}");
    assert_eq!(v["manifest"]["base_url"], server.base_url().as_str());

    // analyze: every request counted, a positive TTFT for each.
    let report = common::analyze_json(&trace, "tokentrace-v1");
    assert_eq!(report["requests"]["counted"], REQUESTS, "{report}");
    assert_eq!(report["requests"]["failed"], 0, "{report}");
    let ttft = &report["metrics"]["ttft_ms"];
    assert_eq!(ttft["samples"], REQUESTS, "{ttft}");
    assert!(ttft["min"].as_f64().unwrap() > 0.0, "{ttft}");

    // The records as the format crate reads them back, and the analyzer's row of each.
    let (reader, records) = common::records_of(&trace);
    assert_eq!(
        reader.header().anchor.realtime_ns,
        v["clock_anchor"]["realtime_ns"]
    );
    let rows = rows(&trace);
    assert_eq!(records.len() as u64, REQUESTS);
    assert_eq!(rows.len() as u64, REQUESTS);
    for (r, row) in records.iter().zip(&rows) {
        let m = &r.meta;
        assert_eq!(row["id"], m.id);
        assert_eq!(
            (m.outcome, m.http_status),
            (Outcome::Ok, 200),
            "{:?}",
            m.error
        );
        assert_eq!(m.phase, Phase::Measured);
        assert_eq!(m.usage.completion_tokens, Some(MAX_TOKENS));
        assert!(m.usage.prompt_tokens > Some(0));
        assert_eq!(m.finish_reason.as_deref(), Some("length"));
        assert!(m.prompt_bytes > 0 && m.prompt_hash != 0);
        let text: u32 = r.chunks.iter().map(|c| c.text_len).sum();
        assert_eq!(text, m.output_bytes);
        assert!(m.output_bytes > 0);

        // The channels the example tells apart, in stream order.
        let channels: Vec<Channel> = r.chunks.iter().map(|c| c.channel).collect();
        assert_eq!(channels.first(), Some(&Channel::Role), "{channels:?}");
        assert_eq!(channels.last(), Some(&Channel::Done), "{channels:?}");
        let usage = channels.iter().filter(|&&c| c == Channel::Usage).count();
        assert_eq!(usage, 1, "{channels:?}");
        assert!(r.chunks.iter().all(|c| c.bytes > 0));

        // Times: intended ≤ send ≤ headers ≤ first chunk ≤ … ≤ last chunk ≤ end.
        let headers = m.headers_ns.unwrap();
        assert!(m.intended_ns <= m.send_ns && m.send_ns <= headers);
        assert!(headers <= r.chunks[0].arrival_ns);
        assert!(r
            .chunks
            .windows(2)
            .all(|w| w[0].arrival_ns <= w[1].arrival_ns && w[0].read_index <= w[1].read_index));
        assert!(r.chunks.last().unwrap().arrival_ns <= m.end_ns);

        // TTFT is the first content chunk's arrival minus the send, to the nanosecond.
        let first = r
            .chunks
            .iter()
            .find(|c| c.channel.is_content_text(c.text_len))
            .unwrap();
        let expected_ms = (first.arrival_ns - m.send_ns) as f64 / 1e6;
        assert!(expected_ms > 0.0);
        for metric in ["ttft_ms", "ttft_content_ms"] {
            let got = row[metric].as_f64().unwrap();
            assert!(
                (got - expected_ms).abs() < 1e-6,
                "request {}: {metric} {got} but the chunks say {expected_ms}",
                m.id
            );
        }
    }
}
