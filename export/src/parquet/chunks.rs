//! `chunks.parquet`: one row per recorded chunk, read from the traces block by block.

use super::table::{Cell, ColumnDef, Kind, Table};
use crate::error::ExportError;
use crate::run::RunColumns;
use crate::walk;
use bytes::Bytes;
use parquet::data_type::ByteArray;
use std::path::Path;
use tokentrace_format::DecodedBlock;

/// Rows per row group: about 128 thousand, near DuckDB's own (122 880), whose readers split
/// work by row group; about 30 MB of buffered columns.
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// The columns of `chunks.parquet`, in file order.
pub fn columns() -> Vec<ColumnDef> {
    use Kind::*;
    let r = ColumnDef::required;
    vec![
        r("trace_index", Int32),
        r("trace", Str),
        r("trace_path", Str),
        ColumnDef::nullable("run_id", Str),
        r("id", Int64),
        r("chunk_index", Int64),
        r("arrival_ns", Int64),
        r("read_index", Int64),
        r("channel", Str),
        r("bytes", Int64),
        r("text_len", Int64),
        ColumnDef::nullable("tokens", Int64),
    ]
}

/// The run columns as shared buffers: each row refers to them instead of copying the strings.
struct RunCells {
    index: i32,
    trace: ByteArray,
    path: ByteArray,
    run_id: Option<ByteArray>,
}

impl RunCells {
    fn new(run: &RunColumns) -> RunCells {
        let shared = |s: &str| ByteArray::from(Bytes::copy_from_slice(s.as_bytes()));
        RunCells {
            index: i32::try_from(run.trace_index).unwrap_or(i32::MAX),
            trace: shared(&run.trace),
            path: shared(&run.trace_path),
            run_id: run.run_id.as_deref().map(shared),
        }
    }
}

/// Writes every chunk of the traces `runs` describe to `path` (through its partial name
/// `file`), in the order [`walk::blocks`] reads them. Returns the rows written.
pub fn write(runs: &[RunColumns], file: &Path, path: &Path) -> Result<u64, ExportError> {
    let mut table = Table::create(file, path, columns(), Vec::new(), ROW_GROUP_ROWS)?;
    for run in runs {
        let cells = RunCells::new(run);
        walk::blocks(Path::new(&run.trace_path), |block| {
            push_block(&mut table, &cells, block)
        })?;
    }
    table.finish()
}

/// One row per chunk of a decoded block.
fn push_block(table: &mut Table, run: &RunCells, block: &DecodedBlock) -> Result<(), ExportError> {
    let c = &block.chunks;
    let n = walk::chunk_count(c);
    for request in &block.requests {
        let id = Cell::u64("id", Some(request.meta.id))?;
        for (position, i) in request.chunk_range().enumerate() {
            if i >= n {
                break;
            }
            table.push_row([
                Cell::I32(Some(run.index)),
                Cell::Str(Some(run.trace.clone())),
                Cell::Str(Some(run.path.clone())),
                Cell::Str(run.run_id.clone()),
                id.clone(),
                Cell::I64(Some(position as i64)),
                Cell::u64("arrival_ns", Some(c.arrival_ns[i]))?,
                Cell::I64(Some(i64::from(c.read_index[i]))),
                Cell::Str(Some(ByteArray::from(Bytes::from_static(
                    c.channel[i].name().as_bytes(),
                )))),
                Cell::I64(Some(i64::from(c.bytes[i]))),
                Cell::I64(Some(i64::from(c.text_len[i]))),
                Cell::I64(c.tokens[i].map(i64::from)),
            ])?;
        }
    }
    Ok(())
}
