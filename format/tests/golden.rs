//! Golden traces: files checked into tests/golden/ that every later version must decode to
//! the same contents. `regenerate_golden_files` (ignored) rewrites them:
//!
//! ```text
//! cargo test -p tokentrace-format --test golden -- --ignored regenerate_golden_files
//! ```
//!
//! Regenerate only for a deliberate format change (and a new minor/major version).

mod common;

use common::*;
use std::time::Duration;
use tokentrace_format::*;

/// Blocks of the finished golden trace (the writer's size limit splits the six requests).
const GOLDEN_BLOCKS: usize = 3;

#[test]
#[ignore = "rewrites tests/golden/; run by hand for a format change"]
fn regenerate_golden_files() {
    let dir = golden_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let finished = dir.join("finished.trace");
    // Only the size limit decides block boundaries, so the output is deterministic.
    let config = WriterConfig {
        block_target_bytes: 250,
        block_max_age: Duration::from_secs(3600),
        ..Default::default()
    };
    let writer =
        TraceWriter::create(&finished, golden_header(), &golden_manifest(), config).unwrap();
    let sender = writer.sender();
    for record in golden_records() {
        sender.send(record).unwrap();
    }
    writer.finish(golden_run_end()).unwrap();

    // A killed writer: the file ends halfway through the last block's payload.
    let bytes = std::fs::read(&finished).unwrap();
    let reader = TraceReader::open(&finished).unwrap();
    let last = reader.block_info(reader.block_count() - 1).unwrap();
    let cut = last.offset as usize + 32 + last.frame.stored_len as usize / 2;
    std::fs::write(dir.join("killed.trace"), &bytes[..cut]).unwrap();
}

fn records_of(reader: &TraceReader) -> Vec<RequestRecord> {
    reader.requests().collect::<Result<Vec<_>, _>>().unwrap()
}

#[test]
fn finished_golden_trace_decodes_to_known_contents() {
    let reader = TraceReader::open(&golden_dir().join("finished.trace")).unwrap();
    assert_eq!(reader.integrity(), &Integrity::Ok);
    assert_eq!((reader.header().major, reader.header().minor), (1, 0));
    assert_eq!(reader.header().anchor.mono_ns, 123_456_789_000);
    assert_eq!(reader.header().host, "golden-host");
    assert_eq!(reader.manifest().model, "tiny");
    assert_eq!(reader.manifest().labels["engine"], "sim");
    assert_eq!(reader.manifest(), &golden_manifest());
    assert_eq!(
        reader.run_end().map(|e| e.reason.as_str()),
        Some("completed")
    );
    assert_eq!(reader.run_end(), Some(&golden_run_end()));
    assert_eq!(reader.block_count(), GOLDEN_BLOCKS);

    let records = records_of(&reader);
    assert_eq!(records.len(), 6);
    // A few fields spelled out, then every field of every record.
    assert_eq!(records[0].phase, Phase::Warmup);
    assert_eq!(records[0].chunks[2].text.as_deref(), Some("ünï"));
    assert_eq!(records[0].chunks[2].arrival_ns, 60_010_123);
    assert_eq!(records[1].http_status, 429);
    assert_eq!(records[2].headers_ns, None);
    assert_eq!(records[3].usage.reasoning_tokens, Some(20));
    assert_eq!(
        records[3].chunks[23].arrival_ns,
        70_000_000 + 23 * 10_003_007
    );
    assert_eq!(records[4].outcome, Outcome::StreamError);
    assert_eq!(records[5].chunks.len(), 12);
    assert_eq!(records, golden_records());

    let chunks: usize = (0..reader.block_count())
        .map(|b| reader.decode_block(b).unwrap().chunk_count())
        .sum();
    assert_eq!(chunks, 6 + 24 + 2 + 12);
}

#[test]
fn killed_golden_trace_recovers_every_complete_block() {
    let reader = TraceReader::open(&golden_dir().join("killed.trace")).unwrap();
    assert_eq!(reader.run_end(), None);
    assert_eq!(reader.block_count(), GOLDEN_BLOCKS - 1);
    match reader.integrity() {
        Integrity::Recovered { blocks, skipped } => {
            assert_eq!(*blocks, GOLDEN_BLOCKS - 1);
            assert_eq!(skipped.len(), 1);
            assert!(!skipped[0].corrupt);
            assert!(
                skipped[0].reason.contains("incomplete last frame"),
                "{}",
                skipped[0].reason
            );
        }
        other => panic!("expected recovered, got {other:?}"),
    }
    let records = records_of(&reader);
    let expected = golden_records();
    assert!(!records.is_empty() && records.len() < expected.len());
    assert_eq!(records[..], expected[..records.len()]);
}
