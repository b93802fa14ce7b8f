//! The fault matrix (docs/RELIABILITY.md): for every fault the simulator can inject, a run
//! completes, every request is in the trace with its outcome class and message, the successful
//! requests beside the failed ones are intact, and `analyze --protocol capacity-v3` lists the
//! failures. Plus the two faults of the network itself: nothing listening at start, and the
//! server going away in the middle of a run.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use std::time::Duration;
use tokentrace_format::{Channel, Outcome, RequestRecord};
use tokentrace_sim::{FaultConfig, SimConfig};

/// Requests per matrix run; faults strike every second request (ids 1 and 3).
const REQUESTS: u64 = 4;
const MAX_TOKENS: u32 = 6;

/// A request that succeeded must be whole: status 200, every token, usage, `[DONE]`.
fn assert_intact(r: &RequestRecord) {
    assert_ok(r);
    assert_eq!(r.meta.error, None);
    assert_eq!(r.meta.http_status, 200);
    assert_eq!(
        r.meta.usage.completion_tokens,
        Some(MAX_TOKENS),
        "request {}",
        r.meta.id
    );
    assert_eq!(r.meta.finish_reason.as_deref(), Some("length"));
    assert_eq!(count(r, Channel::Content), MAX_TOKENS as usize);
    assert_eq!(count(r, Channel::Done), 1);
    assert!(r.meta.headers_ns.is_some() && r.meta.end_ns >= r.meta.send_ns);
}

/// Runs the matrix for one fault: `faults` must strike every second arrival. Returns the
/// faulted records (ids 1 and 3) and the capacity-v3 report, after checking the trace and the
/// analyzer's failure list.
fn matrix_run(
    name: &str,
    faults: FaultConfig,
    extra: &[&str],
    outcome: Outcome,
    message: &str,
) -> (Vec<RequestRecord>, serde_json::Value) {
    let server = sim(SimConfig {
        faults,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.tt"));
    let prompts = prompt_file(dir.path(), 4);
    let n_requests = REQUESTS.to_string();
    let max_tokens = MAX_TOKENS.to_string();
    let mut args = vec![
        "--requests",
        &n_requests,
        "--concurrency",
        "1",
        "--max-tokens",
        &max_tokens,
        "--ignore-eos",
        "--prompts",
        prompts.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    record(&server.base_url(), &out, &args).assert().success();

    let (reader, records) = records_of(&out);
    assert_eq!(reader.run_end().unwrap().reason, "completed");
    let ids: Vec<u64> = records.iter().map(|r| r.meta.id).collect();
    assert_eq!(
        ids,
        (0..REQUESTS).collect::<Vec<_>>(),
        "every request is in the trace"
    );
    let (good, bad): (Vec<_>, Vec<_>) = records.into_iter().partition(|r| r.meta.id % 2 == 0);
    for r in &good {
        assert_intact(r);
    }
    for r in &bad {
        assert_eq!(
            r.meta.outcome, outcome,
            "{name}: request {}: {:?}",
            r.meta.id, r.meta.error
        );
        if outcome != Outcome::Ok {
            let error = r.meta.error.as_deref().unwrap_or_default();
            eprintln!("{name}: {}: {error}", outcome.name());
            assert!(
                error.contains(message),
                "{name}: {error:?} lacks {message:?}"
            );
        }
    }

    let report = analyze_v3(&out);
    let failures = report["failures"].as_array().unwrap();
    let timings = report["request_timings"].as_array().unwrap();
    if outcome == Outcome::Ok {
        assert!(failures.is_empty(), "{name}: {failures:?}");
        assert_eq!(timings.len(), REQUESTS as usize);
    } else {
        assert_eq!(failures.len(), bad.len(), "{name}: {failures:?}");
        assert_eq!(timings.len(), good.len());
        for f in failures {
            assert_eq!(f["outcome"], outcome.name(), "{name}: {f}");
            assert!(
                f["error"].as_str().unwrap().contains(message),
                "{name}: {f}"
            );
        }
    }
    (bad, report)
}

#[test]
fn http_429_is_an_http_error() {
    let faults = FaultConfig {
        http_429_every: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run("429", faults, &[], Outcome::HttpError, "HTTP 429");
    assert!(bad
        .iter()
        .all(|r| r.meta.http_status == 429 && r.chunks.is_empty()));
    // When to ask again is kept with the refusal.
    for r in &bad {
        let retry_after = r
            .meta
            .response_headers
            .iter()
            .find(|(n, _)| n == "retry-after");
        assert_eq!(retry_after.map(|(_, v)| v.as_str()), Some("1"), "{r:?}");
    }
}

#[test]
fn http_500_is_an_http_error() {
    let faults = FaultConfig {
        http_500_every: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run("500", faults, &[], Outcome::HttpError, "HTTP 500");
    assert!(bad.iter().all(|r| r.meta.http_status == 500));
}

#[test]
fn http_503_is_an_http_error() {
    let faults = FaultConfig {
        http_503_every: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run("503", faults, &[], Outcome::HttpError, "HTTP 503");
    assert!(bad.iter().all(|r| r.meta.http_status == 503));
}

#[test]
fn reset_mid_stream_is_a_stream_error() {
    let faults = FaultConfig {
        reset_every: 2,
        after_chunks: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run("reset", faults, &[], Outcome::StreamError, "reset by peer");
    for r in &bad {
        assert_eq!(r.meta.http_status, 200);
        // The chunks that arrived before the reset are kept.
        assert!(count(r, Channel::Content) >= 1, "{r:?}");
        assert_eq!(count(r, Channel::Done), 0);
    }
}

#[test]
fn stall_before_first_token_is_a_ttft_timeout() {
    let faults = FaultConfig {
        stall_every: 2,
        stall_ms: 3_000,
        after_chunks: 0,
        ..FaultConfig::default()
    };
    let extra = ["--ttft-timeout", "0.3", "--timeout", "10"];
    let (bad, _) = matrix_run(
        "stall-ttft",
        faults,
        &extra,
        Outcome::TtftTimeout,
        "TTFT timeout",
    );
    for r in &bad {
        let waited = r.meta.end_ns - r.meta.send_ns;
        assert!(waited >= 300_000_000, "ended after {waited} ns");
        assert_eq!(count(r, Channel::Content), 0);
    }
}

#[test]
fn stall_mid_stream_is_a_timeout() {
    let faults = FaultConfig {
        stall_every: 2,
        stall_ms: 3_000,
        after_chunks: 2,
        ..FaultConfig::default()
    };
    let extra = ["--ttft-timeout", "2", "--timeout", "0.5"];
    let (bad, _) = matrix_run("stall", faults, &extra, Outcome::Timeout, "request timeout");
    for r in &bad {
        let waited = r.meta.end_ns - r.meta.send_ns;
        assert!(waited >= 500_000_000, "ended after {waited} ns");
        assert!(
            count(r, Channel::Content) >= 1,
            "chunks before the stall are kept"
        );
    }
}

#[test]
fn malformed_json_event_is_malformed() {
    let faults = FaultConfig {
        malformed_every: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run(
        "malformed",
        faults,
        &[],
        Outcome::Malformed,
        "while parsing",
    );
    for r in &bad {
        // The stream is read to its end: the malformed event does not end the request.
        assert_eq!(count(r, Channel::Done), 1);
        assert_eq!(count(r, Channel::Content), MAX_TOKENS as usize);
    }
}

#[test]
fn oversize_line_is_oversize() {
    let faults = FaultConfig {
        oversize_every: 2,
        oversize_bytes: 64 * 1024,
        ..FaultConfig::default()
    };
    let extra = ["--max-line-bytes", "4096"];
    let (bad, _) = matrix_run(
        "oversize",
        faults,
        &extra,
        Outcome::Oversize,
        "longer than 4096 bytes",
    );
    assert!(bad.iter().all(|r| r.meta.http_status == 200));
}

#[test]
fn missing_done_is_missing_done() {
    let faults = FaultConfig {
        no_done_every: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run(
        "no-done",
        faults,
        &[],
        Outcome::MissingDone,
        "without [DONE]",
    );
    for r in &bad {
        // Everything but the sentinel arrived.
        assert_eq!(count(r, Channel::Done), 0);
        assert_eq!(count(r, Channel::Content), MAX_TOKENS as usize);
        assert_eq!(r.meta.usage.completion_tokens, Some(MAX_TOKENS));
        // The role event, one per token, the final usage event.
        let said = format!(
            "after {} events and a finish_reason, without [DONE]",
            MAX_TOKENS + 2
        );
        assert!(
            r.meta.error.as_deref().unwrap_or("").contains(&said),
            "{:?}",
            r.meta.error
        );
    }
}

#[test]
fn missing_usage_is_ok_without_usage() {
    // Per-chunk usage would still carry the counts; ask for the final usage chunk only.
    let faults = FaultConfig {
        no_usage_every: 2,
        ..FaultConfig::default()
    };
    let extra = ["--usage", "final"];
    let (bad, report) = matrix_run("no-usage", faults, &extra, Outcome::Ok, "");
    for r in &bad {
        assert_eq!(r.meta.error, None);
        assert_eq!(r.meta.usage.completion_tokens, None, "{:?}", r.meta.usage);
        assert_eq!(count(r, Channel::Usage), 0);
        assert_eq!(count(r, Channel::Content), MAX_TOKENS as usize);
        assert_eq!(count(r, Channel::Done), 1);
    }
    // The analyzer measures them from the counted chunks instead of usage.
    for row in report["request_timings"].as_array().unwrap() {
        let faulted = row["request_index"].as_u64().unwrap() % 2 == 1;
        let source = if faulted { "chunks" } else { "usage" };
        assert_eq!(row["output_token_source"], source, "{row}");
        assert_eq!(row["output_tokens"], MAX_TOKENS);
        assert_eq!(row["prompt_tokens"].is_null(), faulted, "{row}");
    }
}

#[test]
fn non_utf8_event_is_malformed() {
    let faults = FaultConfig {
        non_utf8_every: 2,
        ..FaultConfig::default()
    };
    let (bad, _) = matrix_run(
        "non-utf8",
        faults,
        &[],
        Outcome::Malformed,
        "invalid unicode",
    );
    for r in &bad {
        assert_eq!(count(r, Channel::Done), 1, "the stream is read to its end");
    }
}

#[test]
fn nothing_listening_at_start_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("refused.tt");
    let url = unreachable_url();
    let output = record(&url, &out, &["--requests", "3"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr).to_lowercase();
    assert!(
        stderr.contains("unreachable") && stderr.contains("refused"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        !out.exists(),
        "no trace is started for a run that cannot proceed"
    );
}

#[test]
fn server_gone_mid_run_records_every_request() {
    // 20 ms per step and 30 tokens: each request streams for about 0.6 s.
    let server = sim(SimConfig {
        step_base_ms: 20.0,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gone.tt");
    let prompts = prompt_file(dir.path(), 4);
    let mut child = record_child(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "12",
            "--concurrency",
            "2",
            "--max-tokens",
            "30",
            "--ignore-eos",
            "--timeout",
            "5",
            "--prompts",
            prompts.to_str().unwrap(),
        ],
    )
    .stdout(std::process::Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1_500));
    server.shutdown().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");

    let (reader, records) = records_of(&out);
    assert_eq!(reader.run_end().unwrap().reason, "completed");
    let ids: Vec<u64> = records.iter().map(|r| r.meta.id).collect();
    assert_eq!(
        ids,
        (0..12).collect::<Vec<_>>(),
        "every request is in the trace"
    );
    let by = |o: Outcome| records.iter().filter(|r| r.meta.outcome == o).count();
    assert!(
        by(Outcome::Ok) >= 2,
        "requests before the shutdown completed"
    );
    assert!(
        by(Outcome::ConnectError) >= 1,
        "requests after it could not connect"
    );
    for r in &records {
        match r.meta.outcome {
            Outcome::Ok => assert_eq!(count(r, Channel::Done), 1),
            Outcome::ConnectError => {
                assert_eq!(r.meta.http_status, 0);
                assert!(r.chunks.is_empty());
                assert!(r
                    .meta
                    .error
                    .as_deref()
                    .unwrap()
                    .to_lowercase()
                    .contains("refused"));
            }
            // In flight at the shutdown: the connection closed under it.
            Outcome::StreamError | Outcome::MissingDone => assert!(r.meta.error.is_some()),
            other => panic!(
                "request {}: unexpected {other:?}: {:?}",
                r.meta.id, r.meta.error
            ),
        }
    }
    let report = analyze_v3(&out);
    let failures = report["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 12 - by(Outcome::Ok));
    assert!(failures.iter().any(|f| f["outcome"] == "connect_error"));
}
