//! The Parquet dataset: `requests.parquet` and `chunks.parquet` in one directory, written with
//! the low-level column writers of the `parquet` crate (no Arrow), zstd-compressed.

pub mod chunks;
pub mod requests;
pub mod table;

use crate::error::ExportError;
use crate::run::{self, RunColumns};
use std::path::{Path, PathBuf};
use tokentrace_analyzer::analysis::Analysis;

/// The file names the dataset consists of.
pub const FILES: [&str; 2] = ["requests.parquet", "chunks.parquet"];

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// `requests.parquet`.
    pub requests_path: PathBuf,
    /// Its rows.
    pub requests: u64,
    /// `chunks.parquet`.
    pub chunks_path: PathBuf,
    /// Its rows.
    pub chunks: u64,
}

/// Fails when a file of the dataset exists in `dir` and `force` is not set: call it before
/// loading the traces, so a refusal costs nothing.
pub fn check_outputs(dir: &Path, force: bool) -> Result<(), ExportError> {
    FILES
        .iter()
        .try_for_each(|name| run::refuse_existing(&dir.join(name), force))
}

/// Writes the dataset of `analysis` (every request of its traces, counted or not) into `dir`,
/// creating it when missing. Each file is written under a `.partial` name and renamed when
/// complete.
pub fn export(analysis: &Analysis<'_>, dir: &Path, force: bool) -> Result<Written, ExportError> {
    check_outputs(dir, force)?;
    std::fs::create_dir_all(dir).map_err(|e| ExportError::io(dir, e))?;
    // Indexed by trace: the requests' `trace` field points into it.
    let runs: Vec<RunColumns> = analysis
        .dataset
        .traces
        .iter()
        .enumerate()
        .map(|(i, t)| RunColumns::of(i, t))
        .collect();
    let analyzed: Vec<RunColumns> = analysis
        .traces
        .iter()
        .filter_map(|&t| runs.get(t as usize).cloned())
        .collect();
    let requests_path = dir.join(FILES[0]);
    let chunks_path = dir.join(FILES[1]);
    let requests = write_one(&requests_path, |file| {
        requests::write(analysis, &runs, file, &requests_path)
    })?;
    let chunks = write_one(&chunks_path, |file| {
        chunks::write(&analyzed, file, &chunks_path)
    })?;
    Ok(Written {
        requests_path,
        requests,
        chunks_path,
        chunks,
    })
}

/// Writes `path` through its partial name, removing the partial file when writing fails.
fn write_one(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<u64, ExportError>,
) -> Result<u64, ExportError> {
    let partial = run::partial_path(path);
    match write(&partial) {
        Ok(rows) => {
            run::commit(path)?;
            Ok(rows)
        }
        Err(err) => {
            let _ = std::fs::remove_file(&partial);
            Err(err)
        }
    }
}
