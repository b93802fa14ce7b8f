//! The trace reader: maps the file, checks the header and manifest, then finds every block
//! through the index (finished trace) or by scanning frames forward (killed writer), verifying
//! each block's checksums. Damaged stretches are skipped and reported; nothing here panics,
//! loops without progress, or trusts a length beyond the bytes that are actually there.

use crate::block::DecodedBlock;
use crate::block_decoder;
use crate::error::FormatError;
use crate::frame::{self, FrameKind, FRAME_HEADER_LEN};
use crate::integrity::{Integrity, Skipped};
pub use crate::locate::BlockInfo;
use crate::locate::{self, check_frame, FrameProblem};
use crate::payload::{frame_payload, parse_json};
use crate::types::{Header, Manifest, RequestRecord, RunEnd};
use memmap2::Mmap;
use std::fs::File;
use std::path::Path;

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

        let (layout, index_used) = match locate::from_index(data, data_start) {
            Ok(layout) => (layout, true),
            Err(index_problem) => {
                let mut layout = locate::scan(data, data_start, data.len());
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

    /// Decompresses and decodes readable block `index` into new vectors. To walk many blocks,
    /// prefer [`TraceReader::decode_block_into`]: reusing one block's memory is about twice
    /// as fast in a single pass (docs/PERFORMANCE.md).
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
        out.clear();
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
        let result = block_decoder::decode_payload_into(&info.frame, payload, out, frame_payload);
        if result.is_err() {
            // Never leave an earlier block's contents behind to be mistaken for this one's.
            out.clear();
        }
        result.map_err(bad)
    }

    /// Every request with its chunks, block by block in file order, then the requests a
    /// killed recorder left unfinished ([`TraceReader::interrupted`]). A block that cannot be
    /// decoded yields one error, then reading goes on with the next block. One decoded block
    /// is held (and its memory reused) at a time.
    pub fn requests(&self) -> impl Iterator<Item = Result<RequestRecord, FormatError>> + '_ {
        let blocks = RequestIter {
            reader: self,
            next_block: 0,
            block: DecodedBlock::default(),
            next_request: 0,
        };
        let mut tail = None;
        blocks.chain(std::iter::from_fn(move || {
            tail.get_or_insert_with(|| self.interrupted().into_iter())
                .next()
                .map(Ok)
        }))
    }

    /// Whether the trace may hold requests that only checkpoints describe: it has no run end
    /// (a killed writer), or its writer said so. Without them, [`TraceReader::interrupted`]
    /// is empty and costs nothing.
    pub fn may_have_interrupted(&self) -> bool {
        crate::checkpoint::needs_merge(self.run_end.as_ref())
    }

    /// The requests still streaming when the writer stopped without their final record, each
    /// as [`crate::Outcome::Interrupted`] with every chunk up to its last checkpoint (docs/
    /// FORMAT.md, section 4.6). Walks every block once, in file order; blocks that do not
    /// decode are skipped here (the walk of the final records reports them).
    pub fn interrupted(&self) -> Vec<RequestRecord> {
        if !self.may_have_interrupted() {
            return Vec::new();
        }
        let mut merge = crate::checkpoint::Interrupted::default();
        let mut block = DecodedBlock::default();
        for index in 0..self.block_count() {
            if self.decode_block_into(index, &mut block).is_ok() {
                merge.add_block(&block);
            }
        }
        merge.finish()
    }
}

/// The iterator behind [`TraceReader::requests`].
struct RequestIter<'a> {
    reader: &'a TraceReader,
    next_block: usize,
    block: DecodedBlock,
    next_request: usize,
}

impl Iterator for RequestIter<'_> {
    type Item = Result<RequestRecord, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.next_request >= self.block.requests.len() {
            if self.next_block >= self.reader.block_count() {
                return None;
            }
            let index = self.next_block;
            self.next_block += 1;
            self.next_request = 0;
            if let Err(err) = self.reader.decode_block_into(index, &mut self.block) {
                return Some(Err(err));
            }
        }
        let record = self.block.record(self.next_request);
        self.next_request += 1;
        Some(Ok(record))
    }
}
