//! The engine model shows up in what a client measures: queueing above the slot count, step
//! time growing with the batch, speculative steps, slots freed by departed clients.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use serde_json::json;
use tokentrace_sim::{SimConfig, SimServer};

async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

/// Sends `concurrency` requests at once, `rounds` times, and returns every TTFT.
async fn ttfts(addr: SocketAddr, concurrency: usize, rounds: usize, prompt: &str) -> Vec<Duration> {
    let mut all = Vec::new();
    for round in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..concurrency {
            let body = chat(prompt, json!({"max_tokens": 20, "ignore_eos": true}));
            let id = format!("c{concurrency}-r{round}-{i}");
            tasks.spawn(async move {
                post(addr, "/v1/chat/completions", &body, Some(&id))
                    .await
                    .time_to_first("content")
            });
        }
        while let Some(ttft) = tasks.join_next().await {
            all.push(ttft.unwrap());
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_rises_with_concurrency_above_the_slot_count() {
    // 4 slots; each prefill takes ~40 ms and each request decodes for ~100 ms.
    let config = SimConfig {
        slots: 4,
        prefill_tok_s: 10_000.0,
        prefill_base_ms: 0.0,
        step_base_ms: 5.0,
        step_per_seq_ms: 0.0,
        ..Default::default()
    };
    let server = start(config).await;
    let addr = server.local_addr();
    let prompt = vec!["word"; 400].join(" ");
    let alone = median(ttfts(addr, 1, 3, &prompt).await);
    let within_slots = median(ttfts(addr, 4, 1, &prompt).await);
    let queued = median(ttfts(addr, 16, 1, &prompt).await);
    assert!(alone < within_slots, "{alone:?} !< {within_slots:?}");
    assert!(within_slots < queued, "{within_slots:?} !< {queued:?}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn ttft_grows_with_prompt_length() {
    let config = SimConfig {
        prefill_tok_s: 5_000.0,
        prefill_base_ms: 0.0,
        ..fast_config()
    };
    let server = start(config).await;
    let addr = server.local_addr();
    let mut medians = Vec::new();
    for words in [10, 500, 1500] {
        let prompt = vec!["w"; words].join(" ");
        medians.push(median(ttfts(addr, 1, 3, &prompt).await));
    }
    assert!(medians.windows(2).all(|w| w[0] < w[1]), "{medians:?}");
    server.shutdown().await.unwrap();
}

/// Mean gap between content events of one request.
fn mean_gap(reply: &Reply) -> Duration {
    let times: Vec<_> = reply.with_text("content").map(|e| e.at).collect();
    (times[times.len() - 1] - times[0]) / (times.len() as u32 - 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_steps_slow_down_as_the_batch_grows() {
    let config = SimConfig {
        slots: 16,
        step_base_ms: 2.0,
        step_per_seq_ms: 2.0,
        prefill_base_ms: 0.0,
        ..Default::default()
    };
    let server = start(config).await;
    let addr = server.local_addr();
    let body = chat("x", json!({"max_tokens": 20, "ignore_eos": true}));
    let alone = mean_gap(&post(addr, "/v1/chat/completions", &body, Some("solo")).await);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..12 {
        let body = body.clone();
        tasks.spawn(async move {
            mean_gap(&post(addr, "/v1/chat/completions", &body, Some(&format!("b{i}"))).await)
        });
    }
    let mut batched = Vec::new();
    while let Some(gap) = tasks.join_next().await {
        batched.push(gap.unwrap());
    }
    let batched = median(batched);
    assert!(alone < batched, "{alone:?} !< {batched:?}");
    server.shutdown().await.unwrap();
}

/// Tokens per content event, from cumulative per-event usage.
fn tokens_per_event(reply: &Reply) -> Vec<u64> {
    let mut previous = 0;
    let mut counts = Vec::new();
    for event in reply.with_text("content") {
        let completion = event.json().unwrap()["usage"]["completion_tokens"]
            .as_u64()
            .unwrap();
        counts.push(completion - previous);
        previous = completion;
    }
    counts
}

#[tokio::test]
async fn speculative_events_carry_the_configured_mean_tokens() {
    let extra = json!({"max_tokens": 3000, "ignore_eos": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    for (mean, drafts) in [(2.5, 4), (1.6, 2)] {
        let config = SimConfig {
            spec_tokens_mean: mean,
            spec_draft_tokens: drafts,
            step_base_ms: 0.2,
            ..fast_config()
        };
        let server = start(config).await;
        let reply = post(
            server.local_addr(),
            "/v1/chat/completions",
            &chat("x", extra.clone()),
            None,
        )
        .await;
        let mut counts = tokens_per_event(&reply);
        assert_eq!(counts.iter().sum::<u64>(), 3000);
        counts.pop(); // the last event is cut to fit max_tokens
        let measured = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        // ~1200-1900 steps; the standard error of the mean is below 0.04 tokens.
        assert!(
            (measured - mean).abs() < 0.15,
            "mean {mean}: measured {measured}"
        );
        assert!(counts
            .iter()
            .all(|&n| (1..=u64::from(drafts) + 1).contains(&n)));
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn without_speculation_every_event_is_one_token() {
    let server = start(fast_config()).await;
    let extra = json!({"max_tokens": 50, "ignore_eos": true,
        "stream_options": {"continuous_usage_stats": true}});
    let reply = post(
        server.local_addr(),
        "/v1/completions",
        &completion("x", extra),
        None,
    )
    .await;
    let counts: Vec<u64> = {
        let mut previous = 0;
        reply
            .events
            .iter()
            .filter(|e| e.text("text").is_some())
            .map(|e| {
                let c = e.json().unwrap()["usage"]["completion_tokens"]
                    .as_u64()
                    .unwrap();
                let n = c - previous;
                previous = c;
                n
            })
            .collect()
    };
    assert_eq!(counts, vec![1; 50]);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_departed_client_frees_its_slot() {
    let server = start(SimConfig {
        slots: 1,
        ..fast_config()
    })
    .await;
    let addr = server.local_addr();
    // An endless request holds the only slot until its client goes away.
    let endless = chat("x", json!({"max_tokens": 1_000_000, "ignore_eos": true}));
    let hog = tokio::spawn(async move { post(addr, "/v1/chat/completions", &endless, None).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    hog.abort();
    let _ = hog.await;
    let body = chat("y", json!({"max_tokens": 3, "ignore_eos": true}));
    let reply = tokio::time::timeout(
        Duration::from_secs(10),
        post(addr, "/v1/chat/completions", &body, None),
    )
    .await
    .expect("the slot was never freed");
    assert!(reply.events.last().unwrap().is_done());
    server.shutdown().await.unwrap();
}
