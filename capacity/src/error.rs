//! Errors of the capacity search and its re-analysis.

use std::path::PathBuf;

/// Everything that can stop a search or a re-analysis.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// An `--slo` spec that does not parse or resolve (the grammar's own message).
    #[error(transparent)]
    Slo(#[from] tokentrace_analyzer::slo::SloError),
    /// SLOs the capacity search cannot use: none given, or a metric its report keeps no
    /// per-request values of.
    #[error("bad SLO `{spec}`: {why}")]
    BadSlo {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A `--workload` spec that does not parse.
    #[error("bad workload `{spec}`: {why}")]
    BadWorkload {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// Search settings that cannot run.
    #[error("bad search settings: {0}")]
    BadSettings(String),
    /// A protocol the capacity search cannot judge under.
    #[error("protocol `{0}`: {1}")]
    UnknownProtocol(String, String),
    /// A trace could not be read.
    #[error("cannot read trace {path}: {why}")]
    Trace {
        /// The trace file.
        path: PathBuf,
        /// The reader's message.
        why: String,
    },
    /// The search directory or its manifest is unusable.
    #[error("search directory {path}: {why}")]
    Directory {
        /// The directory or file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A trial could not be run.
    #[error("trial {workload} c{concurrency} #{trial}: {why}")]
    Trial {
        /// The workload (`2048/512`).
        workload: String,
        /// The level.
        concurrency: u32,
        /// The trial number.
        trial: u32,
        /// What failed.
        why: String,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl CapacityError {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> CapacityError {
        CapacityError::Io {
            path: path.into(),
            source,
        }
    }
}
