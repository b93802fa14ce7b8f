//! The socket-level arrival clock. Every connection's TCP stream stores CLOCK_MONOTONIC when a
//! read returns bytes, and each response carries that cell in its extensions ([`ReadClock`]).
//!
//! Why: hyper's connection task reads the socket and decodes body frames, then hands each frame
//! to the request task through a channel. Under load the request task runs later — with
//! thousands of streams on two cores, milliseconds later — so a clock read when the frame
//! reaches the request task measures the client's own queueing. The cell holds the time of the
//! connection's latest read, which is at or after the read that delivered the frame's bytes and
//! at or before the request task's own clock read.
//!
//! On Linux the time is the kernel's own receive timestamp of the last segment a read returned
//! (`SO_TIMESTAMPNS`, read with `recvmsg`), so even the connection task's lateness drops out:
//! when a decode step delivers a thousand events at once, the client processes them one after
//! another, and a clock read in user space would stamp the last one a thousand events late.

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::io;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::ready;
use std::task::{Context, Poll};
use tokentrace_format::clock::mono_now_ns;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

mod offset;
pub mod receive_time;
use offset::realtime_minus_mono_ns;

/// Absolute CLOCK_MONOTONIC ns of a connection's latest read that returned bytes (0: none yet),
/// and of the start of its latest write.
#[derive(Clone, Debug, Default)]
pub struct ReadClock(Arc<Cells>);

/// The two times, shared by the stream and every response read from it.
#[derive(Debug, Default)]
struct Cells {
    read: AtomicU64,
    write: AtomicU64,
}

impl ReadClock {
    fn stamp(&self) {
        self.advance(mono_now_ns());
    }

    /// Stamp with a kernel receive time (CLOCK_REALTIME ns), moved onto CLOCK_MONOTONIC by the
    /// current offset between the two clocks.
    fn stamp_kernel(&self, received_realtime_ns: u64) {
        let offset = realtime_minus_mono_ns();
        self.advance(received_realtime_ns.saturating_sub(offset));
    }

    /// The cell only moves forward: two reads converted with slightly different offsets must
    /// not put a later read before an earlier one (headers before their first event).
    ///
    /// Relaxed is enough: the cell publishes no other memory, and the frame a reader stamps
    /// reaches it through hyper's channel, whose synchronization already orders this store
    /// before the reader's load.
    fn advance(&self, mono_ns: u64) {
        self.0.read.fetch_max(mono_ns, Ordering::Relaxed);
    }

    /// The latest read's time, absolute CLOCK_MONOTONIC ns; 0 before the first read.
    pub fn last_read_ns(&self) -> u64 {
        self.0.read.load(Ordering::Relaxed)
    }

    /// When the latest write on the connection began (a request's bytes), absolute
    /// CLOCK_MONOTONIC ns; 0 before the first.
    pub fn last_write_ns(&self) -> u64 {
        self.0.write.load(Ordering::Relaxed)
    }

    /// Whether the connection had carried bytes from the server, and none since the latest
    /// write began: a request written on a kept-alive connection that then failed this way
    /// was never answered (the server had closed the connection).
    pub fn silent_since_write(&self) -> bool {
        let read = self.last_read_ns();
        read != 0 && read < self.last_write_ns()
    }

    fn note_write(&self) {
        self.0.write.fetch_max(mono_now_ns(), Ordering::Relaxed);
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

/// A server that closes a connection within this long after the last bytes it sent on it
/// closes after every response (llama.cpp's server does, after each stream, while announcing
/// keep-alive); an idle close (uvicorn's 5 s) comes much later.
const CLOSE_AFTER_RESPONSE_NS: u64 = 50_000_000;

/// Shared by every connection of a client: set once a server closed a connection right after
/// a response. Reusing such a server's connections races with its close (a request written
/// in that moment is lost or reset), so the recorder then opens a new connection per request.
#[derive(Clone, Debug, Default)]
pub struct CloseWatch(Arc<AtomicBool>);

impl CloseWatch {
    /// Whether a server closed a connection right after a response.
    pub fn closed_after_response(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Notes that a server closed a connection right after a response (the own client sees it
    /// on its idle connections).
    pub fn mark(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Notes a reset on a connection. A server that closes right after its response resets
    /// the connection instead when the next request's bytes reached it before its close (a
    /// close with unread bytes sends RST, not FIN), so the client never reads the end of
    /// stream: a request written within [`CLOSE_AFTER_RESPONSE_NS`] of the previous response
    /// and reset before any answer is the same close.
    fn reset(&self, clock: &ReadClock) {
        let (read, write) = (clock.last_read_ns(), clock.last_write_ns());
        if clock.silent_since_write() && write - read < CLOSE_AFTER_RESPONSE_NS {
            self.0.store(true, Ordering::Relaxed);
        }
    }

    /// Notes an end of stream on a connection whose last read was `last_read_ns`.
    fn eof(&self, last_read_ns: u64) {
        if last_read_ns != 0 && mono_now_ns().saturating_sub(last_read_ns) < CLOSE_AFTER_RESPONSE_NS
        {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// A TCP stream that stamps its [`ReadClock`] whenever a read returns bytes.
///
/// It drives the socket through [`AsyncFd`] rather than tokio's `TcpStream` so that a short
/// read clears the socket's readiness: the receive queue was drained, and the edge-triggered
/// epoll registration will say when more bytes come. tokio's own `TcpStream::poll_read` does
/// the same, but a `recvmsg` (which the kernel receive time needs) can only go through
/// `try_io`, which clears readiness on `EWOULDBLOCK` alone — one wasted system call per event.
///
/// While a response is read by the stream reader (`crate::reader`), the socket is out of
/// tokio's reactor ([`TimedTcp::detach`], or [`TimedTcp::new_detached`] from the start), so
/// that its arrivals wake that reader alone; it is registered again ([`TimedTcp::attach`])
/// only when a request's task reads it (a TLS head, an error's body, `--client own-task`).
pub struct TimedTcp {
    /// Registered with tokio's reactor; None while detached.
    fd: Option<AsyncFd<std::net::TcpStream>>,
    /// The socket while detached.
    apart: Option<std::net::TcpStream>,
    clock: ReadClock,
    closes: CloseWatch,
}

/// The error of an async read or write on a detached socket (a bug, never a server's doing).
fn detached() -> io::Error {
    io::Error::other("socket is with the stream reader")
}

impl TimedTcp {
    /// Wrap a connected stream; `closes` learns when the server closes it right after a
    /// response. Must run inside a tokio runtime (the socket moves to its reactor).
    pub fn new(tcp: TcpStream, closes: CloseWatch) -> io::Result<TimedTcp> {
        let mut timed = TimedTcp::new_detached(tcp, closes)?;
        timed.attach()?;
        Ok(timed)
    }

    /// As [`TimedTcp::new`], but out of tokio's reactor (as after [`TimedTcp::detach`]): for a
    /// connection the stream reader reads from its first response.
    pub fn new_detached(tcp: TcpStream, closes: CloseWatch) -> io::Result<TimedTcp> {
        let tcp = tcp.into_std()?;
        // Refused, the reads are stamped in user space (no timestamp comes with them).
        let _ = receive_time::enable(tcp.as_raw_fd());
        Ok(TimedTcp {
            fd: None,
            apart: Some(tcp),
            clock: ReadClock::default(),
            closes,
        })
    }

    /// Takes the socket out of tokio's reactor (a no-op when it is out already): from here on
    /// only [`TimedTcp::read_now`] reads it, and tokio is not woken by its arrivals.
    pub fn detach(&mut self) {
        if let Some(fd) = self.fd.take() {
            self.apart = Some(fd.into_inner());
        }
    }

    /// Registers the socket with tokio's reactor again (inside a runtime); on failure it stays
    /// detached and the error says why.
    pub fn attach(&mut self) -> io::Result<()> {
        if let Some(tcp) = self.apart.take() {
            // SAFETY: as in `new`: the std stream owns its descriptor until the `AsyncFd` drops it.
            match unsafe { AsyncFd::register(tcp) } {
                Ok(fd) => self.fd = Some(fd),
                Err(e) => {
                    let (tcp, err) = e.into_parts();
                    self.apart = Some(tcp);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// One read now, without waiting: the bytes read (0: the peer closed), the clock stamped
    /// as an async read stamps it, `EWOULDBLOCK` when nothing is there. For the stream reader,
    /// which learns readiness from its own epoll.
    pub fn read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let last_read_ns = self.clock.last_read_ns();
        match receive_time::recv_into(self.tcp(), buf) {
            Ok((n, received)) => {
                if n > 0 {
                    match received {
                        Some(ns) => self.clock.stamp_kernel(ns),
                        None => self.clock.stamp(),
                    }
                } else if !buf.is_empty() {
                    self.closes.eof(last_read_ns);
                }
                Ok(n)
            }
            Err(err) => {
                if err.kind() == io::ErrorKind::ConnectionReset {
                    self.closes.reset(&self.clock);
                }
                Err(err)
            }
        }
    }

    /// Writes what the socket takes now, without waiting, while the socket is out of tokio's
    /// reactor (for a request whose answer the stream reader reads); the bytes written, fewer
    /// than `buf` only when the send buffer is full.
    pub fn write_now(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Before the write, as an async write notes it: a refused write counts too.
        self.clock.note_write();
        let Some(mut tcp) = self.apart.as_ref() else {
            return Err(io::Error::other("socket is in tokio's reactor"));
        };
        let mut written = 0;
        while written < buf.len() {
            match tcp.write(&buf[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// This stream's clock.
    pub fn clock(&self) -> &ReadClock {
        &self.clock
    }

    /// The socket underneath (non-blocking; for a peek at an idle connection).
    pub fn tcp(&self) -> &std::net::TcpStream {
        match (&self.fd, &self.apart) {
            (Some(fd), _) => fd.get_ref(),
            (None, Some(tcp)) => tcp,
            // `detach` and `attach` move the socket from one to the other, never out.
            (None, None) => unreachable!("a TimedTcp always holds its socket"),
        }
    }
}

impl AsyncRead for TimedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let room = buf.remaining();
        // The last read before this one: an end of stream is timed against it.
        let last_read_ns = this.clock.last_read_ns();
        let Some(fd) = &this.fd else {
            return Poll::Ready(Err(detached()));
        };
        loop {
            let mut guard = ready!(fd.poll_read_ready(cx))?;
            // SAFETY: the read writes only initialized bytes, and only the `n` it reports are
            // marked initialized and filled below.
            let unfilled = unsafe { buf.unfilled_mut() };
            match receive_time::recv(guard.get_inner(), unfilled) {
                Ok((n, received)) => {
                    if n > 0 && n < room {
                        guard.clear_ready();
                    }
                    // SAFETY: the read wrote `n` bytes at the start of the unfilled part.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if n > 0 {
                        match received {
                            Some(ns) => this.clock.stamp_kernel(ns),
                            None => this.clock.stamp(),
                        }
                    } else if room > 0 {
                        this.closes.eof(last_read_ns);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => {
                    if err.kind() == io::ErrorKind::ConnectionReset {
                        this.closes.reset(&this.clock);
                    }
                    return Poll::Ready(Err(err));
                }
            }
        }
    }
}

impl TimedTcp {
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        mut write: impl FnMut(&std::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        // Before the write, so that a write the kernel refuses (the server closed) counts too.
        self.clock.note_write();
        let Some(fd) = &self.fd else {
            return Poll::Ready(Err(detached()));
        };
        loop {
            let mut guard = ready!(fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| write(fd.get_ref())) {
                Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for TimedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |mut tcp| tcp.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_with(cx, |mut tcp| tcp.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket: nothing is buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.tcp().shutdown(std::net::Shutdown::Write))
    }
}

impl Connection for TimedTcp {
    fn connected(&self) -> Connected {
        Connected::new().extra(self.clock.clone())
    }
}

/// hyper-util's [`HttpConnector`] whose streams are [`TimedTcp`], all reporting to one
/// [`CloseWatch`].
#[derive(Clone)]
pub struct TimedConnector(pub HttpConnector, pub CloseWatch);

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
        let closes = self.1.clone();
        Box::pin(async move {
            let tcp = connecting.await?.into_inner();
            Ok(TokioIo::new(TimedTcp::new(tcp, closes)?))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_format::clock::realtime_now_ns;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A `TimedTcp` client connected over 127.0.0.1 to the server end it returns beside it.
    async fn timed_pair() -> (TimedTcp, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (
            TimedTcp::new(client, CloseWatch::default()).unwrap(),
            server,
        )
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_read_is_stamped_with_when_its_bytes_arrived() {
        let (mut timed, mut server) = timed_pair().await;
        assert_eq!(timed.clock().last_read_ns(), 0);
        // The kernel turns receive timestamping on for the whole host from a deferred work
        // item when the first socket asks for it; give it time to run.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let written = mono_now_ns();
        server.write_all(b"data: x\n\n").await.unwrap();
        // The bytes wait in the socket before the client reads them.
        std::thread::sleep(std::time::Duration::from_millis(30));
        let before_read = mono_now_ns();
        let mut buf = [0u8; 64];
        let n = timed.read(&mut buf).await.unwrap();
        let after = mono_now_ns();
        assert_eq!(&buf[..n], b"data: x\n\n");
        let stamped = timed.clock().last_read_ns();
        assert!(stamped <= after, "{stamped} > {after}");
        if cfg!(target_os = "linux") {
            // The kernel's receive time, not the read's: within a few ms of the write (slack
            // for converting between the real-time and monotonic clocks).
            assert!(
                stamped + 2_000_000 >= written && stamped + 10_000_000 < before_read,
                "written {written} stamped {stamped} read {before_read}"
            );
        } else {
            assert!(stamped >= before_read);
        }
        // End of stream returns no bytes and leaves the stamp alone.
        drop(server);
        assert_eq!(timed.read(&mut buf).await.unwrap(), 0);
        assert_eq!(timed.clock().last_read_ns(), stamped);
    }

    /// A short read clears the socket's readiness (no `EWOULDBLOCK` read after it); the next
    /// read must still wake when more bytes come, and the write side must still work.
    #[tokio::test(flavor = "current_thread")]
    async fn after_a_short_read_the_next_bytes_still_wake_the_reader() {
        let (mut timed, mut server) = timed_pair().await;
        timed.write_all(b"POST / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut got = [0u8; 19];
        server.read_exact(&mut got).await.unwrap();
        let mut buf = [0u8; 64];
        for round in 0..20u8 {
            let later = async {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                server.write_all(&[b'a' + round; 3]).await.unwrap();
            };
            let reading = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                let (n, ()) = tokio::join!(timed.read(&mut buf), later);
                n
            });
            let n = reading
                .await
                .expect("a read after a short one never woke")
                .unwrap();
            assert_eq!(&buf[..n], &[b'a' + round; 3]);
        }
        drop(server);
        assert_eq!(timed.read(&mut buf).await.unwrap(), 0);
    }

    /// The stale-connection signature: bytes came on the connection before, none since the
    /// latest write began.
    #[tokio::test(flavor = "current_thread")]
    async fn a_connection_is_silent_since_a_write_until_bytes_come_back() {
        let (mut timed, mut server) = timed_pair().await;
        let clock = timed.clock().clone();
        let mut buf = [0u8; 16];
        // A first request, before anything came back: not a reused connection.
        timed.write_all(b"one").await.unwrap();
        assert!(!clock.silent_since_write());
        server.read_exact(&mut buf[..3]).await.unwrap();
        server.write_all(b"answer").await.unwrap();
        timed.read_exact(&mut buf[..6]).await.unwrap();
        assert!(!clock.silent_since_write());
        // The next request on it: silent until its answer's bytes arrive.
        std::thread::sleep(std::time::Duration::from_millis(1));
        timed.write_all(b"two").await.unwrap();
        assert!(clock.silent_since_write());
        server.read_exact(&mut buf[..3]).await.unwrap();
        server.write_all(b"again").await.unwrap();
        timed.read_exact(&mut buf[..5]).await.unwrap();
        assert!(!clock.silent_since_write());
    }

    /// A server that closes right after its response, when the next request reached it
    /// first, resets the connection: that marks the close watch as an end of stream would.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reset_of_the_next_request_right_after_a_response_counts_as_a_close() {
        let (mut timed, mut server) = timed_pair().await;
        let closes = timed.closes.clone();
        let mut buf = [0u8; 16];
        timed.write_all(b"one").await.unwrap();
        server.read_exact(&mut buf[..3]).await.unwrap();
        server.write_all(b"answer").await.unwrap();
        timed.read_exact(&mut buf[..6]).await.unwrap();
        // The next request arrives before the server closes: its close sends RST.
        timed.write_all(b"two").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        drop(server);
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), timed.read(&mut buf));
        let err = read.await.expect("no reset within 5 s").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        assert!(closes.closed_after_response());
    }

    /// A reset in the middle of an answer (a server that crashed) is not a close after a
    /// response.
    #[tokio::test(flavor = "current_thread")]
    async fn a_reset_after_answer_bytes_is_not_a_close_after_a_response() {
        let (mut timed, server) = timed_pair().await;
        let closes = timed.closes.clone();
        let mut server = server.into_std().unwrap();
        let mut buf = [0u8; 16];
        timed.write_all(b"one").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        std::io::Write::write_all(&mut server, b"part").unwrap();
        timed.read_exact(&mut buf[..4]).await.unwrap();
        // Closing with the request unread resets the connection.
        drop(server);
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), timed.read(&mut buf));
        let err = read.await.expect("no reset within 5 s").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
        assert!(!closes.closed_after_response());
    }

    #[test]
    fn the_cell_never_moves_back() {
        let clock = ReadClock::default();
        clock.advance(5_000);
        clock.advance(4_990);
        assert_eq!(clock.last_read_ns(), 5_000);
        clock.advance(5_010);
        assert_eq!(clock.last_read_ns(), 5_010);
    }

    /// One control message as the kernel lays it out: header, data, padding to the next.
    #[cfg(target_os = "linux")]
    fn control_message(level: i32, kind: i32, data: &[u8]) -> Vec<u8> {
        // SAFETY: an all-zero header is valid; its fields are set below.
        let mut header: libc::cmsghdr = unsafe { std::mem::zeroed() };
        // SAFETY (both): pure arithmetic on lengths.
        header.cmsg_len = unsafe { libc::CMSG_LEN(data.len() as u32) } as _;
        let space = unsafe { libc::CMSG_SPACE(data.len() as u32) } as usize;
        header.cmsg_level = level;
        header.cmsg_type = kind;
        // SAFETY: the header's own bytes, for its size.
        let mut bytes = unsafe {
            std::slice::from_raw_parts(
                (&header as *const libc::cmsghdr).cast::<u8>(),
                std::mem::size_of::<libc::cmsghdr>(),
            )
        }
        .to_vec();
        bytes.resize(header.cmsg_len as usize - data.len(), 0);
        bytes.extend_from_slice(data);
        bytes.resize(space, 0);
        bytes
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_receive_time_is_found_among_control_messages_unaligned() {
        use receive_time::in_control;
        let ts = libc::timespec {
            tv_sec: 5,
            tv_nsec: 7,
        };
        // SAFETY: the timespec's own bytes, for its size.
        let time = unsafe {
            std::slice::from_raw_parts(
                (&ts as *const libc::timespec).cast::<u8>(),
                std::mem::size_of::<libc::timespec>(),
            )
        };
        let other = control_message(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[1, 2, 3, 4]);
        let stamp = control_message(libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS, time);
        // One byte in front, so that nothing in the walk is aligned.
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(&other);
        bytes.extend_from_slice(&stamp);
        assert_eq!(in_control(&bytes[1..]), Some(5_000_000_007));
        assert_eq!(
            in_control(&bytes[1..1 + other.len()]),
            None,
            "no time there"
        );
        let cut = other.len() + stamp.len() - 1;
        assert_eq!(in_control(&bytes[1..1 + cut]), None, "a time cut short");
        let wrong_level = control_message(libc::IPPROTO_TCP, libc::SCM_TIMESTAMPNS, time);
        assert_eq!(in_control(&wrong_level), None, "another level's message");
        // A header whose length is less than a header's ends the walk.
        let mut broken = control_message(libc::SOL_SOCKET, libc::SCM_RIGHTS, &[]);
        broken[..std::mem::size_of::<usize>()].fill(0);
        broken.extend_from_slice(&stamp);
        assert_eq!(in_control(&broken), None);
    }

    #[test]
    fn kernel_time_maps_onto_the_monotonic_clock() {
        let clock = ReadClock::default();
        let before = mono_now_ns();
        clock.stamp_kernel(realtime_now_ns());
        let after = mono_now_ns();
        let stamped = clock.last_read_ns();
        // Slack for the clocks' own disagreement (an NTP slew in progress): 1 ms.
        assert!(stamped + 1_000_000 >= before && stamped <= after + 1_000_000);
    }

    #[test]
    fn arrival_is_the_read_time_capped_by_now() {
        let clock = ReadClock::default();
        assert_eq!(
            clock.arrival_ns(1_000, 500),
            500,
            "no read yet: the caller's clock"
        );
        clock.0.read.store(1_200, Ordering::Relaxed);
        assert_eq!(clock.arrival_ns(1_000, 500), 200);
        assert_eq!(
            clock.arrival_ns(1_000, 150),
            150,
            "never later than the caller's clock"
        );
        assert_eq!(
            clock.arrival_ns(2_000, 500),
            500,
            "a read before the anchor is ignored"
        );
    }
}
