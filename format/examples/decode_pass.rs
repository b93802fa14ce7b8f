//! One pass over a trace in a fresh process, as an analysis makes it: how fast blocks decode
//! when every block is decoded once (no warm allocator, unlike a repeated benchmark loop).
//!
//! ```text
//! cargo run --release -p tokentrace-format --example decode_pass -- fresh   # decode_block
//! cargo run --release -p tokentrace-format --example decode_pass -- reuse   # decode_block_into
//! ```
//!
//! The first run writes the trace (20,000 synthetic requests, 5.18M chunks, no text) to the
//! system temp directory. Prints chunks per CPU-second of this process.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use std::time::Duration;
use tokentrace_format::{clock, synthetic, ClockAnchor, DecodedBlock, Header, Manifest, RunEnd};
use tokentrace_format::{TraceReader, TraceWriter, WriterConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "reuse".into());
    let path = std::env::temp_dir().join("tokentrace-decode-pass.trace");
    if !path.exists() {
        let header = Header {
            major: 1,
            minor: 0,
            anchor: ClockAnchor {
                mono_ns: 0,
                realtime_ns: 0,
            },
            host: "bench".into(),
            shard: 0,
        };
        let config = WriterConfig {
            block_max_age: Duration::from_secs(600),
            ..Default::default()
        };
        let writer = TraceWriter::create(&path, header, &Manifest::default(), config)?;
        let sender = writer.sender();
        for record in synthetic::requests(42, 20_000, 256, false) {
            sender.send(record)?;
        }
        writer.finish(RunEnd::default())?;
    }
    let cpu_start = clock::process_cpu_ns();
    let reader = TraceReader::open(&path)?;
    let mut chunks = 0usize;
    let mut block = DecodedBlock::default();
    for i in 0..reader.block_count() {
        if mode == "fresh" {
            chunks += reader.decode_block(i)?.chunk_count();
        } else {
            reader.decode_block_into(i, &mut block)?;
            chunks += block.chunk_count();
        }
    }
    let cpu_ns = clock::process_cpu_ns() - cpu_start;
    println!(
        "{mode}: {chunks} chunks in {:.1} ms of CPU = {:.1} M chunks per CPU-second",
        cpu_ns as f64 / 1e6,
        chunks as f64 / cpu_ns as f64 * 1e3
    );
    Ok(())
}
