//! A response body in the stream reader's hands ([`crate::reader`]): the request's state, its
//! connection and its read loop state, moved from the request's task to the reader thread and
//! back. Each read is stamped and fed exactly as in the task's own loop
//! ([`StreamState::take_read`]); only who waits for the socket differs.

use super::{BodyRead, Step};
use crate::h1::{Conn, Pool};
use crate::reader::Tenant;
use crate::stream::{StreamContext, StreamState};
use std::io;
use std::os::fd::RawFd;
use tokentrace_format::Outcome;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A streaming response on its way through the reader.
pub(in crate::stream) struct Streaming {
    pub(super) state: Box<StreamState>,
    pub(super) conn: Conn,
    pub(super) body: BodyRead,
    /// Set when the body ended whole and the connection may carry another request.
    pub(super) reuse: bool,
    /// Where the response goes back to its task.
    pub(super) reply: Option<oneshot::Sender<Box<Streaming>>>,
}

impl Streaming {
    /// Back in the request's task: the connection returns to tokio's reactor and the pool when
    /// it may carry another request. The state, and true (the request ran its course:
    /// a cancellation was recorded by the reader).
    pub(super) fn finish(self, pool: &Pool) -> (Box<StreamState>, bool) {
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

    fn tick(&mut self, ctx: &StreamContext) {
        self.state.checkpoint(ctx);
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
