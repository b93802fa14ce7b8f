//! Response bodies: a whole body, or an SSE stream fed by the engine. The stream stamps the
//! truth log when it hands an event to hyper, which writes it to the socket right away.

use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame as HttpFrame, SizeHint};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Sleep;

use crate::job::Frame;
use crate::truth::{mono_now_ns, TruthRecord, TruthSender};

/// Body of every response the simulator sends.
pub(crate) enum SimBody {
    Whole(Option<Bytes>),
    Stream(Box<SseStream>),
}

/// An SSE response in progress.
pub(crate) struct SseStream {
    pub rx: UnboundedReceiver<Frame>,
    pub truth: Option<(TruthSender, Arc<str>)>,
    pub chunk_index: u32,
    pub stall: Option<Pin<Box<Sleep>>>,
    /// A reset fault is due once `stall` (the reset delay) has elapsed.
    pub reset_due: bool,
    /// The connection's socket, for an abortive close on a reset fault.
    pub socket: RawFd,
}

/// Delay between handing over the last event and resetting: hyper buffers events and writes
/// them when the body has nothing more, so an immediate error would drop events that were
/// already logged as written.
const RESET_DELAY: Duration = Duration::from_millis(10);

impl SimBody {
    pub(crate) fn whole(bytes: impl Into<Bytes>) -> Self {
        SimBody::Whole(Some(bytes.into()))
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<HttpFrame<Bytes>, io::Error>>> {
        match self.get_mut() {
            SimBody::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(HttpFrame::data(b)))),
            SimBody::Stream(stream) => stream.poll_next(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, SimBody::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Whole(Some(b)) => SizeHint::with_exact(b.len() as u64),
            SimBody::Whole(None) => SizeHint::with_exact(0),
            SimBody::Stream(_) => SizeHint::default(),
        }
    }
}

impl SseStream {
    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<HttpFrame<Bytes>, io::Error>>> {
        loop {
            if let Some(sleep) = &mut self.stall {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.stall = None;
                if self.reset_due {
                    set_abortive_close(self.socket);
                    return Poll::Ready(Some(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        "injected connection reset",
                    ))));
                }
            }
            let frame = match self.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Ready(Some(frame)) => frame,
            };
            match frame {
                Frame::Event(bytes) => {
                    if let Some((tx, id)) = &self.truth {
                        let record = TruthRecord {
                            request_id_json: id.clone(),
                            chunk_index: self.chunk_index,
                            mono_ns: mono_now_ns(),
                        };
                        // The log thread outlives every body; a send error only means
                        // the server is shutting down.
                        let _ = tx.send(record);
                    }
                    self.chunk_index += 1;
                    return Poll::Ready(Some(Ok(HttpFrame::data(bytes))));
                }
                Frame::Stall(duration) => {
                    self.stall = Some(Box::pin(tokio::time::sleep(duration)));
                }
                Frame::Reset => {
                    self.reset_due = true;
                    self.stall = Some(Box::pin(tokio::time::sleep(RESET_DELAY)));
                }
            }
        }
    }
}

/// Makes the socket's close send a TCP RST instead of a FIN (SO_LINGER with zero timeout).
fn set_abortive_close(socket: RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `socket` is the open socket of the connection this body is being written to
    // (the body lives inside that connection's task); the option value is a valid `linger`.
    unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}
