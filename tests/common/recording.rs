//! The `tokentrace record` end-to-end tests' side of the shared code: a simulator on
//! 127.0.0.1, the real binary run against it (to completion or as a child the test signals),
//! and small readings of the trace and of the process.

use assert_cmd::Command;
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};
use tokentrace_format::{Channel, RequestRecord, TraceReader};
use tokentrace_sim::{SimConfig, SimHandle, SimServer};

/// How long one `tokentrace` run may take before the test fails instead of hanging.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A fast simulator: short steps, so a request streams in a few milliseconds.
pub fn fast_sim() -> SimConfig {
    SimConfig {
        step_base_ms: 1.0,
        step_per_seq_ms: 0.0,
        prefill_base_ms: 0.5,
        prefill_tok_s: 1_000_000.0,
        ..SimConfig::default()
    }
}

/// A fast simulator whose arrivals fail on a schedule: every 5th answers HTTP 500, every 7th is
/// reset after 2 chunks, every 11th malformed, every 3rd ends without `[DONE]`, every 13th
/// sends a 4 KiB line (arrival n is request id n-1 with one request at a time and a prompt
/// file, so no calibration probes).
pub fn fault_matrix_sim() -> SimConfig {
    SimConfig {
        faults: tokentrace_sim::FaultConfig {
            http_500_every: 5,
            reset_every: 7,
            malformed_every: 11,
            no_done_every: 3,
            oversize_every: 13,
            oversize_bytes: 4096,
            after_chunks: 2,
            ..tokentrace_sim::FaultConfig::default()
        },
        ..fast_sim()
    }
}

/// What [`fault_matrix_sim`] does to requests 0 to 13 when they arrive one at a time.
pub const FAULT_MATRIX_OUTCOMES: [(u64, tokentrace_format::Outcome); 14] = {
    use tokentrace_format::Outcome::*;
    [
        (0, Ok),
        (1, Ok),
        (2, MissingDone),
        (3, Ok),
        (4, HttpError),
        (5, MissingDone),
        (6, StreamError),
        (7, Ok),
        (8, MissingDone),
        (9, HttpError),
        (10, Malformed),
        (11, MissingDone),
        (12, Oversize),
        (13, StreamError),
    ]
};

/// The flags of a fault-matrix run up to `--prompts` (whose file follows): 14 requests one
/// at a time, 6 tokens each, lines over 1 KiB oversize.
pub const FAULT_MATRIX_ARGS: [&str; 10] = [
    "--requests",
    "14",
    "--concurrency",
    "1",
    "--max-tokens",
    "6",
    "--ignore-eos",
    "--max-line-bytes",
    "1024",
    "--prompts",
];

/// Starts a simulator in this process, on a free loopback port.
pub fn sim(config: SimConfig) -> SimHandle {
    SimServer::spawn_background(config).unwrap()
}

/// The `tokentrace` binary with no API key in its environment, bounded in time.
pub fn tokentrace_without_key() -> Command {
    let mut cmd = super::tokentrace();
    cmd.env_remove("OPENAI_API_KEY").timeout(RUN_LIMIT);
    cmd
}

/// The arguments of `tokentrace record --url URL --model sim --progress off -o OUT ARGS…`.
fn record_args(url: &str, out: &Path, args: &[&str]) -> Vec<OsString> {
    let fixed = [
        "record",
        "--url",
        url,
        "--model",
        "sim",
        "--progress",
        "off",
        "-o",
    ];
    let mut all: Vec<OsString> = fixed.iter().map(OsString::from).collect();
    all.push(out.into());
    all.extend(args.iter().map(OsString::from));
    // `TOKENTRACE_TEST_CLIENT=hyper` runs every recording test over hyper's client (the
    // default is the recorder's own HTTP/1.1 client).
    if let Some(client) = std::env::var_os("TOKENTRACE_TEST_CLIENT") {
        // HTTP/2 stays on hyper.
        let http2 = args.windows(2).any(|w| w == ["--http", "2"]);
        if !args.contains(&"--client") && !http2 {
            all.push("--client".into());
            all.push(client);
        }
    }
    all
}

/// A loopback URL where nothing listens: a port bound, then freed.
pub fn unreachable_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/v1")
}

/// `tokentrace record --url URL --model sim --progress off -o OUT ARGS…`, with no API key.
pub fn record(url: &str, out: &Path, args: &[&str]) -> Command {
    let mut cmd = tokentrace_without_key();
    cmd.args(record_args(url, out, args));
    cmd
}

/// The same command line as [`record`], for a child process the test signals itself.
pub fn record_child(url: &str, out: &Path, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(super::tokentrace_path());
    cmd.args(record_args(url, out, args))
        .env_remove("OPENAI_API_KEY");
    cmd
}

/// Waits for a child process to end, failing the test after `limit`.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not end within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends a signal (`INT`, `KILL`, …) to process `pid` with kill(1).
pub fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// Sends signal `name` to `child` once `after` has passed, then waits for it to end, failing
/// the test after `limit`.
pub fn signal_after(child: &mut Child, after: Duration, name: &str, limit: Duration) -> ExitStatus {
    std::thread::sleep(after);
    signal(child.id(), name);
    wait_bounded(child, limit)
}

/// Chunks of `record` on `channel`.
pub fn count(record: &RequestRecord, channel: Channel) -> usize {
    record
        .chunks
        .iter()
        .filter(|c| c.channel == channel)
        .count()
}

/// Sum of per-chunk tokens on the output channels.
pub fn output_tokens(record: &RequestRecord) -> u32 {
    record
        .chunks
        .iter()
        .filter(|c| matches!(c.channel, Channel::Reasoning | Channel::Content))
        .map(|c| c.tokens.unwrap_or(0))
        .sum()
}

/// A JSONL prompt file of `n` short prompts (a prompt file skips calibration probes, so the
/// simulator's arrival number n is request id n-1).
pub fn prompt_file(dir: &Path, n: usize) -> PathBuf {
    let path = dir.join("prompts.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| format!("{{\"prompt\": \"prompt number {i} about rivers and trees\"}}"))
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// `tokentrace inspect --json FILE`, parsed, with the exit status.
pub fn inspect(path: &Path) -> (Value, i32) {
    let out = tokentrace_without_key()
        .arg("inspect")
        .arg("--json")
        .arg(path)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "inspect --json printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (json, out.status.code().unwrap_or(-1))
}

/// `tokentrace analyze --protocol capacity-v3 --format json FILE`, parsed.
pub fn analyze_v3(path: &Path) -> Value {
    let out = tokentrace_without_key()
        .args(["analyze", "--protocol", "capacity-v3", "--format", "json"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Resident set size of a process in bytes, from /proc (None once it has exited).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `tokentrace record` as [`record`], asserted to succeed, and the trace it wrote read back
/// with its requests in id order.
pub fn record_ok(url: &str, out: &Path, args: &[&str]) -> (TraceReader, Vec<RequestRecord>) {
    record(url, out, args).assert().success();
    super::records_of(out)
}

/// Fails the test unless `r` ended `ok`, naming the request and its error.
pub fn assert_ok(r: &RequestRecord) {
    assert_eq!(
        r.meta.outcome,
        tokentrace_format::Outcome::Ok,
        "request {}: {:?}",
        r.meta.id,
        r.meta.error
    );
}
