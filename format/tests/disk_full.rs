//! A write error in the middle of a run (the disk fills up) surfaces as a clear error from
//! `send`/`finish`, never a panic, and leaves the file readable up to its last complete block.
//!
//! The full disk is simulated with RLIMIT_FSIZE (writes past the limit fail with EFBIG), which
//! is process-wide: this file holds a single test so nothing else runs under the limit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use std::time::Duration;
use tokentrace_format::synthetic;
use tokentrace_format::*;

fn set_file_size_limit(bytes: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on valid pointers; SIGXFSZ is ignored so the write fails instead
    // of killing the process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
        limit.rlim_cur = bytes.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0);
    }
}

#[test]
fn a_full_disk_is_an_error_and_the_file_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.trace");
    let header = Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor::now(),
        host: "d".into(),
        shard: 0,
    };
    let config = WriterConfig {
        block_target_bytes: 4096,
        block_max_age: Duration::from_secs(600),
        ..Default::default()
    };
    let records = synthetic::requests(5, 400, 40, true);

    set_file_size_limit(20_000);
    let writer = TraceWriter::create(&path, header, &Manifest::default(), config).unwrap();
    let sender = writer.sender();
    let mut send_error = None;
    for r in &records {
        if let Err(err) = sender.send(r.clone()) {
            send_error = Some(err);
            break;
        }
    }
    let finish = writer.finish(RunEnd::default());
    set_file_size_limit(u64::MAX);

    if let Some(err) = &send_error {
        assert!(matches!(err, FormatError::WriterFailed(_)), "{err}");
        assert!(err.to_string().contains("full.trace"), "{err}");
    }
    let err = finish.expect_err("finish must report the write failure");
    assert!(err.to_string().contains("writing"), "{err}");

    let reader = TraceReader::open(&path).unwrap();
    assert!(reader.block_count() > 0);
    assert_eq!(reader.integrity().verdict(), "recovered");
    let read: Vec<_> = reader.requests().map(Result::unwrap).collect();
    assert!(!read.is_empty() && read.len() < records.len());
    assert_eq!(read[..], records[..read.len()]);
}
