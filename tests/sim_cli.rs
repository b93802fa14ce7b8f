//! `tokentrace sim`: prints its address, serves with the flags given, stops on Ctrl-C with the
//! truth log flushed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin;

/// Sends one HTTP/1.1 request with `connection: close` and returns the raw response.
fn http(addr: &str, method: &str, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\nx-request-id: cli-{method}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    String::from_utf8(response).unwrap()
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "sim did not stop after the signal"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn serves_until_ctrl_c_and_flushes_the_truth_log() {
    let dir = tempfile::tempdir().unwrap();
    let truth = dir.path().join("truth.jsonl");
    let mut child = Command::new(cargo_bin("tokentrace"))
        .args([
            "sim",
            "--port",
            "0",
            "--step-base-ms",
            "1",
            "--reasoning-tokens",
            "2",
        ])
        .args(["--fault-503-every", "2", "--truth-log"])
        .arg(&truth)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("tokentrace sim listening on http://")
        .and_then(|rest| rest.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();

    let body = r#"{"messages":[{"role":"user","content":"three word prompt"}],"stream":true,
        "max_tokens":5,"ignore_eos":true,"stream_options":{"include_usage":true}}"#;
    let streamed = http(&addr, "POST", "/v1/chat/completions", body);
    assert!(streamed.starts_with("HTTP/1.1 200"), "{streamed}");
    assert!(streamed.contains("\"reasoning_content\":"));
    assert!(streamed.contains("\"prompt_tokens\":3,"));
    assert!(streamed.contains("data: [DONE]"));
    // The second request is scheduled to fail.
    let failed = http(&addr, "POST", "/v1/chat/completions", body);
    assert!(failed.starts_with("HTTP/1.1 503"), "{failed}");
    assert!(http(&addr, "GET", "/health", "").starts_with("HTTP/1.1 200"));

    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(wait_for_exit(&mut child).success());
    let log = std::fs::read_to_string(&truth).unwrap();
    let events = streamed.matches("data: ").count();
    // Role, two reasoning and three content steps at most, usage, [DONE]; one line each.
    assert!(events >= 5);
    assert_eq!(log.lines().count(), events);
    assert!(log
        .lines()
        .all(|l| l.starts_with(r#"{"request_id":"cli-POST","chunk_index":"#)));
}

#[test]
fn help_lists_the_engine_and_fault_flags() {
    let output = Command::new(cargo_bin("tokentrace"))
        .args(["sim", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--slots",
        "--prefill-tok-s",
        "--spec-tokens-mean",
        "--fault-reset-every",
        "--truth-log",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn stops_on_sigterm() {
    let mut child = Command::new(cargo_bin("tokentrace"))
        .args(["sim", "--port", "0", "--threads", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("tokentrace sim listening on http://127.0.0.1:"),
        "{line}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(wait_for_exit(&mut child).success());
}
