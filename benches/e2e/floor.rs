//! The floor: the least a client can do to stream the same load, so that "recorder ÷ floor"
//! says how much the recorder costs above what any client on this host must pay. It sends the
//! same HTTP request bytes as the recorder over kept-alive TCP connections and, per read, only
//! takes the clock and counts SSE event ends (`\n\n`) so each event can be joined with the
//! simulator's truth log. No HTTP parsing, no SSE parsing, no JSON, no trace.
//!
//! Two implementations share this child protocol and output format:
//! - `epoll` (default, [`crate::floor_epoll`]): one thread, no async runtime, no HTTP library;
//!   `epoll_wait` over non-blocking `std::net::TcpStream`s, one `read` and one clock read per
//!   readable socket. This is the physical limit of one wake-up and one read per arrival.
//! - `tokio` ([`crate::floor_tokio`]): a tokio runtime with one task per stream, kept for
//!   comparison (`--floor tokio`); it adds the runtime's scheduling to every read.
//!
//! It runs in a child process (the bench binary re-executed with `--floor-child`) so its CPU
//! time and peak RSS are its own, like the recorder's.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use tokentrace_format::mono_now_ns;

/// End of a chunked HTTP/1.1 body: the CRLF closing the last data chunk, then `0\r\n\r\n`.
pub const BODY_END: &[u8; 7] = b"\r\n0\r\n\r\n";

/// Bytes per socket read, like hyper's initial read buffer.
pub const READ_BUF: usize = 8192;

/// Which floor client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorKind {
    /// One thread, `epoll` over non-blocking sockets (the default).
    Epoll,
    /// The same, with the recorder's SSE parse, classification and packing of every read
    /// (`floor_parse.rs`).
    EpollParse,
    /// The same, reading with `recvmsg` and the kernel's receive time (`SO_TIMESTAMPNS`), as
    /// the recorder reads.
    EpollStamped,
    /// A tokio runtime, one task per stream.
    Tokio,
    /// One thread, one io_uring, multishot `recvmsg` with kernel receive times
    /// (`floor_uring.rs`).
    Uring,
}

impl FloorKind {
    /// Parse `epoll`, `epoll-parse` or `tokio`.
    pub fn parse(text: &str) -> Result<FloorKind, String> {
        match text {
            "epoll" => Ok(FloorKind::Epoll),
            "epoll-parse" => Ok(FloorKind::EpollParse),
            "epoll-stamped" => Ok(FloorKind::EpollStamped),
            "tokio" => Ok(FloorKind::Tokio),
            "uring" => Ok(FloorKind::Uring),
            other => Err(format!(
                "unknown floor {other:?} (epoll, epoll-parse, epoll-stamped, tokio or uring)"
            )),
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            FloorKind::Epoll => "epoll",
            FloorKind::EpollParse => "epoll-parse",
            FloorKind::EpollStamped => "epoll-stamped",
            FloorKind::Tokio => "tokio",
            FloorKind::Uring => "uring",
        }
    }
}

/// What the orchestrator asks the floor child to do.
pub struct FloorArgs {
    /// Which client.
    pub kind: FloorKind,
    /// Simulator address.
    pub addr: SocketAddr,
    /// Concurrent streams (closed loop).
    pub streams: usize,
    /// Requests in all.
    pub requests: u64,
    /// Runtime worker threads (tokio floor only; the epoll floor is one thread).
    pub threads: usize,
    /// JSON request body, identical to the recorder's.
    pub body: Vec<u8>,
    /// Expected events per response, to reserve the arrival vector once.
    pub events_per_request: usize,
    /// Where arrivals are written: per request `id u64, n u32, n × mono_ns u64` (little endian).
    pub out: PathBuf,
    /// Speak TLS, trusting this certificate (PEM): the epoll floor only.
    pub tls_ca: Option<PathBuf>,
}

/// One response's event arrival times (absolute CLOCK_MONOTONIC ns).
pub struct Arrivals {
    /// Request id sent as `X-Request-ID`.
    pub id: u64,
    /// Arrival of each event, in order.
    pub events: Vec<u64>,
    /// Reads that completed at least one event.
    pub event_reads: u32,
    /// Reads that were to carry the kernel's receive time and came without it, stamped with
    /// the clock instead (`epoll-stamped` and `uring` only).
    pub unstamped: u32,
}

/// Per-response scan state: counts event ends and finds the end of the chunked body, across
/// read boundaries.
pub struct Scan {
    /// The response's arrivals so far.
    pub arrivals: Arrivals,
    prev: u8,
    tail: [u8; 7],
}

impl Scan {
    /// A fresh response for request `id`.
    pub fn new(id: u64, events_per_request: usize) -> Scan {
        Scan {
            arrivals: Arrivals {
                id,
                events: Vec::with_capacity(events_per_request),
                event_reads: 0,
                unstamped: 0,
            },
            prev: 0,
            tail: [0; 7],
        }
    }

    /// Account for one non-empty read of `data` stamped `now`; true at the end of the body.
    pub fn feed(&mut self, data: &[u8], now: u64) -> bool {
        let Some(&last) = data.last() else {
            return false;
        };
        let events = &mut self.arrivals.events;
        let before = events.len();
        for i in memchr::memchr_iter(b'\n', data) {
            let previous = if i == 0 { self.prev } else { data[i - 1] };
            if previous == b'\n' {
                events.push(now);
            }
        }
        if events.len() > before {
            self.arrivals.event_reads += 1;
        }
        self.prev = last;
        let (n, width) = (data.len(), self.tail.len());
        if n >= width {
            self.tail.copy_from_slice(&data[n - width..]);
        } else {
            self.tail.rotate_left(n);
            self.tail[width - n..].copy_from_slice(data);
        }
        &self.tail == BODY_END
    }
}

/// The request head before the id (`x-request-id` is the last header but one) and the rest
/// after it (content length, blank line, body): the recorder's request bytes, id aside.
pub fn request_parts(addr: SocketAddr, body: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\n\
         content-type: application/json\r\naccept: text/event-stream\r\nx-request-id: "
    )
    .into_bytes();
    let mut rest = format!("\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    rest.extend_from_slice(body);
    (head, rest)
}

/// Parse the child's arguments (everything after `--floor-child`).
pub fn parse_args(args: &[String]) -> Result<FloorArgs, String> {
    let get = |name: &str| -> Result<&str, String> {
        let at = args
            .iter()
            .position(|a| a == name)
            .ok_or(format!("missing {name}"))?;
        args.get(at + 1)
            .map(String::as_str)
            .ok_or(format!("{name} needs a value"))
    };
    let num = |name: &str| -> Result<u64, String> {
        get(name)?.parse().map_err(|e| format!("{name}: {e}"))
    };
    let body_file = get("--body-file")?;
    let kind = match get("--kind") {
        Ok(kind) => FloorKind::parse(kind)?,
        Err(_) => FloorKind::Epoll,
    };
    Ok(FloorArgs {
        kind,
        addr: get("--addr")?.parse().map_err(|e| format!("--addr: {e}"))?,
        streams: num("--streams")? as usize,
        requests: num("--requests")?,
        threads: num("--threads")? as usize,
        body: std::fs::read(body_file).map_err(|e| format!("{body_file}: {e}"))?,
        events_per_request: num("--events")? as usize,
        out: PathBuf::from(get("--out")?),
        tls_ca: get("--tls-ca").ok().map(PathBuf::from),
    })
}

/// Entry point of the child: run the load, print a JSON summary line, write the arrivals.
pub fn child_main(args: FloorArgs) -> io::Result<()> {
    let before = own_usage();
    let started = mono_now_ns();
    let (all, failures) = match args.kind {
        FloorKind::EpollStamped if args.tls_ca.is_some() => {
            return Err(io::Error::other(
                "the epoll-stamped floor has no TLS; use the epoll floor",
            ))
        }
        FloorKind::Epoll | FloorKind::EpollParse | FloorKind::EpollStamped => {
            crate::floor_epoll::run(&args)?
        }
        FloorKind::Tokio if args.tls_ca.is_some() => {
            return Err(io::Error::other(
                "the tokio floor has no TLS; use the epoll floor",
            ))
        }
        FloorKind::Tokio => crate::floor_tokio::run(&args)?,
        FloorKind::Uring => crate::floor_uring::run(&args)?,
    };
    let ended = mono_now_ns();
    // Measured before the arrivals are written: a floor client would not write them.
    let after = own_usage();
    let peak_kib = crate::procs::vm_hwm_kib("/proc/self/status").unwrap_or(0);
    let events: u64 = all.iter().map(|a| a.events.len() as u64).sum();
    let reads: u64 = all.iter().map(|a| u64::from(a.event_reads)).sum();
    let mut file = io::BufWriter::new(std::fs::File::create(&args.out)?);
    for a in &all {
        file.write_all(&a.id.to_le_bytes())?;
        file.write_all(&(a.events.len() as u32).to_le_bytes())?;
        for t in &a.events {
            file.write_all(&t.to_le_bytes())?;
        }
    }
    file.flush()?;
    println!(
        "{{\"cpu_ns\":{},\"rss_before_bytes\":{},\"vm_hwm_bytes\":{},\"events\":{events},\
         \"event_reads\":{reads},\"requests\":{},\"failed_streams\":{failures},\"wall_ns\":{}}}",
        after.0 - before.0,
        before.1,
        peak_kib * 1024,
        all.len(),
        ended - started
    );
    Ok(())
}

/// (user + system CPU ns, current RSS bytes) of this process.
fn own_usage() -> (u64, u64) {
    // SAFETY: an all-zero rusage is valid; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0, 0);
    }
    let rss_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    (crate::cpu_ns(&usage), rss_kib * 1024)
}

/// Read the arrivals file written by [`child_main`].
pub fn read_arrivals(path: &std::path::Path) -> io::Result<Vec<Arrivals>> {
    let bytes = std::fs::read(path)?;
    let mut out = Vec::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> io::Result<&[u8]> {
        let slice = bytes
            .get(*at..*at + n)
            .ok_or_else(|| io::Error::other("truncated arrivals file"))?;
        *at += n;
        Ok(slice)
    };
    while at < bytes.len() {
        let id = u64::from_le_bytes(take(&mut at, 8)?.try_into().unwrap_or([0; 8]));
        let n = u32::from_le_bytes(take(&mut at, 4)?.try_into().unwrap_or([0; 4])) as usize;
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            events.push(u64::from_le_bytes(
                take(&mut at, 8)?.try_into().unwrap_or([0; 8]),
            ));
        }
        out.push(Arrivals {
            id,
            events,
            event_reads: 0,
            unstamped: 0,
        });
    }
    Ok(out)
}

/// Check the scanner on hand-made responses split at every byte boundary (run by the
/// `cargo test --benches` self-check).
pub fn self_check() -> io::Result<()> {
    let response: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        f\r\ndata: {\"a\":1}\n\n\r\nf\r\ndata: {\"b\":2}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";
    for split in 1..response.len() {
        let mut scan = Scan::new(7, 4);
        let first = scan.feed(&response[..split], 1);
        let second = scan.feed(&response[split..], 2);
        if first || !second || scan.arrivals.events.len() != 3 {
            return Err(io::Error::other(format!(
                "floor scan wrong at split {split}: {} events, end {first}/{second}",
                scan.arrivals.events.len()
            )));
        }
    }
    let (head, rest) = request_parts("127.0.0.1:9".parse().map_err(io::Error::other)?, b"{}");
    let mut request = head;
    request.extend_from_slice(b"5");
    request.extend_from_slice(&rest);
    let expected = "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:9\r\n\
         content-type: application/json\r\naccept: text/event-stream\r\n\
         x-request-id: 5\r\ncontent-length: 2\r\n\r\n{}";
    if request != expected.as_bytes() {
        return Err(io::Error::other("floor request bytes changed"));
    }
    Ok(())
}
