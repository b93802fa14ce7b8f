//! The epoll floor (the default): what receiving the load costs at the least on this host, with
//! no async runtime and no HTTP library in between. One thread runs `epoll_wait` (level
//! triggered) over one non-blocking `std::net::TcpStream` per stream, kept alive across that
//! stream's requests. For every socket `epoll_wait` reports readable it makes exactly one
//! `read()` of up to 8 KiB and one `clock_gettime(CLOCK_MONOTONIC)` right after it, then only
//! scans the bytes for SSE event ends (`\n\n`, each stamped with that clock read, so arrivals
//! join the simulator's truth log like the recorder's) and for the end of the chunked body;
//! at the body's end it writes the next request (the recorder's bytes, its own
//! `X-Request-ID`) on the same connection, until the closed loop has sent every request.
//! Connects are non-blocking too, so no stream waits while others connect. With `--tls` the
//! same loop reads through rustls (`floor_tls.rs`): still one `read()` per readable event.
//!
//! Why: the recorder's CPU per chunk is compared with this, so "recorder ÷ floor" should mean
//! "what the recorder costs over the physical limit of one wake-up and one read per arrival".
//! A tokio floor (`--floor tokio`) adds a runtime's task scheduling to every read and so
//! understates the recorder's own overhead; here every system call is one the kernel needs
//! (one `epoll_wait` can serve several ready sockets, so when events crowd it costs less than
//! one per event), and nothing else runs.

use crate::floor::{request_parts, Arrivals, FloorArgs, FloorKind, Scan, READ_BUF};
use crate::floor_parse::Parse;
use crate::floor_tls;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use tokentrace_format::{mono_now_ns, ClockAnchor};
use tokentrace_recorder::epoll::Epoll;
use tokentrace_recorder::read_clock::receive_time;

/// Ready sockets taken per `epoll_wait`.
const MAX_EVENTS: usize = 1024;

/// `epoll_wait` timeout: only to notice a stalled run.
const WAIT: std::time::Duration = std::time::Duration::from_millis(1000);

/// Give up when no byte arrived for this long (ns).
const STALL_NS: u64 = 60_000_000_000;

/// One `recvmsg` into `buf` with the kernel's receive time of the read, as the recorder reads
/// (`tokentrace_recorder::read_clock::receive_time`), moved onto CLOCK_MONOTONIC by
/// `offset`: the bytes read, and the time (None where no receive time came).
pub fn recv_stamped(
    stream: &TcpStream,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<(usize, Option<u64>)> {
    let (n, received) = receive_time::recv_into(stream, buf)?;
    Ok((
        n,
        received
            .filter(|_| n > 0)
            .map(|ns| ns.saturating_sub(offset)),
    ))
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now, from one paired reading of the two clocks: what
/// moves a kernel receive time onto the truth log's clock.
pub fn realtime_offset_ns() -> u64 {
    let anchor = ClockAnchor::now();
    anchor.realtime_ns.saturating_sub(anchor.mono_ns)
}

/// One stream's connection and the response in flight on it.
struct Conn {
    stream: TcpStream,
    /// The TLS session over it (`--tls`).
    tls: Option<rustls::ClientConnection>,
    /// A non-blocking connect has not completed yet (registered for `EPOLLOUT`).
    connecting: bool,
    /// The response being read (its request id is the one sent).
    scan: Scan,
    /// With `--floor epoll-parse`: the recorder's parse of the same response.
    parse: Option<Box<Parse>>,
}

/// What one ready event led to.
enum Outcome {
    /// Nothing to do (partial response, or a spurious wake-up).
    Pending,
    /// The connect completed: send the request.
    Connected,
    /// The body ended: record it, send the next request or close.
    Finished,
    /// The server closed the connection.
    Eof,
    /// The connection failed.
    Failed,
}

/// A non-blocking TCP connection with `TCP_NODELAY`; true while the connect is in progress.
fn connect(addr: SocketAddr) -> io::Result<(TcpStream, bool)> {
    let SocketAddr::V4(v4) = addr else {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        return Ok((stream, false));
    };
    let flags = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain system call; the fd is owned right below.
    let fd = unsafe { libc::socket(libc::AF_INET, flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nobody else owns; the stream closes it.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    stream.set_nodelay(true)?;
    // SAFETY: an all-zero sockaddr_in is valid; the fields that matter are set below.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = v4.port().to_be();
    sa.sin_addr = libc::in_addr {
        s_addr: u32::from_ne_bytes(v4.ip().octets()),
    };
    // SAFETY: `sa` is a valid sockaddr_in of the length given.
    let rc = unsafe {
        libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        return Ok((stream, false));
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINPROGRESS) {
        Ok((stream, true))
    } else {
        Err(err)
    }
}

/// Write all of `bytes` to a non-blocking socket (a request fits the send buffer of an idle
/// connection, so the wait below is for the exceptional case).
pub fn send_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    let mut writer = stream;
    while !bytes.is_empty() {
        match writer.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut poll = libc::pollfd {
                    fd: stream.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                if unsafe { libc::poll(&mut poll, 1, 10_000) } == 0 {
                    return Err(io::Error::other("send buffer full for 10 s"));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The request bytes for `id`, built in `out`.
pub fn build_request<'a>(out: &'a mut Vec<u8>, parts: &(Vec<u8>, Vec<u8>), id: u64) -> &'a [u8] {
    out.clear();
    out.extend_from_slice(&parts.0);
    let _ = write!(out, "{id}");
    out.extend_from_slice(&parts.1);
    out
}

/// The closed loop's driver: connections by slot, request ids, finished responses.
struct Floor<'a> {
    args: &'a FloorArgs,
    /// With `--tls`: the client configuration every connection uses.
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    epoll: Epoll,
    parts: (Vec<u8>, Vec<u8>),
    request: Vec<u8>,
    conns: Vec<Option<Conn>>,
    /// Next request id to claim.
    next: u64,
    /// Connections open or connecting.
    live: usize,
    done: Vec<Arrivals>,
    failures: u64,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC, for kernel receive times (`epoll-stamped`).
    offset: u64,
}

impl Floor<'_> {
    /// Claim the next request id, if any is left.
    fn claim(&mut self) -> Option<u64> {
        (self.next < self.args.requests).then(|| {
            self.next += 1;
            self.next - 1
        })
    }

    /// Connect slot `slot` for request `id` and register it; sends at once when the connect
    /// completed immediately. A TLS connection's handshake completes here, and its request is
    /// sent only with `send_now` (the first connections wait until every stream's handshake is
    /// done, so no stream's bytes sit unread while later handshakes run).
    fn connect_slot(&mut self, slot: usize, id: u64, send_now: bool) {
        let opened = match &self.tls {
            Some(config) => floor_tls::connect(self.args.addr, config)
                .map(|(stream, tls)| (stream, Some(tls), false)),
            None => connect(self.args.addr).map(|(stream, connecting)| (stream, None, connecting)),
        }
        .and_then(|(stream, tls, connecting)| {
            let interest = if connecting {
                libc::EPOLLOUT
            } else {
                libc::EPOLLIN
            };
            let fd = stream.as_raw_fd();
            if self.args.kind == FloorKind::EpollStamped {
                receive_time::enable(fd)?;
            }
            self.epoll
                .ctl(libc::EPOLL_CTL_ADD, fd, interest as u32, slot as u64)?;
            Ok(Conn {
                stream,
                tls,
                connecting,
                scan: Scan::new(id, self.args.events_per_request),
                parse: self.new_parse(),
            })
        });
        match opened {
            Ok(conn) => {
                let send = !conn.connecting && (conn.tls.is_none() || send_now);
                self.conns[slot] = Some(conn);
                self.live += 1;
                if send {
                    self.send(slot);
                }
            }
            Err(_) => self.failures += 1,
        }
    }

    /// The parse state of a new response, with `--floor epoll-parse`.
    fn new_parse(&self) -> Option<Box<Parse>> {
        (self.args.kind == FloorKind::EpollParse).then(|| Parse::new(self.args.events_per_request))
    }

    /// Send the request of the response in flight on `slot`.
    fn send(&mut self, slot: usize) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let bytes = build_request(&mut self.request, &self.parts, conn.scan.arrivals.id);
        let sent = match conn.tls.as_mut() {
            Some(tls) => floor_tls::send(&conn.stream, tls, bytes),
            None => send_all(&conn.stream, bytes),
        };
        if sent.is_err() {
            self.fail(slot);
        }
    }

    /// Drop `slot`'s connection as failed.
    fn fail(&mut self, slot: usize) {
        if self.conns[slot].take().is_some() {
            self.live -= 1;
            self.failures += 1;
        }
    }

    /// Handle one ready event of `slot`; `buf` is the shared read buffer, `last_read` the
    /// latest clock read (for the stall check).
    fn ready(&mut self, slot: usize, buf: &mut [u8], last_read: &mut u64) -> io::Result<()> {
        let Some(conn) = self.conns[slot].as_mut() else {
            return Ok(());
        };
        let outcome = if conn.connecting {
            match conn.stream.take_error() {
                Ok(None) => {
                    conn.connecting = false;
                    let fd = conn.stream.as_raw_fd();
                    self.epoll
                        .ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLIN as u32, slot as u64)?;
                    Outcome::Connected
                }
                Ok(Some(_)) | Err(_) => Outcome::Failed,
            }
        } else if let Some(tls) = conn.tls.as_mut() {
            let (scan, parse) = (&mut conn.scan, &mut conn.parse);
            let mut finished = false;
            let read = floor_tls::read_once(&conn.stream, tls, buf, mono_now_ns, |plain, at| {
                if let Some(parse) = parse.as_mut() {
                    parse.feed(plain, at);
                }
                finished |= scan.feed(plain, at);
            });
            match read {
                Ok(floor_tls::Read1::Data(at)) => {
                    *last_read = at;
                    if finished {
                        Outcome::Finished
                    } else {
                        Outcome::Pending
                    }
                }
                Ok(floor_tls::Read1::WouldBlock) => Outcome::Pending,
                Ok(floor_tls::Read1::Eof) => Outcome::Eof,
                Err(_) => Outcome::Failed,
            }
        } else {
            let read = if self.args.kind == FloorKind::EpollStamped {
                recv_stamped(&conn.stream, buf, self.offset).map(|(n, at)| {
                    if n > 0 && at.is_none() {
                        conn.scan.arrivals.unstamped += 1;
                    }
                    (n, at.unwrap_or_else(mono_now_ns))
                })
            } else {
                let fd = conn.stream.as_raw_fd();
                // SAFETY: `buf` is writable for its length; `fd` is this connection's socket.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                match usize::try_from(n) {
                    Ok(n) => Ok((n, mono_now_ns())),
                    Err(_) => Err(io::Error::last_os_error()),
                }
            };
            match read {
                Ok((0, _)) => Outcome::Eof,
                Ok((n, now)) => {
                    *last_read = now;
                    if let Some(parse) = conn.parse.as_mut() {
                        parse.feed(&buf[..n], now);
                    }
                    if conn.scan.feed(&buf[..n], now) {
                        Outcome::Finished
                    } else {
                        Outcome::Pending
                    }
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Outcome::Pending,
                    _ => Outcome::Failed,
                },
            }
        };
        match outcome {
            Outcome::Pending => {}
            Outcome::Connected => self.send(slot),
            Outcome::Failed => self.fail(slot),
            Outcome::Finished => match self.claim() {
                Some(id) => {
                    let parse = self.new_parse();
                    if let Some(conn) = self.conns[slot].as_mut() {
                        conn.parse = parse;
                        let scan = std::mem::replace(
                            &mut conn.scan,
                            Scan::new(id, self.args.events_per_request),
                        );
                        self.done.push(scan.arrivals);
                    }
                    self.send(slot);
                }
                None => {
                    if let Some(conn) = self.conns[slot].take() {
                        self.done.push(conn.scan.arrivals);
                        self.live -= 1;
                    }
                }
            },
            Outcome::Eof => {
                if let Some(conn) = self.conns[slot].take() {
                    self.done.push(conn.scan.arrivals);
                    self.live -= 1;
                }
                if let Some(id) = self.claim() {
                    self.connect_slot(slot, id, true);
                }
            }
        }
        Ok(())
    }
}

/// Run the load; returns every response's arrivals and the number of connections that failed.
pub fn run(args: &FloorArgs) -> io::Result<(Vec<Arrivals>, u64)> {
    let streams = args.streams.min(args.requests as usize);
    let parts = request_parts(args.addr, &args.body);
    let tls = match &args.tls_ca {
        Some(ca) => Some(floor_tls::client_config(ca)?),
        None => None,
    };
    let mut floor = Floor {
        args,
        tls,
        epoll: Epoll::new()?,
        request: Vec::with_capacity(parts.0.len() + parts.1.len() + 20),
        parts,
        conns: (0..streams).map(|_| None).collect(),
        next: 0,
        live: 0,
        done: Vec::with_capacity(args.requests as usize),
        failures: 0,
        offset: realtime_offset_ns(),
    };
    for slot in 0..streams {
        if let Some(id) = floor.claim() {
            floor.connect_slot(slot, id, false);
        }
    }
    if floor.tls.is_some() {
        for slot in 0..streams {
            floor.send(slot);
        }
    }
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; MAX_EVENTS.min(streams.max(1))];
    let mut buf = vec![0u8; READ_BUF];
    let mut last_read = mono_now_ns();
    while floor.live > 0 {
        let n = floor.epoll.wait(&mut events, WAIT)?;
        if n == 0 {
            if mono_now_ns().saturating_sub(last_read) > STALL_NS {
                return Err(io::Error::other(format!(
                    "no byte for {} s with {} connections open",
                    STALL_NS / 1_000_000_000,
                    floor.live
                )));
            }
            continue;
        }
        for event in &events[..n] {
            let slot = { event.u64 } as usize;
            floor.ready(slot, &mut buf, &mut last_read)?;
        }
    }
    Ok((floor.done, floor.failures))
}
