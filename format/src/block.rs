//! The columnar, in-memory view of one decoded block: request metadata in one vector and every
//! chunk field in its own vector, so analysis walks flat arrays instead of per-chunk structs.

use crate::types::{Channel, ChunkRecord, RequestMeta, RequestRecord};

/// A request of a decoded block: its [`RequestMeta`] and where its chunks are in the block's
/// [`ChunkColumns`] (`chunk_start .. chunk_start + chunk_len`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRequest {
    /// The request's facts.
    pub meta: RequestMeta,
    /// Index of the request's first chunk in the block's [`ChunkColumns`].
    pub chunk_start: usize,
    /// Number of chunks the request has.
    pub chunk_len: usize,
}

impl BlockRequest {
    /// The range of this request's chunks in the block's [`ChunkColumns`].
    pub fn chunk_range(&self) -> std::ops::Range<usize> {
        self.chunk_start..self.chunk_start + self.chunk_len
    }
}

/// Every chunk of a block, one vector per field, all of the same length. Times are absolute
/// (ns from the clock anchor), already un-delta'd.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkColumns {
    /// See [`ChunkRecord::arrival_ns`].
    pub arrival_ns: Vec<u64>,
    /// See [`ChunkRecord::read_index`].
    pub read_index: Vec<u32>,
    /// See [`ChunkRecord::bytes`].
    pub bytes: Vec<u32>,
    /// See [`ChunkRecord::channel`].
    pub channel: Vec<Channel>,
    /// See [`ChunkRecord::text_len`].
    pub text_len: Vec<u32>,
    /// See [`ChunkRecord::tokens`].
    pub tokens: Vec<Option<u32>>,
    /// See [`ChunkRecord::text`].
    pub text: Vec<Option<String>>,
}

impl ChunkColumns {
    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.arrival_ns.len()
    }

    /// True when there are no chunks.
    pub fn is_empty(&self) -> bool {
        self.arrival_ns.is_empty()
    }

    /// Empties every column, keeping the memory for reuse.
    pub fn clear(&mut self) {
        self.arrival_ns.clear();
        self.read_index.clear();
        self.bytes.clear();
        self.channel.clear();
        self.text_len.clear();
        self.tokens.clear();
        self.text.clear();
    }

    /// Materializes chunk `i` (panics if out of range, like slice indexing).
    pub fn chunk(&self, i: usize) -> ChunkRecord {
        ChunkRecord {
            arrival_ns: self.arrival_ns[i],
            read_index: self.read_index[i],
            bytes: self.bytes[i],
            channel: self.channel[i],
            text_len: self.text_len[i],
            tokens: self.tokens[i],
            text: self.text[i].clone(),
        }
    }
}

/// Columnar view of one block, for fast analysis without per-chunk structs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodedBlock {
    /// The block's requests, in the order they were written.
    pub requests: Vec<BlockRequest>,
    /// Every chunk of every request, request by request.
    pub chunks: ChunkColumns,
    /// Checkpoints of requests that were still streaming when the block was written (format
    /// 1.2; None when the block has none). Readers merge them with
    /// [`crate::checkpoint::Interrupted`]; analysis of final records ignores them.
    pub checkpoints: Option<Box<CheckpointSection>>,
}

/// The checkpoints of one block: the requests as blocks hold them (chunks are only those since
/// each request's previous checkpoint) and where each request's chunks start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointSection {
    /// The checkpointed requests and their new chunks.
    pub block: DecodedBlock,
    /// Per request of `block`: index of its first chunk here within the request's whole list.
    pub chunk_offset: Vec<u64>,
}

impl DecodedBlock {
    /// Materializes request `i` with its chunks (panics if out of range, like slice indexing).
    pub fn record(&self, i: usize) -> RequestRecord {
        let request = &self.requests[i];
        RequestRecord {
            meta: request.meta.clone(),
            chunks: request
                .chunk_range()
                .map(|c| self.chunks.chunk(c))
                .collect(),
        }
    }

    /// The columnar view of `records` (the inverse of [`DecodedBlock::records`]), e.g. for the
    /// interrupted requests a reader assembles from checkpoints.
    pub fn from_records(records: &[RequestRecord]) -> DecodedBlock {
        let mut block = DecodedBlock::default();
        for r in records {
            let chunk_start = block.chunks.len();
            for c in &r.chunks {
                let cols = &mut block.chunks;
                cols.arrival_ns.push(c.arrival_ns);
                cols.read_index.push(c.read_index);
                cols.bytes.push(c.bytes);
                cols.channel.push(c.channel);
                cols.text_len.push(c.text_len);
                cols.tokens.push(c.tokens);
                cols.text.push(c.text.clone());
            }
            block.requests.push(BlockRequest {
                meta: r.meta.clone(),
                chunk_start,
                chunk_len: r.chunks.len(),
            });
        }
        block
    }

    /// Empties the block, keeping the memory for reuse.
    pub fn clear(&mut self) {
        self.requests.clear();
        self.chunks.clear();
        self.checkpoints = None;
    }

    /// Materializes every request of the block.
    pub fn records(&self) -> Vec<RequestRecord> {
        (0..self.requests.len()).map(|i| self.record(i)).collect()
    }

    /// Total chunks in the block (final records only; checkpoints are not counted).
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }
}
