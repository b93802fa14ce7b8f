//! One measured request over the recorder's own HTTP/1.1 client (`--client own`, see
//! [`crate::h1`]): this task writes the request and reads the response head; the body is then
//! read by the stream reader ([`crate::reader`]), or with `--client own-task` by this task,
//! either way framed and fed to the SSE parser read by read, each read stamped before its
//! bytes are looked at. The outcomes, the timeouts, the checkpoints and the one retry of a
//! request whose kept-alive connection the server had closed are those of the hyper path
//! (`stream.rs`).

use super::answer::Answer;
use super::events::{truncate_lossy, ERROR_TEXT_LIMIT};
use super::{RequestSpec, StreamContext, StreamState, KEPT_HEADERS, NEVER, STALE_FAILURE_WINDOW};
use crate::h1::response::{self, Framing, Head};
use crate::h1::{Conn, Pool};
use std::io;
use tokentrace_format::request_id::write_uuid;
use tokentrace_format::Outcome;
use tokentrace_sse::parser::SseError;
use tokio::sync::oneshot;
use tokio::time::Instant;

#[path = "stream_reader.rs"]
mod reader;

/// Why an exchange stopped before its body.
enum Broken {
    /// A read or write failed (or the server closed) before any byte of the response, on a
    /// connection that had carried a response before: maybe a stale keep-alive connection.
    BeforeAnswer { error: String, reused: bool },
    /// Anything else: no retry.
    Failed(Outcome, String),
}

/// What woke a stream waiting for its next read.
enum Wake {
    /// The read, and what was made of its bytes.
    Read(io::Result<Step>),
    /// The request's deadline.
    Deadline,
    /// The checkpoint period.
    Tick,
}

/// A response head and what came after it in the same read.
struct Answered {
    conn: Conn,
    head: Head,
    /// Bytes after the head, from the read that completed it.
    rest: Vec<u8>,
    /// When that read arrived.
    arrival_ns: u64,
}

/// What the read loop needs of a response besides the request's state: its framing, its
/// deadlines and whether its connection may carry another request. Shared by the task that
/// reads its own socket and by the stream reader.
pub(super) struct BodyRead {
    framing: Framing,
    keeps_alive: bool,
    ttft_deadline: Option<Instant>,
    total_deadline: Instant,
    /// The deadline in force: the TTFT or total one, or the drain after `[DONE]`.
    deadline: Instant,
    draining: bool,
}

/// What one read did to the response.
pub(super) enum Step {
    /// The body goes on.
    More,
    /// The response is over; `reuse`: the connection may carry another request.
    Over { reuse: bool },
}

/// A response whose head has been read and whose body streams.
struct Started {
    conn: Conn,
    body: BodyRead,
    /// Bytes after the head, from the read that completed it.
    rest: Vec<u8>,
    /// When that read arrived.
    head_arrival_ns: u64,
    /// When the next checkpoint is due.
    next_tick: Instant,
}

impl StreamState {
    /// [`StreamState::drive`] over the own client; false when `cancel` fired first (the caller
    /// records the cancellation). The body is read by the stream reader when the run has one
    /// (`ctx.reader`), else by this task.
    pub(super) async fn drive_own(
        mut self: Box<Self>,
        ctx: &StreamContext,
        pool: &Pool,
        spec: RequestSpec,
        mut cancel: oneshot::Receiver<()>,
    ) -> (Box<Self>, bool) {
        let started = {
            let answering = self.answer_own(ctx, pool, spec);
            tokio::select! {
                biased;
                started = answering => started,
                _ = &mut cancel => return (self, false),
            }
        };
        let Some(Started {
            mut conn,
            mut body,
            rest,
            head_arrival_ns,
            next_tick,
        }) = started
        else {
            return (self, true);
        };
        // The bytes after the head came in the read that completed it: they are its first body
        // bytes, at its time (read index 0, even when there are none).
        if let Step::Over { reuse } = self.take_read(ctx, &mut body, Some(&rest), head_arrival_ns) {
            if reuse {
                pool.put_back(conn);
            }
            return (self, true);
        }
        drop(rest);
        match &ctx.reader {
            Some(reader) => {
                let started = (conn, body, next_tick);
                reader::stream_on_reader(self, ctx, pool, reader, started, cancel).await
            }
            None => {
                let reuse = {
                    let streaming = self.stream_in_task(ctx, &mut conn, &mut body, next_tick);
                    tokio::select! {
                        biased;
                        reuse = streaming => reuse,
                        _ = &mut cancel => return (self, false),
                    }
                };
                if reuse {
                    pool.put_back(conn);
                }
                (self, true)
            }
        }
    }

    /// Sends the request and reads the response head; the started body, or None when the
    /// request ended before one (recorded in the state).
    async fn answer_own(
        &mut self,
        ctx: &StreamContext,
        pool: &Pool,
        spec: RequestSpec,
    ) -> Option<Started> {
        let start = Instant::now();
        let total_deadline = ctx.timeout.map_or(start + NEVER, |t| start + t);
        let ttft_deadline = ctx.ttft_timeout.map(|t| start + t);
        let sleep = tokio::time::sleep_until(
            ttft_deadline.map_or(total_deadline, |d| d.min(total_deadline)),
        );
        tokio::pin!(sleep);
        let tick = tokio::time::sleep_until(ctx.next_checkpoint(start));
        tokio::pin!(tick);
        let request = request_bytes(ctx, pool, &spec);
        // The body is in `request` now; a stream holds neither for the rest of its response.
        drop(spec);
        self.record.meta.send_ns = ctx.now_ns();
        let sent = Instant::now();
        // Boxed, here and for the retry: an exchange future (connect and TLS handshake
        // included) is 1.7 KiB, and held inline, it and its moved copy in `await_ticking` would
        // each take room in every stream's task for the whole response.
        let first = Box::pin(exchange(ctx, pool, &request, pool.take_idle(&ctx.closes)));
        let answered = match self.await_ticking(ctx, first, &mut sleep, &mut tick).await {
            None => {
                self.timed_out(ctx, ttft_deadline, total_deadline);
                return None;
            }
            Some(Err(Broken::BeforeAnswer { reused: true, .. }))
                if sent.elapsed() <= STALE_FAILURE_WINDOW =>
            {
                // The server had closed the kept-alive connection and never saw the request:
                // send it once more on a new one. Times count from this send. A server that
                // does this closes after its responses: no connection is reused from now on.
                ctx.closes.mark();
                self.record.meta.retries = 1;
                self.record.meta.send_ns = ctx.now_ns();
                let again = Box::pin(exchange(ctx, pool, &request, None));
                match self.await_ticking(ctx, again, &mut sleep, &mut tick).await {
                    None => {
                        self.timed_out(ctx, ttft_deadline, total_deadline);
                        return None;
                    }
                    Some(answered) => answered,
                }
            }
            Some(answered) => answered,
        };
        // Answered, or failed for good: the request is not sent again.
        drop(request);
        let Answered {
            mut conn,
            head,
            rest,
            arrival_ns: head_arrival_ns,
        } = match answered {
            Ok(answered) => answered,
            Err(Broken::BeforeAnswer { error, .. }) => {
                self.fail(Outcome::StreamError, error);
                self.record.meta.end_ns = ctx.now_ns();
                return None;
            }
            Err(Broken::Failed(outcome, error)) => {
                self.fail(outcome, error);
                self.record.meta.end_ns = ctx.now_ns();
                return None;
            }
        };
        self.record.meta.headers_ns = Some(head_arrival_ns);
        self.record.meta.http_status = head.status;
        for name in KEPT_HEADERS {
            if let Some(value) = head.get(name) {
                self.record
                    .meta
                    .response_headers
                    .push((name.to_string(), value.to_string()));
            }
        }
        let mut framing = match head.framing(false) {
            Ok(framing) => framing,
            Err(error) => {
                self.fail(Outcome::StreamError, error);
                self.record.meta.end_ns = head_arrival_ns;
                return None;
            }
        };
        let answer = Answer::from_parts(
            head.get("content-type"),
            head.get("content-encoding"),
            head.get("location"),
        );
        let status = head.status;
        if let Some((outcome, message)) = answer.refusal(status) {
            let text = if outcome == Outcome::NotEventStream {
                let body = error_body(&mut conn, &mut framing, &rest);
                tokio::select! {
                    biased;
                    text = body => format!(": {text}"),
                    () = &mut sleep => String::from(" (body not received before the timeout)"),
                }
            } else {
                String::new()
            };
            self.fail(outcome, format!("{message}{text}"));
            self.record.meta.end_ns = ctx.now_ns();
            return None;
        }
        if status >= 400 {
            let text = tokio::select! {
                biased;
                text = error_body(&mut conn, &mut framing, &rest) => text,
                () = &mut sleep => String::from("(error body not received before the timeout)"),
            };
            self.fail(Outcome::HttpError, format!("HTTP {status}: {text}"));
            self.record.meta.end_ns = ctx.now_ns();
            return None;
        }
        // What the rest of the response needs from the head, so the head does not stay
        // allocated in every open stream until the end.
        let keeps_alive = head.keeps_alive();
        drop(head);
        Some(Started {
            conn,
            body: BodyRead {
                framing,
                keeps_alive,
                ttft_deadline,
                total_deadline,
                deadline: sleep.deadline(),
                draining: false,
            },
            rest,
            head_arrival_ns,
            next_tick: tick.deadline(),
        })
    }

    /// Reads the body in this task (`--client own-task`); whether the connection may carry
    /// another request.
    async fn stream_in_task(
        &mut self,
        ctx: &StreamContext,
        conn: &mut Conn,
        body: &mut BodyRead,
        next_tick: Instant,
    ) -> bool {
        let sleep = tokio::time::sleep_until(body.deadline);
        tokio::pin!(sleep);
        let tick = tokio::time::sleep_until(next_tick);
        tokio::pin!(tick);
        loop {
            let wake = tokio::select! {
                biased;
                read = conn.read_with(|bytes, clock| {
                    // The kernel's receive time of this read (or, where the kernel gives
                    // none, the clock read right after it), before anything looks at the
                    // bytes; no bytes: the server closed.
                    let at = clock.arrival_ns(ctx.anchor_mono_ns, ctx.now_ns());
                    self.take_read(ctx, body, (!bytes.is_empty()).then_some(bytes), at)
                }) => Wake::Read(read),
                () = &mut sleep => Wake::Deadline,
                () = &mut tick, if ctx.checkpoints.is_some() => Wake::Tick,
            };
            match wake {
                Wake::Deadline => {
                    self.expire(ctx, body);
                    return false;
                }
                Wake::Tick => self.on_tick(ctx, &mut tick),
                Wake::Read(Err(err)) => {
                    self.read_failed(ctx, conn, &err);
                    return false;
                }
                Wake::Read(Ok(Step::Over { reuse })) => return reuse,
                Wake::Read(Ok(Step::More)) => {
                    if sleep.deadline() != body.deadline {
                        sleep.as_mut().reset(body.deadline);
                    }
                }
            }
        }
    }

    /// One read's bytes (None: the server closed) at `arrival_ns`: framed, parsed and
    /// recorded, the deadlines moved.
    pub(super) fn take_read(
        &mut self,
        ctx: &StreamContext,
        body: &mut BodyRead,
        bytes: Option<&[u8]>,
        arrival_ns: u64,
    ) -> Step {
        let Some(bytes) = bytes else {
            if matches!(body.framing, Framing::Close) {
                self.end_of_body(arrival_ns);
            } else if !self.done {
                self.fail(
                    Outcome::StreamError,
                    "connection closed before the end of the body".into(),
                );
                self.record.meta.end_ns = arrival_ns;
            }
            return Step::Over { reuse: false };
        };
        let had_output = self.first_output;
        let (decoded, oversize) = match self.feed(ctx, &mut body.framing, bytes, arrival_ns) {
            Ok(fed) => fed,
            Err(error) => {
                if !self.done {
                    self.fail(Outcome::StreamError, error);
                    self.record.meta.end_ns = arrival_ns;
                }
                return Step::Over { reuse: false };
            }
        };
        if let Some(limit) = oversize {
            self.fail(
                Outcome::Oversize,
                format!("SSE line longer than {limit} bytes; stream abandoned"),
            );
            self.record.meta.end_ns = arrival_ns;
            return Step::Over { reuse: false };
        }
        if decoded.done {
            self.end_of_body(arrival_ns);
            return Step::Over {
                reuse: body.keeps_alive && decoded.consumed == bytes.len(),
            };
        }
        body.deadline = self.deadline_after_read(
            had_output,
            body.ttft_deadline.is_some(),
            body.total_deadline,
            &mut body.draining,
            body.deadline,
        );
        Step::More
    }

    /// The deadline passed while the body streamed.
    fn expire(&mut self, ctx: &StreamContext, body: &BodyRead) {
        if !self.done {
            self.timed_out(ctx, body.ttft_deadline, body.total_deadline);
        }
    }

    /// A read of the body failed.
    fn read_failed(&mut self, ctx: &StreamContext, conn: &Conn, err: &io::Error) {
        if !self.done {
            self.fail(Outcome::StreamError, format!("reading the body: {err}"));
            self.record.meta.end_ns = conn.clock.arrival_ns(ctx.anchor_mono_ns, ctx.now_ns());
        }
    }

    /// Decodes one read's bytes and feeds the body data to the SSE parser under the read's
    /// time and index; the oversize limit when a line outgrew it.
    fn feed(
        &mut self,
        ctx: &StreamContext,
        framing: &mut Framing,
        bytes: &[u8],
        arrival_ns: u64,
    ) -> Result<(response::Decoded, Option<usize>), String> {
        let read_index = self.reads;
        self.reads += 1;
        let mut oversize = None;
        let decoded = framing.decode(bytes, |data| {
            if oversize.is_none() {
                if let Err(SseError::Oversize { limit }) =
                    self.on_data(ctx, arrival_ns, read_index, data)
                {
                    oversize = Some(limit);
                }
            }
        })?;
        Ok((decoded, oversize))
    }
}

/// The request bytes, with this request's id header.
fn request_bytes(ctx: &StreamContext, pool: &Pool, spec: &RequestSpec) -> Vec<u8> {
    match &ctx.request_id {
        Some((name, run_prefix)) => {
            let mut uuid = [0u8; 36];
            write_uuid(*run_prefix, spec.id, &mut uuid);
            pool.request(&[(name.as_str(), &uuid)], &spec.body)
        }
        None => pool.request(&[], &spec.body),
    }
}

/// Sends `request` on `conn` (or a new connection) and reads the response head.
async fn exchange(
    ctx: &StreamContext,
    pool: &Pool,
    request: &[u8],
    conn: Option<Conn>,
) -> Result<Answered, Broken> {
    let mut conn = match conn {
        Some(conn) => conn,
        None => pool
            .connect(&ctx.closes)
            .await
            .map_err(|e| Broken::Failed(Outcome::ConnectError, format!("connecting: {e}")))?,
    };
    let reused = conn.reused;
    let before = |what: &str, e: io::Error| Broken::BeforeAnswer {
        error: format!("{what}: {e}"),
        reused,
    };
    conn.send(request)
        .await
        .map_err(|e| before("sending the request", e))?;
    let mut head_bytes: Vec<u8> = Vec::new();
    loop {
        let (n, arrival_ns) = conn
            .read_with(|bytes, clock| {
                let at = clock.arrival_ns(ctx.anchor_mono_ns, ctx.now_ns());
                head_bytes.extend_from_slice(bytes);
                (bytes.len(), at)
            })
            .await
            .map_err(|e| before("reading the response", e))?;
        if n == 0 {
            return Err(if head_bytes.is_empty() {
                before(
                    "reading the response",
                    io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"),
                )
            } else {
                Broken::Failed(
                    Outcome::StreamError,
                    "connection closed in the middle of the response head".into(),
                )
            });
        }
        // Interim answers (100 Continue, 103 Early Hints) precede the one that counts.
        while let Some(end) = response::head_end(&head_bytes) {
            let head = response::parse_head(&head_bytes[..end])
                .map_err(|e| Broken::Failed(Outcome::StreamError, e))?;
            let rest = head_bytes.split_off(end);
            if (100..200).contains(&head.status) && head.status != 101 {
                head_bytes = rest;
                continue;
            }
            return Ok(Answered {
                conn,
                head,
                rest,
                arrival_ns,
            });
        }
        if head_bytes.len() > response::MAX_HEAD {
            return Err(Broken::Failed(
                Outcome::StreamError,
                format!("response head longer than {} bytes", response::MAX_HEAD),
            ));
        }
    }
}

/// At most [`ERROR_TEXT_LIMIT`] bytes of an error body (the bytes after the head first).
async fn error_body(conn: &mut Conn, framing: &mut Framing, rest: &[u8]) -> String {
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
