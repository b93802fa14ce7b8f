//! One measured request over the recorder's own HTTP/1.1 client (`--client own`, see
//! [`crate::h1`]): this task writes the request (in a closed loop, the stream reader writes
//! the requests that follow it on the same connection, `stream_reader.rs`). On a plain connection, kept alive or new, the
//! stream reader ([`crate::reader`]) then reads the whole response, head and body, and gives
//! back to this task only what it does not read (an error's body, a refusal, a stale
//! connection's retry). Otherwise (TLS, a request the socket did not take whole at once, a
//! retry) this task reads the head and the stream reader the body; with `--client own-task`
//! this task reads both. Either way the body is framed and fed to the SSE parser read by read,
//! each read stamped before its bytes are looked at. The outcomes, the timeouts, the
//! checkpoints and the one retry of a request whose kept-alive connection the server had
//! closed are those of the hyper path (`stream.rs`).

use super::answer::Answer;
use super::{RequestSpec, StreamContext, StreamState, Successor, NEVER, STALE_FAILURE_WINDOW};
use crate::h1::response::{self, Framing};
use crate::h1::{Conn, Pool};
use head::{error_body, exchange, request_bytes, Answered, Broken};
use std::io;
use std::sync::Weak;
use tokentrace_format::Outcome;
use tokentrace_sse::parser::SseError;
use tokio::sync::oneshot;
use tokio::time::Instant;

#[path = "stream_head.rs"]
mod head;
#[path = "stream_reader.rs"]
mod reader;

/// What woke a stream waiting for its next read.
enum Wake {
    /// The read, and what was made of its bytes.
    Read(io::Result<Step>),
    /// The request's deadline.
    Deadline,
    /// The checkpoint period.
    Tick,
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

/// How a request's task starts its exchange.
enum First {
    /// It sends the request (from byte `written`: a first write may have sent part of it) on
    /// `conn`, or on a new connection, and reads the head itself.
    Exchange { conn: Option<Conn>, written: usize },
    /// The stream reader read the head (or met the failure) and gave the response back, with
    /// the request's next checkpoint time.
    Answered(Result<Answered, Broken>, Instant),
}

impl BodyRead {
    /// A response not yet answered, for a request sent at `start`: the deadlines in force
    /// until its head arrives (its framing is set from the head).
    fn awaiting(ctx: &StreamContext, start: Instant) -> BodyRead {
        let total_deadline = ctx.timeout.map_or(start + NEVER, |t| start + t);
        let ttft_deadline = ctx.ttft_timeout.map(|t| start + t);
        BodyRead {
            framing: Framing::Close,
            keeps_alive: false,
            ttft_deadline,
            total_deadline,
            deadline: ttft_deadline.map_or(total_deadline, |d| d.min(total_deadline)),
            draining: false,
        }
    }
}

impl StreamState {
    /// [`StreamState::drive`] over the own client; false when `cancel` fired first (the caller
    /// records the cancellation). With a stream reader (`ctx.reader`) and a plain connection,
    /// this task writes the request and the reader reads the whole response; otherwise this
    /// task reads the head, and the body is read by the stream reader when the run has one,
    /// else by this task. With a `successor`, the stream reader may follow the request with
    /// more ([`Successor`]): what comes back is then the last one's state.
    pub(super) async fn drive_own(
        mut self: Box<Self>,
        ctx: &StreamContext,
        pool: &Pool,
        spec: RequestSpec,
        mut cancel: oneshot::Receiver<()>,
        successor: Option<Weak<dyn Successor>>,
    ) -> (Box<Self>, bool) {
        let mut request = request_bytes(ctx, pool, &spec);
        // The body is in `request` now; a stream holds neither for the rest of its response.
        drop(spec);
        self.record.meta.send_ns = ctx.now_ns();
        // The deadlines count from here, no earlier than `send_ns` (as in `StreamState::drive`).
        let mut start = Instant::now();
        let idle = pool.take_idle(&ctx.closes);
        let first = match &ctx.reader {
            Some(reader) if pool.is_plain() => {
                let on_reader = self.start_on_reader(
                    ctx,
                    pool,
                    reader,
                    (&request, start),
                    idle,
                    &mut cancel,
                    successor,
                );
                match on_reader.await {
                    Ok((state, first, chained)) => {
                        self = state;
                        // A request the reader sent after this one came back unfinished: the
                        // task goes on with that one.
                        if let Some(chained) = chained {
                            (request, start) = (chained.request, chained.start);
                        }
                        first
                    }
                    Err(ended) => return ended,
                }
            }
            _ => First::Exchange {
                conn: idle,
                written: 0,
            },
        };
        let started = {
            let answering = self.answer_own(ctx, pool, request, start, first);
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
                if let Err(err) = conn.detach() {
                    self.read_failed(ctx, &conn, &err);
                    return (self, true);
                }
                let streaming = reader::Streaming::body_started(self, conn, body, next_tick);
                match reader::run_on_reader(streaming, ctx, pool, reader, &mut cancel).await {
                    reader::OnReader::Done(state, ran) => (state, ran),
                    // Only a response whose head the reader reads comes back unfinished; this
                    // one's body ended, one way or another, on the reader.
                    reader::OnReader::Back(state, ..) => (state, true),
                }
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

    /// The request on a plain connection, a kept-alive one (`idle`) or a new one, written by
    /// this task, its whole response then read by the stream reader: no wait in tokio's
    /// reactor for writability or for the head. `request` was first sent at `start`. Ok: what
    /// this task goes on with (the reader's answer, or a request the socket did not take whole
    /// at once), with the request itself when the reader wrote it; Err: how the request
    /// ended, as [`StreamState::drive_own`] returns it.
    #[allow(clippy::too_many_arguments)]
    async fn start_on_reader(
        mut self: Box<Self>,
        ctx: &StreamContext,
        pool: &Pool,
        reader: &reader::StreamReader,
        (request, start): (&[u8], Instant),
        idle: Option<Conn>,
        cancel: &mut oneshot::Receiver<()>,
        successor: Option<Weak<dyn Successor>>,
    ) -> Result<(Box<Self>, First, Option<Box<reader::Chained>>), (Box<Self>, bool)> {
        let body = BodyRead::awaiting(ctx, start);
        let mut next_tick = ctx.next_checkpoint(start);
        let mut conn = match idle {
            Some(conn) => conn,
            None => {
                let sleep = tokio::time::sleep_until(body.deadline);
                tokio::pin!(sleep);
                let tick = tokio::time::sleep_until(next_tick);
                tokio::pin!(tick);
                let connecting = Box::pin(pool.connect(&ctx.closes, true));
                let connected = tokio::select! {
                    biased;
                    connected = self.await_ticking(ctx, connecting, &mut sleep, &mut tick) => connected,
                    _ = &mut *cancel => return Err((self, false)),
                };
                next_tick = tick.deadline();
                match connected {
                    None => {
                        self.timed_out(ctx, body.ttft_deadline, body.total_deadline);
                        return Err((self, true));
                    }
                    Some(Err(e)) => {
                        let failed =
                            Broken::Failed(Outcome::ConnectError, format!("connecting: {e}"));
                        return Ok((self, First::Answered(Err(failed), next_tick), None));
                    }
                    Some(Ok(conn)) => conn,
                }
            }
        };
        // Out of tokio's reactor (a kept-alive connection is still in it when this task read
        // its last response), the request written now: a request is a few KiB, which an idle
        // socket's send buffer takes whole.
        let _ = conn.detach();
        match conn.write_now(request) {
            Ok(n) if n == request.len() => {
                let awaiting =
                    reader::Streaming::awaiting_head(self, conn, body, next_tick, successor);
                match reader::run_on_reader(awaiting, ctx, pool, reader, cancel).await {
                    reader::OnReader::Done(state, ran) => Err((state, ran)),
                    reader::OnReader::Back(state, first, chained) => Ok((state, first, chained)),
                }
            }
            Ok(written) => {
                let rest = First::Exchange {
                    conn: Some(conn),
                    written,
                };
                Ok((self, rest, None))
            }
            Err(e) => {
                let broken = Broken::BeforeAnswer {
                    error: format!("sending the request: {e}"),
                    reused: conn.reused,
                };
                Ok((self, First::Answered(Err(broken), next_tick), None))
            }
        }
    }

    /// Sends the request (sent first at `start`) and reads the response head, or takes what
    /// the stream reader made of them (`first`); the started body, or None when the request
    /// ended before one (recorded in the state).
    async fn answer_own(
        &mut self,
        ctx: &StreamContext,
        pool: &Pool,
        request: Vec<u8>,
        start: Instant,
        first: First,
    ) -> Option<Started> {
        let mut body = BodyRead::awaiting(ctx, start);
        let (ttft_deadline, total_deadline) = (body.ttft_deadline, body.total_deadline);
        let sleep = tokio::time::sleep_until(body.deadline);
        tokio::pin!(sleep);
        let first_tick = match &first {
            First::Answered(_, next_tick) => *next_tick,
            First::Exchange { .. } => ctx.next_checkpoint(start),
        };
        let tick = tokio::time::sleep_until(first_tick);
        tokio::pin!(tick);
        let answered = match first {
            First::Answered(answered, _) => Some(answered),
            First::Exchange { conn, written } => {
                // Boxed, here and for the retry: an exchange future (connect and TLS handshake
                // included) is 1.7 KiB, and held inline, it and its moved copy in
                // `await_ticking` would each take room in every stream's task for the whole
                // response.
                let first = Box::pin(exchange(ctx, pool, &request[written..], conn));
                self.await_ticking(ctx, first, &mut sleep, &mut tick).await
            }
        };
        let answered = match answered {
            None => {
                self.timed_out(ctx, ttft_deadline, total_deadline);
                return None;
            }
            Some(Err(Broken::BeforeAnswer { reused: true, .. }))
                if start.elapsed() <= STALE_FAILURE_WINDOW =>
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
        self.record_head(&head, head_arrival_ns);
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
        body.framing = framing;
        // What the rest of the response needs from the head, so the head does not stay
        // allocated in every open stream until the end.
        body.keeps_alive = head.keeps_alive();
        drop(head);
        Some(Started {
            conn,
            body,
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
