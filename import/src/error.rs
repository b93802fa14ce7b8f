//! Errors that stop an import, and the problems with single items that an import skips.

use std::fmt;
use std::path::{Path, PathBuf};
use tokentrace_format::error::FormatError;

/// Where in an input something is: the file, the 1-based line when known, and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The input file.
    pub file: PathBuf,
    /// 1-based line (JSONL record line, or the line a JSON parse error points at).
    pub line: Option<usize>,
    /// The field, as a path such as `responses[3].perf_ns` or `itls[7]`.
    pub field: Option<String>,
}

impl Location {
    /// A location in `file` at `line`, naming `field`.
    pub fn new(file: &Path, line: Option<usize>, field: Option<String>) -> Location {
        Location {
            file: file.to_path_buf(),
            line,
            field,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        Ok(())
    }
}

/// One item of the input that was skipped or imported only in part, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong with it.
    pub message: String,
}

impl Issue {
    /// A problem at `file`, `line`, `field`.
    pub fn new(file: &Path, line: Option<usize>, field: &str, message: impl Into<String>) -> Issue {
        Issue {
            location: Location::new(file, line, Some(field.to_string())),
            message: message.into(),
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Why an import could not produce a trace at all.
#[derive(thiserror::Error, Debug)]
pub enum ImportError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The input is malformed in a way that leaves nothing sound to import.
    #[error("{location}: {message}")]
    Invalid {
        /// Where.
        location: Location,
        /// What is wrong.
        message: String,
    },
    /// Every item was malformed; the first problem is shown, all are in `issues`.
    #[error("nothing could be imported from {}: {} problem(s), the first: {}",
        path.display(), issues.len(), issues.first().map(ToString::to_string).unwrap_or_default())]
    NothingImported {
        /// The input.
        path: PathBuf,
        /// Every problem found.
        issues: Vec<Issue>,
    },
    /// Writing the trace failed.
    #[error("writing the trace: {0}")]
    Format(#[from] FormatError),
}

impl ImportError {
    /// An [`ImportError::Invalid`] at `file`, `line`, `field`.
    pub fn invalid(
        file: &Path,
        line: Option<usize>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> ImportError {
        ImportError::Invalid {
            location: Location::new(file, line, field.map(str::to_string)),
            message: message.into(),
        }
    }

    /// An [`ImportError::Io`] for `path`.
    pub fn io(path: &Path, source: std::io::Error) -> ImportError {
        ImportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// An error for a JSON document that does not parse, at the line serde_json reports.
    pub fn json(path: &Path, err: &serde_json::Error) -> ImportError {
        ImportError::invalid(path, Some(err.line()), None, format!("invalid JSON: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_names_file_line_and_field() {
        let issue = Issue::new(
            Path::new("raw.jsonl"),
            Some(7),
            "responses[2].perf_ns",
            "not an integer",
        );
        assert_eq!(
            issue.to_string(),
            "raw.jsonl:7: field `responses[2].perf_ns`: not an integer"
        );
    }

    #[test]
    fn location_without_line_or_field() {
        let loc = Location::new(Path::new("a.json"), None, None);
        assert_eq!(loc.to_string(), "a.json");
    }
}
