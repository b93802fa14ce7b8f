//! Code shared by the end-to-end tests: fixture paths, the real `tokentrace` binary run to
//! success and its JSON read back, imported traces and traces read back through the format
//! crate; [`recording`] for the `record_*`/`reliability_*` tests against the simulator, [`tls`]
//! for a self-signed TLS front. Each test binary uses a part of it, hence `dead_code` allowed.
#![allow(dead_code)]

pub mod browser;
pub mod manifests;
pub mod python_tools;
pub mod recording;
pub mod servers;
pub mod tls;

use assert_cmd::Command;
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokentrace_format::{RequestRecord, TraceReader};

/// The built-in protocols in `tokentrace protocols` order: a test that covers each one
/// compares this list with the crate's, so a new protocol cannot go unpinned.
pub const BUILTIN_PROTOCOLS: [&str; 8] = [
    "tokentrace-v1",
    "capacity-v3",
    "capacity-v4-reasoning",
    "aiperf",
    "aiperf-0.10",
    "vllm",
    "sglang",
    "guidellm",
];

/// Runs `command`, asserts it was refused with status 2 and an error naming `--force`, and
/// returns its stderr: what every command that would overwrite a file does without `--force`.
#[track_caller]
pub fn refused_without_force(command: &mut Command) -> String {
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    stderr
}

/// The fixtures directory, `tests/fixtures` (copies of the real reports and exports the
/// project's reference set holds; see its README).
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The AIPerf 0.13 fixture run (its exports and `profile_export_aiperf.json` summary).
pub fn aiperf_fixture() -> PathBuf {
    fixtures().join("aiperf-0.13-chat")
}

/// A JSON file, parsed.
pub fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A JSON Lines file, one value per line.
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `tokentrace` binary under test (`TOKENTRACE_BIN` when set: [`program_path`]), ready
/// for arguments.
pub fn tokentrace() -> Command {
    Command::new(tokentrace_path())
}

/// Where the `tokentrace` binary under test is (`TOKENTRACE_BIN` when set: [`program_path`]).
pub fn tokentrace_path() -> PathBuf {
    program_path("tokentrace", "TOKENTRACE_BIN")
}

/// Where binary `name` under test is: the environment variable `env` when set (another build
/// of it, such as the profile-guided one `deploy/pgo-build.sh` makes and checks this way),
/// else cargo's build. `TOKENTRACE_BIN` is the name `conformance/run.sh` takes too.
pub fn program_path(name: &str, env: &str) -> PathBuf {
    std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| assert_cmd::cargo::cargo_bin(name))
}

/// Runs `command`, asserts it succeeded (showing its stderr otherwise) and returns its stdout.
#[track_caller]
pub fn stdout_of(command: &mut Command) -> Vec<u8> {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs `command` to success and parses its stdout as JSON.
#[track_caller]
pub fn json_of(command: &mut Command) -> Value {
    serde_json::from_slice(&stdout_of(command)).unwrap()
}

/// `tokentrace import KIND INPUT -o TRACE`, asserted to succeed; returns the assertion for
/// further checks on its output.
pub fn import(kind: &str, input: &Path, trace: &Path) -> assert_cmd::assert::Assert {
    tokentrace()
        .args(["import", kind])
        .arg(input)
        .arg("-o")
        .arg(trace)
        .assert()
        .success()
}

/// Imports the AIPerf fixture into `aiperf.trace` in a fresh temporary directory (kept alive
/// by the returned guard).
pub fn import_aiperf_fixture() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("aiperf.trace");
    import("aiperf", &aiperf_fixture(), &trace);
    (dir, trace)
}

/// `tokentrace analyze TRACE --protocol PROTOCOL --format json`, parsed.
pub fn analyze_json(trace: &Path, protocol: &str) -> Value {
    json_of(tokentrace().arg("analyze").arg(trace).args([
        "--protocol",
        protocol,
        "--format",
        "json",
    ]))
}

/// A trace's reader and its records in id order.
pub fn records_of(trace: &Path) -> (TraceReader, Vec<RequestRecord>) {
    let reader = TraceReader::open(trace).unwrap();
    let mut records: Vec<RequestRecord> = reader.requests().map(Result::unwrap).collect();
    records.sort_by_key(|r| r.meta.id);
    (reader, records)
}
