//! Every fault flag produces its fault.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use serde_json::json;
use tokentrace_sim::{FaultConfig, SimConfig, SimServer};

async fn start(faults: FaultConfig) -> SimServer {
    let config = SimConfig {
        faults,
        ..fast_config()
    };
    SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

async fn one_chat(faults: FaultConfig) -> Reply {
    let server = start(faults).await;
    let body = chat("x", json!({"max_tokens": 8, "ignore_eos": true}));
    let reply = post(
        server.local_addr(),
        "/v1/chat/completions",
        &body,
        Some("f"),
    )
    .await;
    server.shutdown().await.unwrap();
    reply
}

#[tokio::test]
async fn http_error_faults_answer_their_status() {
    let cases = [
        (
            FaultConfig {
                http_429_every: 1,
                ..Default::default()
            },
            429,
        ),
        (
            FaultConfig {
                http_500_every: 1,
                ..Default::default()
            },
            500,
        ),
        (
            FaultConfig {
                http_503: 1.0,
                ..Default::default()
            },
            503,
        ),
    ];
    for (faults, status) in cases {
        let reply = one_chat(faults).await;
        assert_eq!(reply.status, status);
        assert_eq!(reply.json()["error"]["code"], status);
        assert_eq!(reply.headers.contains_key("retry-after"), status == 429);
    }
}

#[tokio::test]
async fn schedules_and_probabilities_pick_requests() {
    let server = start(FaultConfig {
        http_500_every: 3,
        ..Default::default()
    })
    .await;
    let addr = server.local_addr();
    let mut statuses = Vec::new();
    for i in 0..6 {
        let body = completion("x", json!({"stream": false, "max_tokens": 1}));
        statuses.push(
            post(addr, "/v1/completions", &body, Some(&format!("s{i}")))
                .await
                .status,
        );
    }
    assert_eq!(statuses, [200, 200, 500, 200, 200, 500]);
    server.shutdown().await.unwrap();

    let server = start(FaultConfig {
        http_429: 0.5,
        ..Default::default()
    })
    .await;
    let addr = server.local_addr();
    let mut limited = 0;
    for i in 0..200 {
        let body = completion("x", json!({"stream": false, "max_tokens": 1}));
        limited += usize::from(
            post(addr, "/v1/completions", &body, Some(&format!("p{i}")))
                .await
                .status
                == 429,
        );
    }
    // Binomial(200, 0.5): outside 60..140 has probability below 1e-8.
    assert!((60..140).contains(&limited), "{limited}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn reset_aborts_the_stream() {
    let reply = one_chat(FaultConfig {
        reset_every: 1,
        after_chunks: 2,
        ..Default::default()
    })
    .await;
    assert!(reply.error.is_some(), "the body must end in an error");
    assert!(!reply.events.iter().any(Event::is_done));
}

#[tokio::test]
async fn reset_is_a_tcp_rst() {
    for after_chunks in [0, 2] {
        reset_after(after_chunks).await;
    }
}

/// Reads a raw HTTP/1.1 response until the connection ends; the events written before the
/// fault (role, then `after_chunks` token events) must arrive before the reset.
async fn reset_after(after_chunks: u32) {
    let server = start(FaultConfig {
        reset: 1.0,
        after_chunks,
        ..Default::default()
    })
    .await;
    let addr = server.local_addr();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let body = chat("x", json!({"max_tokens": 50, "ignore_eos": true})).to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let mut received = Vec::new();
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return (received, Ok(())),
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(err) => return (received, Err(err.kind())),
            }
        }
    })
    .await
    .unwrap();
    let (received, outcome) = outcome;
    let text = String::from_utf8_lossy(&received);
    let expected = 1 + after_chunks as usize;
    assert!(text.matches("data: ").count() >= expected, "{text}");
    assert!(!text.contains("[DONE]"));
    assert_eq!(outcome, Err(std::io::ErrorKind::ConnectionReset));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn stall_writes_nothing_for_its_length() {
    let faults = FaultConfig {
        stall_every: 1,
        stall_ms: 300,
        after_chunks: 2,
        ..Default::default()
    };
    let reply = one_chat(faults).await;
    assert!(reply.events.last().unwrap().is_done());
    let tokens: Vec<&Event> = reply.with_text("content").collect();
    let gaps: Vec<Duration> = tokens.windows(2).map(|w| w[1].at - w[0].at).collect();
    // The gap after the second token event is the stall; the others are 1 ms steps.
    assert!(gaps[1] >= Duration::from_millis(250), "{gaps:?}");
    let longest_other = gaps
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, g)| *g)
        .max();
    assert!(longest_other.unwrap() < gaps[1], "{gaps:?}");
}

#[tokio::test]
async fn stall_before_the_first_token() {
    let faults = FaultConfig {
        stall_every: 1,
        stall_ms: 300,
        after_chunks: 0,
        ..Default::default()
    };
    let reply = one_chat(faults).await;
    let role = reply.events[0].at;
    let first_token = reply.with_text("content").next().unwrap().at;
    assert!(first_token - role >= Duration::from_millis(250));
    assert!(reply.events.last().unwrap().is_done());
}

#[tokio::test]
async fn malformed_event_is_not_json() {
    let reply = one_chat(FaultConfig {
        malformed_every: 1,
        ..Default::default()
    })
    .await;
    let bad: Vec<&Event> = reply
        .events
        .iter()
        .filter(|e| !e.is_done() && e.json().is_none())
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(bad[0].bytes.starts_with(b"data: {"));
    assert!(reply.events.last().unwrap().is_done());
}

#[tokio::test]
async fn oversize_event_has_a_huge_line() {
    let faults = FaultConfig {
        oversize_every: 1,
        oversize_bytes: 300_000,
        ..Default::default()
    };
    let reply = one_chat(faults).await;
    let sizes: Vec<usize> = reply.events.iter().map(|e| e.bytes.len()).collect();
    assert_eq!(
        sizes.iter().filter(|&&n| n >= 300_000).count(),
        1,
        "{sizes:?}"
    );
    let huge = reply
        .events
        .iter()
        .find(|e| e.bytes.len() >= 300_000)
        .unwrap();
    assert_eq!(
        huge.bytes.iter().filter(|&&b| b == b'\n').count(),
        2,
        "one line"
    );
}

#[tokio::test]
async fn missing_done_and_missing_usage() {
    let reply = one_chat(FaultConfig {
        no_done_every: 1,
        ..Default::default()
    })
    .await;
    assert!(reply.error.is_none());
    assert!(!reply.events.iter().any(Event::is_done));
    assert!(reply.events.last().unwrap().json().unwrap()["usage"].is_object());

    let reply = one_chat(FaultConfig {
        no_usage: 1.0,
        ..Default::default()
    })
    .await;
    assert!(reply.events.last().unwrap().is_done());
    assert!(reply
        .events
        .iter()
        .all(|e| e.json().is_none_or(|j| j.get("usage").is_none())));
}

#[tokio::test]
async fn non_utf8_event_carries_invalid_bytes() {
    let reply = one_chat(FaultConfig {
        non_utf8_every: 1,
        ..Default::default()
    })
    .await;
    let invalid = reply
        .events
        .iter()
        .filter(|e| std::str::from_utf8(&e.bytes).is_err())
        .count();
    assert_eq!(invalid, 1);
    assert!(reply.events.last().unwrap().is_done());
}

#[tokio::test]
async fn no_fault_flags_no_faults() {
    let reply = one_chat(FaultConfig::default()).await;
    assert_eq!(reply.status, 200);
    assert!(reply.error.is_none());
    assert!(reply
        .events
        .iter()
        .all(|e| e.is_done() || e.json().is_some()));
    assert!(reply.events.last().unwrap().is_done());
}
