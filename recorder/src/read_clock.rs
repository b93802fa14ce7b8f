//! The socket-level arrival clock. Every connection's TCP stream stores CLOCK_MONOTONIC when a
//! read returns bytes, and each response carries that cell in its extensions ([`ReadClock`]).
//!
//! Why: hyper's connection task reads the socket and decodes body frames, then hands each frame
//! to the request task through a channel. Under load the request task runs later — with
//! thousands of streams on two cores, milliseconds later — so a clock read when the frame
//! reaches the request task measures the client's own queueing. The cell holds the time of the
//! connection's latest read, which is at or after the read that delivered the frame's bytes and
//! at or before the request task's own clock read.

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokentrace_format::clock::mono_now_ns;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Absolute CLOCK_MONOTONIC ns of a connection's latest read that returned bytes (0: none yet).
#[derive(Clone, Debug, Default)]
pub struct ReadClock(Arc<AtomicU64>);

impl ReadClock {
    fn stamp(&self) {
        self.0.store(mono_now_ns(), Ordering::Release);
    }

    /// The latest read's time, absolute CLOCK_MONOTONIC ns; 0 before the first read.
    pub fn last_read_ns(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Arrival of a frame relative to `anchor_mono_ns`, given the caller's own clock read
    /// `now_ns` (relative to the same anchor): the connection's latest read, never later than
    /// `now_ns`, and `now_ns` itself when no read was stamped.
    pub fn arrival_ns(&self, anchor_mono_ns: u64, now_ns: u64) -> u64 {
        let last = self.last_read_ns();
        if last == 0 || last < anchor_mono_ns {
            return now_ns;
        }
        (last - anchor_mono_ns).min(now_ns)
    }
}

/// A TCP stream that stamps its [`ReadClock`] whenever a read returns bytes.
pub struct TimedTcp {
    tcp: TcpStream,
    clock: ReadClock,
}

impl TimedTcp {
    /// Wrap a connected stream.
    pub fn new(tcp: TcpStream) -> TimedTcp {
        TimedTcp {
            tcp,
            clock: ReadClock::default(),
        }
    }

    /// This stream's clock.
    pub fn clock(&self) -> &ReadClock {
        &self.clock
    }
}

impl AsyncRead for TimedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.clock.stamp();
        }
        result
    }
}

impl AsyncWrite for TimedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

impl Connection for TimedTcp {
    fn connected(&self) -> Connected {
        self.tcp.connected().extra(self.clock.clone())
    }
}

/// hyper-util's [`HttpConnector`] whose streams are [`TimedTcp`].
#[derive(Clone)]
pub struct TimedConnector(pub HttpConnector);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Uri> for TimedConnector {
    type Response = TokioIo<TimedTcp>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(TimedTcp::new(tcp)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(flavor = "current_thread")]
    async fn a_read_with_bytes_stamps_the_clock() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let mut timed = TimedTcp::new(client);
        assert_eq!(timed.clock().last_read_ns(), 0);
        server.write_all(b"data: x\n\n").await.unwrap();
        let before = mono_now_ns();
        let mut buf = [0u8; 64];
        let n = timed.read(&mut buf).await.unwrap();
        let after = mono_now_ns();
        assert_eq!(&buf[..n], b"data: x\n\n");
        let stamped = timed.clock().last_read_ns();
        assert!(stamped >= before && stamped <= after, "{before} {stamped} {after}");
        // End of stream returns no bytes and leaves the stamp alone.
        drop(server);
        assert_eq!(timed.read(&mut buf).await.unwrap(), 0);
        assert_eq!(timed.clock().last_read_ns(), stamped);
    }

    #[test]
    fn arrival_is_the_read_time_capped_by_now() {
        let clock = ReadClock::default();
        assert_eq!(clock.arrival_ns(1_000, 500), 500, "no read yet: the caller's clock");
        clock.0.store(1_200, Ordering::Relaxed);
        assert_eq!(clock.arrival_ns(1_000, 500), 200);
        assert_eq!(clock.arrival_ns(1_000, 150), 150, "never later than the caller's clock");
        assert_eq!(clock.arrival_ns(2_000, 500), 500, "a read before the anchor is ignored");
    }
}
