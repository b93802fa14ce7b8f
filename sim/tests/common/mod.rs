//! A small HTTP client for the simulator's tests: sends one request on a fresh connection and
//! splits the response into SSE events, stamping each with its arrival time.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// Upper bound on any one request in the tests.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One SSE event as received.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: Instant,
    pub mono_ns: u64,
    pub bytes: Bytes,
}

impl Event {
    /// The JSON payload, if the event is `data: {json}`.
    pub fn json(&self) -> Option<Value> {
        let text = std::str::from_utf8(&self.bytes).ok()?;
        serde_json::from_str(text.strip_prefix("data: ")?.trim_end()).ok()
    }

    pub fn is_done(&self) -> bool {
        &self.bytes[..] == b"data: [DONE]\n\n"
    }

    /// Text of the first choice's delta field `field` (or completions `text`).
    pub fn text(&self, field: &str) -> Option<String> {
        let json = self.json()?;
        let choice = json.get("choices")?.get(0)?;
        let value = choice
            .get("delta")
            .and_then(|d| d.get(field))
            .or_else(|| (field == "text").then(|| choice.get("text")).flatten())?;
        value.as_str().map(str::to_owned)
    }
}

/// A whole response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub sent_at: Instant,
    pub events: Vec<Event>,
    pub body: Vec<u8>,
    pub error: Option<String>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// Events whose first choice has a non-empty delta in `field`.
    pub fn with_text<'a>(&'a self, field: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
        self.events
            .iter()
            .filter(move |e| e.text(field).is_some_and(|t| !t.is_empty()))
    }

    /// Time from sending to the first non-empty `field` delta.
    pub fn time_to_first(&self, field: &str) -> Duration {
        self.with_text(field).next().unwrap().at - self.sent_at
    }
}

/// POSTs `body` as JSON to `path` over HTTP/1.1 (or h2c when `h2`).
pub async fn post(addr: SocketAddr, path: &str, body: &Value, request_id: Option<&str>) -> Reply {
    send(addr, path, body, request_id, false).await
}

pub async fn send(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    request_id: Option<&str>,
    h2: bool,
) -> Reply {
    tokio::time::timeout(
        REQUEST_TIMEOUT,
        send_inner(addr, path, body, request_id, h2),
    )
    .await
    .expect("request timed out")
}

/// GETs `path`, returning status and body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, body)
}

async fn send_inner(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    request_id: Option<&str>,
    h2: bool,
) -> Reply {
    let stream = TcpStream::connect(addr).await.unwrap();
    let mut builder = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    if let Some(id) = request_id {
        builder = builder.header("x-request-id", id);
    }
    let req = builder
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let sent_at = Instant::now();
    let resp = if h2 {
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        sender.send_request(req).await.unwrap()
    } else {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        sender.send_request(req).await.unwrap()
    };
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut buffer = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    let mut error = None;
    loop {
        match body.frame().await {
            None => break,
            Some(Err(err)) => {
                error = Some(format!("{err:?}"));
                break;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                let at = Instant::now();
                let mono_ns = tokentrace_sim::mono_now_ns();
                buffer.extend_from_slice(&data);
                pending.extend_from_slice(&data);
                // Events end with a blank line.
                while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                    let bytes = Bytes::copy_from_slice(&pending[..end + 2]);
                    pending.drain(..end + 2);
                    events.push(Event { at, mono_ns, bytes });
                }
            }
        }
    }
    Reply {
        status,
        headers,
        sent_at,
        events,
        body: buffer,
        error,
    }
}

/// A chat request body.
pub fn chat(prompt: &str, extra: Value) -> Value {
    let mut body = serde_json::json!({
        "model": "test-model",
        "messages": [{"role": "user", "content": prompt}],
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    merge(&mut body, extra);
    body
}

/// A completions request body.
pub fn completion(prompt: &str, extra: Value) -> Value {
    let mut body = serde_json::json!({
        "model": "test-model",
        "prompt": prompt,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    merge(&mut body, extra);
    body
}

fn merge(body: &mut Value, extra: Value) {
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
}

/// A fast engine for tests: short steps and outputs.
pub fn fast_config() -> tokentrace_sim::SimConfig {
    tokentrace_sim::SimConfig {
        step_base_ms: 1.0,
        step_per_seq_ms: 0.0,
        prefill_base_ms: 0.5,
        eos_tokens_mean: 12,
        ..Default::default()
    }
}

/// Median of durations.
pub fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}
