//! Cost of the recorder's receive path per SSE event, without the network: the SSE parser
//! alone, parser + JSON classification, and the full per-read path (clock read, parse,
//! classify, append the chunk to reserved packed columns, as the recorder does).
//!
//! Run: `cargo bench --bench sse`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // criterion generates undocumented items; a bench may fail loudly

use criterion::measurement::WallTime;
use criterion::{
    black_box, criterion_group, criterion_main, BatchSize, BenchmarkGroup, Criterion, Throughput,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tokentrace_format::{mono_now_ns, Channel, ChunkRecord, PackedChunks};
use tokentrace_sse::classify::{classify, classify_general, Classified, OutputSink};
use tokentrace_sse::parser::{SseEvent, SseParser};

/// A vLLM-style chat stream: role, `n` content events with continuous usage, usage, [DONE].
fn chat_stream(n: usize) -> Vec<u8> {
    let mut s = String::new();
    let head = r#"{"id":"chatcmpl-8a1f2c3d4e5f","object":"chat.completion.chunk","created":1732000000,"model":"meta-llama/Llama-3.1-8B-Instruct","#;
    s.push_str(&format!(
        "data: {head}\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":{{\"prompt_tokens\":512,\"total_tokens\":512,\"completion_tokens\":0}}}}\n\n"
    ));
    for i in 0..n {
        s.push_str(&format!(
            "data: {head}\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" token{i}\"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":{{\"prompt_tokens\":512,\"total_tokens\":{},\"completion_tokens\":{}}}}}\n\n",
            513 + i,
            i + 1
        ));
    }
    s.push_str(&format!(
        "data: {head}\"choices\":[],\"usage\":{{\"prompt_tokens\":512,\"total_tokens\":{},\"completion_tokens\":{n}}}}}\n\ndata: [DONE]\n\n",
        512 + n
    ));
    s.into_bytes()
}

/// Split `stream` into reads of one event each (the common case at low batch sizes).
fn event_reads(stream: &[u8]) -> Vec<&[u8]> {
    let mut reads = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < stream.len() {
        if stream[i] == b'\n' && stream[i + 1] == b'\n' {
            reads.push(&stream[start..i + 2]);
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    reads
}

/// Benchmarks parsing `reads` and classifying every event but `[DONE]` with `classifier`
/// (summing the text lengths, so the work cannot be skipped). Generic over the classifier so
/// each one is called directly, as in the recorder, not through a function pointer.
fn bench_parse_classify<E, F>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    reads: &[&[u8]],
    classifier: F,
) where
    F: Fn(&[u8], &mut OutputSink) -> Result<Classified, E>,
{
    group.bench_function(name, |b| {
        let mut parser = SseParser::default();
        b.iter(|| {
            let mut sink = OutputSink::new(false);
            let mut n = 0u32;
            for read in reads {
                parser
                    .feed(read, |e| {
                        if !e.is_done() {
                            n += classifier(e.data, &mut sink).map_or(0, |c| c.text_len);
                        }
                    })
                    .unwrap();
            }
            black_box(n)
        })
    });
}

fn bench(c: &mut Criterion) {
    const EVENTS: usize = 256;
    let stream = chat_stream(EVENTS);
    let reads = event_reads(&stream);
    let events = reads.len() as u64;
    let mut group = c.benchmark_group("sse");
    group.throughput(Throughput::Elements(events));

    group.bench_function("parse_only/one_event_per_read", |b| {
        let mut parser = SseParser::default();
        b.iter(|| {
            let mut n = 0usize;
            for read in &reads {
                parser.feed(read, |e| n += e.data.len()).unwrap();
            }
            black_box(n)
        })
    });

    group.bench_function("parse_only/16KiB_reads", |b| {
        let mut parser = SseParser::default();
        b.iter(|| {
            let mut n = 0usize;
            for read in stream.chunks(16 << 10) {
                parser.feed(read, |e| n += e.data.len()).unwrap();
            }
            black_box(n)
        })
    });

    bench_parse_classify(&mut group, "parse_classify", &reads, classify);
    bench_parse_classify(
        &mut group,
        "parse_classify_serde_only",
        &reads,
        classify_general,
    );

    group.bench_function("hot_path_per_read", |b| {
        b.iter(|| {
            let mut stream = StreamParse::new(EVENTS + 8);
            for (read_index, read) in reads.iter().enumerate() {
                stream.receive(read_index, read);
            }
            black_box(stream.chunks)
        })
    });
    group.finish();

    round_robin(c, &reads);

    c.bench_function("clock/mono_now_ns", |b| b.iter(|| black_box(mono_now_ns())));
}

/// One stream's receive-path state, as each open stream holds it.
struct StreamParse {
    parser: SseParser,
    sink: OutputSink,
    chunks: PackedChunks,
}

impl StreamParse {
    fn new(capacity: usize) -> StreamParse {
        StreamParse {
            parser: SseParser::default(),
            sink: OutputSink::new(false),
            chunks: PackedChunks::with_capacity(capacity),
        }
    }

    /// The recorder's work for one read: clock read, parse, classify every event but
    /// `[DONE]`, append each as a chunk.
    fn receive(&mut self, read_index: usize, read: &[u8]) {
        let arrival_ns = mono_now_ns();
        let StreamParse {
            parser,
            sink,
            chunks,
        } = self;
        let mut take = |e: SseEvent<'_>, classified: Option<Classified>| {
            let mut chunk = ChunkRecord::unclassified(arrival_ns, read_index as u32, e.wire_bytes);
            if e.is_done() {
                chunk.channel = Channel::Done;
            } else if let Some(c) = classified {
                chunk.channel = c.channel;
                chunk.text_len = c.text_len;
                chunk.tokens = c.usage.and_then(|u| u.completion_tokens);
            }
            chunks.push(chunk);
        };
        // As the recorder reads a body run: the stream's template first, the parser if not.
        if let Some((e, c)) = parser.whole_known_event(read, sink) {
            take(e, Some(c));
            return;
        }
        parser
            .feed(read, |e| {
                let classified = if e.is_done() {
                    None
                } else {
                    classify(e.data, sink).ok()
                };
                take(e, classified);
            })
            .unwrap();
    }
}

/// The hot path with its state cold: `streams` streams each receive one event in turn, in a
/// shuffled order, as a reader over many connections meets them, so between two events of one
/// stream every other stream's parser, hash state and chunk columns pass through the caches.
/// Per event, the difference from one stream is what a cold state costs.
fn round_robin(c: &mut Criterion, reads: &[&[u8]]) {
    let mut group = c.benchmark_group("sse/hot_path_round_robin");
    for streams in [1usize, 64, 1024, 4096] {
        group.throughput(Throughput::Elements((reads.len() * streams) as u64));
        // Streams become readable in no order the memory layout predicts.
        let mut order: Vec<usize> = (0..streams).collect();
        order.shuffle(&mut StdRng::seed_from_u64(streams as u64));
        group.bench_function(streams.to_string(), |b| {
            b.iter_batched_ref(
                || {
                    (0..streams)
                        .map(|_| StreamParse::new(reads.len() + 8))
                        .collect::<Vec<_>>()
                },
                |states| {
                    for (read_index, read) in reads.iter().enumerate() {
                        for &i in &order {
                            states[i].receive(read_index, read);
                        }
                    }
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
