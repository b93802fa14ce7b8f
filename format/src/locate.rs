//! Finding the blocks of a trace: through the footer and index of a finished file, or by
//! scanning frames forward (a killed writer, a damaged tail), verifying both checksums of every
//! frame and resynchronizing on the frame magic after damage. Every length read from the file
//! is checked against the bytes actually present before it is used.

use crate::frame::{self, FrameHeader, FrameKind, FRAME_HEADER_LEN, FRAME_MAGIC};
use crate::integrity::Skipped;
use crate::payload::{frame_payload, parse_json};
use crate::types::RunEnd;

/// Where one readable block is, and what the index says about it (when there is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Byte offset of the block's frame header.
    pub offset: u64,
    /// The frame header (sequence number, lengths, checksum).
    pub frame: FrameHeader,
    /// Requests and chunks in the block, from the index (None when found by scanning).
    pub counts: Option<(u32, u64)>,
}

use xxhash_rust::xxh3::xxh3_64;

/// A frame whose header and payload checksums are good.
pub(crate) struct CheckedFrame<'a> {
    pub(crate) header: FrameHeader,
    pub(crate) payload: &'a [u8],
}

/// Why a frame at some offset cannot be used.
pub(crate) enum FrameProblem {
    /// The file ends inside the frame (what a killed writer leaves).
    Incomplete(String),
    /// The frame header is damaged: its lengths cannot be trusted.
    BadHeader(String),
    /// The header is fine but the payload is damaged: the next frame starts right after it.
    BadPayload(FrameHeader, String),
}

/// Checks the frame at `offset`, which must end at or before `limit`.
pub(crate) fn check_frame(
    data: &[u8],
    offset: usize,
    limit: usize,
) -> Result<CheckedFrame<'_>, FrameProblem> {
    let available = &data[offset..limit];
    if available.len() < FRAME_HEADER_LEN {
        return Err(FrameProblem::Incomplete(format!(
            "{} bytes at the end, less than a frame header",
            available.len()
        )));
    }
    let header = frame::decode_frame_header(available).map_err(FrameProblem::BadHeader)?;
    let end = FRAME_HEADER_LEN + header.stored_len as usize;
    if end > available.len() {
        return Err(FrameProblem::Incomplete(format!(
            "frame of {end} bytes, only {} present",
            available.len()
        )));
    }
    let payload = &available[FRAME_HEADER_LEN..end];
    if xxh3_64(payload) != header.payload_check {
        return Err(FrameProblem::BadPayload(
            header,
            "payload checksum mismatch".into(),
        ));
    }
    Ok(CheckedFrame { header, payload })
}

/// What locating the blocks found.
pub(crate) struct Layout {
    pub(crate) blocks: Vec<BlockInfo>,
    pub(crate) run_end: Option<RunEnd>,
    pub(crate) skipped: Vec<Skipped>,
}

/// Locates blocks through the footer and index. `Err(None)`: there is no footer (killed
/// writer); `Err(Some(reason))`: there is one but it or the index is damaged.
pub(crate) fn from_index(data: &[u8], data_start: usize) -> Result<Layout, Option<String>> {
    let index_offset = frame::decode_footer(data).ok_or(None)?;
    let footer_start = data.len() - frame::FOOTER_LEN;
    let index_offset = usize::try_from(index_offset)
        .ok()
        .filter(|&o| o >= data_start && o <= footer_start)
        .ok_or_else(|| Some(format!("footer points outside the file ({index_offset})")))?;
    let index_frame = check_frame(data, index_offset, footer_start).map_err(|p| match p {
        FrameProblem::Incomplete(r)
        | FrameProblem::BadHeader(r)
        | FrameProblem::BadPayload(_, r) => Some(r),
    })?;
    if index_frame.header.kind != FrameKind::Index
        || index_offset + FRAME_HEADER_LEN + index_frame.payload.len() != footer_start
    {
        return Err(Some("footer does not point at an index frame".into()));
    }
    let raw = frame_payload(&index_frame.header, index_frame.payload).map_err(Some)?;
    let (run_end_offset, entries) = frame::decode_index(&raw).map_err(Some)?;

    let mut layout = Layout {
        blocks: Vec::new(),
        run_end: None,
        skipped: Vec::new(),
    };
    for (position, entry) in entries.iter().enumerate() {
        let offset = usize::try_from(entry.offset).unwrap_or(usize::MAX);
        let problem = if offset < data_start || offset >= index_offset {
            Some(format!(
                "index entry points outside the data ({})",
                entry.offset
            ))
        } else {
            match check_frame(data, offset, index_offset) {
                Ok(f) if f.header.kind == FrameKind::Block && f.header.seq == entry.seq => {
                    layout.blocks.push(BlockInfo {
                        offset: entry.offset,
                        frame: f.header,
                        counts: Some((entry.requests, entry.chunks)),
                    });
                    None
                }
                Ok(_) => Some("index entry does not match the block there".into()),
                Err(
                    FrameProblem::Incomplete(r)
                    | FrameProblem::BadHeader(r)
                    | FrameProblem::BadPayload(_, r),
                ) => Some(r),
            }
        };
        if let Some(reason) = problem {
            layout.skipped.push(Skipped {
                offset: entry.offset,
                len: 0,
                block: position as u64,
                reason,
                corrupt: true,
            });
        }
    }
    if let Ok(offset) = usize::try_from(run_end_offset) {
        if offset >= data_start && offset < index_offset {
            match check_frame(data, offset, index_offset) {
                Ok(f) if f.header.kind == FrameKind::RunEnd => {
                    match parse_json(&f.header, f.payload) {
                        Ok(end) => layout.run_end = Some(end),
                        Err(reason) => {
                            layout
                                .skipped
                                .push(corrupt_run_end(offset, entries.len(), reason))
                        }
                    }
                }
                Ok(_) => layout.skipped.push(corrupt_run_end(
                    offset,
                    entries.len(),
                    "not a run end frame".into(),
                )),
                Err(
                    FrameProblem::Incomplete(r)
                    | FrameProblem::BadHeader(r)
                    | FrameProblem::BadPayload(_, r),
                ) => layout
                    .skipped
                    .push(corrupt_run_end(offset, entries.len(), r)),
            }
        }
    }
    Ok(layout)
}

/// Walks frames from `start` to `end`, keeping every good block and resynchronizing on the
/// frame magic after damage.
pub(crate) fn scan(data: &[u8], start: usize, end: usize) -> Layout {
    let mut layout = Layout {
        blocks: Vec::new(),
        run_end: None,
        skipped: Vec::new(),
    };
    let mut expected_seq: u64 = 0;
    let mut pos = start;
    while pos < end {
        match check_frame(data, pos, end) {
            Ok(f) => {
                let frame_end = pos + FRAME_HEADER_LEN + f.payload.len();
                match f.header.kind {
                    FrameKind::Block => {
                        let seq = u64::from(f.header.seq);
                        if seq < expected_seq {
                            layout.skipped.push(Skipped {
                                offset: pos as u64,
                                len: (frame_end - pos) as u64,
                                block: expected_seq,
                                reason: format!("block with sequence {seq} out of order (expected {expected_seq})"),
                                corrupt: true,
                            });
                        } else {
                            if seq > expected_seq {
                                layout.skipped.push(Skipped {
                                    offset: pos as u64,
                                    len: 0,
                                    block: expected_seq,
                                    reason: format!("blocks {expected_seq}..{} missing", seq - 1),
                                    corrupt: true,
                                });
                            }
                            layout.blocks.push(BlockInfo {
                                offset: pos as u64,
                                frame: f.header,
                                counts: None,
                            });
                            expected_seq = seq + 1;
                        }
                    }
                    FrameKind::RunEnd => match parse_json(&f.header, f.payload) {
                        Ok(run_end) => layout.run_end = Some(run_end),
                        Err(reason) => {
                            layout
                                .skipped
                                .push(corrupt_run_end(pos, expected_seq as usize, reason))
                        }
                    },
                    // An index without a valid footer is not trusted; the scan has the blocks.
                    FrameKind::Index => {}
                    FrameKind::Manifest => layout.skipped.push(Skipped {
                        offset: pos as u64,
                        len: (frame_end - pos) as u64,
                        block: expected_seq,
                        reason: "a second manifest frame".into(),
                        corrupt: true,
                    }),
                }
                pos = frame_end;
            }
            Err(FrameProblem::Incomplete(reason)) => {
                layout.skipped.push(Skipped {
                    offset: pos as u64,
                    len: (end - pos) as u64,
                    block: expected_seq,
                    reason: format!("incomplete last frame: {reason}"),
                    corrupt: false,
                });
                break;
            }
            Err(FrameProblem::BadPayload(header, reason)) => {
                let frame_end = pos + FRAME_HEADER_LEN + header.stored_len as usize;
                layout.skipped.push(Skipped {
                    offset: pos as u64,
                    len: (frame_end - pos) as u64,
                    block: expected_seq,
                    reason: format!("seq {}: {reason}", header.seq),
                    corrupt: true,
                });
                if header.kind == FrameKind::Block {
                    expected_seq = expected_seq.max(u64::from(header.seq) + 1);
                }
                pos = frame_end;
            }
            Err(FrameProblem::BadHeader(reason)) => {
                let next = find_magic(data, pos + 1, end);
                layout.skipped.push(Skipped {
                    offset: pos as u64,
                    len: (next - pos) as u64,
                    block: expected_seq,
                    reason: format!("bad frame header ({reason}); skipped to the next frame"),
                    corrupt: true,
                });
                pos = next;
            }
        }
    }
    layout
}

fn corrupt_run_end(offset: usize, block: usize, reason: String) -> Skipped {
    Skipped {
        offset: offset as u64,
        len: 0,
        block: block as u64,
        reason: format!("run end: {reason}"),
        corrupt: true,
    }
}

/// Offset of the next frame magic in `data[from..end]`, or `end`.
fn find_magic(data: &[u8], from: usize, end: usize) -> usize {
    if from >= end {
        return end;
    }
    data[from..end]
        .windows(FRAME_MAGIC.len())
        .position(|w| w == FRAME_MAGIC)
        .map_or(end, |p| from + p)
}
