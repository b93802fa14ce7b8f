//! The synthetic trace of `analyze_synthetic` and `table_layout`: requests written with known
//! timestamps, so every value a report shows can be computed by hand. Each test binary uses
//! a part of it, hence `dead_code` allowed.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use tokentrace_format::{
    Channel, ChunkRecord, ClockAnchor, Header, Manifest, Outcome, Phase, RequestMeta,
    RequestRecord, RunEnd, TraceWriter, Usage, WriterConfig,
};

/// One millisecond in ns.
pub const MS: u64 = 1_000_000;
/// 2026-09-05T03:46:40Z.
pub const ANCHOR_REALTIME_NS: u64 = 1_788_580_000_000_000_000;

/// A chunk arriving `at_ms` after the anchor.
pub fn chunk(at_ms: u64, channel: Channel, text_len: u32, tokens: Option<u32>) -> ChunkRecord {
    ChunkRecord {
        arrival_ns: at_ms * MS,
        read_index: 0,
        bytes: 40,
        channel,
        text_len,
        tokens,
        text: None,
    }
}

/// A successful request of `phase` with these times (ms after the anchor) and chunks.
pub fn request(
    id: u64,
    phase: Phase,
    intended_ms: u64,
    send_ms: u64,
    end_ms: u64,
    chunks: Vec<ChunkRecord>,
) -> RequestRecord {
    RequestRecord {
        meta: RequestMeta {
            id,
            phase,
            trial: 0,
            intended_ns: intended_ms * MS,
            send_ns: send_ms * MS,
            headers_ns: None,
            end_ns: end_ms * MS,
            http_status: 200,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage::default(),
            finish_reason: Some("stop".into()),
            prompt_hash: 0,
            prompt_bytes: 400,
            output_hash: 0,
            output_bytes: 30,
            planned_input_tokens: Some(100),
            response_headers: vec![],
            retries: 0,
        },
        chunks,
    }
}

/// The requests, in completion order (as a recorder writes them). Times in ms:
/// - id 0, warmup: content at 10 and 20.
/// - id 1: intended 100, sent 102, headers 105; role 110, reasoning 120 and 130, content 150,
///   160, 190, usage 195, done 196; end 200. usage: 100 prompt (50 cached), 6 completion.
/// - id 2: sent 150, headers 160; content 170, 180, 200, 250 (1, 2, 1, 1 tokens), finish 251;
///   end 260. usage: 120 prompt, 5 completion.
/// - id 3: sent 200, HTTP 503 at 205.
pub fn requests() -> Vec<RequestRecord> {
    let mut warm = request(
        0,
        Phase::Warmup,
        0,
        0,
        25,
        vec![
            chunk(10, Channel::Content, 3, None),
            chunk(20, Channel::Content, 3, None),
        ],
    );
    warm.meta.usage = Usage {
        prompt_tokens: Some(100),
        completion_tokens: Some(2),
        ..Usage::default()
    };
    let mut one = request(
        1,
        Phase::Measured,
        100,
        102,
        200,
        vec![
            chunk(110, Channel::Role, 0, None),
            chunk(120, Channel::Reasoning, 5, None),
            chunk(130, Channel::Reasoning, 5, None),
            chunk(150, Channel::Content, 4, None),
            chunk(160, Channel::Content, 4, None),
            chunk(190, Channel::Content, 4, None),
            chunk(195, Channel::Usage, 0, None),
            chunk(196, Channel::Done, 0, None),
        ],
    );
    one.meta.headers_ns = Some(105 * MS);
    one.meta.usage = Usage {
        prompt_tokens: Some(100),
        completion_tokens: Some(6),
        reasoning_tokens: Some(2),
        cached_tokens: Some(50),
    };
    let mut two = request(
        2,
        Phase::Measured,
        150,
        150,
        260,
        vec![
            chunk(170, Channel::Content, 4, Some(1)),
            chunk(180, Channel::Content, 8, Some(2)),
            chunk(200, Channel::Content, 4, Some(1)),
            chunk(250, Channel::Content, 4, Some(1)),
            chunk(251, Channel::Finish, 0, None),
        ],
    );
    two.meta.headers_ns = Some(160 * MS);
    two.meta.usage = Usage {
        prompt_tokens: Some(120),
        completion_tokens: Some(5),
        ..Usage::default()
    };
    two.meta.planned_input_tokens = Some(120);
    let mut failed = request(3, Phase::Measured, 200, 200, 205, vec![]);
    failed.meta.outcome = Outcome::HttpError;
    failed.meta.http_status = 503;
    failed.meta.error = Some("overloaded".into());
    vec![warm, one, failed, two]
}

/// The synthetic trace, `dir/name`.
pub fn write_trace(dir: &Path, name: &str) -> PathBuf {
    write_trace_of(dir, name, requests())
}

/// A trace of `records` with the manifest and run end of the synthetic one.
pub fn write_trace_of(dir: &Path, name: &str, records: Vec<RequestRecord>) -> PathBuf {
    let path = dir.join(name);
    let header = Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 5_000_000_000,
            realtime_ns: ANCHOR_REALTIME_NS,
        },
        host: "testhost".into(),
        shard: 0,
    };
    let mut manifest = Manifest {
        tool_version: "0.1.0".into(),
        base_url: "http://127.0.0.1:9/v1".into(),
        api: "chat".into(),
        model: "sim-model".into(),
        seed: 7,
        start_realtime_ns: ANCHOR_REALTIME_NS,
        ..Manifest::default()
    };
    manifest.load.insert("concurrency".into(), 2.into());
    manifest.workload.insert("input_tokens".into(), 100.into());
    manifest.workload.insert("output_tokens".into(), 8.into());
    manifest.labels.insert("engine".into(), "sim".into());
    manifest.labels.insert("gpu".into(), "none".into());
    manifest
        .labels
        .insert("serve_flags.thinking_mode".into(), "enabled".into());
    let writer = TraceWriter::create(&path, header, &manifest, WriterConfig::default()).unwrap();
    let sender = writer.sender();
    for r in records {
        sender.send(r).unwrap();
    }
    drop(sender);
    let mut end = RunEnd {
        end_realtime_ns: ANCHOR_REALTIME_NS + 300 * MS,
        end_ns: 300 * MS,
        reason: "completed".into(),
        ..RunEnd::default()
    };
    end.client_health.max_sched_lag_ns = Some(20_000_000);
    end.client_health.cpu_ns = Some(30_000_000);
    writer.finish(end).unwrap();
    path
}

/// The synthetic requests plus two more failures: a second 503 `overloaded` (so that reason
/// counts 2) and a timeout, whose error text spans lines and spaces (the table condenses it).
pub fn requests_with_failures() -> Vec<RequestRecord> {
    let mut records = requests();
    let mut again = request(4, Phase::Measured, 210, 210, 212, vec![]);
    again.meta.outcome = Outcome::HttpError;
    again.meta.http_status = 503;
    again.meta.error = Some("overloaded".into());
    let mut slow = request(5, Phase::Measured, 220, 220, 250, vec![]);
    slow.meta.outcome = Outcome::Timeout;
    slow.meta.http_status = 200;
    slow.meta.error = Some("request timed out   after 30 ms\n(--timeout)".into());
    records.extend([again, slow]);
    records
}
