//! Imports other benchmarking tools' raw exports into tokentrace traces, so runs made with
//! AIPerf or `vllm bench serve` can be analyzed under any protocol next to recorded ones.
//!
//! An import is two steps: [`read`] parses the source into an [`Imported`] (header, manifest,
//! request records and the problems found), and [`write()`] writes it with the format crate's
//! writer. docs/IMPORT.md describes every mapping and what each source cannot provide.

pub mod aiperf;
pub mod error;
mod fields;
mod time;
pub mod vllm;

pub use error::{ImportError, Issue, Location};

use std::path::{Path, PathBuf};
use std::str::FromStr;
use tokentrace_format::writer::{TraceWriter, WriterConfig};
use tokentrace_format::{Header, Manifest, RequestRecord, RunEnd};

/// The kinds of export tokentrace can import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// An AIPerf artifact directory (`profile_export_raw.jsonl` and companions).
    Aiperf,
    /// The JSON of `vllm bench serve --save-result --save-detailed`.
    Vllm,
}

impl SourceKind {
    /// Every kind, for help texts.
    pub const ALL: [SourceKind; 2] = [SourceKind::Aiperf, SourceKind::Vllm];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Aiperf => "aiperf",
            SourceKind::Vllm => "vllm",
        }
    }
}

impl FromStr for SourceKind {
    type Err = String;

    fn from_str(s: &str) -> Result<SourceKind, String> {
        SourceKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown import kind `{s}` (known: aiperf, vllm)"))
    }
}

/// A parsed import, ready to be written.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The trace header (clock anchor chosen from the source's own clock).
    pub header: Header,
    /// The run manifest: the source's configuration, provenance and what it could not provide.
    pub manifest: Manifest,
    /// Every sound request, with its chunks.
    pub requests: Vec<RequestRecord>,
    /// The run end.
    pub run_end: RunEnd,
    /// Items skipped or imported in part, with file, line and field.
    pub issues: Vec<Issue>,
}

/// What [`write()`] wrote.
#[derive(Debug, Clone)]
pub struct ImportSummary {
    /// The trace written.
    pub trace: PathBuf,
    /// Requests written.
    pub requests: u64,
    /// Chunks written.
    pub chunks: u64,
    /// Items skipped or imported in part.
    pub issues: Vec<Issue>,
}

/// Parses `input` as an export of `kind`.
pub fn read(kind: SourceKind, input: &Path) -> Result<Imported, ImportError> {
    match kind {
        SourceKind::Aiperf => aiperf::read(input),
        SourceKind::Vllm => vllm::read(input),
    }
}

/// Writes an import to `out` as a trace.
pub fn write(imported: Imported, out: &Path) -> Result<ImportSummary, ImportError> {
    let writer = TraceWriter::create(
        out,
        imported.header,
        &imported.manifest,
        WriterConfig::default(),
    )?;
    let sender = writer.sender();
    for record in imported.requests {
        sender.send(record)?;
    }
    drop(sender);
    let stats = writer.finish(imported.run_end)?;
    Ok(ImportSummary {
        trace: out.to_path_buf(),
        requests: stats.requests,
        chunks: stats.chunks,
        issues: imported.issues,
    })
}

/// Reads `input` as `kind` and writes the trace to `out`.
pub fn import(kind: SourceKind, input: &Path, out: &Path) -> Result<ImportSummary, ImportError> {
    write(read(kind, input)?, out)
}

/// Fails with [`ImportError::NothingImported`] when problems left no request to import.
pub(crate) fn require_requests(
    input: &Path,
    requests: &[RequestRecord],
    issues: &[Issue],
) -> Result<(), ImportError> {
    if !requests.is_empty() {
        return Ok(());
    }
    if issues.is_empty() {
        return Err(ImportError::invalid(
            input,
            None,
            None,
            "the input holds no requests",
        ));
    }
    Err(ImportError::NothingImported {
        path: input.to_path_buf(),
        issues: issues.to_vec(),
    })
}

/// The issues as strings for the manifest, at most `limit` (a summary line says how many more).
pub(crate) fn issue_strings(issues: &[Issue], limit: usize) -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = issues
        .iter()
        .take(limit)
        .map(|i| i.to_string().into())
        .collect();
    if issues.len() > limit {
        out.push(format!("… and {} more", issues.len() - limit).into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_by_name() {
        assert_eq!("aiperf".parse::<SourceKind>(), Ok(SourceKind::Aiperf));
        assert_eq!("vllm".parse::<SourceKind>(), Ok(SourceKind::Vllm));
        assert!("genai-perf"
            .parse::<SourceKind>()
            .unwrap_err()
            .contains("known: aiperf, vllm"));
    }
}
