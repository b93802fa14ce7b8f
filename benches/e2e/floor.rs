//! The floor: the least a client can do to stream the same load. One task per stream sends the
//! same HTTP request bytes as the recorder over a kept-alive TCP connection and, per read,
//! takes the clock first and then only counts SSE event ends (`\n\n`) so each event can be
//! joined with the simulator's truth log. No HTTP parsing, no SSE parsing, no JSON, no trace.
//!
//! It runs in a child process (the bench binary re-executed with `--floor-child`) so its CPU
//! time and peak RSS are its own, like the recorder's.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokentrace_format::mono_now_ns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// End of a chunked HTTP/1.1 body: the CRLF closing the last data chunk, then `0\r\n\r\n`.
const BODY_END: &[u8; 7] = b"\r\n0\r\n\r\n";

/// Bytes per socket read, like hyper's initial read buffer.
const READ_BUF: usize = 8192;

/// What the orchestrator asks the floor child to do.
pub struct FloorArgs {
    /// Simulator address.
    pub addr: SocketAddr,
    /// Concurrent streams (closed loop).
    pub streams: usize,
    /// Requests in all.
    pub requests: u64,
    /// Runtime worker threads.
    pub threads: usize,
    /// JSON request body, identical to the recorder's.
    pub body: Vec<u8>,
    /// Expected events per response, to reserve the arrival vector once.
    pub events_per_request: usize,
    /// Where arrivals are written: per request `id u64, n u32, n × mono_ns u64` (little endian).
    pub out: PathBuf,
}

/// One response's event arrival times (absolute CLOCK_MONOTONIC ns).
pub struct Arrivals {
    /// Request id sent as `X-Request-ID`.
    pub id: u64,
    /// Arrival of each event, in order.
    pub events: Vec<u64>,
    /// Reads that completed at least one event.
    pub event_reads: u32,
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
    Ok(FloorArgs {
        addr: get("--addr")?.parse().map_err(|e| format!("--addr: {e}"))?,
        streams: num("--streams")? as usize,
        requests: num("--requests")?,
        threads: num("--threads")? as usize,
        body: std::fs::read(body_file).map_err(|e| format!("{body_file}: {e}"))?,
        events_per_request: num("--events")? as usize,
        out: PathBuf::from(get("--out")?),
    })
}

/// Entry point of the child: run the load, print a JSON summary line, write the arrivals.
pub fn child_main(args: FloorArgs) -> io::Result<()> {
    let before = own_usage();
    let started = mono_now_ns();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let body: Arc<[u8]> = args.body.clone().into();
    let results = runtime.block_on(async {
        let mut tasks = Vec::with_capacity(args.streams);
        for _ in 0..args.streams {
            let (next, body) = (next.clone(), body.clone());
            let (addr, total, cap) = (args.addr, args.requests, args.events_per_request);
            tasks.push(tokio::spawn(stream_loop(addr, next, total, body, cap)));
        }
        let mut all = Vec::new();
        let mut failures = 0u64;
        for task in tasks {
            match task.await {
                Ok(Ok(done)) => all.extend(done),
                Ok(Err(_)) | Err(_) => failures += 1,
            }
        }
        (all, failures)
    });
    let ended = mono_now_ns();
    drop(runtime);
    // Measured before the arrivals are written: a floor client would not write them.
    let after = own_usage();
    let peak_kib = crate::procs::vm_hwm_kib("/proc/self/status").unwrap_or(0);
    let (all, failures) = results;
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

/// One closed-loop stream: claim an id, send, read to the end of the body, repeat.
async fn stream_loop(
    addr: SocketAddr,
    next: Arc<AtomicU64>,
    total: u64,
    body: Arc<[u8]>,
    events_per_request: usize,
) -> io::Result<Vec<Arrivals>> {
    let mut done = Vec::new();
    let mut buf = vec![0u8; READ_BUF];
    let mut conn: Option<TcpStream> = None;
    loop {
        let id = next.fetch_add(1, Ordering::Relaxed);
        if id >= total {
            return Ok(done);
        }
        let stream = match conn.as_mut() {
            Some(stream) => stream,
            None => {
                let stream = TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                conn.insert(stream)
            }
        };
        let mut request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\n\
             content-type: application/json\r\naccept: text/event-stream\r\n\
             x-request-id: {id}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        stream.write_all(&request).await?;
        let mut arrivals = Arrivals {
            id,
            events: Vec::with_capacity(events_per_request),
            event_reads: 0,
        };
        let mut prev = 0u8;
        let mut tail = [0u8; 7];
        loop {
            let n = stream.read(&mut buf).await?;
            let now = mono_now_ns();
            if n == 0 {
                conn = None;
                break;
            }
            let data = &buf[..n];
            let before = arrivals.events.len();
            for i in memchr::memchr_iter(b'\n', data) {
                let previous = if i == 0 { prev } else { data[i - 1] };
                if previous == b'\n' {
                    arrivals.events.push(now);
                }
            }
            if arrivals.events.len() > before {
                arrivals.event_reads += 1;
            }
            prev = data[n - 1];
            let width = tail.len();
            if n >= width {
                tail.copy_from_slice(&data[n - width..]);
            } else {
                tail.rotate_left(n);
                tail[width - n..].copy_from_slice(data);
            }
            if &tail == BODY_END {
                break;
            }
        }
        done.push(arrivals);
    }
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
        });
    }
    Ok(out)
}
