//! A client that is not tokentrace's recorder, writing what it sees into a tokentrace trace.
//!
//! It is the kind of loop any benchmark or application already has: blocking `std::net`, one
//! hand-written HTTP/1.1 POST per request to an OpenAI-compatible `/chat/completions` with
//! `"stream": true`, the chunked body decoded and split into SSE events as it arrives. The only
//! additions are the timestamps and [`TraceWriter`]; `tokentrace inspect` and `tokentrace
//! analyze` then read its traces like any other (docs/FORMAT.md, "Embedding the writer").
//!
//! ```text
//! cargo run -p tokentrace-format --example foreign_client -- \
//!     --url http://127.0.0.1:8000/v1 --model M --requests 8 -o out.trace [--max-tokens 16]
//! ```

use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokentrace_format::{realtime_now_ns, Channel, ChunkRecord, ClientHealth, ClockAnchor};
use tokentrace_format::{Header, Manifest, Outcome, Phase, RequestMeta, RequestRecord, RunEnd};
use tokentrace_format::{TraceWriter, Usage, WriterConfig};

const TOOL_VERSION: &str = concat!("foreign_client ", env!("CARGO_PKG_VERSION"));
const USAGE: &str = "usage: foreign_client --url http://HOST:PORT/v1 --model M --requests N \
                     -o OUT [--max-tokens T]";
/// Every wait is bounded: a server that stops sending fails the request instead of the run.
const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and what to ask: the parts of the command line each request needs.
struct Target {
    host_port: String,
    path: String,
    model: String,
    max_tokens: u32,
}

/// Why a request did not end well: the outcome class and the text that goes into the trace.
struct Failure(Outcome, String);

fn fail(outcome: Outcome, text: impl ToString) -> Failure {
    Failure(outcome, text.to_string())
}

/// One request as it happens: its record being filled in and its output text so far.
struct Exchange {
    anchor: ClockAnchor,
    meta: RequestMeta,
    chunks: Vec<ChunkRecord>,
    output: Vec<u8>,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("foreign_client: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut flags = std::collections::HashMap::new();
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        if !["--url", "--model", "--requests", "--max-tokens", "-o"].contains(&flag.as_str()) {
            return Err(format!("unknown argument {flag}; {USAGE}").into());
        }
        let value = argv
            .next()
            .ok_or(format!("{flag} needs a value; {USAGE}"))?;
        flags.insert(flag, value);
    }
    let get = |flag: &str| {
        flags
            .get(flag)
            .ok_or(format!("{flag} is required; {USAGE}"))
    };
    let (url, out) = (get("--url")?, PathBuf::from(get("-o")?));
    let number = |flag: &str, default: Option<u64>| match flags.get(flag) {
        Some(v) => v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}")),
        None => default.ok_or(format!("{flag} is required; {USAGE}")),
    };
    let requests = number("--requests", None)?;
    let rest = (url.strip_prefix("http://")).ok_or("--url must be http://… (plain HTTP only)")?;
    let (host_port, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let target = Target {
        host_port: host_port.to_string(),
        path: path.trim_end_matches('/').to_string(),
        model: get("--model")?.clone(),
        max_tokens: u32::try_from(number("--max-tokens", Some(16))?)?,
    };

    // The anchor comes first: every time below is "ns since this instant" on CLOCK_MONOTONIC,
    // which no NTP step can move, and the real-time half maps those times to wall-clock time.
    let anchor = ClockAnchor::now();
    let header = Header {
        major: 0, // the writer sets the version it writes
        minor: 0,
        anchor,
        host: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        shard: 0,
    };
    let manifest = Manifest {
        tool_version: TOOL_VERSION.into(),
        argv: std::env::args().collect(), // this client takes no secrets on its command line
        base_url: url.clone(),
        api: "chat".into(),
        model: target.model.clone(),
        workload: [("max_tokens".into(), json!(target.max_tokens))].into(),
        load: [
            ("concurrency".into(), json!(1)),
            ("requests".into(), json!(requests)),
        ]
        .into(),
        start_realtime_ns: anchor.realtime_ns,
        ..Manifest::default()
    };
    // From here the writer's own thread owns the file; this loop only hands it records.
    let writer = TraceWriter::create(&out, header, &manifest, WriterConfig::default())?;
    let sender = writer.sender();
    let mut chunks = 0;
    for id in 0..requests {
        let record = one_request(&target, anchor, id);
        chunks += record.chunks.len() as u64;
        // One record per request, sent once it is over: the writer never sees half a request.
        sender.send(record)?;
    }
    let end_ns = anchor.elapsed_ns();
    let client_health = ClientHealth {
        chunks: Some(chunks),
        wall_ns: Some(end_ns),
        concurrency: Some(1),
        backpressure_events: Some(sender.backpressure_events()),
        ..ClientHealth::default()
    };
    drop(sender);
    // Without finish() the file would still be readable ("recovered"), but it would lack the
    // run end and the index that let a reader call it complete.
    let end = RunEnd {
        end_realtime_ns: realtime_now_ns(),
        end_ns,
        reason: "completed".into(),
        client_health,
    };
    let stats = writer.finish(end)?;
    let (n, m) = (stats.requests, stats.chunks);
    println!("{n} requests, {m} chunks -> {}", out.display());
    Ok(())
}

/// Sends request `id` and reads its stream to the end; failures become the record's outcome.
fn one_request(target: &Target, anchor: ClockAnchor, id: u64) -> RequestRecord {
    let prompt = format!("Request {id}: write a few words about rivers.");
    let body = json!({
        "model": target.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": target.max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string();
    let (path, host, len) = (&target.path, &target.host_port, body.len());
    let request = format!(
        "POST {path}/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n{body}"
    );
    // A closed loop: the request is meant to start as soon as the previous one ended.
    let intended_ns = anchor.elapsed_ns();
    let meta = RequestMeta {
        id,
        phase: Phase::Measured,
        trial: 0,
        intended_ns,
        send_ns: intended_ns,
        headers_ns: None,
        end_ns: intended_ns,
        http_status: 0,
        outcome: Outcome::Ok,
        error: None,
        usage: Usage::default(),
        finish_reason: None,
        prompt_hash: xxhash_rust::xxh3::xxh3_64(prompt.as_bytes()),
        prompt_bytes: prompt.len() as u32,
        output_hash: 0,
        output_bytes: 0,
        planned_input_tokens: None,
        response_headers: Vec::new(),
        retries: 0,
    };
    let mut x = Exchange {
        anchor,
        meta,
        chunks: Vec::new(),
        output: Vec::new(),
    };
    if let Err(Failure(outcome, error)) = x.stream(target, &request) {
        (x.meta.outcome, x.meta.error) = (outcome, Some(error));
        x.meta.end_ns = anchor.elapsed_ns();
    }
    x.meta.output_hash = xxhash_rust::xxh3::xxh3_64(&x.output);
    x.meta.output_bytes = x.output.len() as u32;
    RequestRecord {
        meta: x.meta,
        chunks: x.chunks,
    }
}

impl Exchange {
    /// The HTTP exchange: connect, send, then read and decode until the body ends.
    fn stream(&mut self, target: &Target, request: &str) -> Result<(), Failure> {
        let addrs = target.host_port.to_socket_addrs();
        let addr = addrs.ok().and_then(|mut a| a.next());
        let addr = addr.ok_or_else(|| fail(Outcome::ConnectError, "cannot resolve the host"))?;
        let mut socket = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
            .map_err(|e| fail(Outcome::ConnectError, e))?;
        let _ = socket.set_nodelay(true);
        let _ = socket.set_read_timeout(Some(IO_TIMEOUT));
        let _ = socket.set_write_timeout(Some(IO_TIMEOUT));
        // send_ns after connecting: intended → send then shows this client's connection set-up,
        // and TTFT (send → first content) only what the server took.
        self.meta.send_ns = self.anchor.elapsed_ns();
        (socket.write_all(request.as_bytes())).map_err(|e| fail(Outcome::StreamError, e))?;
        let (mut raw, mut body, mut buf) = (Vec::new(), Vec::new(), vec![0u8; 16 * 1024]);
        let (mut chunked, mut saw_done) = (None, false); // `chunked` is known once headers are in
        for read_index in 0u32.. {
            let read = socket.read(&mut buf);
            // Taken right after the read returns and before anything looks at the bytes, so
            // the time this client spends parsing never shows up as server latency.
            let arrival_ns = self.anchor.elapsed_ns();
            let n = match read {
                Ok(0) => break, // the server closed the connection (Connection: close)
                Ok(n) => n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(fail(Outcome::Timeout, "the server stopped sending"))
                }
                Err(e) => return Err(fail(Outcome::StreamError, e)),
            };
            self.meta.end_ns = arrival_ns;
            raw.extend_from_slice(&buf[..n]);
            if chunked.is_none() {
                let Some(end) = find(&raw, b"\r\n\r\n") else {
                    continue; // headers not complete yet
                };
                let head = String::from_utf8_lossy(&raw[..end]).into_owned();
                raw.drain(..end + 4);
                self.meta.headers_ns = Some(arrival_ns);
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
                self.meta.http_status = status.ok_or_else(|| fail(Outcome::Malformed, &head))?;
                chunked = Some(head.lines().any(|line| {
                    let l = line.to_ascii_lowercase();
                    l.starts_with("transfer-encoding:") && l.contains("chunked")
                }));
            }
            let body_done = if chunked == Some(true) {
                dechunk(&mut raw, &mut body).map_err(|e| fail(Outcome::Malformed, e))?
            } else {
                body.append(&mut raw);
                false
            };
            // An error body is kept as text, not split into events.
            if (200..300).contains(&self.meta.http_status) {
                // Every event this read completed shares its arrival time and index.
                while let Some(end) = event_end(&body) {
                    let event: Vec<u8> = body.drain(..end).collect();
                    saw_done |=
                        self.classify(&event, arrival_ns, read_index) == Some(Channel::Done);
                }
            }
            if body_done {
                break;
            }
        }
        let meta = &self.meta;
        let (outcome, error) = match meta.http_status {
            200..=299 if saw_done => return Ok(()),
            0 => (
                Outcome::StreamError,
                "closed before the response headers".into(),
            ),
            200..=299 if meta.finish_reason.is_some() => (Outcome::MissingDone, "no [DONE]".into()),
            200..=299 => (Outcome::StreamError, "stream ended before [DONE]".into()),
            _ => (
                Outcome::HttpError,
                String::from_utf8_lossy(&body[..body.len().min(1024)]).into(),
            ),
        };
        Err(Failure(outcome, error))
    }

    /// Records one SSE event as a chunk, classified the simple way, and returns its channel;
    /// events without `data:` lines (comments, keep-alives) are not recorded. Usage, finish
    /// reason and output text go into the request.
    fn classify(&mut self, event: &[u8], arrival_ns: u64, read_index: u32) -> Option<Channel> {
        let text = String::from_utf8_lossy(event);
        let data: Vec<&str> = (text.lines().filter_map(|l| l.strip_prefix("data:")))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            return None;
        }
        let payload = data.join("\n");
        let (channel, text_len) = match serde_json::from_str::<Value>(&payload) {
            _ if payload.trim() == "[DONE]" => (Channel::Done, 0),
            Err(_) => (Channel::Other, 0), // not JSON: recorded, not interpreted
            Ok(v) => {
                let n = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
                let u = &v["usage"];
                if u.is_object() {
                    self.meta.usage = Usage {
                        prompt_tokens: n(&u["prompt_tokens"]),
                        completion_tokens: n(&u["completion_tokens"]),
                        reasoning_tokens: n(&u["completion_tokens_details"]["reasoning_tokens"]),
                        cached_tokens: n(&u["prompt_tokens_details"]["cached_tokens"]),
                    };
                }
                let choice = &v["choices"][0];
                if let Some(reason) = choice["finish_reason"].as_str() {
                    self.meta.finish_reason = Some(reason.to_string());
                }
                let content = choice["delta"]["content"].as_str().unwrap_or("");
                self.output.extend_from_slice(content.as_bytes());
                if !content.is_empty() {
                    (Channel::Content, content.len() as u32)
                } else if !choice["delta"]["role"].is_null() {
                    (Channel::Role, 0)
                } else if choice.is_null() && u.is_object() {
                    (Channel::Usage, 0)
                } else {
                    (Channel::Other, 0)
                }
            }
        };
        self.chunks.push(ChunkRecord {
            arrival_ns,
            read_index,
            bytes: event.len() as u32,
            channel,
            text_len,
            tokens: None,
            text: None,
        });
        Some(channel)
    }
}

/// Moves every complete chunk of a chunked body from `raw` to `body`; true once the last
/// (empty) chunk is in. Trailers are ignored.
fn dechunk(raw: &mut Vec<u8>, body: &mut Vec<u8>) -> Result<bool, String> {
    while let Some(line_end) = find(raw, b"\r\n") {
        let line = String::from_utf8_lossy(&raw[..line_end]).into_owned();
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| format!("chunk {line:?}"))?;
        if size == 0 {
            return Ok(true);
        }
        let start = line_end + 2;
        if raw.len() < start + size + 2 {
            break; // the rest of this chunk is still on its way
        }
        body.extend_from_slice(&raw[start..start + size]);
        raw.drain(..start + size + 2);
    }
    Ok(false)
}

/// The end (past the blank line) of the first complete SSE event in `body`.
fn event_end(body: &[u8]) -> Option<usize> {
    let lf = find(body, b"\n\n").map(|i| i + 2);
    let crlf = find(body, b"\r\n\r\n").map(|i| i + 4);
    lf.into_iter().chain(crlf).min()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
