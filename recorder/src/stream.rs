//! One request from send to end of stream: the receive hot path.
//!
//! Every socket read is stamped before its bytes are looked at: with the kernel's receive time
//! where Linux gives it, else with the monotonic clock read when the read returned
//! ([`crate::read_clock`]). Only then are the bytes framed and fed to the SSE parser, and every
//! event it completes becomes a [`tokentrace_format::ChunkRecord`] with that arrival time and
//! the read's index. Chunks go into the request's packed columns (about 12 bytes a chunk
//! without captured text), reserved up front: no allocation, lock or channel send per chunk.
//! Checkpoints hand the writer copies of the chunks that came since the last one, and the
//! whole [`PackedRecord`] leaves at the end.

use crate::config::Capture;
use crate::http::{error_chain, read_body, HttpClient};
use crate::read_clock::ReadClock;
use bytes::Bytes;
use events::{truncate_lossy, ERROR_TEXT_LIMIT};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use std::time::Duration;
use tokentrace_format::clock::mono_now_ns;
use tokentrace_format::request_id::write_uuid;
use tokentrace_format::{
    Outcome, PackedChunks, PackedRecord, Phase, RecordSender, RequestMeta, Usage,
};
use tokentrace_sse::classify::OutputSink;
use tokentrace_sse::parser::{SseError, SseParser};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Response headers kept in the trace (lower-case names). `retry-after` comes with a 429 or
/// 503 and says when the server wants to be asked again.
const KEPT_HEADERS: [&str; 5] = [
    "x-request-id",
    "server-timing",
    "openai-processing-ms",
    "x-ratelimit-remaining-requests",
    "retry-after",
];

/// What every request of a run shares.
#[derive(Clone)]
pub struct StreamContext {
    /// The pooled HTTP client.
    pub client: HttpClient,
    /// A client without a pool, for the retry of a request whose reused connection was closed.
    pub fresh_client: HttpClient,
    /// Set when the server closes connections right after a response: from then on every
    /// request goes through `fresh_client`.
    pub closes: crate::read_clock::CloseWatch,
    /// `{base}/chat/completions` or `{base}/completions`.
    pub uri: Uri,
    /// Headers sent on every request (content type, authorization, custom).
    pub headers: HeaderMap,
    /// The header carrying each request's id and the run's prefix of the id (None: no id).
    pub request_id: Option<(HeaderName, u64)>,
    /// Monotonic ns of the trace's clock anchor.
    pub anchor_mono_ns: u64,
    /// Whole-request timeout.
    pub timeout: Option<Duration>,
    /// Timeout until the first reasoning/content/tool output.
    pub ttft_timeout: Option<Duration>,
    /// Text capture mode.
    pub capture: Capture,
    /// SSE line limit.
    pub line_limit: usize,
    /// Trial number recorded in each request.
    pub trial: u32,
    /// Chunk vector capacity reserved per request.
    pub chunk_capacity: usize,
    /// Where and how often a request still streaming checkpoints its new chunks (None: no
    /// checkpoints; calibration probes have none).
    pub checkpoints: Option<(RecordSender, Duration)>,
    /// The own HTTP/1.1 client's pool, when measured requests go through it (`--client own`;
    /// None: hyper).
    pub own: Option<std::sync::Arc<crate::h1::Pool>>,
    /// The stream reader that reads the own client's response bodies (None: each request's
    /// task reads its own, `--client own-task`). The reader's own copy of the context has
    /// none.
    pub reader: Option<std::sync::Arc<crate::reader::Reader<StreamContext>>>,
    /// Events of the records sealed so far that their stream's template took whole, without
    /// the parser looking for the line's end (`SseParser::whole_known_event`;
    /// `client_health.events_read_whole`). Shared by every copy of the context.
    pub events_read_whole: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Responses of the load whose head came over HTTP/2 (hyper's client, `--http 2` or
    /// `--http auto` where TLS negotiated h2; `client_health.http2_responses`). Shared by every
    /// copy of the context.
    pub http2_responses: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A deadline this far away never fires within a run.
const NEVER: Duration = Duration::from_secs(365 * 24 * 3600);

impl StreamContext {
    /// When a request that checkpointed at `from` checkpoints next (never, without
    /// checkpoints).
    fn next_checkpoint(&self, from: Instant) -> Instant {
        let every = self.checkpoints.as_ref().map_or(NEVER, |(_, every)| *every);
        from.checked_add(every).unwrap_or(from + NEVER)
    }

    /// Nanoseconds from the anchor to now.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        mono_now_ns().saturating_sub(self.anchor_mono_ns)
    }
}

/// One request to send.
pub struct RequestSpec {
    /// Trace id; the request id header carries a UUID derived from it.
    pub id: u64,
    /// Warmup or measured.
    pub phase: Phase,
    /// Scheduled start (ns from anchor).
    pub intended_ns: u64,
    /// Serialized JSON body.
    pub body: Bytes,
    /// xxh3 of the prompt identity bytes.
    pub prompt_hash: u64,
    /// Prompt identity length in bytes.
    pub prompt_bytes: u32,
    /// Planned input tokens, when synthetic.
    pub planned_input_tokens: Option<u32>,
}

/// What a closed loop does between two requests, for the stream reader to do itself when a
/// response leaves its connection reusable (`--client own` over plain HTTP): the reader writes
/// the next request on that connection at once, as the benchmark's floor does, and the request's
/// task is not woken to do it. docs/PERFORMANCE.md measures what this saves.
pub trait Successor: Send + Sync {
    /// The request that starts now in the finished one's place, or None: the loop goes on in
    /// the task (the run stopping or past its deadline, warmup requests still out).
    fn next(&self) -> Option<RequestSpec>;
    /// A request that ended on the reader, and that a later one followed: its record goes
    /// where the task would have sent it.
    fn finished(&self, record: PackedRecord);
}

/// Execute one request; `cancel` firing (or its sender being dropped) ends it as Cancelled.
/// With a `successor` (the closed loop), the stream reader may run further requests after it
/// on its connection ([`Successor`]); the record returned is then the last one's.
pub async fn execute(
    ctx: &StreamContext,
    spec: RequestSpec,
    cancel: oneshot::Receiver<()>,
    successor: Option<std::sync::Weak<dyn Successor>>,
) -> PackedRecord {
    // Boxed: on the own client the state moves to the stream reader and back.
    let state = Box::new(StreamState::new(ctx, &spec));
    let (mut state, finished) = match ctx.own.as_deref() {
        // The spec goes in whole: its body is freed once the request bytes are built.
        Some(pool) => state.drive_own(ctx, pool, spec, cancel, successor).await,
        None => {
            let mut state = state;
            // Boxed: hyper's request futures would otherwise size every task's future (each
            // stream's task holds one) for the path the default client does not take.
            let drive = Box::pin(state.drive(ctx, &spec));
            let finished = tokio::select! {
                biased;
                () = drive => true,
                _ = cancel => false,
            };
            (state, finished)
        }
    };
    if !finished {
        state.fail(Outcome::Cancelled, "run interrupted".to_string());
        state.record.meta.end_ns = ctx.now_ns();
    }
    state.sealed(ctx)
}

/// The HTTP request for `spec`: a POST of its body with the run's headers and its request id.
fn build_request(ctx: &StreamContext, spec: &RequestSpec) -> Request<Full<Bytes>> {
    let mut request = Request::new(Full::new(spec.body.clone()));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = ctx.uri.clone();
    *request.headers_mut() = ctx.headers.clone();
    if let Some((name, run_prefix)) = &ctx.request_id {
        let mut uuid = [0u8; 36];
        write_uuid(*run_prefix, spec.id, &mut uuid);
        if let Ok(value) = HeaderValue::from_bytes(&uuid) {
            request.headers_mut().insert(name.clone(), value);
        }
    }
    request
}

/// How long the body may stay open after `[DONE]` before the request lets the connection go.
const DONE_DRAIN: Duration = Duration::from_millis(500);

/// A failed send is retried when the connection had served an earlier response, nothing
/// arrived on it since this request began to be written (its clock's latest read precedes its
/// latest write), and the failure came within this long: the signature of a keep-alive
/// connection the server had closed (an immediate EOF or reset), not of a server that took the
/// request and then died. The connection's own write time matters, not the send's: waiting
/// for a connection, a request may be given one that another request's response was still
/// arriving on a moment before.
const STALE_FAILURE_WINDOW: Duration = Duration::from_secs(1);

/// Whether `err`, the failure of a send noticed `elapsed` after it, came from a reused
/// connection that the server had already closed.
fn stale_connection(err: &hyper_util::client::legacy::Error, elapsed: Duration) -> bool {
    if err.is_connect() || elapsed > STALE_FAILURE_WINDOW {
        return false;
    }
    let Some(info) = err.connect_info() else {
        return false;
    };
    let mut extras = hyper::http::Extensions::new();
    info.get_extras(&mut extras);
    extras
        .get::<ReadClock>()
        .is_some_and(ReadClock::silent_since_write)
}

/// Removes every sensitive request header value (the API key, secret custom headers) from the
/// texts a server fills: error messages and kept response headers. Some gateways quote the
/// credentials they reject in their error body. Runs once per request, never per chunk.
fn scrub_secrets(headers: &HeaderMap, meta: &mut RequestMeta) {
    for value in headers.values().filter(|v| v.is_sensitive()) {
        let Ok(value) = value.to_str() else {
            continue;
        };
        let secret = value.strip_prefix("Bearer ").unwrap_or(value).trim();
        if secret.len() < 4 {
            continue;
        }
        let texts = meta
            .error
            .iter_mut()
            .chain(meta.response_headers.iter_mut().map(|(_, v)| v));
        for text in texts {
            if text.contains(secret) {
                *text = text.replace(secret, "<redacted>");
            }
            // An error body cut at its size limit may end in the first part of the secret.
            let tail = (4..secret.len())
                .rev()
                .find(|&n| text.as_bytes().ends_with(&secret.as_bytes()[..n]));
            if let Some(n) = tail {
                text.truncate(text.len() - n);
                text.push_str("<redacted>");
            }
        }
    }
}

/// Everything a request accumulates while it streams.
struct StreamState {
    record: PackedRecord,
    parser: SseParser,
    sink: OutputSink,
    reads: u32,
    done: bool,
    first_output: bool,
    last_completion_tokens: Option<u32>,
    /// Chunks already handed over in checkpoints.
    checkpointed: usize,
    /// Whether a checkpoint was handed over at all (the first one goes even without chunks:
    /// it is what keeps a request that never answered in a killed recorder's trace).
    any_checkpoint: bool,
    /// Events the stream's template took whole (added to the context's count when sealed).
    read_whole: u64,
}

impl StreamState {
    fn new(ctx: &StreamContext, spec: &RequestSpec) -> StreamState {
        let meta = RequestMeta {
            id: spec.id,
            phase: spec.phase,
            trial: ctx.trial,
            intended_ns: spec.intended_ns,
            send_ns: 0,
            headers_ns: None,
            end_ns: 0,
            http_status: 0,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage::default(),
            finish_reason: None,
            prompt_hash: spec.prompt_hash,
            prompt_bytes: spec.prompt_bytes,
            output_hash: 0,
            output_bytes: 0,
            planned_input_tokens: spec.planned_input_tokens,
            response_headers: Vec::new(),
            retries: 0,
        };
        StreamState::with_meta(ctx, meta, ctx.chunk_capacity)
    }

    /// A request's state before its first read: `meta`, room for `chunks` chunks.
    fn with_meta(ctx: &StreamContext, meta: RequestMeta, chunks: usize) -> StreamState {
        StreamState {
            record: PackedRecord {
                meta,
                chunks: PackedChunks::with_capacity(chunks),
            },
            parser: SseParser::new(ctx.line_limit),
            sink: OutputSink::new(ctx.capture == Capture::Text),
            reads: 0,
            done: false,
            first_output: false,
            last_completion_tokens: None,
            checkpointed: 0,
            any_checkpoint: false,
            read_whole: 0,
        }
    }

    /// The state of a request whose streaming state was lost (the stream reader died with it):
    /// what it knew when the body began, no chunks.
    fn lost(ctx: &StreamContext, meta: RequestMeta) -> Box<StreamState> {
        Box::new(StreamState::with_meta(ctx, meta, 0))
    }

    /// Hands the writer what arrived since the last checkpoint (never waits: a full channel
    /// only defers it to the next tick). Runs every `checkpoint_every`, never per chunk.
    fn checkpoint(&mut self, ctx: &StreamContext) {
        let Some((sender, _)) = &ctx.checkpoints else {
            return;
        };
        let have = self.record.chunks.len();
        if self.any_checkpoint && have == self.checkpointed {
            return;
        }
        let mut record = PackedRecord {
            meta: self.record.meta.clone(),
            chunks: self.record.chunks.copy_from(self.checkpointed),
        };
        record.meta.outcome = Outcome::Interrupted;
        record.meta.error = None;
        record.meta.end_ns = ctx.now_ns();
        record.meta.output_hash = self.sink.output_hash();
        record.meta.output_bytes = u32::try_from(self.sink.output_bytes).unwrap_or(u32::MAX);
        scrub_secrets(&ctx.headers, &mut record.meta);
        if sender.checkpoint(record, self.checkpointed as u64) {
            self.checkpointed = have;
            self.any_checkpoint = true;
        }
    }

    /// Awaits `future` while the checkpoint timer keeps ticking; None when `deadline` fired
    /// first (the request has then timed out).
    async fn await_ticking<F: std::future::Future>(
        &mut self,
        ctx: &StreamContext,
        future: F,
        deadline: &mut std::pin::Pin<&mut tokio::time::Sleep>,
        tick: &mut std::pin::Pin<&mut tokio::time::Sleep>,
    ) -> Option<F::Output> {
        tokio::pin!(future);
        loop {
            tokio::select! {
                biased;
                out = &mut future => return Some(out),
                () = deadline.as_mut() => return None,
                () = tick.as_mut(), if ctx.checkpoints.is_some() => self.on_tick(ctx, tick),
            }
        }
    }

    fn on_tick(&mut self, ctx: &StreamContext, tick: &mut std::pin::Pin<&mut tokio::time::Sleep>) {
        self.checkpoint(ctx);
        tick.as_mut().reset(ctx.next_checkpoint(Instant::now()));
    }

    /// Keep the first failure: later ones are usually its consequences.
    fn fail(&mut self, outcome: Outcome, message: String) {
        if self.record.meta.outcome == Outcome::Ok {
            self.record.meta.outcome = outcome;
            self.record.meta.error = Some(message);
        }
    }

    fn into_record(mut self) -> PackedRecord {
        self.record.meta.output_hash = self.sink.output_hash();
        self.record.meta.output_bytes = u32::try_from(self.sink.output_bytes).unwrap_or(u32::MAX);
        self.record
    }

    /// The record of a request that has ended, as the trace gets it.
    fn sealed(self, ctx: &StreamContext) -> PackedRecord {
        ctx.events_read_whole
            .fetch_add(self.read_whole, std::sync::atomic::Ordering::Relaxed);
        let mut record = self.into_record();
        scrub_secrets(&ctx.headers, &mut record.meta);
        record
    }

    async fn drive(&mut self, ctx: &StreamContext, spec: &RequestSpec) {
        // The deadlines count from a moment no earlier than the send's time in the record, so
        // that a request ended by its timeout ran at least that long after its `send_ns`.
        self.record.meta.send_ns = ctx.now_ns();
        let start = Instant::now();
        let far = start + NEVER;
        let total_deadline = ctx.timeout.map_or(far, |t| start + t);
        let ttft_deadline = ctx.ttft_timeout.map(|t| start + t);
        let sleep = tokio::time::sleep_until(
            ttft_deadline.map_or(total_deadline, |d| d.min(total_deadline)),
        );
        tokio::pin!(sleep);
        let tick = tokio::time::sleep_until(ctx.next_checkpoint(start));
        tokio::pin!(tick);
        let client = if ctx.closes.closed_after_response() {
            &ctx.fresh_client
        } else {
            &ctx.client
        };
        let sending = client.request(build_request(ctx, spec));
        let Some(mut response) = self
            .await_ticking(ctx, sending, &mut sleep, &mut tick)
            .await
        else {
            return self.timed_out(ctx, ttft_deadline, total_deadline);
        };
        if let Err(err) = &response {
            if stale_connection(err, start.elapsed()) {
                // The server never saw the request: send it once more on a new connection.
                // Times count from this send, the one the server answers.
                self.record.meta.retries = 1;
                self.record.meta.send_ns = ctx.now_ns();
                let resending = ctx.fresh_client.request(build_request(ctx, spec));
                match self
                    .await_ticking(ctx, resending, &mut sleep, &mut tick)
                    .await
                {
                    Some(r) => response = r,
                    None => return self.timed_out(ctx, ttft_deadline, total_deadline),
                }
            }
        }
        let response = match response {
            Ok(response) => response,
            Err(err) => {
                let outcome = if err.is_connect() {
                    Outcome::ConnectError
                } else {
                    Outcome::StreamError
                };
                self.fail(outcome, error_chain(&err));
                self.record.meta.end_ns = ctx.now_ns();
                return;
            }
        };
        // Headers and body are stamped by the same clock, so headers never come after a chunk.
        let read_clock = response.extensions().get::<ReadClock>().cloned();
        let now_ns = ctx.now_ns();
        self.record.meta.headers_ns = Some(
            read_clock
                .as_ref()
                .map_or(now_ns, |clock| clock.arrival_ns(ctx.anchor_mono_ns, now_ns)),
        );
        self.record.meta.http_status = response.status().as_u16();
        if response.version() == hyper::Version::HTTP_2 {
            ctx.http2_responses
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        for name in KEPT_HEADERS {
            if let Some(value) = response.headers().get(name) {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                self.record
                    .meta
                    .response_headers
                    .push((name.to_string(), value));
            }
        }
        let answer = Answer::of(&response);
        let mut body = response.into_body();
        let mut draining = false;
        if let Some((outcome, message)) = answer.refusal(self.record.meta.http_status) {
            // The body says more (an HTML error page, a JSON completion); its first KiB is kept.
            let text = if outcome == Outcome::NotEventStream {
                tokio::select! {
                    biased;
                    text = read_error_body(&mut body) => format!(": {text}"),
                    () = &mut sleep => String::from(" (body not received before the timeout)"),
                }
            } else {
                String::new()
            };
            self.fail(outcome, format!("{message}{text}"));
            self.record.meta.end_ns = ctx.now_ns();
            return;
        }
        if self.record.meta.http_status >= 400 {
            let text = tokio::select! {
                biased;
                text = read_error_body(&mut body) => text,
                () = &mut sleep => String::from("(error body not received before the timeout)"),
            };
            let status = self.record.meta.http_status;
            self.fail(Outcome::HttpError, format!("HTTP {status}: {text}"));
            self.record.meta.end_ns = ctx.now_ns();
            return;
        }
        loop {
            let frame = tokio::select! {
                biased;
                frame = body.frame() => frame,
                () = &mut sleep => {
                    if !self.done {
                        self.timed_out(ctx, ttft_deadline, total_deadline);
                    }
                    return;
                }
                () = &mut tick, if ctx.checkpoints.is_some() => {
                    self.on_tick(ctx, &mut tick);
                    continue;
                }
            };
            // The arrival clock is read before anything looks at the bytes.
            let now_ns = ctx.now_ns();
            // The connection's latest socket read: hyper's connection task decodes the frame
            // and hands it over, and this task may run much later under load.
            let arrival_ns = read_clock
                .as_ref()
                .map_or(now_ns, |clock| clock.arrival_ns(ctx.anchor_mono_ns, now_ns));
            match frame {
                None => return self.end_of_body(arrival_ns),
                Some(Err(err)) => {
                    if !self.done {
                        self.fail(Outcome::StreamError, error_chain(&err));
                        self.record.meta.end_ns = arrival_ns;
                    }
                    return;
                }
                Some(Ok(frame)) => {
                    let Some(data) = frame.data_ref() else {
                        continue;
                    };
                    let had_output = self.first_output;
                    if let Err(SseError::Oversize { limit }) = self.on_read(ctx, arrival_ns, data) {
                        self.fail(
                            Outcome::Oversize,
                            format!("SSE line longer than {limit} bytes; stream abandoned"),
                        );
                        self.record.meta.end_ns = arrival_ns;
                        return;
                    }
                    let ttft = ttft_deadline.is_some();
                    self.after_read(had_output, ttft, total_deadline, &mut draining, &mut sleep);
                }
            }
        }
    }

    /// The deadlines after a read's events, on either client: the first output lifts the
    /// TTFT deadline (`ttft`: there is one) to the total one, and `[DONE]` starts the drain —
    /// the body's own end usually follows at once (and lets the connection be reused); a server
    /// that keeps the body open gets a short wait, then the connection is dropped.
    fn after_read(
        &mut self,
        had_output: bool,
        ttft: bool,
        total_deadline: Instant,
        draining: &mut bool,
        sleep: &mut std::pin::Pin<&mut tokio::time::Sleep>,
    ) {
        let deadline =
            self.deadline_after_read(had_output, ttft, total_deadline, draining, sleep.deadline());
        if deadline != sleep.deadline() {
            sleep.as_mut().reset(deadline);
        }
    }

    /// [`StreamState::after_read`]'s rule: the deadline after a read, given the one in force.
    fn deadline_after_read(
        &mut self,
        had_output: bool,
        ttft: bool,
        total_deadline: Instant,
        draining: &mut bool,
        current: Instant,
    ) -> Instant {
        let mut deadline = current;
        if !had_output && self.first_output && ttft {
            deadline = total_deadline;
        }
        if self.done && !*draining {
            *draining = true;
            let drained_by = Instant::now() + DONE_DRAIN;
            if drained_by < deadline {
                deadline = drained_by;
            }
        }
        deadline
    }

    fn timed_out(&mut self, ctx: &StreamContext, ttft: Option<Instant>, total: Instant) {
        let ttft_fired = !self.first_output && ttft.is_some_and(|d| d <= total);
        if ttft_fired {
            self.fail(
                Outcome::TtftTimeout,
                "no output before the TTFT timeout".into(),
            );
        } else {
            self.fail(Outcome::Timeout, "request timeout".into());
        }
        self.record.meta.end_ns = ctx.now_ns();
    }

    fn end_of_body(&mut self, now_ns: u64) {
        if self.done {
            return;
        }
        self.record.meta.end_ns = now_ns;
        if self.parser.has_pending() {
            self.fail(
                Outcome::StreamError,
                "stream ended in the middle of an event".into(),
            );
        } else if self.record.meta.finish_reason.is_none() {
            // Cut before the server said the generation was over: the output is incomplete.
            self.fail(
                Outcome::StreamError,
                format!(
                    "stream ended after {} events, before any finish_reason and without [DONE]",
                    self.record.chunks.len()
                ),
            );
        } else {
            // Complete (a finish_reason came) but not closed the OpenAI way; whether that
            // counts as a success is each protocol's call.
            self.fail(
                Outcome::MissingDone,
                format!(
                    "stream ended after {} events and a finish_reason, without [DONE]",
                    self.record.chunks.len()
                ),
            );
        }
    }
}

async fn read_error_body(body: &mut Incoming) -> String {
    let (mut collected, err) = read_body(body, ERROR_TEXT_LIMIT).await;
    if let Some(err) = err {
        collected.extend_from_slice(format!(" (body read failed: {err})").as_bytes());
    }
    if collected.iter().all(u8::is_ascii_whitespace) {
        return "(empty body)".into();
    }
    truncate_lossy(&collected)
}

#[path = "stream_events.rs"]
mod events;

#[path = "stream_answer.rs"]
mod answer;
use answer::Answer;

#[path = "stream_h1.rs"]
mod own;
