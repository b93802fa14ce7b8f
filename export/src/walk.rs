//! Walks a trace's requests with their chunks one decoded block at a time, as `analyze` reads
//! them: final records block by block in file order (completion order), then the requests a
//! killed recorder left streaming, from their checkpoints.

use crate::error::ExportError;
use std::path::Path;
use tokentrace_format::{ChunkColumns, DecodedBlock, TraceReader};

/// Calls `f` with every decoded block of the trace at `path`, then with one block of its
/// interrupted requests (when it has any). A block that does not decode is skipped: loading
/// the dataset reported it already.
pub fn blocks(
    path: &Path,
    mut f: impl FnMut(&DecodedBlock) -> Result<(), ExportError>,
) -> Result<(), ExportError> {
    let reader = TraceReader::open(path).map_err(|source| ExportError::Trace {
        path: path.to_path_buf(),
        source,
    })?;
    let mut block = DecodedBlock::default();
    for index in 0..reader.block_count() {
        if reader.decode_block_into(index, &mut block).is_ok() {
            f(&block)?;
        }
    }
    let interrupted = reader.interrupted();
    if !interrupted.is_empty() {
        f(&DecodedBlock::from_records(&interrupted))?;
    }
    Ok(())
}

/// Chunks a block's columns hold: the decoder gives every chunk column the same length, and
/// the shortest bounds a walk all the same, so a block built some other way cannot make an
/// index run past a column's end.
pub fn chunk_count(c: &ChunkColumns) -> usize {
    [
        c.arrival_ns.len(),
        c.read_index.len(),
        c.bytes.len(),
        c.channel.len(),
        c.text_len.len(),
        c.tokens.len(),
    ]
    .into_iter()
    .min()
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_column_bounds_the_chunks() {
        let mut c = ChunkColumns::default();
        assert_eq!(chunk_count(&c), 0);
        c.arrival_ns = vec![1, 2, 3];
        c.read_index = vec![0, 1, 2];
        c.bytes = vec![9, 9, 9];
        c.channel = vec![tokentrace_format::Channel::Content; 3];
        c.text_len = vec![1, 1, 1];
        c.tokens = vec![None, None];
        assert_eq!(chunk_count(&c), 2);
    }
}
