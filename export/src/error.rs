//! What can go wrong while exporting.

use std::path::PathBuf;

/// Errors of the exports.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The output is already there and overwriting was not asked for.
    #[error("{path} exists; pass --force to overwrite it")]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A trace could not be opened.
    #[error("{path}: {source}")]
    Trace {
        /// The trace.
        path: PathBuf,
        /// Why.
        #[source]
        source: tokentrace_format::FormatError,
    },
    /// The Parquet writer refused something.
    #[error("{path}: parquet: {source}")]
    Parquet {
        /// The file being written.
        path: PathBuf,
        /// Why.
        #[source]
        source: parquet::errors::ParquetError,
    },
    /// A value does not fit its column (an unsigned 64-bit number above the signed range).
    #[error("{column}: value {value} does not fit a signed 64-bit column")]
    OutOfRange {
        /// The column.
        column: String,
        /// The value.
        value: u64,
    },
    /// The protocol's per-request metrics do not make a table: a name is used twice or takes
    /// the name of a fixed column, or a value does not have its column's type.
    #[error("{0}")]
    Schema(String),
}

impl ExportError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> ExportError {
        ExportError::Io {
            path: path.into(),
            source,
        }
    }
}
