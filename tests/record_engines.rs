//! What real engines do that the simulator alone never showed: a server that validates
//! X-Request-ID as a UUID (llama-cpp-python), one that sends no usage (calibration falls back
//! to its tokenizer), keep-alive connections the server has already closed (llama.cpp's
//! cpp-httplib, uvicorn), streams that end without `[DONE]`, and mistyped base URLs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use common::servers::{serve, Behaviour, Close, COMPLETE_STREAM};
use std::time::Duration;
use tokentrace_format::request_id::id_of_uuid;
use tokentrace_format::{Outcome, TraceReader};
use tokentrace_sim::SimConfig;

fn url_of(server: &tokentrace_sim::SimHandle) -> String {
    format!("http://{}/v1", server.addr())
}

/// The X-Request-ID the simulator echoed for `r`.
fn echoed_id(r: &tokentrace_format::RequestRecord) -> &str {
    let header = r
        .meta
        .response_headers
        .iter()
        .find(|(n, _)| n == "x-request-id");
    &header.unwrap().1
}

fn calibration(trace: &std::path::Path) -> serde_json::Value {
    let reader = TraceReader::open(trace).unwrap();
    reader.manifest().extra["calibration"].clone()
}

#[test]
fn a_server_that_wants_uuid_request_ids_accepts_every_request() {
    let server = sim(SimConfig {
        uuid_request_ids: true,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let (reader, records) = record_ok(
        &url_of(&server),
        &out,
        &["--requests", "6", "--concurrency", "2", "--max-tokens", "8"],
    );
    assert_eq!(records.len(), 6);
    let header = reader.manifest().request_id_header.clone().unwrap();
    assert_eq!(header.name, "x-request-id");
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Ok, "{:?}", r.meta.error);
        // The simulator echoes the id it received: the UUID of this request.
        let echoed = echoed_id(r);
        assert_eq!(echoed, header.value(r.meta.id));
        assert_eq!(id_of_uuid(echoed), Some(r.meta.id));
    }
    // Calibration probes got through too: the server's own usage decided.
    assert_eq!(calibration(&out)["method"], "usage");
}

#[test]
fn request_id_header_none_sends_no_id() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let args = [
        "--requests",
        "2",
        "--no-calibrate",
        "--request-id-header",
        "none",
    ];
    let (reader, records) = record_ok(&url_of(&server), &out, &args);
    assert!(reader.manifest().request_id_header.is_none());
    for r in &records {
        let echoed = echoed_id(r);
        // The simulator names requests that come without an id itself.
        assert!(echoed.starts_with("sim-"), "{echoed}");
    }
}

#[test]
fn user_headers_reach_the_calibration_probes_and_their_refusal_is_explained() {
    let server = sim(SimConfig {
        uuid_request_ids: true,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    // The user's own (non-UUID) id replaces the derived one on every request, probes included,
    // so this server refuses them all: the run still happens, and says why.
    let args = ["--requests", "2", "-H", "X-Request-ID: 42"];
    let output = record(&url_of(&server), &out, &args).output().unwrap();
    assert!(output.status.success());
    let calibration = calibration(&out);
    assert_eq!(calibration["method"], "tokenize");
    let note = calibration["notes"][0].as_str().unwrap();
    assert!(note.contains("/v1/chat/completions"), "{note}");
    assert!(
        note.contains("HTTP 400") && note.contains("empty body"),
        "{note}"
    );
    let (_, records) = records_of(&out);
    assert!(records.iter().all(|r| r.meta.outcome == Outcome::HttpError));
}

#[test]
fn a_server_without_usage_is_calibrated_by_its_tokenizer() {
    // Asked for no usage, the simulator sends none, as llama-cpp-python never does.
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let args = [
        "--requests",
        "2",
        "--input-tokens",
        "300",
        "--usage",
        "none",
    ];
    record_ok(&url_of(&server), &out, &args);
    let calibration = calibration(&out);
    assert_eq!(calibration["method"], "tokenize", "{calibration}");
    // The simulator counts one token per word: 300 tokens within 1%.
    let measured = calibration["measured_prompt_tokens"].as_u64().unwrap();
    assert!(measured.abs_diff(300) <= 3, "{calibration}");

    let plain = dir.path().join("plain.ttrace");
    record_ok(
        &url_of(&server),
        &plain,
        &["--requests", "1", "--no-calibrate"],
    );
    assert_eq!(self::calibration(&plain)["method"], "estimate");
}

#[test]
fn url_mistakes_are_named_before_any_load() {
    let server = sim(fast_sim());
    let addr = server.addr();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let cases = [
        (
            format!("http://{addr}"),
            format!("use --url http://{addr}/v1"),
        ),
        (
            format!("http://{addr}/v2"),
            format!("use --url http://{addr}/v1"),
        ),
        (
            format!("http://{addr}/v1/chat/completions"),
            format!("--url http://{addr}/v1 (tokentrace adds /chat/completions itself)"),
        ),
    ];
    for (url, advice) in cases {
        let output = record(&url, &out, &["--requests", "1"]).output().unwrap();
        assert!(!output.status.success(), "{url}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&url), "{stderr}");
        assert!(stderr.contains(&advice), "{stderr}");
        assert!(!out.exists(), "no trace for a refused URL");
    }
}

#[test]
fn a_closed_keep_alive_connection_is_retried_once_on_a_fresh_one() {
    // hyper's client sends on a connection the server has closed and must retry; the own
    // client sees the close on the idle connection (a peek that does not wait) and connects
    // anew, so at most a request racing the close needs its one retry.
    for (client, fewest, most) in [("hyper", 4, 8), ("own", 0, 1)] {
        let url = serve(Behaviour {
            close: Close::WhenIdle(Duration::from_millis(60)),
            ..Behaviour::one_per_connection(COMPLETE_STREAM)
        });
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.ttrace");
        // 100 ms apart: every reuse finds a connection idle for longer than the server keeps it.
        let args = [
            "--requests",
            "8",
            "--no-calibrate",
            "--http",
            "1",
            "--rate",
            "10",
            "--arrival",
            "constant",
            "--client",
            client,
        ];
        let (_, records) = record_ok(&url, &out, &args);
        assert_eq!(records.len(), 8);
        for r in &records {
            assert_ok(r);
            assert!(r.meta.retries <= 1);
        }
        let retried = records.iter().filter(|r| r.meta.retries == 1).count();
        assert!(
            (fewest..=most).contains(&retried),
            "{client}: {retried} of 8 retried"
        );
        let (json, _) = inspect(&out);
        assert_eq!(json["retried_requests"], retried as u64);
        if retried > 0 {
            // The analysis counts them and says what happened.
            let report = common::analyze_json(&out, "tokentrace-v1");
            let notes = report["notes"].as_array().unwrap();
            let note = notes.iter().find(|n| n["note"] == "retried").unwrap();
            assert_eq!(note["requests"], retried as u64, "{note}");
        }
    }
}

/// A kept-alive connection the server closes, without a byte, when the next request arrives
/// on it: that request is sent once more on a new connection, and since the server showed the
/// habit, no connection is reused after it. Over `own` the stream reader reads the reused
/// connection's head and gives the close back to the request's task; over `own-task` the task
/// reads the head itself. Either way exactly the second request is retried.
#[test]
fn a_connection_closed_on_the_next_request_is_retried_once_then_never_reused() {
    for client in ["own", "own-task"] {
        let url = serve(Behaviour {
            close: Close::OnNextPost,
            ..Behaviour::one_per_connection(COMPLETE_STREAM)
        });
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.ttrace");
        let args = [
            "--requests",
            "5",
            "--concurrency",
            "1",
            "--no-calibrate",
            "--http",
            "1",
            "--client",
            client,
        ];
        let (_, records) = record_ok(&url, &out, &args);
        assert_eq!(records.len(), 5, "{client}");
        for r in &records {
            assert_ok(r);
        }
        let retried: Vec<u64> = records
            .iter()
            .filter(|r| r.meta.retries == 1)
            .map(|r| r.meta.id)
            .collect();
        assert_eq!(retried, [1], "{client}");
    }
}

#[test]
fn a_complete_stream_without_done_is_missing_done_and_a_cut_one_a_failure() {
    const NO_DONE: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
    const CUT: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    for (body, outcome) in [(NO_DONE, Outcome::MissingDone), (CUT, Outcome::StreamError)] {
        let url = serve(Behaviour::one_per_connection(body));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.ttrace");
        let args = ["--requests", "2", "--no-calibrate", "--http", "1"];
        let (_, records) = record_ok(&url, &out, &args);
        for r in &records {
            assert_eq!(r.meta.outcome, outcome, "{:?}", r.meta.error);
        }
    }
}

#[test]
fn an_existing_trace_is_kept_unless_force_is_given() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let args = ["--requests", "2", "--no-calibrate"];
    record_ok(&url_of(&server), &out, &args);
    let before = std::fs::read(&out).unwrap();
    let output = record(&url_of(&server), &out, &args).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        before,
        "the first trace is untouched"
    );
    let mut forced = args.to_vec();
    forced.push("--force");
    record_ok(&url_of(&server), &out, &forced);
    assert_ne!(std::fs::read(&out).unwrap(), before);
}

#[test]
fn a_request_ends_at_done_even_when_the_body_stays_open() {
    let url = serve(Behaviour {
        unsent: 100,
        ..Behaviour::one_per_connection(COMPLETE_STREAM)
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let started = std::time::Instant::now();
    let args = [
        "--requests",
        "2",
        "--no-calibrate",
        "--http",
        "1",
        "--timeout",
        "20",
    ];
    let (_, records) = record_ok(&url, &out, &args);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Ok, "{:?}", r.meta.error);
        let done = r.chunks.last().unwrap();
        assert_eq!(done.channel, tokentrace_format::Channel::Done);
        assert_eq!(r.meta.end_ns, done.arrival_ns, "the request ends at [DONE]");
    }
}

#[test]
fn a_server_that_never_answers_ends_the_run_within_the_timeout() {
    let url = serve(Behaviour {
        answers: false,
        ..Behaviour::one_per_connection(COMPLETE_STREAM)
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let started = std::time::Instant::now();
    let output = record(&url, &out, &["--requests", "2", "--timeout", "2"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no answer within 2 s"), "{stderr}");
    assert!(took < Duration::from_secs(8), "{took:?}");
}

#[test]
fn a_run_of_no_requests_quotes_no_cost_per_chunk() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let output = record(
        &url_of(&server),
        &out,
        &["--requests", "0", "--no-calibrate"],
    )
    .output()
    .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("no chunks recorded"), "{stdout}");
    assert!(!stdout.contains("per chunk"), "{stdout}");
}

#[test]
fn connections_a_server_closes_after_each_response_are_not_reused() {
    // hyper's client learns of the close from a read on the connection after the response,
    // which on a busy host can come after a few more reuses, or as a reset when the next
    // request reached the server before its close; the own client peeks at the idle
    // connection before every reuse.
    for (client, most) in [("hyper", 6), ("own", 2)] {
        // Closes 1 ms after each response, as llama.cpp's server does after every stream.
        let url = serve(Behaviour {
            close: Close::After(Duration::from_millis(1)),
            ..Behaviour::one_per_connection(COMPLETE_STREAM)
        });
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.ttrace");
        let args = [
            "--requests",
            "30",
            "--concurrency",
            "2",
            "--no-calibrate",
            "--http",
            "1",
            "--client",
            client,
        ];
        let (reader, records) = record_ok(&url, &out, &args);
        for r in &records {
            assert_eq!(r.meta.outcome, Outcome::Ok, "{client}: {:?}", r.meta.error);
        }
        // Reusing such connections races with the close; once it is seen, every request gets
        // a connection of its own, so at most the first requests needed a second send.
        let retried = records.iter().filter(|r| r.meta.retries > 0).count();
        assert!(retried <= most, "{client}: {retried} of 30 retried");
        let health = &reader.run_end().unwrap().client_health;
        assert_eq!(health.server_closes_after_response, Some(true), "{client}");
    }
}

/// Answers that are not an event stream say what they are: a JSON completion or an HTML page
/// (`not_event_stream`, with the content type and the body's start), a compressed body
/// (`unsupported_encoding`), a redirect (`redirect`, with where to). Each was a
/// `stream_error` or `missing_done` before.
#[test]
fn answers_that_are_not_a_stream_are_named() {
    let cases: [(&'static str, &'static str, Outcome, &str); 4] = [
        (
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n",
            r#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#,
            Outcome::NotEventStream,
            "content type `application/json`, not an event stream: {\"choices\"",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n",
            "<html><body>Sign in</body></html>",
            Outcome::NotEventStream,
            "`text/html`, not an event stream: <html><body>Sign in",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n",
            "\u{1f}\u{8b}\u{8}\u{0}binary",
            Outcome::UnsupportedEncoding,
            "content-encoding `gzip`",
        ),
        (
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: https://elsewhere.example/v1/chat/completions\r\n",
            "",
            Outcome::Redirect,
            "redirect to https://elsewhere.example/v1/chat/completions",
        ),
    ];
    for ((head, body, outcome, text), client) in cases
        .into_iter()
        .flat_map(|case| ["hyper", "own"].map(|client| (case, client)))
    {
        let url = serve(Behaviour {
            head,
            close: Close::WhenIdle(Duration::from_secs(5)),
            ..Behaviour::one_per_connection(body)
        });
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run.ttrace");
        let args = [
            "--requests",
            "2",
            "--no-calibrate",
            "--http",
            "1",
            "--timeout",
            "20",
            "--client",
            client,
        ];
        record(&url, &out, &args).assert().success();
        let (_, records) = records_of(&out);
        assert_eq!(records.len(), 2);
        for r in &records {
            assert_eq!(
                r.meta.outcome, outcome,
                "{client} {head}: {:?}",
                r.meta.error
            );
            let error = r.meta.error.as_deref().unwrap_or_default();
            assert!(error.contains(text), "{client} {head}: {error}");
            assert!(r.chunks.is_empty());
        }
        let report = analyze_v3(&out).to_string();
        assert!(report.contains(outcome.name()), "{report}");
    }
}

/// A probe met by a transient refusal (503 with Retry-After, as an engine still loading
/// answers) is asked again, so calibration still uses the server's own count; before, the
/// first refusal made calibration fall back to a guess.
#[test]
fn a_transient_refusal_of_a_calibration_probe_is_asked_again() {
    const USAGE_STREAM: &str =
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"length\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":64,\"completion_tokens\":1}}\n\n\
data: [DONE]\n\n";
    let url = serve(Behaviour {
        busy_first: 1,
        close: Close::WhenIdle(Duration::from_secs(5)),
        ..Behaviour::one_per_connection(USAGE_STREAM)
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.ttrace");
    let args = [
        "--requests",
        "1",
        "--input-tokens",
        "64",
        "--http",
        "1",
        "--timeout",
        "20",
    ];
    let (_, records) = record_ok(&url, &out, &args);
    assert_ok(&records[0]);
    let c = calibration(&out);
    assert_eq!(c["method"], "usage", "{c}");
    assert_eq!(c["measured_prompt_tokens"], 64, "{c}");
    let notes = c["notes"].to_string();
    assert!(
        notes.contains("answered HTTP 503; asked again after 1000 ms"),
        "{notes}"
    );
}
