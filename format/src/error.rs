//! Errors of the trace format. Every message names where in the file the problem is, so a
//! person holding a damaged trace knows what was lost.

use std::path::PathBuf;

/// Everything that can go wrong writing or reading a trace.
#[derive(thiserror::Error, Debug)]
pub enum FormatError {
    /// An I/O error on the trace file. The message includes the cause (and the cause is not
    /// also chained as a `source`, so `{:#}` printers do not repeat it).
    #[error("{context} {path}: {cause}")]
    Io {
        /// What was being done (`creating`, `writing`, `opening`, …).
        context: &'static str,
        /// The trace file.
        path: PathBuf,
        /// The underlying error.
        cause: std::io::Error,
    },
    /// The file does not start with a valid tokentrace header.
    #[error("bad file header: {0}")]
    BadHeader(String),
    /// The file was written by a format major version this reader does not know.
    #[error("unsupported format version {major}.{minor} (this reader reads major {supported})")]
    UnsupportedVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
        /// Major version this reader supports.
        supported: u16,
    },
    /// The manifest section is missing or unreadable.
    #[error("bad manifest at offset {offset}: {reason}")]
    BadManifest {
        /// Byte offset of the manifest frame.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A frame (block, run end, index) failed a check.
    #[error("bad frame at offset {offset}: {reason}")]
    BadFrame {
        /// Byte offset of the frame header.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A data block passed its checksum but its contents could not be decoded.
    #[error("block {block} (seq {seq}, offset {offset}): {reason}")]
    BadBlock {
        /// Position of the block among the readable blocks.
        block: usize,
        /// Sequence number written in the block's frame.
        seq: u32,
        /// Byte offset of the block's frame header.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// `decode_block` was asked for a block that does not exist.
    #[error("block {index} out of range (trace has {count} readable blocks)")]
    NoSuchBlock {
        /// Requested index.
        index: usize,
        /// Readable blocks in the trace.
        count: usize,
    },
    /// A record or block could not be encoded (too large for the format's limits).
    #[error("cannot encode: {0}")]
    Encode(String),
    /// The writer thread failed earlier; nothing more can be written.
    #[error("trace writer failed: {0}")]
    WriterFailed(String),
    /// The writer has finished or its thread is gone.
    #[error("trace writer is closed")]
    WriterClosed,
}

impl FormatError {
    /// Wraps an I/O error with what was being done and on which file.
    pub fn io(context: &'static str, path: &std::path::Path, cause: std::io::Error) -> Self {
        FormatError::Io {
            context,
            path: path.to_path_buf(),
            cause,
        }
    }
}
