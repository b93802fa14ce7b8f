//! The OpenAI surface: event order, usage, prompt token rule, both APIs, whole responses.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use std::net::SocketAddr;

use common::*;
use serde_json::{json, Value};
use tokentrace_sim::{count_tokens, ReasoningField, SimConfig, SimServer};

async fn start(config: SimConfig) -> SimServer {
    SimServer::start(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

fn words(events: &[&common::Event], field: &str) -> u32 {
    events
        .iter()
        .map(|e| count_tokens(&e.text(field).unwrap_or_default()))
        .sum()
}

#[tokio::test]
async fn chat_stream_has_role_reasoning_content_usage_done_in_order() {
    let server = start(SimConfig {
        reasoning_tokens: 5,
        ..fast_config()
    })
    .await;
    let prompt = "count these six words please now";
    let reply = post(
        server.local_addr(),
        "/v1/chat/completions",
        &chat(prompt, json!({})),
        None,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.headers["content-type"], "text/event-stream");
    assert!(reply.error.is_none());
    let events = &reply.events;
    let role = events[0].json().unwrap();
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    assert!(events.last().unwrap().is_done());
    let usage_event = events[events.len() - 2].json().unwrap();
    assert_eq!(usage_event["choices"].as_array().unwrap().len(), 0);
    let usage = &usage_event["usage"];
    assert_eq!(usage["prompt_tokens"], 6);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 5);

    // Reasoning strictly before content, and the token counts add up to the usage.
    let tokens: Vec<&Event> = events[1..events.len() - 2].iter().collect();
    let first_content = tokens
        .iter()
        .position(|e| e.text("content").is_some())
        .unwrap();
    assert!(tokens[..first_content]
        .iter()
        .all(|e| e.text("reasoning_content").is_some()));
    assert!(tokens[first_content..]
        .iter()
        .all(|e| e.text("content").is_some()));
    assert_eq!(words(&tokens, "reasoning_content"), 5);
    let completion = usage["completion_tokens"].as_u64().unwrap() as u32;
    assert_eq!(words(&tokens, "content") + 5, completion);
    let finishes: Vec<Value> = tokens
        .iter()
        .map(|e| e.json().unwrap()["choices"][0]["finish_reason"].clone())
        .collect();
    assert_eq!(finishes.last().unwrap(), "stop");
    assert!(finishes[..finishes.len() - 1].iter().all(Value::is_null));
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn reasoning_field_name_and_thinking_switch() {
    let config = SimConfig {
        reasoning_tokens: 3,
        reasoning_field: ReasoningField::Reasoning,
        ..fast_config()
    };
    let server = start(config).await;
    let addr = server.local_addr();
    let reply = post(addr, "/v1/chat/completions", &chat("hi", json!({})), None).await;
    assert_eq!(reply.with_text("reasoning").count(), 3);
    assert_eq!(reply.with_text("reasoning_content").count(), 0);
    let off = json!({"chat_template_kwargs": {"enable_thinking": false}});
    let reply = post(addr, "/v1/chat/completions", &chat("hi", off), None).await;
    assert_eq!(reply.with_text("reasoning").count(), 0);
    assert!(reply.with_text("content").count() > 0);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn completions_stream_and_max_tokens() {
    let server = start(fast_config()).await;
    let body = completion("one two three", json!({"max_tokens": 4}));
    let reply = post(server.local_addr(), "/v1/completions", &body, None).await;
    assert_eq!(reply.status, 200);
    let first = reply.events[0].json().unwrap();
    assert_eq!(first["object"], "text_completion");
    assert!(
        first["choices"][0]["delta"].is_null(),
        "no role event in completions"
    );
    let tokens: Vec<&Event> = reply.with_text("text").collect();
    assert_eq!(words(&tokens, "text"), 4);
    let last = tokens.last().unwrap().json().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    let usage = &reply.events[reply.events.len() - 2].json().unwrap()["usage"];
    assert_eq!(usage["prompt_tokens"], 3);
    assert_eq!(usage["completion_tokens"], 4);
    assert_eq!(usage["total_tokens"], 7);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn whole_responses_for_both_apis() {
    let server = start(SimConfig {
        reasoning_tokens: 2,
        ..fast_config()
    })
    .await;
    let addr = server.local_addr();
    let body = chat(
        "a b c",
        json!({"stream": false, "max_tokens": 6, "ignore_eos": true}),
    );
    let reply = post(addr, "/v1/chat/completions", &body, None).await;
    let json = reply.json();
    assert_eq!(json["object"], "chat.completion");
    let message = &json["choices"][0]["message"];
    assert_eq!(
        count_tokens(message["reasoning_content"].as_str().unwrap()),
        2
    );
    assert_eq!(count_tokens(message["content"].as_str().unwrap()), 4);
    assert_eq!(json["usage"]["prompt_tokens"], 3);
    assert_eq!(json["usage"]["completion_tokens"], 6);
    assert_eq!(json["choices"][0]["finish_reason"], "length");

    let body = json!({"prompt": [[1, 2, 3, 4], [5]], "max_tokens": 3, "ignore_eos": true});
    let json = post(addr, "/v1/completions", &body, None).await.json();
    assert_eq!(json["object"], "text_completion");
    assert_eq!(
        count_tokens(json["choices"][0]["text"].as_str().unwrap()),
        3
    );
    assert_eq!(json["usage"]["prompt_tokens"], 5);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn prompt_token_rule_with_chat_overhead() {
    let server = start(SimConfig {
        chat_tokens_per_message: 4,
        ..fast_config()
    })
    .await;
    let body = json!({"messages": [
        {"role": "system", "content": "you  are\tterse"},
        {"role": "user", "content": [{"type": "text", "text": "tell me"}]}],
        "stream": false, "max_tokens": 1});
    let json = post(server.local_addr(), "/v1/chat/completions", &body, None)
        .await
        .json();
    assert_eq!(json["usage"]["prompt_tokens"], 3 + 2 + 2 * 4);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn continuous_usage_is_cumulative_per_event() {
    let server = start(SimConfig {
        spec_tokens_mean: 2.0,
        ..fast_config()
    })
    .await;
    let extra = json!({"stream_options": {"include_usage": true, "continuous_usage_stats": true},
                       "max_tokens": 30, "ignore_eos": true});
    let reply = post(
        server.local_addr(),
        "/v1/chat/completions",
        &chat("x", extra),
        None,
    )
    .await;
    let mut previous = 0;
    for event in reply.events.iter().filter(|e| e.text("content").is_some()) {
        let completion = event.json().unwrap()["usage"]["completion_tokens"]
            .as_u64()
            .unwrap();
        let tokens = count_tokens(&event.text("content").unwrap()) as u64;
        assert_eq!(completion, previous + tokens);
        previous = completion;
    }
    assert_eq!(previous, 30);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn models_health_errors_and_h2c() {
    let server = start(fast_config()).await;
    let addr = server.local_addr();
    let (status, body) = get(addr, "/v1/models").await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(models["data"][0]["id"], "tokentrace-sim");
    assert_eq!(get(addr, "/health").await.0, 200);
    assert_eq!(get(addr, "/v1/nothing").await.0, 404);
    let bad = post(addr, "/v1/chat/completions", &json!({"prompt": "x"}), None).await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("messages"));

    let reply = send(
        addr,
        "/v1/chat/completions",
        &chat("h2", json!({})),
        Some("h2-1"),
        true,
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(reply.events.last().unwrap().is_done());
    assert_eq!(reply.headers["x-request-id"], "h2-1");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn same_seed_body_and_id_give_the_same_output() {
    let text = |reply: &Reply| -> String {
        reply
            .with_text("content")
            .map(|e| e.text("content").unwrap())
            .collect()
    };
    let body = chat("determinism", json!({}));
    let a = start(SimConfig {
        seed: 7,
        ..fast_config()
    })
    .await;
    let b = start(SimConfig {
        seed: 7,
        ..fast_config()
    })
    .await;
    let c = start(SimConfig {
        seed: 8,
        ..fast_config()
    })
    .await;
    let path = "/v1/chat/completions";
    let ra = post(a.local_addr(), path, &body, Some("req-1")).await;
    let rb = post(b.local_addr(), path, &body, Some("req-1")).await;
    let rc = post(c.local_addr(), path, &body, Some("req-1")).await;
    let rd = post(a.local_addr(), path, &body, Some("req-2")).await;
    assert_eq!(text(&ra), text(&rb));
    assert_ne!(text(&ra), text(&rc));
    assert_ne!(text(&ra), text(&rd));
    for server in [a, b, c] {
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn prefix_cache_reports_shared_blocks() {
    let server = start(SimConfig {
        prefix_cache: true,
        prefix_cache_block: 16,
        ..fast_config()
    })
    .await;
    let addr = server.local_addr();
    let shared: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    let first = shared.join(" ");
    let second = format!("{} different tail", shared[..35].join(" "));
    let cached = |json: Value| json["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
    let body = |p: &str| chat(p, json!({"stream": false, "max_tokens": 1}));
    assert_eq!(
        cached(
            post(addr, "/v1/chat/completions", &body(&first), None)
                .await
                .json()
        ),
        0
    );
    assert_eq!(
        cached(
            post(addr, "/v1/chat/completions", &body(&second), None)
                .await
                .json()
        ),
        32
    );
    server.shutdown().await.unwrap();
}

#[test]
fn background_handle_serves_and_stops() {
    let handle = SimServer::spawn_background(fast_config()).unwrap();
    let port = handle.addr().port();
    assert_eq!(handle.base_url(), format!("http://127.0.0.1:{port}/v1"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reply = runtime.block_on(post(
        handle.addr(),
        "/v1/completions",
        &completion("x", json!({})),
        None,
    ));
    assert!(reply.events.last().unwrap().is_done());
    handle.shutdown().unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[tokio::test]
async fn logprobs_list_every_token_of_each_event() {
    let server = start(SimConfig {
        spec_tokens_mean: 2.5,
        ..fast_config()
    })
    .await;
    let addr = server.local_addr();
    let body = completion(
        "x",
        json!({"logprobs": 0, "max_tokens": 40, "ignore_eos": true}),
    );
    let reply = post(addr, "/v1/completions", &body, None).await;
    let mut offset = 0;
    let mut total = 0;
    for event in reply.with_text("text") {
        let json = event.json().unwrap();
        let lp = &json["choices"][0]["logprobs"];
        let tokens: Vec<&str> = lp["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        let text = event.text("text").unwrap();
        assert_eq!(tokens.concat(), text);
        assert_eq!(lp["text_offset"][0], offset);
        assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), tokens.len());
        offset += text.len();
        total += tokens.len();
    }
    assert_eq!(total, 40);

    let body = chat(
        "x",
        json!({"logprobs": true, "max_tokens": 10, "ignore_eos": true}),
    );
    let reply = post(addr, "/v1/chat/completions", &body, None).await;
    for event in reply.with_text("content") {
        let json = event.json().unwrap();
        let content = json["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap();
        assert_eq!(
            content.len() as u32,
            count_tokens(&event.text("content").unwrap())
        );
    }
    let without = post(addr, "/v1/chat/completions", &chat("x", json!({})), None).await;
    let event = without.with_text("content").next().unwrap().json().unwrap();
    assert!(event["choices"][0]["logprobs"].is_null());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_ends_requests_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let config = SimConfig {
        truth_log: Some(dir.path().join("t.jsonl")),
        ..fast_config()
    };
    let server = start(config).await;
    let addr = server.local_addr();
    let endless = json!({"max_tokens": 10_000_000, "ignore_eos": true});
    let mut whole = chat("x", endless.clone());
    whole["stream"] = json!(false);
    let h2_whole =
        tokio::spawn(async move { send(addr, "/v1/chat/completions", &whole, None, true).await });
    let h2_stream = {
        let body = chat("x", endless.clone());
        tokio::spawn(async move { send(addr, "/v1/chat/completions", &body, None, true).await })
    };
    let h1_stream = tokio::spawn(async move {
        post(addr, "/v1/completions", &completion("x", endless), None).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    tokio::time::timeout(std::time::Duration::from_secs(10), server.shutdown())
        .await
        .expect("shutdown waited for endless requests")
        .unwrap();
    // Every request ended without completing: an error reply, a broken body, or no response.
    for task in [h2_whole, h2_stream, h1_stream] {
        let ended_early = match task.await {
            Ok(reply) => !reply.events.iter().any(Event::is_done) && reply.body.len() < 1 << 20,
            Err(join_error) => join_error.is_panic(),
        };
        assert!(ended_early);
    }
}
