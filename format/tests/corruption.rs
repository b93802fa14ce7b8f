//! Every single-byte flip and every truncation point of the small golden traces: the reader
//! returns correct data or reports what it skipped (or refuses the file with an error), never
//! panics, and never passes off damaged data as good.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::*;
use tokentrace_format::*;

/// What a damaged file yielded.
struct Outcome {
    integrity: Integrity,
    records: Vec<RequestRecord>,
    decode_errors: usize,
}

fn read_all(bytes: Vec<u8>) -> Result<Outcome, FormatError> {
    let reader = TraceReader::open_bytes(bytes)?;
    assert_eq!(reader.header(), &golden_header());
    assert_eq!(reader.manifest(), &golden_manifest());
    if let Some(end) = reader.run_end() {
        assert_eq!(end, &golden_run_end());
    }
    let mut records = Vec::new();
    let mut decode_errors = 0;
    for r in reader.requests() {
        match r {
            Ok(r) => records.push(r),
            Err(_) => decode_errors += 1,
        }
    }
    Ok(Outcome {
        integrity: reader.integrity().clone(),
        records,
        decode_errors,
    })
}

/// (offset, end, first record index, record count) of each block of an intact trace.
fn block_spans(bytes: &[u8]) -> Vec<(usize, usize, usize, usize)> {
    let reader = TraceReader::open_bytes(bytes.to_vec()).unwrap();
    let mut first = 0;
    (0..reader.block_count())
        .map(|b| {
            let info = reader.block_info(b).unwrap();
            let n = reader.decode_block(b).unwrap().requests.len();
            let span = (
                info.offset as usize,
                info.offset as usize + 32 + info.frame.stored_len as usize,
                first,
                n,
            );
            first += n;
            span
        })
        .collect()
}

/// Offset where block data starts (after header and manifest): damage before it is an error.
fn data_start(bytes: &[u8]) -> usize {
    block_spans(bytes).first().map(|b| b.0).unwrap()
}

/// Every record read must be one of the originals, whole and in order.
fn assert_subsequence(records: &[RequestRecord], expected: &[RequestRecord], what: &str) {
    let mut it = expected.iter();
    for r in records {
        assert!(
            it.any(|e| e == r),
            "{what}: a record was read that is not an original: {r:?}"
        );
    }
}

fn check_flips(name: &str, complete_when_undamaged: bool) {
    let original = std::fs::read(golden_dir().join(name)).unwrap();
    let expected = golden_records();
    let spans = block_spans(&original);
    let start = data_start(&original);
    let intact_records: usize = spans.iter().map(|s| s.3).sum();
    for i in 0..original.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut bytes = original.clone();
            bytes[i] ^= flip;
            let what = format!("{name}: byte {i} ^ {flip:#04x}");
            let outcome = match read_all(bytes) {
                Ok(outcome) => outcome,
                Err(err) => {
                    assert!(
                        i < start,
                        "{what}: refused although header and manifest are intact: {err}"
                    );
                    assert!(!err.to_string().is_empty());
                    continue;
                }
            };
            assert_subsequence(&outcome.records, &expected, &what);
            // Only the block holding the flipped byte may be lost.
            let lost = spans
                .iter()
                .find(|s| i >= s.0 && i < s.1)
                .map_or(0, |s| s.3);
            assert!(
                outcome.records.len() + lost >= intact_records,
                "{what}: lost more than the damaged block"
            );
            let complete = outcome.records.len() == intact_records && outcome.decode_errors == 0;
            if !complete {
                assert_ne!(
                    outcome.integrity,
                    Integrity::Ok,
                    "{what}: data lost but integrity ok"
                );
                assert!(
                    !outcome.integrity.skipped().is_empty() || outcome.decode_errors > 0,
                    "{what}: loss not reported"
                );
            }
            if lost > 0 && !complete {
                assert_eq!(
                    outcome.integrity.verdict(),
                    "corrupt",
                    "{what}: a damaged block must be reported corrupt"
                );
            }
            if complete_when_undamaged && outcome.integrity == Integrity::Ok {
                assert_eq!(outcome.records, expected, "{what}");
            }
        }
    }
}

#[test]
fn every_byte_flip_of_the_finished_trace_is_caught_or_harmless() {
    check_flips("finished.trace", true);
}

#[test]
fn every_byte_flip_of_the_killed_trace_is_caught_or_harmless() {
    check_flips("killed.trace", false);
}

#[test]
fn every_truncation_reads_every_complete_block() {
    let original = std::fs::read(golden_dir().join("finished.trace")).unwrap();
    let expected = golden_records();
    let spans = block_spans(&original);
    let start = data_start(&original);
    for cut in 0..original.len() {
        let what = format!("cut at {cut}");
        match read_all(original[..cut].to_vec()) {
            Err(err) => assert!(cut < start, "{what}: refused: {err}"),
            Ok(outcome) => {
                let complete_blocks: usize = spans.iter().filter(|s| s.1 <= cut).map(|s| s.3).sum();
                assert_eq!(outcome.decode_errors, 0, "{what}");
                assert_eq!(outcome.records[..], expected[..complete_blocks], "{what}");
                assert_eq!(outcome.integrity.verdict(), "recovered", "{what}");
            }
        }
    }
}

#[test]
fn garbage_and_empty_files_are_refused_cleanly() {
    for bytes in [
        vec![],
        vec![0u8; 10],
        b"TOKTRACE".to_vec(),
        vec![0xffu8; 4096],
    ] {
        assert!(TraceReader::open_bytes(bytes).is_err());
    }
}
