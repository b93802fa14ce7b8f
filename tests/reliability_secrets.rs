//! Secrets: the API key (a unique marker) never reaches a trace byte, a decoded record, the
//! manifest, standard output or standard error — on success, on HTTP 401 and 500 answers (even
//! from a server that echoes the key back), and on connection errors. Text capture is off
//! unless asked for.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Output;
use tokentrace_format::{Outcome, TraceReader};
use tokentrace_sim::{FaultConfig, SimConfig};

/// A key no other text can contain by chance.
fn marker() -> String {
    format!("sk-ttmarker-{}-c0ffee5ecret", std::process::id())
}

/// Fails if `secret` is in the file's bytes or in anything the reader decodes from it
/// (blocks are compressed, so the raw bytes alone prove nothing).
fn assert_trace_clean(path: &Path, secret: &str) {
    let bytes = std::fs::read(path).unwrap();
    let needle = secret.as_bytes();
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the key is in the bytes of {}",
        path.display()
    );
    let reader = TraceReader::open(path).unwrap();
    let manifest = serde_json::to_string(reader.manifest()).unwrap();
    assert!(!manifest.contains(secret), "the key is in the manifest");
    let run_end = format!("{:?}", reader.run_end());
    assert!(!run_end.contains(secret), "the key is in the run end");
    for r in reader.requests() {
        let text = format!("{:?}", r.unwrap());
        assert!(!text.contains(secret), "the key is in a record: {text}");
    }
}

fn assert_output_clean(output: &Output, secret: &str) {
    for (name, stream) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        let text = String::from_utf8_lossy(stream);
        assert!(!text.contains(secret), "the key is on {name}: {text}");
    }
}

/// The start of the 401 body, before the padding and the quoted header.
const BODY_START: &str = "{\"error\":{\"message\":\"invalid credentials: ";

/// An HTTP/1.1 server on loopback that answers every request with 401 and an error body that
/// quotes the Authorization header it received (after `pad` filler bytes), as some gateways do.
fn echoing_401_server(pad: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve_401(stream, pad));
        }
    });
    port
}

fn serve_401(stream: TcpStream, pad: usize) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let (mut auth, mut length) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("authorization:") {
                auth = line["authorization:".len()..].trim().to_string();
            } else if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let filler = "-".repeat(pad);
        let answer = format!("{BODY_START}{filler}{auth}\",\"code\":401}}}}");
        let response = format!(
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
             www-authenticate: Bearer\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn key_stays_out_of_successful_and_http_500_runs() {
    let key = marker();
    let server = sim(SimConfig {
        faults: FaultConfig {
            http_500_every: 3,
            ..FaultConfig::default()
        },
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("secret.tt");
    let output = tokentrace_without_key()
        .args(["record", "--url", &server.base_url(), "--model", "sim"])
        .args(["--requests", "9", "--concurrency", "3", "--max-tokens", "5"])
        .args(["--progress", "plain", "-o"])
        .arg(&out)
        .env("TT_RELIABILITY_KEY", &key)
        .args(["--api-key-env", "TT_RELIABILITY_KEY"])
        // A secret header given on the command line is also kept out of the manifest's argv.
        .args(["-H", &format!("x-api-key: {key}")])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_output_clean(&output, &key);
    assert_trace_clean(&out, &key);

    let (reader, records) = records_of(&out);
    assert_eq!(records.len(), 9);
    assert!(records.iter().any(|r| r.meta.http_status == 500));
    // Capture defaults to none: no chunk holds text.
    assert_eq!(reader.manifest().workload["capture"], "none");
    assert!(records
        .iter()
        .all(|r| r.chunks.iter().all(|c| c.text.is_none())));
    let argv = reader.manifest().argv.join(" ");
    assert!(argv.contains("<redacted>"), "{argv}");
}

#[test]
fn key_stays_out_of_a_401_that_echoes_it() {
    let key = marker();
    // Whole in the kept first KiB of the body, then cut in the middle by the 1 KiB limit.
    let cut = 1024 - BODY_START.len() - "Bearer ".len() - key.len() / 2;
    for pad in [0, cut] {
        let port = echoing_401_server(pad);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("401.tt");
        let prompts = prompt_file(dir.path(), 2);
        let output = record(
            &format!("http://127.0.0.1:{port}/v1"),
            &out,
            &["--requests", "3", "--prompts", prompts.to_str().unwrap()],
        )
        .env("OPENAI_API_KEY", &key)
        .output()
        .unwrap();
        assert!(output.status.success(), "{output:?}");
        assert_output_clean(&output, &key);
        assert_trace_clean(&out, &key);
        assert_trace_clean(&out, &key[..key.len() / 2]);
        let (_, records) = records_of(&out);
        assert_eq!(records.len(), 3);
        for r in &records {
            assert_eq!(
                (r.meta.outcome, r.meta.http_status),
                (Outcome::HttpError, 401)
            );
            let error = r.meta.error.as_deref().unwrap();
            assert!(error.starts_with("HTTP 401"), "{error}");
            assert!(error.contains("invalid credentials"), "{error}");
            assert!(error.contains("<redacted>"), "{error}");
        }
    }
}

#[test]
fn key_stays_out_of_connection_errors() {
    let key = marker();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("refused.tt");
    let output = record(&unreachable_url(), &out, &["--requests", "2"])
        .env("OPENAI_API_KEY", &key)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert_output_clean(&output, &key);

    // A bad URL and a bad flag also echo nothing of the key.
    for args in [
        vec!["--url", "ftp://127.0.0.1/v1"],
        vec!["--url", "http://127.0.0.1:1/v1", "--concurrency", "0"],
    ] {
        let output = tokentrace_without_key()
            .args(["record", "--model", "sim", "--requests", "1", "-o"])
            .arg(&out)
            .args(args)
            .env("OPENAI_API_KEY", &key)
            .output()
            .unwrap();
        assert!(!output.status.success());
        assert_output_clean(&output, &key);
    }
}
