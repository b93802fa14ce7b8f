//! Shared helpers of the `record_*` end-to-end tests: a simulator on 127.0.0.1, the real
//! `tokentrace record` binary, and the trace read back through the format crate.
#![allow(dead_code)]

use assert_cmd::Command;
use std::path::Path;
use std::time::Duration;
use tokentrace_format::{Channel, RequestRecord, TraceReader};
use tokentrace_sim::{SimConfig, SimHandle, SimServer};

/// A fast simulator: short steps so tests finish in well under a second of streaming.
pub fn fast_sim() -> SimConfig {
    SimConfig {
        step_base_ms: 1.0,
        step_per_seq_ms: 0.0,
        prefill_base_ms: 0.5,
        prefill_tok_s: 1_000_000.0,
        ..SimConfig::default()
    }
}

/// Start a simulator in this process.
pub fn sim(config: SimConfig) -> SimHandle {
    SimServer::spawn_background(config).unwrap()
}

/// `tokentrace record --url URL --model sim -o OUT --progress off ARGS…`, bounded in time.
pub fn record(url: &str, out: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::cargo_bin("tokentrace").unwrap();
    cmd.args([
        "record",
        "--url",
        url,
        "--model",
        "sim",
        "--progress",
        "off",
        "-o",
    ])
    .arg(out)
    .args(args)
    .env_remove("OPENAI_API_KEY")
    .timeout(Duration::from_secs(60));
    cmd
}

/// Every request of a trace, sorted by id.
pub fn requests(path: &Path) -> (TraceReader, Vec<RequestRecord>) {
    let reader = TraceReader::open(path).unwrap();
    let mut records: Vec<RequestRecord> = reader.requests().map(|r| r.unwrap()).collect();
    records.sort_by_key(|r| r.id);
    (reader, records)
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

/// Write a JSONL prompt file of `n` short prompts.
pub fn prompt_file(dir: &Path, n: usize) -> std::path::PathBuf {
    let path = dir.join("prompts.jsonl");
    let lines: Vec<String> = (0..n)
        .map(|i| format!("{{\"prompt\": \"prompt number {i} about rivers and trees\"}}"))
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}
