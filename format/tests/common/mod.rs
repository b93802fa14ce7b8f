//! The contents of the golden traces in tests/golden/, written out literally so that the
//! golden tests compare decoded files against fixed values, never against re-encoded bytes.

#![allow(dead_code)]

use std::path::PathBuf;
use tokentrace_format::*;

/// tests/golden/ at the workspace root.
pub fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden")
}

/// Header of both golden traces.
pub fn golden_header() -> Header {
    Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 123_456_789_000,
            realtime_ns: 1_764_374_400_000_000_000,
        },
        host: "golden-host".into(),
        shard: 0,
    }
}

/// Manifest of both golden traces.
pub fn golden_manifest() -> Manifest {
    let mut manifest = Manifest {
        tool_version: "0.1.0".into(),
        argv: vec![
            "tokentrace".into(),
            "record".into(),
            "--model".into(),
            "tiny".into(),
        ],
        base_url: "http://127.0.0.1:8000/v1".into(),
        api: "chat".into(),
        model: "tiny".into(),
        seed: 7,
        start_realtime_ns: 1_764_374_400_000_000_000,
        ..Manifest::default()
    };
    manifest.labels.insert("engine".into(), "sim".into());
    manifest
        .workload
        .insert("output_tokens".into(), serde_json::json!(20));
    manifest
        .load
        .insert("concurrency".into(), serde_json::json!(2));
    manifest
}

/// Run end of the finished golden trace.
pub fn golden_run_end() -> RunEnd {
    RunEnd {
        end_realtime_ns: 1_764_374_401_000_000_000,
        end_ns: 1_000_000_000,
        reason: "completed".into(),
        ..RunEnd::default()
    }
}

fn chunk(
    arrival_ns: u64,
    read_index: u32,
    bytes: u32,
    channel: Channel,
    text: Option<&str>,
    tokens: Option<u32>,
) -> ChunkRecord {
    ChunkRecord {
        arrival_ns,
        read_index,
        bytes,
        channel,
        text_len: text.map_or(0, |t| t.len() as u32),
        tokens,
        text: text.map(str::to_string),
    }
}

fn base(id: u64, send_ns: u64) -> RequestRecord {
    RequestRecord {
        meta: RequestMeta {
            id,
            phase: Phase::Measured,
            trial: 0,
            intended_ns: send_ns - 1_000,
            send_ns,
            headers_ns: Some(send_ns + 30_000_000),
            end_ns: send_ns + 100_000_000,
            http_status: 200,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage::default(),
            finish_reason: None,
            prompt_hash: 0x0123_4567_89ab_cdef ^ id,
            prompt_bytes: 400,
            output_hash: 0xfedc_ba98_7654_3210 ^ id,
            output_bytes: 0,
            planned_input_tokens: Some(100),
            response_headers: vec![],
            retries: 0,
        },
        chunks: vec![],
    }
}

/// The requests of the golden traces, in file order.
pub fn golden_records() -> Vec<RequestRecord> {
    let mut warm = base(0, 10_000_000);
    warm.meta.phase = Phase::Warmup;
    warm.meta.usage = Usage {
        prompt_tokens: Some(100),
        completion_tokens: Some(3),
        reasoning_tokens: None,
        cached_tokens: Some(64),
    };
    warm.meta.finish_reason = Some("stop".into());
    warm.meta.output_bytes = 8;
    warm.meta.response_headers = vec![("x-request-id".into(), "req-0".into())];
    warm.chunks = vec![
        chunk(40_000_000, 0, 120, Channel::Role, None, None),
        chunk(50_000_000, 1, 131, Channel::Content, Some("Hi"), Some(1)),
        chunk(60_010_123, 2, 134, Channel::Content, Some("ünï"), Some(1)),
        chunk(60_010_123, 2, 128, Channel::Finish, None, None),
        chunk(60_010_123, 2, 260, Channel::Usage, None, None),
        chunk(60_020_000, 3, 14, Channel::Done, None, None),
    ];

    let mut rate_limited = base(1, 20_000_000);
    rate_limited.meta.http_status = 429;
    rate_limited.meta.outcome = Outcome::HttpError;
    rate_limited.meta.error = Some("rate limited: réessayez".into());
    rate_limited.meta.end_ns = 20_000_000 + 31_000_000;

    let mut refused = base(2, 25_000_000);
    refused.meta.headers_ns = None;
    refused.meta.http_status = 0;
    refused.meta.outcome = Outcome::ConnectError;
    refused.meta.error = Some("connection refused".into());
    refused.meta.planned_input_tokens = None;
    refused.meta.end_ns = 25_000_500;

    let mut thinker = base(3, 30_000_000);
    thinker.meta.trial = 1;
    thinker.meta.usage = Usage {
        prompt_tokens: Some(90),
        completion_tokens: Some(24),
        reasoning_tokens: Some(20),
        cached_tokens: None,
    };
    thinker.meta.finish_reason = Some("length".into());
    thinker.meta.response_headers = vec![
        ("server-timing".into(), "queue;dur=1.5".into()),
        ("x-request-id".into(), "req-3".into()),
    ];
    thinker.chunks = (0..24u32)
        .map(|i| {
            let channel = if i < 20 {
                Channel::Reasoning
            } else {
                Channel::Content
            };
            chunk(
                70_000_000 + u64::from(i) * 10_003_007,
                i,
                140 + i % 5,
                channel,
                None,
                Some(1),
            )
        })
        .collect();
    thinker.meta.end_ns = 70_000_000 + 24 * 10_003_007;

    let mut broken = base(4, 35_000_000);
    broken.meta.outcome = Outcome::StreamError;
    broken.meta.error = Some("connection reset mid-stream".into());
    broken.chunks = vec![
        chunk(66_000_000, 0, 120, Channel::Role, None, None),
        chunk(76_000_001, 1, 140, Channel::Content, Some("日本"), None),
    ];
    broken.meta.end_ns = 80_000_000;

    let mut last = base(5, 40_000_000);
    last.meta.usage.completion_tokens = Some(12);
    last.meta.finish_reason = Some("stop".into());
    last.chunks = (0..12u32)
        .map(|i| {
            chunk(
                80_000_000 + u64::from(i / 2) * 9_876_543,
                i / 2,
                150,
                Channel::Content,
                Some("ab"),
                Some(1),
            )
        })
        .collect();
    last.meta.end_ns = 200_000_000;

    vec![warm, rate_limited, refused, thinker, broken, last]
}
