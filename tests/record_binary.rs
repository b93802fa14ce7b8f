//! `tokentrace-record`, the recorder-only program, against the simulator: it writes the same
//! trace as `tokentrace record`, takes the same flags and fails with the same status.
//!
//! `TOKENTRACE_RECORD_BIN=PATH` runs these tests against another build of it (the
//! profile-guided one of `deploy/pgo-build.sh`) instead of cargo's own.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use assert_cmd::Command;
use common::recording::{assert_ok, fast_sim, sim, unreachable_url};
use common::records_of;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use tokentrace_format::Phase;

/// The `tokentrace-record` under test: `TOKENTRACE_RECORD_BIN` when set, else cargo's build.
fn record_program() -> Command {
    Command::new(common::program_path(
        "tokentrace-record",
        "TOKENTRACE_RECORD_BIN",
    ))
}

/// `tokentrace-record --url URL --model sim --progress off -o OUT ARGS…`, with no API key and
/// bounded in time.
fn record_binary(url: &str, out: &Path, args: &[&str]) -> Command {
    let mut cmd = record_program();
    cmd.env_remove("OPENAI_API_KEY")
        .timeout(Duration::from_secs(120))
        .args(["--url", url, "--model", "sim", "--progress", "off", "-o"])
        .arg(out)
        .args(args);
    cmd
}

#[test]
fn records_a_trace_the_format_crate_reads_back() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.tt");
    let args = [
        "--requests",
        "8",
        "--warmup",
        "1",
        "--concurrency",
        "2",
        "--input-tokens",
        "64",
        "--max-tokens",
        "10",
        "--ignore-eos",
        "--label",
        "host=small",
    ];
    let output = record_binary(&server.base_url(), &out, &args)
        .assert()
        .success()
        .get_output()
        .clone();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("recorded 9 requests"), "{stdout}");

    let (reader, records) = records_of(&out);
    assert_eq!(records.len(), 9);
    assert_eq!(reader.run_end().unwrap().reason, "completed");
    assert_eq!(reader.manifest().labels["host"], "small");
    // Compressed for the least CPU unless asked otherwise, and the manifest says so.
    assert_eq!(reader.manifest().load["zstd_level"], 1);
    assert_eq!(
        reader.manifest().argv[0].rsplit('/').next(),
        Some("tokentrace-record")
    );
    assert_eq!(
        records
            .iter()
            .filter(|r| r.meta.phase == Phase::Warmup)
            .count(),
        1
    );
    for r in &records {
        assert_ok(r);
        assert_eq!(r.meta.http_status, 200);
        assert_eq!(r.meta.usage.completion_tokens, Some(10));
        assert!(!r.chunks.is_empty());
    }

    // Like `tokentrace record`, it keeps an existing trace unless --force is given.
    let stderr = common::refused_without_force(&mut record_binary(
        &server.base_url(),
        &out,
        &["--requests", "1"],
    ));
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert_eq!(records_of(&out).1.len(), 9, "the old trace must be kept");
    record_binary(&server.base_url(), &out, &["--requests", "2", "--force"])
        .assert()
        .success();
    assert_eq!(records_of(&out).1.len(), 2);
}

#[test]
fn takes_a_zstd_level_within_zstds_range() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run.tt");
    let args = ["--requests", "3", "--max-tokens", "8", "--capture", "text"];
    record_binary(
        &server.base_url(),
        &out,
        &[&args[..], &["--zstd-level", "19"]].concat(),
    )
    .assert()
    .success();
    let (reader, records) = records_of(&out);
    assert_eq!(reader.manifest().load["zstd_level"], 19);
    assert_eq!(records.len(), 3);
    for r in &records {
        assert_ok(r);
    }

    for level in ["0", "20", "fast"] {
        let refused = record_binary(
            &server.base_url(),
            &out,
            &["--zstd-level", level, "--force"],
        )
        .assert()
        .failure()
        .code(2)
        .get_output()
        .clone();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("--zstd-level"), "{stderr}");
    }
    assert_eq!(records_of(&out).1.len(), 3, "a refused run keeps the trace");
}

#[test]
fn an_unreachable_server_fails_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("none.tt");
    let output = record_binary(&unreachable_url(), &out, &["--requests", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("unreachable"), "{stderr}");
}

/// The long flags a `--help` text lists.
fn long_flags(help: &[u8]) -> BTreeSet<String> {
    String::from_utf8_lossy(help)
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            l.split(|c: char| c.is_whitespace() || c == ',')
                .find(|w| w.starts_with("--"))
                .map(|w| w.split(['=', '<']).next().unwrap_or(w).to_string())
        })
        .collect()
}

#[test]
fn takes_the_same_flags_as_tokentrace_record() {
    let own = record_program().arg("--help").output().unwrap();
    assert!(own.status.success());
    let full = common::tokentrace()
        .args(["record", "--help"])
        .output()
        .unwrap();
    assert!(full.status.success());
    let mut own_flags = long_flags(&own.stdout);
    // A program of its own also answers --version.
    assert!(own_flags.remove("--version"), "{own_flags:?}");
    let full_flags = long_flags(&full.stdout);
    assert!(full_flags.contains("--url") && full_flags.contains("--start-at"));
    assert_eq!(own_flags, full_flags);
}
