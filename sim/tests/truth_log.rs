//! The truth log has one line per SSE event written, stamped before the client saw it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;

use common::*;
use serde_json::{json, Value};
use tokentrace_sim::{FaultConfig, SimConfig, SimServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_per_event_with_times_before_arrival() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truth.jsonl");
    let config = SimConfig {
        truth_log: Some(path.clone()),
        reasoning_tokens: 4,
        spec_tokens_mean: 1.8,
        faults: FaultConfig {
            malformed_every: 5,
            ..Default::default()
        },
        ..fast_config()
    };
    let server = SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = server.local_addr();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..20 {
        tasks.spawn(async move {
            let id = format!("req-{i}");
            let extra = json!({"max_tokens": 10 + i, "ignore_eos": true});
            let body = if i % 2 == 0 {
                chat("a b", extra)
            } else {
                completion("a b", extra)
            };
            let path = if i % 2 == 0 {
                "/v1/chat/completions"
            } else {
                "/v1/completions"
            };
            (id.clone(), post(addr, path, &body, Some(&id)).await)
        });
    }
    let mut replies = HashMap::new();
    while let Some(done) = tasks.join_next().await {
        let (id, reply) = done.unwrap();
        replies.insert(id, reply);
    }
    // A whole response is not an SSE stream and is not logged.
    let whole = chat("x", json!({"stream": false}));
    post(addr, "/v1/chat/completions", &whole, Some("whole")).await;
    server.shutdown().await.unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let id = v["request_id"].as_str().unwrap().to_owned();
        let entry = (
            v["chunk_index"].as_u64().unwrap(),
            v["mono_ns"].as_u64().unwrap(),
        );
        lines.entry(id).or_default().push(entry);
    }
    assert_eq!(lines.len(), 20);
    for (id, reply) in &replies {
        let logged = &lines[id];
        assert_eq!(logged.len(), reply.events.len(), "{id}");
        for (i, ((index, mono_ns), event)) in logged.iter().zip(&reply.events).enumerate() {
            assert_eq!(*index, i as u64);
            assert!(*mono_ns <= event.mono_ns, "{id}: written after it arrived");
        }
        assert!(logged.windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
