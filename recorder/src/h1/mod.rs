//! The recorder's own HTTP/1.1 client for the measured requests (`--client own`): the task
//! that streams a request owns its socket, frames the response itself ([`response`]) and
//! feeds the SSE parser straight from each read, stamped before anything looks at the bytes.
//! hyper's client, by contrast, decodes frames in a connection task and hands each to the
//! request task through a channel (two wake-ups per chunk). Connections are kept alive in a
//! small pool; TLS is rustls on the same socket. Preflight, calibration and server-info calls
//! stay on hyper: they are not measured.

pub mod response;

use crate::error::RecordError;
use crate::read_clock::{CloseWatch, ReadClock, TimedTcp};
use hyper::header::HeaderMap;
use hyper::Uri;
use rustls::pki_types::ServerName;
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Bytes per socket read: SSE events are small, and a larger event spans reads. The buffer is
/// per thread, not per connection, so its size costs no memory per stream; where events queue
/// up (a client behind a server's pace), 16 KiB takes about twice the events per read that
/// 4 KiB did (docs/PERFORMANCE.md, *The stream reader*).
pub const READ_BUF: usize = 16384;

thread_local! {
    /// The read buffer of every connection this thread reads. A read's bytes are looked at
    /// within the poll that read them and never kept (the framing and the SSE parser copy what
    /// they must), so one buffer per thread serves every stream: 16 KiB per thread instead of
    /// per open connection.
    static READ_SPACE: RefCell<Box<[u8; READ_BUF]>> = RefCell::new(Box::new([0u8; READ_BUF]));
}

/// A connection: plain TCP or TLS over it. Either way the TCP stream is a [`TimedTcp`], whose
/// clock holds the kernel's receive time of the latest read (`SO_TIMESTAMPNS`), as on the
/// hyper path: a read's arrival does not depend on when this task got to run.
pub enum Io {
    /// `http://`.
    Plain(TimedTcp),
    /// `https://`.
    Tls(Box<TlsStream<TimedTcp>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A connection, its read clock, and whether it carried an earlier response.
pub struct Conn {
    /// The socket.
    pub io: Io,
    /// Whether a response was read on it before (a failure before any byte then may be the
    /// server's close of an idle keep-alive connection).
    pub reused: bool,
    /// The TCP stream's read clock.
    pub clock: ReadClock,
}

impl Conn {
    /// Reads once, into the thread's read buffer, and returns what `look` makes of the bytes
    /// (empty: the peer closed) and of this connection's clock (its latest TCP read: this one,
    /// or over TLS the earlier one whose bytes rustls still held).
    /// `look` runs inside the read's poll, before the buffer serves another connection.
    pub async fn read_with<T>(
        &mut self,
        mut look: impl FnMut(&[u8], &ReadClock) -> T,
    ) -> io::Result<T> {
        let Conn { io, clock, .. } = self;
        std::future::poll_fn(|cx| {
            READ_SPACE.with_borrow_mut(|space| {
                let mut read = ReadBuf::new(&mut space[..]);
                match Pin::new(&mut *io).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) => Poll::Ready(Ok(look(read.filled(), clock))),
                    Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                    Poll::Pending => Poll::Pending,
                }
            })
        })
        .await
    }

    /// The TCP stream underneath.
    fn timed(&mut self) -> &mut TimedTcp {
        match &mut self.io {
            Io::Plain(tcp) => tcp,
            Io::Tls(tls) => tls.get_mut().0,
        }
    }

    /// Takes the socket out of tokio's reactor, for the stream reader ([`crate::reader`]).
    /// An error tokio-rustls set aside in an earlier read (it keeps one for the next read when
    /// a read had bytes to return first) is returned instead: reading rustls directly from now
    /// on, the reader would never see it.
    pub fn detach(&mut self) -> io::Result<()> {
        if let Io::Tls(tls) = &mut self.io {
            // An empty read returns the set-aside error, if any, and consumes nothing; what it
            // may read from the socket stays in rustls, which the reader drains first.
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let mut nothing = ReadBuf::new(&mut []);
            if let Poll::Ready(Err(err)) = Pin::new(tls.as_mut()).poll_read(&mut cx, &mut nothing) {
                return Err(err);
            }
        }
        self.timed().detach();
        Ok(())
    }

    /// Gives the socket back to tokio's reactor, for the connection's next request.
    pub fn attach(&mut self) -> io::Result<()> {
        self.timed().attach()
    }

    /// The socket's descriptor.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.io {
            Io::Plain(tcp) => tcp.tcp().as_raw_fd(),
            Io::Tls(tls) => tls.get_ref().0.tcp().as_raw_fd(),
        }
    }

    /// Reads what is there now, without waiting, into the thread's read buffer, and hands
    /// `look` each run of bytes with the connection's clock (no bytes: the peer closed) until
    /// it returns false. Plain: one socket read. TLS: the plaintext rustls holds, then (unless
    /// `held_only`) one socket read and the plaintext it completes. Nothing there is no error.
    /// For the stream reader, which learns readiness from its own epoll.
    pub fn read_ready(
        &mut self,
        held_only: bool,
        mut look: impl FnMut(&[u8], &ReadClock) -> bool,
    ) -> io::Result<()> {
        let Conn { io, clock, .. } = self;
        READ_SPACE.with_borrow_mut(|space| match io {
            Io::Plain(tcp) => {
                if held_only {
                    return Ok(());
                }
                match tcp.read_now(&mut space[..]) {
                    Ok(n) => {
                        look(&space[..n], clock);
                        Ok(())
                    }
                    Err(e) if quiet(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Io::Tls(tls) => {
                let (tcp, session) = tls.get_mut();
                if !drain_plaintext(session, &mut space[..], clock, &mut look)? || held_only {
                    return Ok(());
                }
                match session.read_tls(&mut ReadNow(tcp)) {
                    Ok(_) => {
                        // A TCP end of stream (0) is rustls's to judge: the drain below then
                        // reports close_notify as no bytes and a bare close as an error.
                        session
                            .process_new_packets()
                            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                        drain_plaintext(session, &mut space[..], clock, &mut look).map(|_| ())
                    }
                    Err(e) if quiet(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
        })
    }

    /// Whether the server closed (or wrote to) this idle connection: a peek that does not
    /// wait. An idle connection has nothing to say, so bytes mean it cannot be reused either.
    fn peer_closed(&self) -> bool {
        let tcp = match &self.io {
            Io::Plain(tcp) => tcp.tcp(),
            Io::Tls(tls) => tls.get_ref().0.tcp(),
        };
        let mut probe = [0u8; 1];
        !matches!(tcp.peek(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

/// Errors that only mean "nothing to read right now".
fn quiet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// The TCP stream as a blocking-style reader for rustls, one `read_now` per call.
struct ReadNow<'a>(&'a mut TimedTcp);

impl io::Read for ReadNow<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read_now(buf)
    }
}

/// Hands `look` the plaintext rustls holds, read by read; false once `look` said stop or the
/// stream ended (TLS's close_notify is handed over as no bytes).
fn drain_plaintext(
    session: &mut rustls::ClientConnection,
    space: &mut [u8],
    clock: &ReadClock,
    look: &mut impl FnMut(&[u8], &ReadClock) -> bool,
) -> io::Result<bool> {
    use std::io::Read;
    loop {
        match session.reader().read(space) {
            Ok(0) => {
                look(&[], clock);
                return Ok(false);
            }
            Ok(n) => {
                if !look(&space[..n], clock) {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
            // A TCP close without close_notify is an error, as tokio-rustls reports it.
            Err(e) => return Err(e),
        }
    }
}

/// Where the measured requests go, and the idle connections to it.
pub struct Pool {
    host: String,
    port: u16,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// Request line and headers up to the blank line, without the per-request ones.
    head_prefix: Vec<u8>,
    idle: Mutex<Vec<(Conn, Instant)>>,
}

/// How long a kept-alive connection may sit idle and still be reused (as hyper's pool:
/// under the 5 s servers keep idle connections).
const IDLE_LIMIT: Duration = crate::http::POOL_IDLE_TIMEOUT;
/// How long a TCP connect (and TLS handshake) may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

impl Pool {
    /// A pool for POSTs to `uri` with `headers` (the run's headers: content type, accept,
    /// authorization, custom ones).
    pub fn new(
        uri: &Uri,
        headers: &HeaderMap,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<Pool, RecordError> {
        let bad = |m: String| RecordError::Config(m);
        let host = uri
            .host()
            .ok_or_else(|| bad(format!("{uri}: no host")))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = match (https, tls) {
            (false, _) => None,
            (true, Some(config)) => {
                let name =
                    ServerName::try_from(host.clone()).map_err(|e| bad(format!("{uri}: {e}")))?;
                Some((TlsConnector::from(config), name))
            }
            (true, None) => return Err(bad(format!("{uri}: https without a TLS configuration"))),
        };
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let authority = uri.authority().map_or(host.as_str(), |a| a.as_str());
        let mut head = format!("POST {path} HTTP/1.1\r\nhost: {authority}\r\n").into_bytes();
        for (name, value) in headers {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        Ok(Pool {
            host,
            port,
            tls,
            head_prefix: head,
            idle: Mutex::new(Vec::new()),
        })
    }

    /// The request bytes: the shared head, `extra` headers, the length and the body.
    pub fn request(&self, extra: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head_prefix.len() + body.len() + 128);
        out.extend_from_slice(&self.head_prefix);
        for (name, value) in extra {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
        out.extend_from_slice(body);
        out
    }

    /// An idle connection young enough to reuse and still open, if there is one. A server
    /// that closed one within a second of its response closes after every response: `closes`
    /// is marked, and from then on no connection is reused (each request gets its own).
    pub fn take_idle(&self, closes: &CloseWatch) -> Option<Conn> {
        if closes.closed_after_response() {
            return None;
        }
        let mut idle = self.idle.lock().ok()?;
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() >= IDLE_LIMIT {
                continue;
            }
            if conn.peer_closed() {
                if since.elapsed() < Duration::from_secs(1) {
                    closes.mark();
                }
                continue;
            }
            return Some(conn);
        }
        None
    }

    /// Keeps `conn` for the next request.
    pub fn put_back(&self, mut conn: Conn) {
        conn.reused = true;
        if let Ok(mut idle) = self.idle.lock() {
            idle.push((conn, Instant::now()));
        }
    }

    /// A new connection (TCP, then TLS when the URL is https), within [`CONNECT_LIMIT`];
    /// `closes` learns when the server closes it right after a response.
    pub async fn connect(&self, closes: &CloseWatch) -> io::Result<Conn> {
        let connecting = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
            tcp.set_nodelay(true)?;
            let timed = TimedTcp::new(tcp, closes.clone())?;
            let clock = timed.clock().clone();
            let io = match &self.tls {
                None => Io::Plain(timed),
                Some((connector, name)) => {
                    Io::Tls(Box::new(connector.connect(name.clone(), timed).await?))
                }
            };
            Ok(Conn {
                io,
                reused: false,
                clock,
            })
        };
        match tokio::time::timeout(CONNECT_LIMIT, connecting).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {} s", CONNECT_LIMIT.as_secs()),
            )),
        }
    }
}
