//! The io_uring floor (`--floor uring`): the epoll floor's closed loop, read through one
//! io_uring instead of `epoll_wait` and `read`. Each connection has one multishot `recvmsg`
//! armed for its whole life, with buffers from one provided-buffer ring; every completion is
//! one read's bytes and, in its control message, the kernel's receive time of the read
//! (`SO_TIMESTAMPNS`), which stamps the read's events as the recorder stamps its own.
//!
//! Why: the recorder needs the kernel's receive time, which a plain `read()` does not bring,
//! and `recvmsg` per read costs more than `read` (docs/PERFORMANCE.md). This floor measures
//! what the same load costs when the receive time comes through io_uring: no system call
//! per read, one `io_uring_enter` per batch of completions. Plain HTTP only; a connection
//! the server closes counts as failed (the simulator keeps every connection open).

use crate::floor::{request_parts, Arrivals, FloorArgs, Scan, READ_BUF};
use crate::floor_epoll::{build_request, realtime_offset_ns, send_all};
use io_uring::{cqueue, opcode, types, IoUring};
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use tokentrace_format::mono_now_ns;
use tokentrace_recorder::read_clock::receive_time;

/// Buffers in the provided-buffer ring (a power of two).
const BUFFERS: u16 = 4096;
/// The buffer group's id.
const GROUP: u16 = 1;
/// Room for the one control message a read brings: `SCM_TIMESTAMPNS`'s timespec.
// SAFETY: pure arithmetic on a length.
const TIMESTAMP_CONTROL: usize =
    unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::timespec>() as u32) } as usize;
/// Give up when no completion came for this long.
const STALL: std::time::Duration = std::time::Duration::from_secs(60);

/// The provided-buffer ring: its entries (page-aligned, as the kernel requires) and the
/// buffers they point at. The kernel writes into a buffer only while it is in the ring, and
/// this side reads one only after a completion handed it over and before giving it back.
/// Whoever registers it must drop the io_uring first (`run` declares the ring after it).
struct Buffers {
    ring: *mut types::BufRingEntry,
    ring_len: usize,
    memory: Vec<u8>,
    tail: u16,
}

impl Buffers {
    fn register(uring: &IoUring) -> io::Result<Buffers> {
        let ring_len = usize::from(BUFFERS) * std::mem::size_of::<types::BufRingEntry>();
        // SAFETY: an anonymous private mapping; checked below and unmapped on drop.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut buffers = Buffers {
            ring: ring.cast(),
            ring_len,
            memory: vec![0; usize::from(BUFFERS) * READ_BUF],
            tail: 0,
        };
        // SAFETY: the entries and buffers live as long as `buffers`, which its caller drops
        // after the io_uring (see the type's comment).
        unsafe {
            uring
                .submitter()
                .register_buf_ring_with_flags(ring as u64, BUFFERS, GROUP, 0)?
        };
        for bid in 0..BUFFERS {
            buffers.give(bid);
        }
        buffers.publish();
        Ok(buffers)
    }

    /// Buffer `bid`'s first `len` bytes.
    fn get(&self, bid: u16, len: usize) -> &[u8] {
        let start = usize::from(bid) * READ_BUF;
        &self.memory[start..start + len.min(READ_BUF)]
    }

    /// Puts buffer `bid` back in the ring (seen by the kernel at the next `publish`).
    fn give(&mut self, bid: u16) {
        let at = usize::from(self.tail & (BUFFERS - 1));
        // SAFETY: `at` is within the ring's BUFFERS entries.
        let entry = unsafe { &mut *self.ring.add(at) };
        entry.set_addr(self.memory.as_ptr() as u64 + u64::from(bid) * READ_BUF as u64);
        entry.set_len(READ_BUF as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field lies within the mapped ring; the kernel reads it atomically.
        let tail = unsafe { &*(types::BufRingEntry::tail(self.ring) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `register`, of this length.
        unsafe { libc::munmap(self.ring.cast(), self.ring_len) };
    }
}

/// One stream's connection and the response in flight on it.
struct Conn {
    stream: TcpStream,
    scan: Scan,
}

/// The error of a kernel that refuses io_uring or what this floor asks of it (multishot
/// `recvmsg` and provided-buffer rings need Linux 6.0, `DEFER_TASKRUN` 6.1).
fn refused(error: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("io_uring refused: {error}"),
    )
}

/// Ends `slot`'s connection: shut down (which also ends its multishot read, whose last
/// completions are then only recycled), its response kept.
fn close(conns: &mut [Option<Conn>], slot: usize, done: &mut Vec<Arrivals>, live: &mut usize) {
    if let Some(conn) = conns[slot].take() {
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        done.push(conn.scan.arrivals);
        *live -= 1;
    }
}

/// Run the load; returns every response's arrivals and the number of connections that failed.
pub fn run(args: &FloorArgs) -> io::Result<(Vec<Arrivals>, u64)> {
    if args.tls_ca.is_some() {
        return Err(io::Error::other("the io_uring floor has no TLS"));
    }
    let streams = args.streams.min(args.requests as usize);
    let parts = request_parts(args.addr, &args.body);
    let mut request = Vec::new();
    // Every multishot `recvmsg` reads this header: no address, room for the timestamp.
    // SAFETY: an all-zero msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_controllen = TIMESTAMP_CONTROL;
    // Declared before the ring, so dropped after it: the kernel writes into the buffers until
    // the ring is gone.
    let mut buffers;
    let mut uring: IoUring = IoUring::builder()
        .setup_cqsize(4 * u32::from(BUFFERS))
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(256)
        .map_err(refused)?;
    buffers = Buffers::register(&uring).map_err(refused)?;
    let arm = |uring: &mut IoUring, slot: usize, fd: i32, msg: &libc::msghdr| -> io::Result<()> {
        let sqe = opcode::RecvMsgMulti::new(types::Fd(fd), msg, GROUP)
            .build()
            .user_data(slot as u64);
        // SAFETY: `msg` is declared before the ring, so it outlives every request.
        while unsafe { uring.submission().push(&sqe) }.is_err() {
            uring.submit()?;
        }
        Ok(())
    };
    let offset = realtime_offset_ns();
    let mut conns: Vec<Option<Conn>> = Vec::with_capacity(streams);
    let mut next = 0u64;
    let mut failures = 0u64;
    let mut done = Vec::with_capacity(args.requests as usize);
    for slot in 0..streams {
        let stream = TcpStream::connect(args.addr)?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        receive_time::enable(stream.as_raw_fd())?;
        arm(&mut uring, slot, stream.as_raw_fd(), &msg)?;
        conns.push(Some(Conn {
            stream,
            scan: Scan::new(next, args.events_per_request),
        }));
        next += 1;
    }
    uring.submit()?;
    for conn in conns.iter().flatten() {
        send_all(
            &conn.stream,
            build_request(&mut request, &parts, conn.scan.arrivals.id),
        )?;
    }
    let mut live = conns.iter().flatten().count();
    let wait = types::Timespec::new().sec(1);
    let wait = types::SubmitArgs::new().timespec(&wait);
    let mut last = std::time::Instant::now();
    let mut cqes: Vec<cqueue::Entry> = Vec::new();
    while live > 0 {
        match uring.submitter().submit_with_args(1, &wait) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        cqes.clear();
        cqes.extend(uring.completion());
        if cqes.is_empty() {
            if last.elapsed() > STALL {
                return Err(io::Error::other(format!("no byte for 60 s, {live} open")));
            }
            continue;
        }
        last = std::time::Instant::now();
        for cqe in &cqes {
            let slot = cqe.user_data() as usize;
            let more = cqueue::more(cqe.flags());
            let res = cqe.result();
            let mut outcome = None; // Some(true): finished; Some(false): closed or failed
            if let Some(bid) = cqueue::buffer_select(cqe.flags()) {
                let bytes = buffers.get(bid, res.max(0) as usize);
                let parsed = types::RecvMsgOut::parse(bytes, &msg).ok();
                if let (Some(out), Some(Some(conn))) = (parsed, conns.get_mut(slot)) {
                    let payload = out.payload_data();
                    if payload.is_empty() {
                        outcome = Some(false);
                    } else {
                        let received = receive_time::in_control(out.control_data());
                        let at = received.map_or_else(
                            || {
                                conn.scan.arrivals.unstamped += 1;
                                mono_now_ns()
                            },
                            |ns| ns.saturating_sub(offset),
                        );
                        if conn.scan.feed(payload, at) {
                            outcome = Some(true);
                        }
                    }
                }
                buffers.give(bid);
            } else if res < 0 && res != -libc::ENOBUFS {
                outcome = Some(false);
            }
            match outcome {
                Some(true) => {
                    let Some(conn) = conns[slot].as_mut() else {
                        continue;
                    };
                    if next < args.requests {
                        let scan = std::mem::replace(
                            &mut conn.scan,
                            Scan::new(next, args.events_per_request),
                        );
                        done.push(scan.arrivals);
                        let sent =
                            send_all(&conn.stream, build_request(&mut request, &parts, next));
                        next += 1;
                        if sent.is_err() {
                            // Its response will never come: the connection ends here.
                            failures += 1;
                            close(&mut conns, slot, &mut done, &mut live);
                            continue;
                        }
                    } else {
                        close(&mut conns, slot, &mut done, &mut live);
                        continue;
                    }
                }
                Some(false) => {
                    if conns[slot].is_some() {
                        failures += 1;
                        close(&mut conns, slot, &mut done, &mut live);
                    }
                    continue;
                }
                None => {}
            }
            if !more {
                if let Some(conn) = conns[slot].as_ref() {
                    arm(&mut uring, slot, conn.stream.as_raw_fd(), &msg)?;
                }
            }
        }
        buffers.publish();
    }
    drop(uring);
    drop(buffers);
    Ok((done, failures))
}
