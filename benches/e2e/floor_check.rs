//! A check of the floors themselves (run by the bench's self-check, `cargo test --release
//! --bench e2e`): each socket-level floor drives a closed loop against a small server on
//! 127.0.0.1 that answers every request on a kept-alive connection with a chunked stream of
//! events, and must see every request's every event, stamped within the run.

use crate::floor::{Arrivals, FloorArgs, FloorKind};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use tokentrace_format::mono_now_ns;

/// Events per response.
const EVENTS: usize = 5;
/// Streams and requests of the check's closed loop.
const STREAMS: usize = 3;
const REQUESTS: u64 = 8;

/// Answers one connection's requests until the client closes it: each with `EVENTS` events,
/// every event a chunk of its own, written in two parts (with `TCP_NODELAY`, so a read may
/// take them apart or together).
fn serve(stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let (mut id, mut length) = (String::new(), 0usize);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("x-request-id:") {
                id = value.trim().to_string();
            } else if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().map_err(io::Error::other)?;
            } else if line == "\r\n" {
                break;
            }
        }
        reader.read_exact(&mut vec![0; length])?;
        writer.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")?;
        for i in 0..EVENTS {
            let event = format!("data: {{\"id\":\"{id}\",\"i\":{i}}}\n\n");
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            let (first, second) = chunk.as_bytes().split_at(chunk.len() / 2);
            writer.write_all(first)?;
            writer.write_all(second)?;
        }
        writer.write_all(b"0\r\n\r\n")?;
    }
}

/// Runs floor `kind` against the server and checks what it saw.
fn check(kind: FloorKind) -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().take(STREAMS).flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    let args = FloorArgs {
        kind,
        addr,
        streams: STREAMS,
        requests: REQUESTS,
        threads: 1,
        body: b"{}".to_vec(),
        events_per_request: EVENTS,
        out: std::env::temp_dir().join("unused"),
        tls_ca: None,
    };
    let before = mono_now_ns();
    let (mut all, failures) = match kind {
        FloorKind::Uring => crate::floor_uring::run(&args)?,
        _ => crate::floor_epoll::run(&args)?,
    };
    let after = mono_now_ns();
    all.sort_by_key(|a| a.id);
    let ids: Vec<u64> = all.iter().map(|a| a.id).collect();
    let wrong = |what: String| io::Error::other(format!("floor {}: {what}", kind.name()));
    if failures != 0 || ids != (0..REQUESTS).collect::<Vec<_>>() {
        return Err(wrong(format!("{failures} failures, requests {ids:?}")));
    }
    let outside = |a: &Arrivals| a.events.iter().any(|&t| t < before || t > after);
    if let Some(a) = all.iter().find(|a| a.events.len() != EVENTS || outside(a)) {
        return Err(wrong(format!("request {}: events {:?}", a.id, a.events)));
    }
    // A floor that reads the kernel's receive time must have had it for every read (a read
    // without it is stamped by the clock, which the bounds above cannot tell apart).
    let unstamped: u32 = all.iter().map(|a| a.unstamped).sum();
    if kind != FloorKind::Epoll && unstamped != 0 {
        return Err(wrong(format!(
            "{unstamped} reads without the kernel's receive time"
        )));
    }
    Ok(())
}

/// Checks that a stamped read carries the kernel's receive time, not the clock after the read:
/// a byte that waited 20 ms in the receive queue must be stamped at least 10 ms before its
/// read. Returns the socket pair, to be kept open while the floors are checked: the kernel
/// turns receive timestamps on for the whole host from deferred work, when the first socket
/// asks and off again when the last one closes, and a read before that work ran comes
/// without a time.
fn stamps_are_the_kernels() -> io::Result<(TcpStream, TcpStream)> {
    use crate::floor_epoll::{realtime_offset_ns, recv_stamped};
    use std::os::fd::AsRawFd;
    use tokentrace_recorder::read_clock::receive_time;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (mut server, _) = listener.accept()?;
    receive_time::enable(client.as_raw_fd())?;
    let offset = realtime_offset_ns();
    // Until the host's timestamps are on (bounded: 100 tries of 10 ms).
    for _ in 0..100 {
        server.write_all(b"x")?;
        let (n, at) = recv_stamped(&client, &mut [0u8; 16], offset)?;
        if n != 1 {
            return Err(io::Error::other(format!("stamped read: {n} bytes, not 1")));
        }
        if at.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let sent = mono_now_ns();
    server.write_all(b"x")?;
    std::thread::sleep(std::time::Duration::from_millis(20));
    let before_read = mono_now_ns();
    let (n, at) = recv_stamped(&client, &mut [0u8; 16], offset)?;
    // The offset between the clocks was read once: 1 ms of slack below; above, the 20 ms
    // wait leaves 10 ms.
    match at {
        Some(at) if n == 1 && at + 1_000_000 >= sent && at + 10_000_000 <= before_read => {
            Ok((client, server))
        }
        _ => Err(io::Error::other(format!(
            "stamped read: {n} bytes at {at:?}, sent at {sent}, read at {before_read}"
        ))),
    }
}

/// Checks the floors that read sockets themselves: plain reads, reads with the kernel's
/// receive time, and io_uring's (skipped, and said so, where the kernel refuses io_uring).
pub fn self_check() -> io::Result<()> {
    let _timestamps_on = stamps_are_the_kernels()?;
    check(FloorKind::Epoll)?;
    check(FloorKind::EpollStamped)?;
    match check(FloorKind::Uring) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            eprintln!("e2e self-check: io_uring refused here ({e}); its floor is not checked");
            Ok(())
        }
        checked => checked,
    }
}
