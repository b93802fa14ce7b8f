//! A response in the stream reader's hands ([`crate::reader`]): the request's state, its
//! connection and its read loop state, moved from the request's task to the reader thread and
//! back. On a plain connection the reader reads the head too, read by read as the
//! task's exchange does ([`super::head::take_head`]); a head it does not read on from goes back
//! to the task. Each body read is stamped and fed exactly as in the task's own loop
//! ([`StreamState::take_read`]); only who waits for the socket differs.
//!
//! In a closed loop, a response that ends whole on a plain connection is followed on the
//! reader: it writes the loop's next request on the same connection and reads its response in
//! turn ([`Successor`]), and the task hears back only when the chain ends.

use super::head::{request_bytes, stream_framing, take_head, Answered, Broken};
use super::{BodyRead, First, Step, Successor};
use crate::h1::response::Head;
use crate::h1::{Conn, Pool};
use crate::reader::{Reader, Tenant};
use crate::stream::{StreamContext, StreamState};
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use tokentrace_format::{Outcome, RequestMeta};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long a cancelled request waits for the stream reader to hand its response back (it
/// does so at its next wake-up; only a reader that died takes longer).
const CANCEL_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The stream reader of the own client's responses.
pub(super) type StreamReader = Reader<StreamContext>;

/// What came back from the stream reader.
pub(super) enum OnReader {
    /// The request ran its course (true), as [`StreamState::drive_own`] returns it.
    Done(Box<StreamState>, bool),
    /// The response goes on in its task: a head the reader does not read on from (an error's
    /// body or a refusal, which the task reads and records), why the exchange broke before
    /// a head (a stale connection's retry is the task's), or a request of the chain the socket
    /// did not take whole. With the request itself when the reader wrote it (a chain's).
    Back(Box<StreamState>, First, Option<Box<Chained>>),
}

/// A request the reader wrote after the one its task handed over, for the task to go on with
/// should the response come back unfinished.
pub(super) struct Chained {
    /// Its bytes (emptied once its head is in: it is not sent again after that).
    pub request: Vec<u8>,
    /// When it was sent: its deadlines count from then.
    pub start: Instant,
}

/// Hands a response (its head still to come, or its body started) to the stream reader and
/// waits for it to come back, or for `cancel`, which the reader then records.
pub(super) async fn run_on_reader(
    streaming: Box<Streaming>,
    ctx: &StreamContext,
    pool: &Pool,
    reader: &Reader<StreamContext>,
    cancel: &mut oneshot::Receiver<()>,
) -> OnReader {
    let key = streaming.key;
    // What is recorded should the reader thread die with the response (a bug): the request
    // in flight then, which a chain keeps up to date.
    let meta = streaming.state.record.meta.clone();
    let mut streaming = streaming;
    let in_flight = streaming
        .successor
        .is_some()
        .then(|| Arc::new(Mutex::new(meta.clone())));
    streaming.in_flight = in_flight.clone();
    let (reply, mut back) = oneshot::channel();
    streaming.reply = Some(reply);
    if let Err(mut tenant) = reader.adopt(streaming) {
        // The reader thread is gone (it stops only when the run ends).
        let gone = io::Error::other("the stream reader has stopped");
        tenant.unwatchable(ctx, &gone);
        tenant.hand_back();
    }
    let (returned, cancelled) = tokio::select! {
        biased;
        returned = &mut back => (returned.ok(), false),
        _ = cancel => {
            reader.cancel(key);
            // Comes back from the reader at its next wake-up; the bound is only for a reader
            // that died.
            let returned = tokio::time::timeout(CANCEL_LIMIT, &mut back).await;
            (returned.ok().and_then(Result::ok), true)
        }
    };
    match returned {
        Some(streaming) => match streaming.finish(pool) {
            // Handed back unfinished just as the cancel came: the request ends here, as
            // cancelled (its task must not wait on the spent cancel again).
            OnReader::Back(state, ..) if cancelled => OnReader::Done(state, false),
            finished => finished,
        },
        // Dropped unanswered: the reader thread died holding the response.
        None => {
            let meta = match in_flight {
                Some(in_flight) => in_flight
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone(),
                None => meta,
            };
            let mut lost = StreamState::lost(ctx, meta);
            lost.fail(
                Outcome::StreamError,
                "the stream reader stopped while reading the response".into(),
            );
            lost.record.meta.end_ns = ctx.now_ns();
            OnReader::Done(lost, true)
        }
    }
}

/// Why a response goes back to its task before its end.
enum Unfinished {
    /// Its head, the bytes after it and when they arrived.
    Head(Head, Vec<u8>, u64),
    /// The exchange broke before a head.
    Broken(Broken),
    /// A request of the chain of which the socket took only this many bytes.
    Unsent(usize),
}

/// A response on its way through the reader.
pub(super) struct Streaming {
    /// The id of the request its task handed over: what the task's cancel names, through
    /// the whole chain.
    key: u64,
    state: Box<StreamState>,
    conn: Conn,
    body: BodyRead,
    /// When its next checkpoint is due (from its start or its last checkpoint, as in its task).
    next_tick: Instant,
    /// The response head's bytes so far, while the head is still to come (None: the body
    /// streams).
    head: Option<Vec<u8>>,
    /// Set when the response goes back to its task unfinished.
    unfinished: Option<Unfinished>,
    /// Set when the body ended whole and the connection may carry another request.
    reuse: bool,
    /// Where the response goes back to its task.
    reply: Option<oneshot::Sender<Box<Streaming>>>,
    /// The closed loop this request is one of, when the reader may send its successor (weak:
    /// the loop holds the run's context, and with it the reader's own handle).
    successor: Option<Weak<dyn Successor>>,
    /// The request in flight when the reader wrote it.
    chained: Option<Box<Chained>>,
    /// The head of the chain's request in flight, for the task to record should the reader
    /// thread die (None without a successor).
    in_flight: Option<Arc<Mutex<RequestMeta>>>,
}

impl Streaming {
    /// A request written on `conn` (out of tokio's reactor), its head still to come.
    /// With a `successor`, the reader may follow the response with more requests.
    pub(super) fn awaiting_head(
        state: Box<StreamState>,
        conn: Conn,
        body: BodyRead,
        next_tick: Instant,
        successor: Option<Weak<dyn Successor>>,
    ) -> Box<Streaming> {
        let mut streaming = Streaming::body_started(state, conn, body, next_tick);
        streaming.head = Some(Vec::new());
        streaming.successor = successor;
        streaming
    }

    /// A response whose body has started, on `conn` (out of tokio's reactor).
    pub(super) fn body_started(
        state: Box<StreamState>,
        conn: Conn,
        body: BodyRead,
        next_tick: Instant,
    ) -> Box<Streaming> {
        Box::new(Streaming {
            key: state.record.meta.id,
            state,
            conn,
            body,
            next_tick,
            head: None,
            unfinished: None,
            reuse: false,
            reply: None,
            successor: None,
            chained: None,
            in_flight: None,
        })
    }

    /// Back in the request's task. A connection that may carry another request goes to the
    /// pool as it is, out of tokio's reactor: the next request's path registers it where its
    /// reads are waited for.
    fn finish(self: Box<Self>, pool: &Pool) -> OnReader {
        let Streaming {
            state,
            conn,
            reuse,
            unfinished,
            next_tick,
            chained,
            ..
        } = *self;
        let first = match unfinished {
            None => {
                if reuse {
                    pool.put_back(conn);
                }
                return OnReader::Done(state, true);
            }
            Some(Unfinished::Broken(broken)) => First::Answered(Err(broken), next_tick),
            Some(Unfinished::Head(head, rest, arrival_ns)) => {
                let answered = Answered {
                    conn,
                    head,
                    rest,
                    arrival_ns,
                };
                First::Answered(Ok(answered), next_tick)
            }
            Some(Unfinished::Unsent(written)) => First::Exchange {
                conn: Some(conn),
                written,
            },
        };
        OnReader::Back(state, first, chained)
    }

    /// What is there to read now (`held_only`: only what TLS holds decrypted); true when the
    /// response is over here.
    fn read(&mut self, ctx: &StreamContext, held_only: bool) -> bool {
        if self.head.is_some() {
            return !held_only && self.read_head(ctx);
        }
        let Streaming {
            state, conn, body, ..
        } = self;
        let mut over = None;
        let read = conn.read_ready(held_only, |bytes, clock| {
            // The kernel's receive time of this read (or, where the kernel gives none, the
            // clock read right after it), before anything looks at the bytes.
            let at = clock.arrival_ns(ctx.anchor_mono_ns, ctx.now_ns());
            match state.take_read(ctx, body, (!bytes.is_empty()).then_some(bytes), at) {
                Step::More => true,
                Step::Over { reuse } => {
                    over = Some(reuse);
                    false
                }
            }
        });
        if let (Err(err), None) = (&read, over) {
            state.read_failed(ctx, conn, err);
            over = Some(false);
        }
        match over {
            Some(reuse) => {
                self.reuse = reuse;
                true
            }
            None => false,
        }
    }

    /// One read of the response head (a plain connection's: nothing is held in user space);
    /// true when the response is over here or goes back to its task. A head that answers with
    /// a stream is recorded and its first body bytes taken, as its task would.
    fn read_head(&mut self, ctx: &StreamContext) -> bool {
        let Streaming {
            state,
            conn,
            body,
            head,
            unfinished,
            reuse,
            ..
        } = self;
        let Some(head_bytes) = head.as_mut() else {
            return false;
        };
        let reused = conn.reused;
        let mut taken = Ok(None);
        let mut arrival_ns = 0;
        let read = conn.read_ready(false, |bytes, clock| {
            arrival_ns = clock.arrival_ns(ctx.anchor_mono_ns, ctx.now_ns());
            taken = take_head(head_bytes, bytes, reused);
            false
        });
        if let Err(e) = read {
            taken = Err(Broken::BeforeAnswer {
                error: format!("reading the response: {e}"),
                reused,
            });
        }
        let (answer, rest) = match taken {
            Ok(None) => return false,
            Ok(Some(answer)) => answer,
            Err(broken) => {
                *unfinished = Some(Unfinished::Broken(broken));
                return true;
            }
        };
        *head = None;
        if let Some(chained) = self.chained.as_mut() {
            // Answered: the request is not sent again.
            chained.request = Vec::new();
        }
        let Some(framing) = stream_framing(&answer) else {
            *unfinished = Some(Unfinished::Head(answer, rest, arrival_ns));
            return true;
        };
        state.record_head(&answer, arrival_ns);
        body.framing = framing;
        body.keeps_alive = answer.keeps_alive();
        drop(answer);
        // The bytes after the head came in the read that completed it: its first body bytes,
        // at its time (read index 0, even when there are none).
        match state.take_read(ctx, body, Some(&rest), arrival_ns) {
            Step::More => false,
            Step::Over { reuse: whole } => {
                *reuse = whole;
                true
            }
        }
    }
}

impl Streaming {
    /// The response ended (`over`): whether it goes back to its task (true), or a request
    /// that follows it is now in flight here.
    fn over(&mut self, ctx: &StreamContext, over: bool) -> bool {
        over && !self.go_on(ctx)
    }

    /// A response that ended whole on a connection that may carry another request: when its
    /// loop has a next request, writes it there now, hands the ended record on and reads the
    /// new response here (true; false: back to the task, with the next request when the
    /// socket did not take it whole). What the task does between two requests, done here:
    /// the new request's times count from its build, its connection is a reused one.
    fn go_on(&mut self, ctx: &StreamContext) -> bool {
        if !self.reuse || self.unfinished.is_some() || ctx.closes.closed_after_response() {
            return false;
        }
        let Some(successor) = self.successor.as_ref().and_then(Weak::upgrade) else {
            return false;
        };
        let Some(pool) = ctx.own.as_deref() else {
            return false;
        };
        let Some(spec) = successor.next() else {
            return false;
        };
        let request = request_bytes(ctx, pool, &spec);
        let ended = std::mem::replace(&mut self.state, Box::new(StreamState::new(ctx, &spec)));
        drop(spec);
        self.state.record.meta.send_ns = ctx.now_ns();
        // The deadlines count from here, no earlier than `send_ns` (as in `StreamState::drive`).
        let start = Instant::now();
        if let Some(in_flight) = &self.in_flight {
            *in_flight.lock().unwrap_or_else(PoisonError::into_inner) =
                self.state.record.meta.clone();
        }
        self.conn.reused = true;
        let written = self.conn.write_now(&request);
        // The request goes out first: handing the ended record on does not delay it.
        successor.finished(ended.sealed(ctx));
        self.body = BodyRead::awaiting(ctx, start);
        self.next_tick = ctx.next_checkpoint(start);
        self.reuse = false;
        let whole = request.len();
        self.chained = Some(Box::new(Chained { request, start }));
        match written {
            Ok(n) if n == whole => {
                self.head = Some(Vec::new());
                true
            }
            Ok(written) => {
                self.unfinished = Some(Unfinished::Unsent(written));
                false
            }
            Err(e) => {
                self.unfinished = Some(Unfinished::Broken(Broken::BeforeAnswer {
                    error: format!("sending the request: {e}"),
                    reused: true,
                }));
                false
            }
        }
    }
}

impl Tenant<StreamContext> for Streaming {
    fn fd(&self) -> RawFd {
        self.conn.raw_fd()
    }

    fn key(&self) -> u64 {
        self.key
    }

    fn adopted(&mut self, ctx: &StreamContext) -> bool {
        let over = self.read(ctx, true);
        self.over(ctx, over)
    }

    fn readable(&mut self, ctx: &StreamContext) -> bool {
        let over = self.read(ctx, false);
        self.over(ctx, over)
    }

    fn deadline(&self) -> Instant {
        self.body.deadline
    }

    fn expired(&mut self, ctx: &StreamContext) {
        self.state.expire(ctx, &self.body);
    }

    fn cancelled(&mut self, ctx: &StreamContext) {
        // As `execute` records a request cancelled in its task.
        self.state
            .fail(Outcome::Cancelled, "run interrupted".to_string());
        self.state.record.meta.end_ns = ctx.now_ns();
    }

    fn next_tick(&self) -> Instant {
        self.next_tick
    }

    fn tick(&mut self, ctx: &StreamContext) {
        self.state.checkpoint(ctx);
        self.next_tick = ctx.next_checkpoint(Instant::now());
    }

    fn unwatchable(&mut self, ctx: &StreamContext, error: &io::Error) {
        if self.head.is_some() {
            let error = format!("reading the response: {error}");
            self.state.fail(Outcome::StreamError, error);
            self.state.record.meta.end_ns = ctx.now_ns();
        } else {
            self.state.read_failed(ctx, &self.conn, error);
        }
    }

    fn hand_back(mut self: Box<Self>) {
        if let Some(reply) = self.reply.take() {
            // A task that is gone (its run aborted) leaves nothing to hand back to.
            let _ = reply.send(self);
        }
    }
}
