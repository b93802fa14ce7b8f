//! Why a recording run could not proceed. Failures of single requests are not errors: they are
//! recorded in the trace with their outcome.

use tokentrace_format::FormatError;

/// A failure that stops the run before or while it starts.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The configuration is inconsistent or a value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// TLS settings could not be built (bad CA file, …).
    #[error("TLS setup failed: {0}")]
    Tls(String),
    /// The prompt file could not be read or parsed.
    #[error("prompt file: {0}")]
    Prompts(String),
    /// The target did not answer at start (connection refused, TLS handshake failed, …).
    #[error("target unreachable: {0}")]
    Unreachable(String),
    /// The trace could not be created or finished. The message already holds the I/O cause,
    /// so it is not also exposed as `source` (an error chain would print it three times).
    #[error("trace output: {0}")]
    Output(FormatError),
    /// The async runtime could not start.
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

impl From<FormatError> for RecordError {
    fn from(err: FormatError) -> Self {
        RecordError::Output(err)
    }
}
