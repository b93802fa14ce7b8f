//! The truth log: the server's own record of when it wrote each SSE event, the ground truth
//! against which a client's timestamps are measured. Records go through a channel to a thread
//! that formats and writes them, so the hot path pays one clock read and one channel send.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Absolute CLOCK_MONOTONIC time in ns (the same clock the recorder stamps chunks with).
pub fn mono_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and CLOCK_MONOTONIC always exists on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Raises this process's soft limit on open files to its hard limit, so one server can hold
/// thousands of connections; returns the new limit.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: both calls are given a valid, writable rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // `rlim_t` is u64 on 64-bit Linux but not on every target.
    #[allow(clippy::unnecessary_cast)]
    Ok(limit.rlim_cur as u64)
}

/// One truth log line.
pub(crate) struct TruthRecord {
    /// The request id, already JSON-encoded (quoted and escaped).
    pub request_id_json: Arc<str>,
    pub chunk_index: u32,
    pub mono_ns: u64,
}

/// Sending side, cloned into every streaming response body.
pub(crate) type TruthSender = Sender<TruthRecord>;

/// The writer thread. Dropping every sender ends it after a final flush.
pub(crate) struct TruthLog {
    thread: JoinHandle<io::Result<()>>,
}

impl TruthLog {
    /// Creates (truncates) `path` and starts the writer thread.
    pub(crate) fn create(path: &Path) -> io::Result<(TruthLog, TruthSender)> {
        let file = File::create(path)?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("sim-truth-log".into())
            .spawn(move || write_loop(rx, BufWriter::with_capacity(1 << 16, file)))?;
        Ok((TruthLog { thread }, tx))
    }

    /// Waits until every sender is gone and the file is flushed.
    pub(crate) fn finish(self) -> io::Result<()> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("truth log writer panicked")))
    }
}

/// Polls instead of blocking while busy: a receiver blocked in `recv` makes every send pay a
/// futex wake, which at 100k events/s costs more than the formatting. After
/// `IDLE_POLLS_BEFORE_BLOCKING` empty polls it blocks again, so an idle server sleeps.
fn write_loop(rx: Receiver<TruthRecord>, mut out: BufWriter<File>) -> io::Result<()> {
    const POLL_INTERVAL: Duration = Duration::from_millis(1);
    const IDLE_POLLS_BEFORE_BLOCKING: u32 = 100;
    let mut line = Vec::with_capacity(128);
    let mut idle_polls = 0;
    loop {
        match rx.try_recv() {
            Ok(record) => {
                idle_polls = 0;
                format_record(&mut line, &record);
                out.write_all(&line)?;
            }
            Err(TryRecvError::Empty) => {
                out.flush()?;
                idle_polls += 1;
                if idle_polls < IDLE_POLLS_BEFORE_BLOCKING {
                    std::thread::sleep(POLL_INTERVAL);
                    continue;
                }
                let Ok(record) = rx.recv() else { break };
                idle_polls = 0;
                format_record(&mut line, &record);
                out.write_all(&line)?;
            }
            Err(TryRecvError::Disconnected) => break,
        }
    }
    out.flush()
}

fn format_record(line: &mut Vec<u8>, r: &TruthRecord) {
    line.clear();
    line.extend_from_slice(b"{\"request_id\":");
    line.extend_from_slice(r.request_id_json.as_bytes());
    line.extend_from_slice(b",\"chunk_index\":");
    push_decimal(line, u64::from(r.chunk_index));
    line.extend_from_slice(b",\"mono_ns\":");
    push_decimal(line, r.mono_ns);
    line.extend_from_slice(b"}\n");
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_one_json_line_per_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth.jsonl");
        let (log, tx) = TruthLog::create(&path).unwrap();
        let id: Arc<str> = serde_json::Value::from("a\"b").to_string().into();
        for i in 0..3 {
            let record = TruthRecord {
                request_id_json: id.clone(),
                chunk_index: i,
                mono_ns: 5,
            };
            tx.send(record).unwrap();
        }
        drop(tx);
        log.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2]["request_id"], "a\"b");
        assert_eq!(lines[2]["chunk_index"], 2);
        assert_eq!(lines[0]["mono_ns"], 5);
    }

    #[test]
    fn decimal_formatting() {
        for n in [0, 7, 10, 1_234_567_890_123, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }

    #[test]
    fn open_file_limit_is_at_least_the_default() {
        assert!(raise_open_file_limit().unwrap() >= 256);
    }

    #[test]
    fn monotonic_clock_advances() {
        let a = mono_now_ns();
        let b = mono_now_ns();
        assert!(a > 0 && b >= a);
    }
}
