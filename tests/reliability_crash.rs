//! Crash safety of `tokentrace record`: SIGKILL leaves every complete block readable, SIGINT
//! finishes the trace with in-flight requests cancelled, and a full disk is a clear error that
//! leaves a readable partial trace.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokentrace_format::{Channel, Integrity, Outcome, RequestRecord, TraceReader};
use tokentrace_sim::SimConfig;

/// 20 ms decode steps: a 20-token request streams for about 0.4 s, so a run of a few seconds
/// spans several one-second blocks (the writer's default block age).
fn slow_sim() -> SimConfig {
    SimConfig {
        step_base_ms: 20.0,
        ..fast_sim()
    }
}

fn assert_complete(r: &RequestRecord) {
    assert_ok(r);
    assert_eq!(count(r, Channel::Done), 1);
    assert!(
        r.meta.end_ns >= r.meta.send_ns && r.meta.send_ns >= r.meta.intended_ns.min(r.meta.send_ns)
    );
}

/// Records from a slow simulator into `out` (an open-ended `--requests 100000`, then `args`,
/// then a prompt file of 8 beside `out`), sends signal `name` after `after`, and returns the
/// exit status, failing the test if the process has not ended `limit_s` seconds later.
fn record_then_signal(
    out: &Path,
    args: &[&str],
    after: Duration,
    name: &str,
    limit_s: u64,
) -> ExitStatus {
    record_then_signals(out, args, &[(after, name)], limit_s)
}

/// [`record_then_signal`] with several signals, each sent its delay after the one before.
fn record_then_signals(
    out: &Path,
    args: &[&str],
    signals: &[(Duration, &str)],
    limit_s: u64,
) -> ExitStatus {
    let server = sim(slow_sim());
    let prompts = prompt_file(out.parent().unwrap(), 8);
    let mut all = vec!["--requests", "100000"];
    all.extend(args);
    all.extend(["--prompts", prompts.to_str().unwrap()]);
    let mut child = record_child(&server.base_url(), out, &all)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    for (delay, name) in signals {
        std::thread::sleep(*delay);
        signal(child.id(), name);
    }
    wait_bounded(&mut child, Duration::from_secs(limit_s))
}

#[test]
fn sigkill_leaves_every_complete_block_readable() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed.tt");
    let args = ["--concurrency", "8", "--max-tokens", "20", "--ignore-eos"];
    let status = record_then_signal(&out, &args, Duration::from_millis(4_500), "KILL", 10);
    assert!(!status.success());

    let (json, code) = inspect(&out);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["integrity"], "recovered", "{json}");
    assert!(json["run_end"].is_null());
    assert!(json["blocks"].as_u64().unwrap() >= 2, "{json}");
    for skipped in json["skipped"].as_array().unwrap() {
        assert_eq!(
            skipped["corrupt"], false,
            "only the torn tail is skipped: {skipped}"
        );
    }

    let reader = TraceReader::open(&out).unwrap();
    assert!(reader.run_end().is_none());
    assert!(matches!(reader.integrity(), Integrity::Recovered { .. }));
    let mut ids = BTreeSet::new();
    let mut interrupted = 0;
    for r in reader.requests() {
        let r = r.unwrap();
        if r.meta.outcome == Outcome::Interrupted {
            interrupted += 1;
            assert_prefix(&r);
        } else {
            assert_complete(&r);
        }
        assert!(ids.insert(r.meta.id), "request {} twice", r.meta.id);
    }
    assert_eq!(ids.len() as u64, json["requests"].as_u64().unwrap());
    assert_eq!(interrupted, json["interrupted_requests"].as_u64().unwrap());
    assert!(
        ids.len() >= 8,
        "{} requests in the complete blocks",
        ids.len()
    );
    // Closed loop at concurrency 8: at most the 8 requests in flight at the kill can be
    // interrupted (a 0.4 s request often ends before its first checkpoint at 0.5 s).
    assert!(interrupted <= 8, "{interrupted} interrupted");
}

/// An interrupted request: chunks in arrival order, read indices never going back, no
/// `[DONE]` (it was still streaming), ending at its last checkpoint.
fn assert_prefix(r: &RequestRecord) {
    assert!(
        r.meta.error.as_deref().unwrap().starts_with("interrupted"),
        "{r:?}"
    );
    assert_eq!(count(r, Channel::Done), 0);
    for w in r.chunks.windows(2) {
        assert!(w[0].arrival_ns <= w[1].arrival_ns && w[0].read_index <= w[1].read_index);
    }
    assert!(r
        .chunks
        .iter()
        .all(|c| c.arrival_ns >= r.meta.send_ns && c.arrival_ns <= r.meta.end_ns));
}

/// Long streams killed mid-way: every started request is in the trace as `interrupted`, with
/// the chunks its checkpoints held, within about 1.5 s of the kill; with checkpoints turned
/// off (the behaviour before them) the same kill leaves no request at all.
#[test]
fn sigkill_during_long_streams_keeps_every_started_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = sim(slow_sim());
    // 1000 tokens of 20 ms: 20 s per request, so none ends before the kill.
    let base = [
        "--requests",
        "4",
        "--concurrency",
        "4",
        "--max-tokens",
        "1000",
        "--ignore-eos",
        "--input-tokens",
        "32",
        "--no-calibrate",
    ];
    let run = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let mut child = record_child(&server.base_url(), &out, &args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = signal_after(
            &mut child,
            Duration::from_secs(4),
            "KILL",
            Duration::from_secs(10),
        );
        assert!(!status.success());
        (out, started.elapsed())
    };

    let (off, _) = run("off.tt", &["--checkpoint-every", "0"]);
    let (json, _) = inspect(&off);
    assert_eq!(
        json["requests"], 0,
        "without checkpoints nothing survives: {json}"
    );

    let (out, _) = run("on.tt", &[]);
    let (json, code) = inspect(&out);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["requests"], 4, "{json}");
    assert_eq!(json["interrupted_requests"], 4, "{json}");
    let (reader, records) = records_of(&out);
    assert!(reader.run_end().is_none());
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Interrupted);
        assert_prefix(r);
        // Killed 4 s after start; at most ~1.5 s of chunks may be lost, at 20 ms a token. The
        // bound is loose (a busy host streams slower), but 0 would mean nothing checkpointed.
        let content = count(r, Channel::Content);
        assert!(
            content >= 25,
            "request {}: {content} content chunks",
            r.meta.id
        );
        assert!(
            content < 200,
            "request {}: {content} content chunks",
            r.meta.id
        );
    }

    // Every tool reads them: analysis counts them as not successful, redact keeps them.
    let report = analyze_v3(&out);
    let text = report.to_string();
    assert!(text.contains("interrupted"), "{text}");
    let copy = dir.path().join("copy.tt");
    tokentrace_without_key()
        .args(["redact", out.to_str().unwrap(), copy.to_str().unwrap()])
        .assert()
        .success();
    let (_, copied) = records_of(&copy);
    assert_eq!(copied.len(), 4);
    for (a, b) in records.iter().zip(&copied) {
        assert_eq!(
            (a.meta.id, a.meta.outcome, a.chunks.len()),
            (b.meta.id, b.meta.outcome, b.chunks.len())
        );
    }
    let (json, _) = inspect(&copy);
    assert_eq!(
        json["interrupted_requests"], 0,
        "the copy holds them as final records"
    );
}

#[test]
fn sigint_finishes_the_trace_with_in_flight_requests_cancelled() {
    signal_finishes_the_trace("INT");
}

/// Kubernetes, Docker, systemd, CI cancellation and `timeout` stop a process with SIGTERM.
#[test]
fn sigterm_finishes_the_trace_like_sigint() {
    signal_finishes_the_trace("TERM");
}

/// A closed terminal sends SIGHUP.
#[test]
fn sighup_finishes_the_trace_like_sigint() {
    signal_finishes_the_trace("HUP");
}

/// A second signal skips the grace period (here a minute) and still finishes the trace.
#[test]
fn a_second_signal_stops_at_once_with_a_readable_trace() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("twice.tt");
    let args = [
        "--concurrency",
        "4",
        "--max-tokens",
        "50",
        "--ignore-eos",
        "--grace",
        "60",
    ];
    let signals = [
        (Duration::from_millis(2_500), "INT"),
        (Duration::from_millis(300), "TERM"),
    ];
    // Ended within 20 s though the grace is a minute, or the wait fails the test.
    let status = record_then_signals(&out, &args, &signals, 20);
    assert!(status.success(), "{status}");
    let (json, code) = inspect(&out);
    assert_eq!(
        (json["integrity"].as_str(), code),
        (Some("ok"), 0),
        "{json}"
    );
    let (reader, records) = records_of(&out);
    assert_eq!(reader.run_end().unwrap().reason, "interrupted");
    assert!(records.iter().any(|r| r.meta.outcome == Outcome::Cancelled));
}

fn signal_finishes_the_trace(name: &str) {
    // 50 tokens at 20 ms: a second per request; four in flight at the signal.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("interrupted.tt");
    let args = [
        "--concurrency",
        "4",
        "--max-tokens",
        "50",
        "--ignore-eos",
        "--grace",
        "0.1",
    ];
    let status = record_then_signal(&out, &args, Duration::from_millis(2_500), name, 30);
    assert!(status.success(), "SIG{name}: {status}");

    let (json, code) = inspect(&out);
    assert_eq!(
        (json["integrity"].as_str(), code),
        (Some("ok"), 0),
        "{json}"
    );
    let (reader, records) = records_of(&out);
    assert_eq!(reader.run_end().unwrap().reason, "interrupted");
    let ids: Vec<u64> = records.iter().map(|r| r.meta.id).collect();
    assert_eq!(
        ids,
        (0..records.len() as u64).collect::<Vec<_>>(),
        "no request lost"
    );
    let cancelled: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.meta.outcome == Outcome::Cancelled)
        .collect();
    // Four are in flight at the signal; one within `--grace` of its end may still finish.
    assert!(
        (1..=4).contains(&cancelled.len()),
        "{} cancelled",
        cancelled.len()
    );
    for r in &records {
        if r.meta.outcome == Outcome::Cancelled {
            assert!(r.meta.error.is_some());
            assert!(
                count(r, Channel::Content) < 50,
                "a cancelled request was cut short"
            );
        } else {
            assert_complete(r);
        }
    }
    let report = analyze_v3(&out);
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), cancelled.len());
    assert!(failures.iter().all(|f| f["outcome"] == "cancelled"));
}

#[test]
fn writing_to_dev_full_is_a_clear_error() {
    let server = sim(fast_sim());
    let output = record(
        &server.base_url(),
        Path::new("/dev/full"),
        &[
            "--requests",
            "3",
            "--max-tokens",
            "4",
            "--input-tokens",
            "20",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/dev/full"), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn file_size_limit_is_a_clear_error_and_leaves_a_readable_trace() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("limited.tt");
    let prompts = prompt_file(dir.path(), 8);
    // SIGXFSZ keeps its default disposition here: the recorder itself must ignore it, so a
    // write past the limit fails with EFBIG as it would on a full disk.
    let script = r#"ulimit -f 128 || exit 99; exec "$0" "$@""#;
    let output = std::process::Command::new("sh")
        .args(["-c", script])
        .arg(assert_cmd::cargo::cargo_bin("tokentrace"))
        .args(["record", "--url", &server.base_url(), "--model", "sim"])
        .args([
            "--progress",
            "off",
            "--capture",
            "raw",
            "--requests",
            "5000",
        ])
        .args(["--concurrency", "16", "--max-tokens", "20", "--ignore-eos"])
        .args(["--prompts", prompts.to_str().unwrap(), "-o"])
        .arg(&out)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("File too large"), "{stderr}");
    assert!(stderr.contains(out.to_str().unwrap()), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size <= 128 * 1024, "{size} bytes");

    let (json, code) = inspect(&out);
    assert_eq!(
        (json["integrity"].as_str(), code),
        (Some("recovered"), 0),
        "{json}"
    );
    let reader = TraceReader::open(&out).unwrap();
    let mut n = 0;
    for r in reader.requests() {
        assert_complete(&r.unwrap());
        n += 1;
    }
    assert!(n > 0, "the blocks written before the limit are readable");
}
