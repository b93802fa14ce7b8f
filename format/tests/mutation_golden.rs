//! Mutation testing of the reader over the golden traces: thousands of damaged and hostile
//! files, each read completely (every block decoded, every request materialized). The reader
//! must never panic, must finish every file (a hang shows up as a case that does not end), and
//! must not let a length field in the file ask for more memory than the file can justify.
//!
//! Two kinds of damage: raw byte mutations (caught mostly by the checksums), and structural
//! mutations that change a frame's decompressed payload or its header fields and then *re-seal*
//! the frame with valid checksums, so the hostile bytes reach the column decoder, the index
//! parser and the JSON sections as a malicious writer would deliver them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokentrace_format::frame::{self, CODEC_ZSTD, FRAME_HEADER_LEN, MAX_RAW_LEN};
use tokentrace_format::TraceReader;

/// The system allocator, recording the largest single request made by the current thread.
struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: thread-local storage may already be gone while a thread shuts down.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// The largest single allocation reading a file may make. The reader refuses a column whose
/// claimed memory exceeds its 1 GiB decode limit and a frame whose raw length exceeds
/// `MAX_RAW_LEN` (256 MiB); beyond those, a hostile length must not make it reserve memory.
const ALLOCATION_LIMIT: usize = 1 << 30;

/// A case that runs this long is a hang (a correct read of these small files takes
/// milliseconds); the bound is generous so that a loaded machine never trips it.
const HANG_LIMIT: Duration = Duration::from_secs(20);

fn golden(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden");
    std::fs::read(path.join(name)).unwrap()
}

/// Byte ranges of the frames after the file header, in file order; whatever follows the last
/// whole frame (the footer, or a torn frame) is not a frame.
fn frames(data: &[u8]) -> Vec<(usize, usize)> {
    let Ok((_, mut pos)) = frame::decode_file_header(data) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(h) = frame::decode_frame_header(&data[pos..]) {
        let end = pos + FRAME_HEADER_LEN + h.stored_len as usize;
        if end > data.len() {
            break;
        }
        out.push((pos, end));
        pos = end;
    }
    out
}

/// Values a hostile writer would put in a length or count field.
fn hostile_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(u32::MAX),
        Just(MAX_RAW_LEN),
        Just(MAX_RAW_LEN + 1),
        Just(1u32 << 31),
        Just(0u32),
        any::<u32>(),
    ]
}

/// Bytes that decode as a huge bincode varint (0xFD: a u64 follows; 0xFC: a u32 follows).
fn hostile_varint() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(vec![0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
        Just(vec![0xFD, 0, 0, 0, 0, 0, 0, 0, 0x01]),
        Just(vec![0xFC, 0xFF, 0xFF, 0xFF, 0x0F]),
        Just(vec![0xFC, 0x00, 0x00, 0x00, 0x04]),
        Just(vec![0xFB, 0xFF, 0xFF]),
    ]
}

/// One damage applied to a file.
#[derive(Debug, Clone)]
enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    SetByte {
        at: usize,
        value: u8,
    },
    WriteU32 {
        at: usize,
        value: u32,
    },
    Truncate {
        keep: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Delete {
        at: usize,
        len: usize,
    },
    /// Change a frame's decompressed payload, then re-seal it with valid checksums.
    Payload {
        frame: usize,
        at: usize,
        edit: PayloadEdit,
    },
    /// Re-seal a frame with a different raw length, keeping its payload.
    RawLen {
        frame: usize,
        value: u32,
    },
    /// Re-seal a frame with a different sequence number.
    Seq {
        frame: usize,
        value: u32,
    },
}

#[derive(Debug, Clone)]
enum PayloadEdit {
    Set(u8),
    Splice(Vec<u8>),
    Cut(usize),
    Truncate,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<prop::sample::Index>().prop_map(|i| i.index(usize::MAX / 2));
    let edit = prop_oneof![
        any::<u8>().prop_map(PayloadEdit::Set),
        hostile_varint().prop_map(PayloadEdit::Splice),
        prop::collection::vec(any::<u8>(), 1..12).prop_map(PayloadEdit::Splice),
        (1usize..16).prop_map(PayloadEdit::Cut),
        Just(PayloadEdit::Truncate),
    ];
    prop_oneof![
        1 => (at.clone(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        1 => (at.clone(), any::<u8>()).prop_map(|(at, value)| Mutation::SetByte { at, value }),
        1 => (at.clone(), hostile_u32()).prop_map(|(at, value)| Mutation::WriteU32 { at, value }),
        1 => at.clone().prop_map(|keep| Mutation::Truncate { keep }),
        1 => (at.clone(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (at.clone(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        3 => (any::<usize>(), at, edit)
            .prop_map(|(frame, at, edit)| Mutation::Payload { frame, at, edit }),
        1 => (any::<usize>(), hostile_u32()).prop_map(|(frame, value)| Mutation::RawLen { frame, value }),
        1 => (any::<usize>(), any::<u32>()).prop_map(|(frame, value)| Mutation::Seq { frame, value }),
    ]
}

/// Re-encodes frame `(start, end)` of `data` through `change(kind, codec, seq, raw_len,
/// decompressed payload)`, with valid checksums.
fn reseal(
    data: &mut Vec<u8>,
    (start, end): (usize, usize),
    change: impl FnOnce(&mut u32, &mut u32, &mut Vec<u8>),
) {
    let Ok(h) = frame::decode_frame_header(&data[start..end]) else {
        return;
    };
    let stored = &data[start + FRAME_HEADER_LEN..end];
    let mut raw = if h.codec == CODEC_ZSTD {
        match zstd::bulk::decompress(stored, h.raw_len as usize) {
            Ok(raw) => raw,
            Err(_) => return,
        }
    } else {
        stored.to_vec()
    };
    let (mut seq, mut raw_len) = (h.seq, u32::MAX);
    change(&mut seq, &mut raw_len, &mut raw);
    if raw_len == u32::MAX {
        raw_len = raw.len() as u32;
    }
    let payload = if h.codec == CODEC_ZSTD {
        zstd::bulk::compress(&raw, 1).unwrap()
    } else {
        raw
    };
    let kind = match data[start + 4] {
        1 => frame::FrameKind::Manifest,
        2 => frame::FrameKind::Block,
        3 => frame::FrameKind::RunEnd,
        _ => frame::FrameKind::Index,
    };
    let sealed = frame::encode_frame(kind, h.codec, seq, raw_len, &payload);
    data.splice(start..end, sealed);
}

fn apply(data: &mut Vec<u8>, mutation: &Mutation) {
    let len = data.len().max(1);
    match mutation {
        Mutation::FlipBit { at, bit } => {
            if let Some(b) = data.get_mut(at % len) {
                *b ^= 1 << bit;
            }
        }
        Mutation::SetByte { at, value } => {
            if let Some(b) = data.get_mut(at % len) {
                *b = *value;
            }
        }
        Mutation::WriteU32 { at, value } => {
            let at = at % len;
            for (i, b) in value.to_le_bytes().into_iter().enumerate() {
                if let Some(slot) = data.get_mut(at + i) {
                    *slot = b;
                }
            }
        }
        Mutation::Truncate { keep } => data.truncate(keep % len),
        Mutation::Insert { at, bytes } => {
            let at = at % (data.len() + 1);
            data.splice(at..at, bytes.iter().copied());
        }
        Mutation::Delete { at, len: n } => {
            let at = at % len;
            let end = (at + n).min(data.len());
            if at < end {
                data.drain(at..end);
            }
        }
        Mutation::Payload { frame, at, edit } => {
            let all = frames(data);
            if all.is_empty() {
                return;
            }
            reseal(data, all[frame % all.len()], |_, _, raw| {
                let at = at % (raw.len() + 1);
                match edit {
                    PayloadEdit::Set(v) => {
                        if let Some(b) = raw.get_mut(at) {
                            *b = *v;
                        }
                    }
                    PayloadEdit::Splice(bytes) => {
                        let end = (at + bytes.len()).min(raw.len());
                        raw.splice(at..end, bytes.iter().copied());
                    }
                    PayloadEdit::Cut(n) => {
                        let end = (at + n).min(raw.len());
                        raw.drain(at..end);
                    }
                    PayloadEdit::Truncate => raw.truncate(at),
                }
            });
        }
        Mutation::RawLen { frame, value } => {
            let all = frames(data);
            if !all.is_empty() {
                reseal(data, all[frame % all.len()], |_, raw_len, _| {
                    *raw_len = (*value).min(MAX_RAW_LEN)
                });
            }
        }
        Mutation::Seq { frame, value } => {
            let all = frames(data);
            if !all.is_empty() {
                reseal(data, all[frame % all.len()], |seq, _, _| *seq = *value);
            }
        }
    }
}

/// Reads everything a reader offers. Returns the number of requests read.
fn read_everything(bytes: Vec<u8>) -> usize {
    let Ok(reader) = TraceReader::open_bytes(bytes) else {
        return 0;
    };
    let _ = reader.integrity().to_string();
    let _ = reader.run_end();
    let mut requests = 0;
    for i in 0..reader.block_count() {
        if let Ok(block) = reader.decode_block(i) {
            for r in 0..block.requests.len() {
                let record = block.record(r);
                assert!(record.chunks.len() == block.requests[r].chunk_len);
                requests += 1;
            }
        }
    }
    let via_iterator = reader.requests().filter(|r| r.is_ok()).count();
    assert_eq!(
        via_iterator, requests,
        "requests() and decode_block disagree"
    );
    requests
}

fn check(base: &[u8], mutations: &[Mutation]) -> Result<(), TestCaseError> {
    let mut data = base.to_vec();
    for m in mutations {
        apply(&mut data, m);
    }
    let input_len = data.len();
    LARGEST.with(|l| l.set(0));
    let started = Instant::now();
    read_everything(data);
    let elapsed = started.elapsed();
    let largest = LARGEST.with(|l| l.get());
    prop_assert!(elapsed < HANG_LIMIT, "reading took {elapsed:?}: a hang");
    prop_assert!(
        largest <= ALLOCATION_LIMIT,
        "a {input_len}-byte file made the reader allocate {largest} bytes at once"
    );
    Ok(())
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Shrinking a failure is useful; an endless shrink is not.
        max_shrink_iters: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(3_000))]

    #[test]
    fn mutated_finished_trace_never_panics(mutations in prop::collection::vec(mutation(), 1..6)) {
        check(&golden("finished.trace"), &mutations)?;
    }

    #[test]
    fn mutated_killed_trace_never_panics(mutations in prop::collection::vec(mutation(), 1..6)) {
        check(&golden("killed.trace"), &mutations)?;
    }
}

/// The mutations must reach the decoder: re-sealed payload edits yield files that open and
/// whose blocks pass their checksums, so the column decoder is what rejects them.
#[test]
fn resealed_payload_edits_pass_the_checksums() {
    let base = golden("finished.trace");
    let all = frames(&base);
    assert!(all.len() >= 3, "manifest, blocks, run end, index");
    let mut data = base.clone();
    apply(
        &mut data,
        &Mutation::Payload {
            frame: 1,
            at: 0,
            edit: PayloadEdit::Splice(vec![0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
        },
    );
    assert_ne!(data, base);
    let reader = TraceReader::open_bytes(data).unwrap();
    let err = reader.decode_block(0).unwrap_err().to_string();
    assert!(err.contains("column"), "{err}");
}

/// A frame whose raw length claims the maximum while its payload is a few hundred bytes: the
/// reader must not reserve the claimed size before decompressing.
#[test]
fn hostile_raw_length_does_not_reserve_memory() {
    let mut data = golden("finished.trace");
    apply(
        &mut data,
        &Mutation::RawLen {
            frame: 1,
            value: MAX_RAW_LEN,
        },
    );
    let input_len = data.len();
    LARGEST.with(|l| l.set(0));
    read_everything(data);
    let largest = LARGEST.with(|l| l.get());
    assert!(
        largest < 64 * 1024 * 1024,
        "a {input_len}-byte file made the reader allocate {largest} bytes at once"
    );
}
