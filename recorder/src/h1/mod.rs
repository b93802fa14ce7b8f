//! The recorder's own HTTP/1.1 client for the measured requests (`--client own`): the task
//! that streams a request owns its socket, frames the response itself ([`response`]) and
//! feeds the SSE parser straight from each read, stamped before anything looks at the bytes.
//! hyper's client, by contrast, decodes frames in a connection task and hands each to the
//! request task through a channel (two wake-ups per chunk). Connections are kept alive in a
//! small pool; TLS is rustls's unbuffered connection on the same socket ([`tls`]). Preflight, calibration and server-info calls
//! stay on hyper: they are not measured.

pub mod response;
pub mod tls;

use crate::error::RecordError;
use crate::read_clock::{CloseWatch, ReadClock, TimedTcp};
use hyper::header::HeaderMap;
use hyper::Uri;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tls::TlsLink;
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Bytes per socket read: SSE events are small, and a larger event spans reads. The buffer is
/// per thread, not per connection, so its size costs no memory per stream; where events queue
/// up (a client behind a server's pace), 16 KiB takes about twice the events per read that
/// 4 KiB did (docs/performance/2026-12-01-read-path.md, *The stream reader*).
pub const READ_BUF: usize = 16384;

/// A thread's buffers for the connections it reads.
struct Space {
    /// Where a read goes: over TLS after the connection's tail (what a read left of a
    /// record, or of a handshake message), so it has room for [`tls::TAIL_MAX`] bytes before
    /// [`READ_BUF`].
    read: Box<[u8]>,
    /// The plaintext of the whole records of a TLS read (never longer than `read`).
    plain: Box<[u8]>,
}

thread_local! {
    /// The buffers of every connection this thread reads. A read's bytes are looked at
    /// within the poll that read them and never kept (the framing and the SSE parser copy what
    /// they must), so one set per thread serves every stream: 16 KiB (over TLS about 200 KiB)
    /// per thread instead of per open connection (pages a read never reaches stay untouched).
    static SPACE: RefCell<Space> = RefCell::new(Space {
        read: vec![0u8; tls::TAIL_MAX + READ_BUF].into_boxed_slice(),
        plain: vec![0u8; tls::TAIL_MAX + READ_BUF].into_boxed_slice(),
    });
}

/// A connection: plain TCP or TLS over it. Either way the TCP stream is a [`TimedTcp`], whose
/// clock holds the kernel's receive time of the latest read (`SO_TIMESTAMPNS`), as on the
/// hyper path: a read's arrival does not depend on when this task got to run.
pub enum Io {
    /// `http://`.
    Plain(TimedTcp),
    /// `https://`: the socket and its TLS state.
    Tls(TimedTcp, Box<TlsLink>),
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
    /// Sends `request` whole (over TLS, as records after anything rustls had to send).
    pub async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        match &mut self.io {
            Io::Plain(tcp) => {
                tcp.write_all(request).await?;
                tcp.flush().await
            }
            Io::Tls(tcp, link) => {
                let records = link.seal(request)?;
                tcp.write_all(&records).await?;
                tcp.flush().await
            }
        }
    }

    /// Reads until there are bytes to look at (over TLS: a whole record), into the thread's
    /// buffers, and returns what `look` makes of them (empty: the peer closed) and of this
    /// connection's clock (its latest TCP read: the one that completed them).
    /// `look` runs inside the read's poll, before the buffers serve another connection.
    pub async fn read_with<T>(
        &mut self,
        mut look: impl FnMut(&[u8], &ReadClock) -> T,
    ) -> io::Result<T> {
        let Conn { io, clock, .. } = self;
        std::future::poll_fn(|cx| {
            SPACE.with_borrow_mut(|Space { read, plain }| match io {
                Io::Plain(tcp) => {
                    let mut buf = ReadBuf::new(&mut read[..READ_BUF]);
                    match Pin::new(tcp).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) => Poll::Ready(Ok(look(buf.filled(), clock))),
                        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                        Poll::Pending => Poll::Pending,
                    }
                }
                Io::Tls(tcp, link) => loop {
                    if let Some(e) = link.take_failure() {
                        return Poll::Ready(Err(e));
                    }
                    if link.closed() {
                        return Poll::Ready(Ok(look(&[], clock)));
                    }
                    let held = link.load_tail(read);
                    let mut buf = ReadBuf::new(&mut read[held..held + READ_BUF]);
                    match Pin::new(&mut *tcp).poll_read(cx, &mut buf) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    }
                    let n = buf.filled().len();
                    if n == 0 {
                        return Poll::Ready(Err(tls::unannounced_close()));
                    }
                    match link.open(&mut read[..held + n], plain) {
                        Ok(0) => {}
                        Ok(len) => return Poll::Ready(Ok(look(&plain[..len], clock))),
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                },
            })
        })
        .await
    }

    /// The TCP stream underneath.
    fn timed(&mut self) -> &mut TimedTcp {
        match &mut self.io {
            Io::Plain(tcp) => tcp,
            Io::Tls(tcp, _) => tcp,
        }
    }

    /// Takes the socket out of tokio's reactor, for the stream reader ([`crate::reader`]).
    pub fn detach(&mut self) -> io::Result<()> {
        self.timed().detach();
        Ok(())
    }

    /// Gives the socket back to tokio's reactor, for the connection's next request.
    pub fn attach(&mut self) -> io::Result<()> {
        self.timed().attach()
    }

    /// Writes what a plain connection's socket takes of `request` now, without waiting, while
    /// the socket is out of tokio's reactor ([`Conn::detach`]); the bytes written.
    pub fn write_now(&mut self, request: &[u8]) -> io::Result<usize> {
        match &mut self.io {
            Io::Plain(tcp) => tcp.write_now(request),
            Io::Tls(..) => Err(io::Error::other(
                "a TLS request is sealed and sent by its task",
            )),
        }
    }

    /// The socket's descriptor.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.io {
            Io::Plain(tcp) => tcp.tcp().as_raw_fd(),
            Io::Tls(tcp, _) => tcp.tcp().as_raw_fd(),
        }
    }

    /// Reads what is there now, without waiting, into the thread's buffers, and hands `look`
    /// each run of bytes with the connection's clock (no bytes: the peer closed) until it
    /// returns false: one socket read (none when `held_only`) and, over TLS, the plaintext of
    /// the whole records it completed. Nothing there is no error. For the stream reader,
    /// which learns readiness from its own epoll.
    pub fn read_ready(
        &mut self,
        held_only: bool,
        mut look: impl FnMut(&[u8], &ReadClock) -> bool,
    ) -> io::Result<()> {
        let Conn { io, clock, .. } = self;
        SPACE.with_borrow_mut(|Space { read, plain }| match io {
            Io::Plain(tcp) => {
                if held_only {
                    return Ok(());
                }
                match tcp.read_now(&mut read[..READ_BUF]) {
                    Ok(n) => {
                        look(&read[..n], clock);
                        Ok(())
                    }
                    Err(e) if quiet(&e) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Io::Tls(tcp, link) => {
                // A whole record never waits in the tail (every read decrypts all it
                // completes), but a close_notify or an error read with the response head may.
                if let Some(e) = link.take_failure() {
                    return Err(e);
                }
                if link.closed() {
                    look(&[], clock);
                    return Ok(());
                }
                if held_only {
                    return Ok(());
                }
                let held = link.load_tail(read);
                match tcp.read_now(&mut read[held..held + READ_BUF]) {
                    Ok(0) => Err(tls::unannounced_close()),
                    Ok(n) => {
                        let len = link.open(&mut read[..held + n], plain)?;
                        if len > 0 && !look(&plain[..len], clock) {
                            return Ok(());
                        }
                        if let Some(e) = link.take_failure() {
                            return Err(e);
                        }
                        if link.closed() {
                            look(&[], clock);
                        }
                        Ok(())
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
            Io::Tls(tcp, _) => tcp.tcp(),
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

/// Where the measured requests go, and the idle connections to it.
pub struct Pool {
    host: String,
    port: u16,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
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
        tls: Option<Arc<ClientConfig>>,
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
                Some((config, name))
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

    /// Keeps `conn` for the next request (not one whose TLS failed after its response), in
    /// tokio's reactor or out of it as it is: the next request's path registers it where its
    /// reads are waited for.
    pub fn put_back(&self, mut conn: Conn) {
        if matches!(&conn.io, Io::Tls(_, link) if link.failed()) {
            return;
        }
        conn.reused = true;
        if let Ok(mut idle) = self.idle.lock() {
            idle.push((conn, Instant::now()));
        }
    }

    /// Whether the connections are plain TCP (an `http://` URL).
    pub fn is_plain(&self) -> bool {
        self.tls.is_none()
    }

    /// A new connection (TCP, then TLS when the URL is https), within `CONNECT_LIMIT`;
    /// `closes` learns when the server closes it right after a response. `detached`: a plain
    /// connection is left out of tokio's reactor, for the stream reader (a TLS one always
    /// joins it, for its handshake).
    pub async fn connect(&self, closes: &CloseWatch, detached: bool) -> io::Result<Conn> {
        let connecting = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
            tcp.set_nodelay(true)?;
            let mut timed = if detached && self.tls.is_none() {
                TimedTcp::new_detached(tcp, closes.clone())?
            } else {
                TimedTcp::new(tcp, closes.clone())?
            };
            let clock = timed.clock().clone();
            let io = match &self.tls {
                None => Io::Plain(timed),
                Some((config, name)) => {
                    let link = TlsLink::connect(&mut timed, config.clone(), name.clone()).await?;
                    Io::Tls(timed, Box::new(link))
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
