//! Random requests written through the real writer thread and read back identical.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use std::time::Duration;
use tokentrace_format::*;

fn header() -> Header {
    Header {
        major: 1,
        minor: tokentrace_format::frame::FORMAT_MINOR,
        anchor: ClockAnchor {
            mono_ns: 11,
            realtime_ns: 22,
        },
        host: "hôte".into(),
        shard: 1,
    }
}

fn channel() -> impl Strategy<Value = Channel> {
    (0..Channel::ALL.len()).prop_map(|i| Channel::ALL[i])
}

fn chunk() -> impl Strategy<Value = ChunkRecord> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        channel(),
        any::<u32>(),
        option::of(any::<u32>()),
        option::of(".{0,12}"),
    )
        .prop_map(
            |(arrival_ns, read_index, bytes, channel, text_len, tokens, text)| ChunkRecord {
                arrival_ns,
                read_index,
                bytes,
                channel,
                text_len,
                tokens,
                text,
            },
        )
}

fn usage() -> impl Strategy<Value = Usage> {
    (
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
        option::of(any::<u32>()),
    )
        .prop_map(
            |(prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens)| Usage {
                prompt_tokens,
                completion_tokens,
                reasoning_tokens,
                cached_tokens,
            },
        )
}

fn request(max_chunks: usize) -> impl Strategy<Value = RequestRecord> {
    let times = (
        any::<u64>(),
        any::<u64>(),
        option::of(any::<u64>()),
        any::<u64>(),
    );
    let status = (
        any::<bool>(),
        any::<u32>(),
        any::<u16>(),
        0..Outcome::ALL.len(),
        option::of(".{0,40}"),
    );
    let ids = (
        usage(),
        option::of("[a-z_]{0,10}"),
        any::<u64>(),
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
    );
    let rest = (
        option::of(any::<u32>()),
        vec(("[a-z-]{1,12}", ".{0,20}"), 0..3),
        vec(chunk(), 0..max_chunks),
        any::<u8>(),
    );
    (any::<u64>(), times, status, ids, rest).prop_map(
        |(
            id,
            (intended_ns, send_ns, headers_ns, end_ns),
            (warm, trial, http_status, outcome, error),
            ids,
            rest,
        )| {
            let (usage, finish_reason, prompt_hash, prompt_bytes, output_hash, output_bytes) = ids;
            let (planned_input_tokens, response_headers, chunks, retries) = rest;
            RequestRecord {
                meta: RequestMeta {
                    id,
                    phase: if warm { Phase::Warmup } else { Phase::Measured },
                    trial,
                    intended_ns,
                    send_ns,
                    headers_ns,
                    end_ns,
                    http_status,
                    outcome: Outcome::ALL[outcome],
                    error,
                    usage,
                    finish_reason,
                    prompt_hash,
                    prompt_bytes,
                    output_hash,
                    output_bytes,
                    planned_input_tokens,
                    response_headers,
                    retries,
                },
                chunks,
            }
        },
    )
}

/// Writes `records` through a writer with small blocks and reads them back.
fn round_trip(
    records: &[RequestRecord],
    block_target_bytes: usize,
) -> (Vec<RequestRecord>, TraceReader) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.trace");
    let config = WriterConfig {
        block_target_bytes,
        block_max_age: Duration::from_secs(600),
        ..Default::default()
    };
    let manifest = Manifest {
        model: "modèle-✓".into(),
        seed: 42,
        ..Default::default()
    };
    let writer = TraceWriter::create(&path, header(), &manifest, config).unwrap();
    let sender = writer.sender();
    for r in records {
        sender.send(r.clone()).unwrap();
    }
    let end = RunEnd {
        end_ns: 99,
        reason: "completed".into(),
        ..Default::default()
    };
    let stats = writer.finish(end.clone()).unwrap();
    assert_eq!(stats.requests, records.len() as u64);
    let reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.integrity(), &Integrity::Ok);
    assert_eq!(reader.header(), &header());
    assert_eq!(reader.manifest(), &manifest);
    assert_eq!(reader.run_end(), Some(&end));
    assert_eq!(reader.block_count() as u64, stats.blocks);
    let back = reader.requests().collect::<Result<Vec<_>, _>>().unwrap();
    (back, reader)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_requests_round_trip(records in vec(request(40), 0..30), target in 1usize..4000) {
        let (back, reader) = round_trip(&records, target);
        prop_assert_eq!(&back, &records);
        // The columnar path agrees with the materialized one.
        let mut i = 0;
        for b in 0..reader.block_count() {
            let block = reader.decode_block(b).unwrap();
            for r in 0..block.requests.len() {
                prop_assert_eq!(&block.record(r), &records[i]);
                i += 1;
            }
        }
        prop_assert_eq!(i, records.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2))]

    #[test]
    fn a_request_with_100k_chunks_round_trips(mut first in request(1), chunks in vec(chunk(), 100_000..=100_000), rest in vec(request(5), 0..3)) {
        first.chunks = chunks;
        let mut records = vec![first];
        records.extend(rest);
        let (back, _) = round_trip(&records, 1 << 20);
        prop_assert_eq!(back.len(), records.len());
        prop_assert_eq!(back[0].chunks.len(), 100_000);
        prop_assert_eq!(back, records);
    }
}

#[test]
fn empty_requests_and_non_ascii_text_round_trip() {
    let empty = RequestRecord {
        meta: RequestMeta {
            id: 0,
            phase: Phase::Measured,
            trial: 0,
            intended_ns: 0,
            send_ns: 0,
            headers_ns: None,
            end_ns: 0,
            http_status: 0,
            outcome: Outcome::ConnectError,
            error: Some("connexion refusée — 拒否".into()),
            usage: Usage::default(),
            finish_reason: None,
            prompt_hash: 0,
            prompt_bytes: 0,
            output_hash: 0,
            output_bytes: 0,
            planned_input_tokens: None,
            response_headers: vec![],
            retries: 0,
        },
        chunks: vec![],
    };
    let mut texty = empty.clone();
    texty.meta.id = u64::MAX;
    texty.chunks.push(ChunkRecord {
        arrival_ns: u64::MAX,
        read_index: u32::MAX,
        bytes: 1,
        channel: Channel::Reasoning,
        text_len: 9,
        tokens: Some(0),
        text: Some("🦀 naïve 中文".into()),
    });
    let records = vec![empty.clone(), texty, empty];
    let (back, _) = round_trip(&records, 1);
    assert_eq!(back, records);
}

#[test]
fn a_trace_with_no_requests_is_ok() {
    let (back, reader) = round_trip(&[], 1000);
    assert!(back.is_empty());
    assert_eq!(reader.block_count(), 0);
}
