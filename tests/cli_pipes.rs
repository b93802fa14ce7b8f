//! Output to a closed pipe (`tokentrace protocols aiperf | head -5`) ends the process quietly
//! by SIGPIPE, exit status 141 in a shell, never with a panic or an error message. `record`,
//! which keeps SIGPIPE ignored for its sockets, finishes its trace and exits 0.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::{fast_sim, record_child, sim};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

#[test]
fn printing_into_a_closed_pipe_ends_quietly() {
    for args in [&["protocols", "aiperf"][..], &["protocols"][..]] {
        let (reader, writer) = std::io::pipe().unwrap();
        // Nobody reads: the first write meets a closed pipe.
        drop(reader);
        let output = Command::new(assert_cmd::cargo::cargo_bin("tokentrace"))
            .args(args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
        assert_eq!(output.status.signal(), Some(libc::SIGPIPE), "{args:?}");
    }
}

#[test]
fn record_into_a_closed_pipe_finishes_its_trace_without_a_panic() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("piped.ttrace");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = record_child(
        &server.base_url(),
        &out,
        &["--requests", "2", "--max-tokens", "3"],
    )
    .stdout(writer)
    .stderr(Stdio::piped())
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    let trace = tokentrace_format::TraceReader::open(&out).unwrap();
    assert_eq!(trace.requests().filter(Result::is_ok).count(), 2);
}
