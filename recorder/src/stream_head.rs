//! The request and the response head over the own client: the request's bytes, the exchange
//! a request's task runs (send, then read the head), the head's reading read by read (shared
//! with the stream reader, which reads the head itself on a plain connection), and
//! what a head says about the body to come.

use super::super::answer::Answer;
use super::super::events::{truncate_lossy, ERROR_TEXT_LIMIT};
use super::super::KEPT_HEADERS;
use super::{RequestSpec, StreamContext, StreamState};
use crate::h1::response::{self, Framing, Head};
use crate::h1::{Conn, Pool};
use std::io;
use tokentrace_format::request_id::write_uuid;
use tokentrace_format::Outcome;

/// Why an exchange stopped before its body.
pub(super) enum Broken {
    /// A read or write failed (or the server closed) before any byte of the response, on a
    /// connection that had carried a response before: maybe a stale keep-alive connection.
    BeforeAnswer { error: String, reused: bool },
    /// Anything else: no retry.
    Failed(Outcome, String),
}

/// A response head and what came after it in the same read.
pub(super) struct Answered {
    pub conn: Conn,
    pub head: Head,
    /// Bytes after the head, from the read that completed it.
    pub rest: Vec<u8>,
    /// When that read arrived.
    pub arrival_ns: u64,
}

/// The request bytes, with this request's id header.
pub(super) fn request_bytes(ctx: &StreamContext, pool: &Pool, spec: &RequestSpec) -> Vec<u8> {
    match &ctx.request_id {
        Some((name, run_prefix)) => {
            let mut uuid = [0u8; 36];
            write_uuid(*run_prefix, spec.id, &mut uuid);
            pool.request(&[(name.as_str(), &uuid)], &spec.body)
        }
        None => pool.request(&[], &spec.body),
    }
}

/// Sends `request` on `conn` (or a new connection) and reads the response head. A kept-alive
/// connection the stream reader held last comes back into tokio's reactor first. `request`
/// may be the part of a request a first write left.
pub(super) async fn exchange(
    ctx: &StreamContext,
    pool: &Pool,
    request: &[u8],
    conn: Option<Conn>,
) -> Result<Answered, Broken> {
    let mut conn = match conn {
        Some(conn) => conn,
        None => pool
            .connect(&ctx.closes, false)
            .await
            .map_err(|e| Broken::Failed(Outcome::ConnectError, format!("connecting: {e}")))?,
    };
    let reused = conn.reused;
    let before = |what: &str, e: io::Error| Broken::BeforeAnswer {
        error: format!("{what}: {e}"),
        reused,
    };
    conn.attach()
        .map_err(|e| before("registering the connection", e))?;
    conn.send(request)
        .await
        .map_err(|e| before("sending the request", e))?;
    let mut head_bytes: Vec<u8> = Vec::new();
    loop {
        let (taken, arrival_ns) = conn
            .read_with(|bytes, clock| {
                let at = clock.arrival_ns(ctx.anchor_mono_ns, ctx.now_ns());
                (take_head(&mut head_bytes, bytes, reused), at)
            })
            .await
            .map_err(|e| before("reading the response", e))?;
        if let Some((head, rest)) = taken? {
            return Ok(Answered {
                conn,
                head,
                rest,
                arrival_ns,
            });
        }
    }
}

/// [`response::take_head`] for one read (no bytes: the server closed), its failures told
/// as the exchange tells them. `reused`: the connection carried a response before (a close
/// before any byte may then be a stale one's).
pub(super) fn take_head(
    head_bytes: &mut Vec<u8>,
    bytes: &[u8],
    reused: bool,
) -> Result<Option<(Head, Vec<u8>)>, Broken> {
    if bytes.is_empty() {
        return Err(if head_bytes.is_empty() {
            Broken::BeforeAnswer {
                error: "reading the response: connection closed".into(),
                reused,
            }
        } else {
            Broken::Failed(
                Outcome::StreamError,
                "connection closed in the middle of the response head".into(),
            )
        });
    }
    response::take_head(head_bytes, bytes).map_err(|e| Broken::Failed(Outcome::StreamError, e))
}

/// The body's framing when `head` answers with a stream to read; None when the request's task
/// must look further (a framing it cannot read, a refusal, an error status and its body).
pub(super) fn stream_framing(head: &Head) -> Option<Framing> {
    let answer = Answer::from_parts(
        head.get("content-type"),
        head.get("content-encoding"),
        head.get("location"),
    );
    if head.status >= 400 || answer.refusal(head.status).is_some() {
        return None;
    }
    head.framing(false).ok()
}

impl StreamState {
    /// Records what the trace keeps of a response head that arrived at `arrival_ns`.
    pub(super) fn record_head(&mut self, head: &Head, arrival_ns: u64) {
        self.record.meta.headers_ns = Some(arrival_ns);
        self.record.meta.http_status = head.status;
        for name in KEPT_HEADERS {
            if let Some(value) = head.get(name) {
                self.record
                    .meta
                    .response_headers
                    .push((name.to_string(), value.to_string()));
            }
        }
    }
}

/// At most [`ERROR_TEXT_LIMIT`] bytes of an error body (the bytes after the head first). A
/// connection whose head the stream reader read joins tokio's reactor here, for the reads.
pub(super) async fn error_body(conn: &mut Conn, framing: &mut Framing, rest: &[u8]) -> String {
    let mut collected = Vec::new();
    let mut failure = None;
    let take = |framing: &mut Framing, bytes: &[u8], collected: &mut Vec<u8>| {
        framing
            .decode(bytes, |d| collected.extend_from_slice(d))
            .map(|d| d.done)
    };
    let mut done = match take(framing, rest, &mut collected) {
        Ok(done) => done,
        Err(e) => {
            failure = Some(e);
            true
        }
    };
    if let (false, Err(e)) = (done, conn.attach()) {
        failure = Some(format!("registering the connection: {e}"));
        done = true;
    }
    while !done && collected.len() < ERROR_TEXT_LIMIT {
        let read = conn
            .read_with(|bytes, _| (!bytes.is_empty()).then(|| take(framing, bytes, &mut collected)))
            .await;
        match read {
            Ok(None) => break,
            Ok(Some(Ok(d))) => done = d,
            Ok(Some(Err(e))) => {
                failure = Some(e);
                break;
            }
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    collected.truncate(ERROR_TEXT_LIMIT);
    if let Some(e) = failure {
        collected.extend_from_slice(format!(" (body read failed: {e})").as_bytes());
    }
    if collected.iter().all(u8::is_ascii_whitespace) {
        return "(empty body)".into();
    }
    truncate_lossy(&collected)
}
