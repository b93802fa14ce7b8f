//! What a reader found wrong with a trace, and the one-word verdict derived from it.

use std::fmt;

/// A stretch of the file the reader could not use, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Byte offset where the problem starts.
    pub offset: u64,
    /// Bytes skipped (0 when nothing was skipped, e.g. a missing sequence number).
    pub len: u64,
    /// Position (0-based, in file order, counting lost blocks) of the block concerned.
    pub block: u64,
    /// What is wrong.
    pub reason: String,
    /// True for damage (bad checksum, bad header, missing blocks); false for what a stopped
    /// writer normally leaves (an incomplete last frame, no index).
    pub corrupt: bool,
}

/// The integrity verdict of a trace, established when it is opened from the frame structure
/// and both checksums of every frame. A block that passes its checksums but does not decode
/// (a faulty writer) is reported by [`crate::TraceReader::decode_block`] instead; `tokentrace
/// inspect` decodes every block and counts such a block as corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// Finished cleanly; every block verified.
    Ok,
    /// No usable index (the writer was killed or the tail is damaged): the blocks were found by
    /// scanning, and nothing found is damaged.
    Recovered {
        /// Readable blocks found.
        blocks: usize,
        /// What was skipped (usually an incomplete last frame).
        skipped: Vec<Skipped>,
    },
    /// At least one block or frame is damaged and was skipped; later blocks are still read.
    Corrupt {
        /// Position of the first damaged block (see [`Skipped::block`]).
        block: u64,
        /// Byte offset of the damage.
        offset: u64,
        /// What is wrong with it.
        reason: String,
        /// Everything that was skipped, damaged or not.
        skipped: Vec<Skipped>,
    },
}

impl Integrity {
    /// Derives the verdict from what was skipped and whether the index was used.
    pub(crate) fn from_findings(
        index_used: bool,
        blocks: usize,
        skipped: Vec<Skipped>,
    ) -> Integrity {
        if let Some(first) = skipped.iter().find(|s| s.corrupt).cloned() {
            Integrity::Corrupt {
                block: first.block,
                offset: first.offset,
                reason: first.reason,
                skipped,
            }
        } else if index_used && skipped.is_empty() {
            Integrity::Ok
        } else {
            Integrity::Recovered { blocks, skipped }
        }
    }

    /// `ok`, `recovered` or `corrupt`.
    pub fn verdict(&self) -> &'static str {
        match self {
            Integrity::Ok => "ok",
            Integrity::Recovered { .. } => "recovered",
            Integrity::Corrupt { .. } => "corrupt",
        }
    }

    /// Everything skipped (empty when ok).
    pub fn skipped(&self) -> &[Skipped] {
        match self {
            Integrity::Ok => &[],
            Integrity::Recovered { skipped, .. } | Integrity::Corrupt { skipped, .. } => skipped,
        }
    }
}

impl fmt::Display for Integrity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Integrity::Ok => write!(f, "ok"),
            Integrity::Recovered { blocks, .. } => write!(f, "recovered {blocks} blocks"),
            Integrity::Corrupt { block, reason, .. } => {
                write!(f, "corrupt block {block}: {reason}")
            }
        }
    }
}
