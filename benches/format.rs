//! Trace format throughput: writing (encode + zstd + write through the writer thread) and
//! reading (mmap + checksum + zstd + column decode) in chunks per second, plus the file size
//! per chunk. Run: `cargo bench --bench format -- --measurement-time 5`.
//!
//! Time is measured as **process CPU time** (every thread of the process, including the writer
//! thread), not wall time: the figures are chunks per CPU-second, i.e. per core, and stay
//! meaningful on a host shared with other work.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // criterion generates undocumented items; a bench may fail loudly

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::path::Path;
use std::time::Duration;
use tokentrace_format::synthetic;
use tokentrace_format::*;

const REQUESTS: usize = 2000;
const OUTPUT_CHUNKS: usize = 256;

fn header() -> Header {
    Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 0,
            realtime_ns: 0,
        },
        host: "bench".into(),
        shard: 0,
    }
}

/// Writes `records`, plain or already packed (a plain one is packed by `send`, on this thread).
fn write_trace<R: Into<PackedRecord>>(
    path: &Path,
    records: Vec<R>,
    zstd_level: i32,
) -> WriterStats {
    let config = WriterConfig {
        block_max_age: Duration::from_secs(600),
        zstd_level,
        ..Default::default()
    };
    let writer = TraceWriter::create(path, header(), &Manifest::default(), config).unwrap();
    let sender = writer.sender();
    for r in records {
        sender.send(r).unwrap();
    }
    writer.finish(RunEnd::default()).unwrap()
}

/// Process CPU time in nanoseconds, formatted like wall time.
struct CpuTime;

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        clock::process_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        clock::process_cpu_ns().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, value: &u64) -> f64 {
        *value as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        static WALL: WallTime = WallTime;
        WALL.formatter()
    }
}

fn format_benches(c: &mut Criterion<CpuTime>) {
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("format");
    group.sample_size(10);
    for with_text in [false, true] {
        let label = if with_text { "text" } else { "no_text" };
        let records = synthetic::requests(42, REQUESTS, OUTPUT_CHUNKS, with_text);
        let chunks: u64 = records.iter().map(|r| r.chunks.len() as u64).sum();
        let path = dir.path().join(format!("{label}.trace"));
        // zstd level 3 is the writer's default and 1 the recorder's; the others show the
        // size/CPU trade-off on either side of them.
        let levels: &[i32] = if with_text { &[3] } else { &[-1, 1, 2, 3, 6] };
        for &level in levels {
            let stats = write_trace(&path, records.clone(), level);
            eprintln!(
                "format/{label} level {level}: {} requests, {chunks} chunks, {} blocks, {} bytes = {:.2} bytes/chunk",
                stats.requests,
                stats.blocks,
                stats.file_bytes,
                stats.file_bytes as f64 / chunks as f64
            );
        }
        write_trace(&path, records.clone(), 3);
        group.throughput(Throughput::Elements(chunks));
        for &level in levels {
            let name = if level == 3 {
                format!("write/{label}")
            } else {
                format!("write_level{level}/{label}")
            };
            group.bench_function(name, |b| {
                b.iter_batched(
                    || records.clone(),
                    |recs| write_trace(&path.with_extension("w"), recs, level),
                    criterion::BatchSize::LargeInput,
                )
            });
        }
        // The same records handed over packed, as the recorder builds them: the writer's own
        // cost without the conversion `send` makes of a `RequestRecord`.
        group.bench_function(format!("write_packed/{label}"), |b| {
            b.iter_batched(
                || {
                    let packed: Vec<PackedRecord> =
                        records.iter().cloned().map(PackedRecord::from).collect();
                    packed
                },
                |recs| write_trace(&path.with_extension("w"), recs, 3),
                criterion::BatchSize::LargeInput,
            )
        });

        let reader = TraceReader::open(&path).unwrap();
        group.bench_function(format!("decode_blocks/{label}"), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for i in 0..reader.block_count() {
                    n += reader.decode_block(i).unwrap().chunk_count();
                }
                assert_eq!(n as u64, chunks);
            })
        });
        group.bench_function(format!("decode_blocks_into/{label}"), |b| {
            let mut block = DecodedBlock::default();
            b.iter(|| {
                let mut n = 0usize;
                for i in 0..reader.block_count() {
                    reader.decode_block_into(i, &mut block).unwrap();
                    n += block.chunk_count();
                }
                assert_eq!(n as u64, chunks);
            })
        });
        group.bench_function(format!("open_and_decode/{label}"), |b| {
            b.iter(|| {
                let reader = TraceReader::open(&path).unwrap();
                let n: usize = (0..reader.block_count())
                    .map(|i| reader.decode_block(i).unwrap().chunk_count())
                    .sum();
                assert_eq!(n as u64, chunks);
            })
        });
        group.bench_function(format!("records/{label}"), |b| {
            b.iter(|| {
                assert_eq!(
                    reader
                        .requests()
                        .map(|r| r.unwrap().chunks.len() as u64)
                        .sum::<u64>(),
                    chunks
                )
            })
        });
    }
    push_round_robin(&mut group);
    group.finish();
}

/// Streams whose chunks a recorder's reader appends in turn, as it does at 1,024 streams: each
/// list is met again only after every other one, so what a push touches is cold.
const ROUND_ROBIN_STREAMS: usize = 1024;
/// Chunks appended to each list (a 500-token response).
const ROUND_ROBIN_CHUNKS: usize = 500;

/// `PackedChunks::push` with its lists met in turn, lists reserved as the recorder reserves
/// them.
fn push_round_robin(group: &mut criterion::BenchmarkGroup<'_, CpuTime>) {
    group.throughput(Throughput::Elements(
        (ROUND_ROBIN_STREAMS * ROUND_ROBIN_CHUNKS) as u64,
    ));
    group.bench_function(format!("push_round_robin/{ROUND_ROBIN_STREAMS}"), |b| {
        b.iter_batched(
            || {
                (0..ROUND_ROBIN_STREAMS)
                    .map(|_| PackedChunks::with_capacity(ROUND_ROBIN_CHUNKS))
                    .collect::<Vec<_>>()
            },
            |mut lists| {
                for i in 0..ROUND_ROBIN_CHUNKS as u32 {
                    for (s, list) in lists.iter_mut().enumerate() {
                        let mut chunk = ChunkRecord::unclassified(
                            1_000_000_000 + u64::from(i) * 2_000_000 + s as u64,
                            i,
                            180 + i % 7,
                        );
                        chunk.channel = Channel::Content;
                        chunk.text_len = 4 + i % 3;
                        chunk.tokens = (i % 50 == 0).then_some(1);
                        list.push(std::hint::black_box(chunk));
                    }
                }
                lists
            },
            criterion::BatchSize::LargeInput,
        )
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(CpuTime);
    targets = format_benches
}
criterion_main!(benches);
