//! A response body in the stream reader's hands ([`crate::reader`]): the request's state, its
//! connection and its read loop state, moved from the request's task to the reader thread and
//! back. Each read is stamped and fed exactly as in the task's own loop
//! ([`StreamState::take_read`]); only who waits for the socket differs.

use super::{BodyRead, Step};
use crate::h1::{Conn, Pool};
use crate::reader::{Reader, Tenant};
use crate::stream::{StreamContext, StreamState};
use std::io;
use std::os::fd::RawFd;
use tokentrace_format::Outcome;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How long a cancelled request waits for the stream reader to hand its response back (it
/// does so at its next wake-up; only a reader that died takes longer).
const CANCEL_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Hands a started body (its connection, read state and next checkpoint time) to the stream
/// reader and waits for it to come back (or for `cancel`, which the reader then records); the
/// state, and true (the request ran its course).
pub(super) async fn stream_on_reader(
    state: Box<StreamState>,
    ctx: &StreamContext,
    pool: &Pool,
    reader: &Reader<StreamContext>,
    (mut conn, body, next_tick): (Conn, BodyRead, Instant),
    mut cancel: oneshot::Receiver<()>,
) -> (Box<StreamState>, bool) {
    let mut state = state;
    let key = state.record.meta.id;
    // What is recorded should the reader thread die with the response (a bug).
    let meta = state.record.meta.clone();
    if let Err(err) = conn.detach() {
        state.read_failed(ctx, &conn, &err);
        return (state, true);
    }
    let (reply, mut back) = oneshot::channel();
    let streaming = Box::new(Streaming {
        state,
        conn,
        body,
        next_tick,
        reuse: false,
        reply: Some(reply),
    });
    if let Err(mut tenant) = reader.adopt(streaming) {
        // The reader thread is gone (it stops only when the run ends).
        let gone = io::Error::other("the stream reader has stopped");
        tenant.unwatchable(ctx, &gone);
        tenant.hand_back();
    }
    let returned = tokio::select! {
        biased;
        returned = &mut back => returned.ok(),
        _ = &mut cancel => {
            reader.cancel(key);
            // Comes back from the reader at its next wake-up; the bound is only for a reader
            // that died.
            let returned = tokio::time::timeout(CANCEL_LIMIT, &mut back).await;
            returned.ok().and_then(Result::ok)
        }
    };
    match returned {
        Some(streaming) => streaming.finish(pool),
        // Dropped unanswered: the reader thread died holding the response.
        None => {
            let mut lost = StreamState::lost(ctx, meta);
            lost.fail(
                Outcome::StreamError,
                "the stream reader stopped while reading the body".into(),
            );
            lost.record.meta.end_ns = ctx.now_ns();
            (lost, true)
        }
    }
}

/// A streaming response on its way through the reader.
struct Streaming {
    state: Box<StreamState>,
    conn: Conn,
    body: BodyRead,
    /// When its next checkpoint is due (from its start or its last checkpoint, as in its task).
    next_tick: Instant,
    /// Set when the body ended whole and the connection may carry another request.
    reuse: bool,
    /// Where the response goes back to its task.
    reply: Option<oneshot::Sender<Box<Streaming>>>,
}

impl Streaming {
    /// Back in the request's task: the connection returns to tokio's reactor and the pool when
    /// it may carry another request. The state, and true (the request ran its course:
    /// a cancellation was recorded by the reader).
    fn finish(self, pool: &Pool) -> (Box<StreamState>, bool) {
        let Streaming {
            state,
            mut conn,
            reuse,
            ..
        } = self;
        // A socket tokio will not take back is closed, not reused.
        if reuse && conn.attach().is_ok() {
            pool.put_back(conn);
        }
        (state, true)
    }

    /// What is there to read now (`held_only`: only what TLS holds decrypted); true when the
    /// response is over.
    fn read(&mut self, ctx: &StreamContext, held_only: bool) -> bool {
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
}

impl Tenant<StreamContext> for Streaming {
    fn fd(&self) -> RawFd {
        self.conn.raw_fd()
    }

    fn key(&self) -> u64 {
        self.state.record.meta.id
    }

    fn adopted(&mut self, ctx: &StreamContext) -> bool {
        self.read(ctx, true)
    }

    fn readable(&mut self, ctx: &StreamContext) -> bool {
        self.read(ctx, false)
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
        self.state.read_failed(ctx, &self.conn, error);
    }

    fn hand_back(mut self: Box<Self>) {
        if let Some(reply) = self.reply.take() {
            // A task that is gone (its run aborted) leaves nothing to hand back to.
            let _ = reply.send(self);
        }
    }
}
