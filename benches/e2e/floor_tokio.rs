//! The tokio floor (`--floor tokio`), kept for comparison with the epoll floor: a
//! multi-threaded tokio runtime with the recorder's worker-thread count and one task per
//! stream on a kept-alive TCP connection. Per read it takes the clock right after the read
//! returns and counts event ends like the epoll floor, so the two differ only in what the
//! runtime adds around each read (task wake-ups, the reactor, work stealing).

use crate::floor::{request_parts, Arrivals, FloorArgs, Scan, READ_BUF};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokentrace_format::mono_now_ns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Run the load; returns every response's arrivals and the number of streams that failed.
pub fn run(args: &FloorArgs) -> io::Result<(Vec<Arrivals>, u64)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let parts = Arc::new(request_parts(args.addr, &args.body));
    let results = runtime.block_on(async {
        let mut tasks = Vec::with_capacity(args.streams);
        for _ in 0..args.streams {
            let (next, parts) = (next.clone(), parts.clone());
            let (addr, total, cap) = (args.addr, args.requests, args.events_per_request);
            tasks.push(tokio::spawn(stream_loop(addr, next, total, parts, cap)));
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
    drop(runtime);
    Ok(results)
}

/// One closed-loop stream: claim an id, send, read to the end of the body, repeat.
async fn stream_loop(
    addr: SocketAddr,
    next: Arc<AtomicU64>,
    total: u64,
    parts: Arc<(Vec<u8>, Vec<u8>)>,
    events_per_request: usize,
) -> io::Result<Vec<Arrivals>> {
    let mut done = Vec::new();
    let mut buf = vec![0u8; READ_BUF];
    let mut conn: Option<TcpStream> = None;
    let mut request = Vec::with_capacity(parts.0.len() + parts.1.len() + 20);
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
        request.clear();
        request.extend_from_slice(&parts.0);
        request.extend_from_slice(id.to_string().as_bytes());
        request.extend_from_slice(&parts.1);
        stream.write_all(&request).await?;
        let mut scan = Scan::new(id, events_per_request);
        loop {
            let n = stream.read(&mut buf).await?;
            let now = mono_now_ns();
            if n == 0 {
                conn = None;
                break;
            }
            if scan.feed(&buf[..n], now) {
                break;
            }
        }
        done.push(scan.arrivals);
    }
}
