//! Writer behaviour over time: age-based flushing, a writer stopped without `finish`, and
//! senders after the end.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use std::path::Path;
use std::time::{Duration, Instant};
use tokentrace_format::synthetic;
use tokentrace_format::*;

fn header() -> Header {
    Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor::now(),
        host: "w".into(),
        shard: 0,
    }
}

/// Waits (bounded) until `path` holds `blocks` readable blocks; returns the reader.
fn wait_for_blocks(path: &Path, blocks: usize) -> TraceReader {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reader = TraceReader::open(path).unwrap();
        if reader.block_count() >= blocks || Instant::now() > deadline {
            return reader;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_idle_writer_flushes_by_age_so_a_kill_loses_nothing_older() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("age.trace");
    let config = WriterConfig {
        block_max_age: Duration::from_millis(20),
        ..Default::default()
    };
    let writer = TraceWriter::create(&path, header(), &Manifest::default(), config).unwrap();
    let records = synthetic::requests(1, 2, 10, true);
    let sender = writer.sender();
    sender.send(records[0].clone()).unwrap();
    // No further record arrives, yet the block must reach the file.
    let reader = wait_for_blocks(&path, 1);
    assert_eq!(reader.block_count(), 1);
    assert_eq!(reader.integrity().verdict(), "recovered");
    assert_eq!(reader.run_end(), None);
    let read: Vec<_> = reader.requests().map(Result::unwrap).collect();
    assert_eq!(read, records[..1]);

    sender.send(records[1].clone()).unwrap();
    let stats = writer
        .finish(RunEnd {
            reason: "completed".into(),
            ..Default::default()
        })
        .unwrap();
    assert_eq!((stats.requests, stats.blocks), (2, 2));
    assert_eq!(stats.file_bytes, std::fs::metadata(&path).unwrap().len());
    let reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.integrity(), &Integrity::Ok);
    assert_eq!(
        reader.requests().map(Result::unwrap).collect::<Vec<_>>(),
        records
    );

    // The writer is finished: a late send is refused with a clear error, not lost silently.
    assert!(matches!(
        sender.send(records[0].clone()),
        Err(FormatError::WriterClosed)
    ));
}

/// A checkpoint younger than half the block age stays out of a block that fills up and goes in
/// a later one, which the block age brings even though nothing else arrives: a kill loses no
/// more than before, and a final record that comes meanwhile makes the checkpoint unnecessary.
#[test]
fn a_young_checkpoint_is_left_out_of_a_full_block_and_written_in_a_later_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.trace");
    let config = WriterConfig {
        block_target_bytes: 16 << 10,
        // Long enough that the second block cannot come before the first is looked at.
        block_max_age: Duration::from_secs(4),
        ..Default::default()
    };
    let writer = TraceWriter::create(&path, header(), &Manifest::default(), config).unwrap();
    let mut rng = synthetic::SplitMix::new(4);
    let streaming = synthetic::request(&mut rng, 1, 1_000_000_000, 20, false);
    // A final record big enough to fill a block on its own.
    let big = synthetic::request(&mut rng, 2, 1_000_000_000, 4_000, false);
    let sender = writer.sender();
    assert!(sender.checkpoint(streaming.clone(), 0));
    sender.send(big.clone()).unwrap();

    let reader = wait_for_blocks(&path, 1);
    assert_eq!(reader.block_count(), 1);
    let first: Vec<u64> = reader.requests().map(|r| r.unwrap().meta.id).collect();
    assert_eq!(first, [2], "the checkpoint is held out of the full block");
    let reader = wait_for_blocks(&path, 2);
    assert_eq!(
        reader.block_count(),
        2,
        "the held checkpoint was never written"
    );
    let read: Vec<RequestRecord> = reader.requests().map(Result::unwrap).collect();
    assert_eq!(read.len(), 2);
    let interrupted = read.iter().find(|r| r.meta.id == 1).unwrap();
    assert_eq!(interrupted.meta.outcome, Outcome::Interrupted);
    assert_eq!(interrupted.chunks, streaming.chunks);
    drop(sender);
    writer.abandon().unwrap();
}

#[test]
fn dropping_every_handle_keeps_the_records_without_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dropped.trace");
    let config = WriterConfig {
        block_max_age: Duration::from_secs(600),
        ..Default::default()
    };
    let writer = TraceWriter::create(&path, header(), &Manifest::default(), config).unwrap();
    let records = synthetic::requests(2, 5, 30, false);
    let sender = writer.sender();
    for r in &records {
        sender.send(r.clone()).unwrap();
    }
    drop(sender);
    drop(writer);
    let reader = wait_for_blocks(&path, 1);
    assert_eq!(reader.integrity().verdict(), "recovered");
    assert_eq!(
        reader.requests().map(Result::unwrap).collect::<Vec<_>>(),
        records
    );
}

/// A writer whose channel holds one message and which writes a block per record: senders
/// find it full at once.
fn one_slot_writer(path: &Path) -> TraceWriter {
    let config = WriterConfig {
        channel_capacity: 1,
        block_target_bytes: 1,
        ..Default::default()
    };
    TraceWriter::create(path, header(), &Manifest::default(), config).unwrap()
}

#[test]
fn backpressure_is_counted_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bp.trace");
    let writer = one_slot_writer(&path);
    let sender = writer.sender();
    let records = synthetic::requests(3, 200, 50, true);
    for r in &records {
        sender.send(r.clone()).unwrap();
    }
    let seen = sender.backpressure_events();
    let stats = writer.finish(RunEnd::default()).unwrap();
    assert_eq!(stats.requests, 200);
    assert_eq!(stats.blocks, 200);
    assert!(stats.backpressure_events >= seen);
    assert!(stats.backpressure_events <= 200);
}

#[test]
fn a_record_a_full_channel_refuses_comes_back_whole_and_nothing_waits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("try.trace");
    let writer = one_slot_writer(&path);
    let sender = writer.sender();
    let records = synthetic::requests(4, 200, 50, true);
    let packed: Vec<PackedRecord> = records.iter().cloned().map(PackedRecord::from).collect();
    // One slot, and a block written per record: a loop that never waits finds the slot taken
    // (each try takes nanoseconds, the writer's wake-up alone microseconds).
    let mut refused = Vec::new();
    for record in packed {
        if let Some(back) = sender.try_send(record).unwrap() {
            refused.push(back);
        }
    }
    assert!(!refused.is_empty(), "the channel was never full");
    assert_eq!(sender.backpressure_events(), 0, "nothing waited");
    let refused_ids: Vec<u64> = refused.iter().map(|r| r.meta.id).collect();
    for record in refused {
        sender.send(record).unwrap();
    }
    let stats = writer.finish(RunEnd::default()).unwrap();
    assert_eq!(stats.requests, 200);
    let reader = TraceReader::open(&path).unwrap();
    let mut read: Vec<RequestRecord> = reader.requests().map(Result::unwrap).collect();
    read.sort_by_key(|r| r.meta.id);
    let ids: Vec<u64> = read.iter().map(|r| r.meta.id).collect();
    assert_eq!(ids, (0..200).collect::<Vec<u64>>(), "every record once");
    for id in refused_ids {
        let sent = records.iter().find(|r| r.meta.id == id);
        assert!(
            sent == Some(&read[id as usize]),
            "refused record {id} written as it was"
        );
    }
}

#[test]
fn creating_in_a_missing_directory_is_a_clear_error() {
    let err = TraceWriter::create(
        Path::new("/nonexistent-dir/x.trace"),
        header(),
        &Manifest::default(),
        WriterConfig::default(),
    )
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("/nonexistent-dir/x.trace"),
        "{err}"
    );
}
