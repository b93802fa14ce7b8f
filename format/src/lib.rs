//! The tokentrace trace file, format version 1: record types, a writer thread fed through a
//! bounded channel, an mmap reader that verifies and recovers, and the clock anchor.
//!
//! Nothing here speaks to the network. docs/FORMAT.md specifies every byte.
//! `examples/foreign_client.rs` embeds the writer in a client of its own (docs/FORMAT.md, 9).

pub mod block;
mod block_decoder;
pub mod checkpoint;
mod chunk_columns;
mod chunk_columns_write;
pub mod clock;
mod codec;
pub mod error;
pub mod frame;
pub mod imported;
mod inbox;
pub mod integrity;
mod locate;
pub mod merge;
mod narrow;
pub mod packed;
mod payload;
mod pending;
pub mod reader;
pub mod redact;
pub mod request_id;
pub mod shards;
pub mod synthetic;
pub mod types;
pub mod writer;

pub use block::{BlockRequest, CheckpointSection, ChunkColumns, DecodedBlock};
pub use clock::{mono_now_ns, realtime_now_ns};
pub use error::FormatError;
pub use imported::{ClientTokenCounts, MeasurementWindow, RequestTokenCounts};
pub use integrity::{Integrity, Skipped};
pub use packed::{PackedChunks, PackedRecord};
pub use reader::{BlockInfo, TraceReader};
pub use request_id::RequestIdHeader;
pub use types::*;
pub use writer::{RecordSender, TraceWriter, WriterConfig, WriterStats};
