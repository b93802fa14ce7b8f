//! Golden traces: files checked into tests/golden/ that every later version must decode to
//! the same contents. `regenerate_golden_files` (ignored) rewrites them:
//!
//! ```text
//! cargo test -p tokentrace-format --test golden -- --ignored regenerate_golden_files
//! ```
//!
//! Regenerate only for a deliberate format change (and a new minor/major version).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

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

/// One message to the writer.
enum Sent {
    Final(RequestRecord),
    Checkpoint(Checkpoint),
}

/// What `killed-1.2.trace` holds: two final records, a redirect, and the reasoning stream as
/// three checkpoints (chunks 0-9, 10-19, 20-) with no final record; the writer then stopped
/// without finishing. Returns (messages in the order sent, the records a reader presents).
fn golden_1_2() -> (Vec<Sent>, Vec<RequestRecord>) {
    let records = golden_records();
    let mut redirect = records[2].clone();
    redirect.meta.outcome = Outcome::Redirect;
    redirect.meta.http_status = 307;
    redirect.meta.headers_ns = Some(redirect.meta.send_ns + 1_000_000);
    redirect.meta.error =
        Some("HTTP 307 redirect to https://elsewhere.example/v1/chat/completions".into());
    let streaming = &records[3];
    let bounds = [0, 10, 20, streaming.chunks.len()];
    let checkpoints: Vec<Checkpoint> = bounds
        .windows(2)
        .map(|w| {
            let mut r = streaming.clone();
            r.meta.outcome = Outcome::Interrupted;
            r.meta.error = None;
            r.meta.finish_reason = None;
            r.chunks = streaming.chunks[w[0]..w[1]].to_vec();
            r.meta.end_ns = streaming.chunks[w[1] - 1].arrival_ns + 1_000;
            Checkpoint {
                record: r,
                chunk_offset: w[0] as u64,
            }
        })
        .collect();
    let mut it = checkpoints.into_iter();
    let mut next = || Sent::Checkpoint(it.next().unwrap());
    let messages = vec![
        next(),
        Sent::Final(records[0].clone()),
        next(),
        Sent::Final(records[1].clone()),
        Sent::Final(redirect.clone()),
        next(),
    ];
    let mut interrupted = streaming.clone();
    interrupted.meta.outcome = Outcome::Interrupted;
    interrupted.meta.finish_reason = None;
    interrupted.meta.end_ns = streaming.chunks.last().unwrap().arrival_ns + 1_000;
    interrupted.meta.error = Some(format!(
        "interrupted: still streaming when the recorder stopped; {} chunks up to its last \
         checkpoint",
        streaming.chunks.len()
    ));
    let presented = vec![
        records[0].clone(),
        records[1].clone(),
        redirect,
        interrupted,
    ];
    (messages, presented)
}

#[test]
#[ignore = "rewrites tests/golden/killed-1.2.trace; run by hand for a format change"]
fn regenerate_golden_1_2() {
    let path = golden_dir().join("killed-1.2.trace");
    let config = WriterConfig {
        block_target_bytes: 250,
        block_max_age: Duration::from_secs(3600),
        ..Default::default()
    };
    let writer = TraceWriter::create(&path, golden_header(), &golden_manifest(), config).unwrap();
    let sender = writer.sender();
    for message in golden_1_2().0 {
        match message {
            Sent::Final(record) => sender.send(record).unwrap(),
            Sent::Checkpoint(c) => assert!(sender.checkpoint(c.record, c.chunk_offset)),
        }
    }
    // Dropped without finish: the file reads like one a killed writer left.
    drop(sender);
    writer.abandon().unwrap();
}

/// Format 1.2: a killed writer's checkpoints become one `interrupted` request, and an outcome
/// 1.1 cannot name reads back by its own name.
#[test]
fn killed_1_2_golden_trace_presents_the_interrupted_request() {
    let reader = TraceReader::open(&golden_dir().join("killed-1.2.trace")).unwrap();
    assert_eq!((reader.header().major, reader.header().minor), (1, 2));
    assert!(reader.run_end().is_none());
    assert!(reader.block_count() >= 3, "{}", reader.block_count());
    let mut records = records_of(&reader);
    records.sort_by_key(|r| r.meta.id);
    assert_eq!(records, golden_1_2().1);
    // Without the checkpoint merge (a 1.1 reader) the finals alone remain, the redirect as
    // an HTTP error: checked byte for byte in format/reference/read_trace.py's self-test.
    let finals: usize = (0..reader.block_count())
        .map(|i| reader.decode_block(i).unwrap().requests.len())
        .sum();
    assert_eq!(finals, 3);
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
    assert_eq!(records[0].meta.phase, Phase::Warmup);
    assert_eq!(records[0].chunks[2].text.as_deref(), Some("ünï"));
    assert_eq!(records[0].chunks[2].arrival_ns, 60_010_123);
    assert_eq!(records[1].meta.http_status, 429);
    assert_eq!(records[2].meta.headers_ns, None);
    assert_eq!(records[3].meta.usage.reasoning_tokens, Some(20));
    assert_eq!(
        records[3].chunks[23].arrival_ns,
        70_000_000 + 23 * 10_003_007
    );
    assert_eq!(records[4].meta.outcome, Outcome::StreamError);
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
