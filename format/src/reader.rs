//! The trace reader: maps the file, checks the header and manifest, then finds every block
//! through the index (finished trace) or by scanning frames forward (killed writer), verifying
//! each block's checksums. Damaged stretches are skipped and reported; nothing here panics,
//! loops without progress, or trusts a length beyond the bytes that are actually there.

use crate::block::DecodedBlock;
use crate::block_decoder;
use crate::error::FormatError;
use crate::frame::{self, FrameHeader, FrameKind, CODEC_ZSTD, FRAME_HEADER_LEN, FRAME_MAGIC};
use crate::integrity::{Integrity, Skipped};
use crate::types::{Header, Manifest, RequestRecord, RunEnd};
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;
use xxhash_rust::xxh3::xxh3_64;

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

enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Owned(vec) => vec,
        }
    }
}

/// Reads a trace file.
pub struct TraceReader {
    bytes: Bytes,
    header: Header,
    manifest: Manifest,
    run_end: Option<RunEnd>,
    blocks: Vec<BlockInfo>,
    integrity: Integrity,
}

/// A frame whose header and payload checksums are good.
struct CheckedFrame<'a> {
    header: FrameHeader,
    payload: &'a [u8],
}

/// Why a frame at some offset cannot be used.
enum FrameProblem {
    /// The file ends inside the frame (what a killed writer leaves).
    Incomplete(String),
    /// The frame header is damaged: its lengths cannot be trusted.
    BadHeader(String),
    /// The header is fine but the payload is damaged: the next frame starts right after it.
    BadPayload(FrameHeader, String),
}

/// Checks the frame at `offset`, which must end at or before `limit`.
fn check_frame(data: &[u8], offset: usize, limit: usize) -> Result<CheckedFrame<'_>, FrameProblem> {
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

fn frame_payload(header: &FrameHeader, payload: &[u8]) -> Result<Vec<u8>, String> {
    if header.codec != CODEC_ZSTD {
        return Ok(payload.to_vec());
    }
    // Check the size the zstd frame itself states before reserving `raw_len` bytes: a hostile
    // raw length (up to MAX_RAW_LEN) must not make a tiny file reserve hundreds of MiB.
    let raw = match zstd::zstd_safe::get_frame_content_size(payload) {
        Ok(Some(size)) if size == u64::from(header.raw_len) => {
            zstd::bulk::decompress(payload, header.raw_len as usize)
                .map_err(|e| format!("zstd: {e}"))?
        }
        Ok(Some(size)) => {
            return Err(format!(
                "zstd frame holds {size} bytes, frame says {}",
                header.raw_len
            ))
        }
        // No stated size (a streaming writer): grow the buffer only as output really arrives.
        Ok(None) => {
            use std::io::Read;
            let mut raw = Vec::new();
            zstd::stream::read::Decoder::new(payload)
                .and_then(|d| d.take(u64::from(header.raw_len) + 1).read_to_end(&mut raw))
                .map_err(|e| format!("zstd: {e}"))?;
            raw
        }
        Err(_) => return Err("zstd: not a valid zstd frame".into()),
    };
    if raw.len() != header.raw_len as usize {
        return Err(format!(
            "decompressed {} bytes, frame says {}",
            raw.len(),
            header.raw_len
        ));
    }
    Ok(raw)
}

fn parse_json<T: serde::de::DeserializeOwned>(
    header: &FrameHeader,
    payload: &[u8],
) -> Result<T, String> {
    let raw = frame_payload(header, payload)?;
    serde_json::from_slice(&raw).map_err(|e| format!("JSON: {e}"))
}

/// What locating the blocks found.
struct Layout {
    blocks: Vec<BlockInfo>,
    run_end: Option<RunEnd>,
    skipped: Vec<Skipped>,
}

impl TraceReader {
    /// Maps and opens a trace. Fails only if the header or manifest is unreadable; damage
    /// after them is reported by [`TraceReader::integrity`].
    pub fn open(path: &Path) -> Result<TraceReader, FormatError> {
        let file = File::open(path).map_err(|e| FormatError::io("opening", path, e))?;
        // SAFETY: the map is read-only; a trace is not modified while it is read (a file being
        // written only grows, and every offset read is bounds-checked against the map's length).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| FormatError::io("mapping", path, e))?;
        Self::from_bytes(Bytes::Mapped(map))
    }

    /// Opens a trace held in memory (tests, traces received over the network).
    pub fn open_bytes(bytes: Vec<u8>) -> Result<TraceReader, FormatError> {
        Self::from_bytes(Bytes::Owned(bytes))
    }

    fn from_bytes(bytes: Bytes) -> Result<TraceReader, FormatError> {
        let data = bytes.as_slice();
        let (header, header_len) =
            frame::decode_file_header(data).map_err(FormatError::BadHeader)?;
        if header.major != frame::FORMAT_MAJOR {
            return Err(FormatError::UnsupportedVersion {
                major: header.major,
                minor: header.minor,
                supported: frame::FORMAT_MAJOR,
            });
        }
        let bad_manifest = |reason: String| FormatError::BadManifest {
            offset: header_len as u64,
            reason,
        };
        let manifest_frame = check_frame(data, header_len, data.len()).map_err(|p| match p {
            FrameProblem::Incomplete(r)
            | FrameProblem::BadHeader(r)
            | FrameProblem::BadPayload(_, r) => bad_manifest(r),
        })?;
        if manifest_frame.header.kind != FrameKind::Manifest {
            return Err(bad_manifest("the first frame is not a manifest".into()));
        }
        let manifest: Manifest =
            parse_json(&manifest_frame.header, manifest_frame.payload).map_err(bad_manifest)?;
        let data_start = header_len + FRAME_HEADER_LEN + manifest_frame.payload.len();

        let (layout, index_used) = match Self::from_index(data, data_start) {
            Ok(layout) => (layout, true),
            Err(index_problem) => {
                let mut layout = Self::scan(data, data_start, data.len());
                if let Some(reason) = index_problem {
                    layout.skipped.insert(
                        0,
                        Skipped {
                            offset: data.len().saturating_sub(frame::FOOTER_LEN) as u64,
                            len: 0,
                            block: layout.blocks.len() as u64,
                            reason: format!("index unusable ({reason}); blocks found by scanning"),
                            corrupt: false,
                        },
                    );
                }
                (layout, false)
            }
        };
        let integrity = Integrity::from_findings(index_used, layout.blocks.len(), layout.skipped);
        Ok(TraceReader {
            header,
            manifest,
            run_end: layout.run_end,
            blocks: layout.blocks,
            integrity,
            bytes,
        })
    }

    /// Locates blocks through the footer and index. `Err(None)`: there is no footer (killed
    /// writer); `Err(Some(reason))`: there is one but it or the index is damaged.
    fn from_index(data: &[u8], data_start: usize) -> Result<Layout, Option<String>> {
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
    fn scan(data: &[u8], start: usize, end: usize) -> Layout {
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
                                        reason: format!(
                                            "blocks {expected_seq}..{} missing",
                                            seq - 1
                                        ),
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
                            Err(reason) => layout.skipped.push(corrupt_run_end(
                                pos,
                                expected_seq as usize,
                                reason,
                            )),
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

    /// The file header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The run manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The run end, when the writer finished (None for a killed writer).
    pub fn run_end(&self) -> Option<&RunEnd> {
        self.run_end.as_ref()
    }

    /// Readable blocks.
    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    /// Where readable block `index` is.
    pub fn block_info(&self, index: usize) -> Option<&BlockInfo> {
        self.blocks.get(index)
    }

    /// The integrity verdict and everything skipped.
    pub fn integrity(&self) -> &Integrity {
        &self.integrity
    }

    /// Decompresses and decodes readable block `index`.
    pub fn decode_block(&self, index: usize) -> Result<DecodedBlock, FormatError> {
        let mut block = DecodedBlock::default();
        self.decode_block_into(index, &mut block)?;
        Ok(block)
    }

    /// Like [`TraceReader::decode_block`], but fills `out`, reusing the memory of its vectors:
    /// the fastest way to walk a whole trace. On error `out` is left empty.
    pub fn decode_block_into(
        &self,
        index: usize,
        out: &mut DecodedBlock,
    ) -> Result<(), FormatError> {
        let info = self.blocks.get(index).ok_or(FormatError::NoSuchBlock {
            index,
            count: self.blocks.len(),
        })?;
        let start = info.offset as usize + FRAME_HEADER_LEN;
        let bad = |reason: String| FormatError::BadBlock {
            block: index,
            seq: info.frame.seq,
            offset: info.offset,
            reason,
        };
        let payload = self
            .bytes
            .as_slice()
            .get(start..start + info.frame.stored_len as usize)
            .ok_or_else(|| bad("block lies outside the file".into()))?;
        block_decoder::decode_payload_into(&info.frame, payload, out, frame_payload).map_err(bad)
    }

    /// Every request with its chunks, block by block in file order. A block that cannot be
    /// decoded yields one error, then reading goes on with the next block.
    pub fn requests(&self) -> impl Iterator<Item = Result<RequestRecord, FormatError>> + '_ {
        (0..self.blocks.len()).flat_map(move |i| {
            let items: Box<dyn Iterator<Item = Result<RequestRecord, FormatError>>> = match self
                .decode_block(i)
            {
                Ok(block) => Box::new((0..block.requests.len()).map(move |r| Ok(block.record(r)))),
                Err(err) => Box::new(std::iter::once(Err(err))),
            };
            items
        })
    }
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
