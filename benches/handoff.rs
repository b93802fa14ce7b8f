//! The two per-request steps around the recorder's hot path that benches/sse.rs (per-event
//! receive path), benches/format.rs (block encode/decode) and benches/analyzer.rs (whole
//! traces) do not isolate:
//!
//! - `handoff/*`: handing a finished request to the trace writer thread
//!   (`RecordSender::send`). Sustained, so when the writer thread (encode + zstd) is slower
//!   than the sender, the channel fills and the figure is the writer's pace — the hand-off
//!   cost a long run actually pays per chunk.
//! - `metrics/*`: folding one request's chunk columns into the analyzer's per-request facts
//!   (`facts::summarize`), with and without keeping inter-chunk gaps.
//!
//! Run: `cargo bench --bench handoff`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // criterion generates undocumented items; a bench may fail loudly

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tokentrace_analyzer::facts::{summarize, ChunkSlice, GapChunks};
use tokentrace_format::{
    Channel, ChunkRecord, ClockAnchor, Header, Manifest, Outcome, Phase, RequestMeta,
    RequestRecord, RunEnd, TraceWriter, Usage, WriterConfig,
};

/// A chat response as the recorder stores it: role, `tokens` content chunks ~10 ms apart,
/// usage, `[DONE]`.
fn record(id: u64, tokens: u32) -> RequestRecord {
    let mut chunks = Vec::with_capacity(tokens as usize + 3);
    let mut t = 50_000_000 + id * 1_000;
    let mut push = |channel: Channel, text_len: u32, tokens: Option<u32>, step: u64| {
        t += step;
        let read_index = chunks.len() as u32;
        chunks.push(ChunkRecord {
            arrival_ns: t,
            read_index,
            bytes: 180 + text_len,
            channel,
            text_len,
            tokens,
            text: None,
        });
    };
    push(Channel::Role, 0, None, 0);
    for i in 0..tokens {
        push(
            Channel::Content,
            4 + i % 5,
            Some(1),
            9_500_000 + (u64::from(i) * 7919 + id * 104_729) % 1_000_000,
        );
    }
    push(Channel::Usage, 0, None, 50_000);
    push(Channel::Done, 0, None, 1_000);
    RequestRecord {
        meta: RequestMeta {
            id,
            phase: Phase::Measured,
            trial: 0,
            intended_ns: id * 1_000,
            send_ns: id * 1_000 + 20_000,
            headers_ns: Some(id * 1_000 + 2_000_000),
            end_ns: t + 10_000,
            http_status: 200,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage {
                prompt_tokens: Some(512),
                completion_tokens: Some(tokens),
                reasoning_tokens: None,
                cached_tokens: None,
            },
            finish_reason: Some("length".into()),
            prompt_hash: id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            prompt_bytes: 2048,
            output_hash: id,
            output_bytes: tokens * 6,
            planned_input_tokens: Some(512),
            response_headers: vec![("x-request-id".into(), id.to_string())],
            retries: 0,
        },
        chunks,
    }
}

fn handoff(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("handoff");
    for tokens in [100u32, 500] {
        let path = dir.path().join(format!("handoff-{tokens}.tt"));
        let header = Header {
            major: 1,
            minor: 0,
            anchor: ClockAnchor::now(),
            host: "bench".into(),
            shard: 0,
        };
        let writer =
            TraceWriter::create(&path, header, &Manifest::default(), WriterConfig::default())
                .expect("trace writer");
        let sender = writer.sender();
        group.throughput(Throughput::Elements(u64::from(tokens) + 3));
        let mut id = 0u64;
        group.bench_function(format!("send_sustained/{tokens}_tokens"), |b| {
            b.iter_batched(
                || {
                    id += 1;
                    record(id, tokens)
                },
                |r| sender.send(r).expect("writer alive"),
                BatchSize::SmallInput,
            )
        });
        drop(sender);
        let stats = writer.finish(RunEnd::default()).expect("finish");
        eprintln!(
            "handoff/{tokens}: {} requests, {:.2} trace bytes per chunk, {} back-pressure events",
            stats.requests,
            stats.file_bytes as f64 / stats.chunks.max(1) as f64,
            stats.backpressure_events
        );
    }
    group.finish();
}

fn metrics(c: &mut Criterion) {
    let mut group = c.benchmark_group("metrics");
    for tokens in [100u32, 500] {
        let r = record(7, tokens);
        let arrival: Vec<u64> = r.chunks.iter().map(|c| c.arrival_ns).collect();
        let channel: Vec<Channel> = r.chunks.iter().map(|c| c.channel).collect();
        let text_len: Vec<u32> = r.chunks.iter().map(|c| c.text_len).collect();
        let chunk_tokens: Vec<Option<u32>> = r.chunks.iter().map(|c| c.tokens).collect();
        let slice = ChunkSlice {
            arrival_ns: &arrival,
            channel: &channel,
            text_len: &text_len,
            tokens: &chunk_tokens,
        };
        group.throughput(Throughput::Elements(arrival.len() as u64));
        group.bench_function(format!("summarize/{tokens}_tokens"), |b| {
            b.iter(|| {
                black_box(summarize(
                    0,
                    &r.meta,
                    black_box(slice),
                    GapChunks::Output,
                    None,
                ))
            })
        });
        let mut gaps = Vec::with_capacity(arrival.len());
        group.bench_function(format!("summarize_keep_gaps/{tokens}_tokens"), |b| {
            b.iter(|| {
                gaps.clear();
                black_box(summarize(
                    0,
                    &r.meta,
                    black_box(slice),
                    GapChunks::Output,
                    Some(&mut gaps),
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, handoff, metrics);
criterion_main!(benches);
