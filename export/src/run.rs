//! The run columns every exported row carries, and the output files' safe creation.

use crate::error::ExportError;
use std::path::{Path, PathBuf};
use tokentrace_analyzer::dataset::TraceInfo;
use tokentrace_format::Manifest;

/// What tells one trace's rows from another's when many traces share one dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunColumns {
    /// Position of the trace on the command line, from 0.
    pub trace_index: u32,
    /// The trace's label as `analyze` shows it (its file name).
    pub trace: String,
    /// The path the trace was read from, as given.
    pub trace_path: String,
    /// The run's id, when the trace has one ([`run_id`]).
    pub run_id: Option<String>,
}

impl RunColumns {
    /// The run columns of trace `index` of a dataset.
    pub fn of(index: usize, trace: &TraceInfo) -> RunColumns {
        RunColumns {
            trace_index: u32::try_from(index).unwrap_or(u32::MAX),
            trace: trace.label.clone(),
            trace_path: trace.path.display().to_string(),
            run_id: run_id(&trace.manifest),
        }
    }
}

/// The run id of a trace: the `run_id` label when the user gave one (`--label run_id=…`),
/// else the per-run prefix of the request ids the recorder sent (16 hex digits; the same
/// prefix every request's `X-Request-ID` UUID carries, so server logs join on it), else none
/// (imported traces and runs without request ids).
pub fn run_id(manifest: &Manifest) -> Option<String> {
    if let Some(id) = manifest.labels.get("run_id") {
        return Some(id.clone());
    }
    manifest
        .request_id_header
        .as_ref()
        .map(|h| format!("{:016x}", h.run_prefix))
}

/// The manifest's labels as one JSON object of strings, e.g. `{"engine":"vllm"}`.
pub fn labels_json(manifest: &Manifest) -> String {
    // A map of strings always serializes; the fallback keeps the column total anyway.
    serde_json::to_string(&manifest.labels).unwrap_or_else(|_| "{}".into())
}

/// Fails when `path` exists and `force` is not set.
pub fn refuse_existing(path: &Path, force: bool) -> Result<(), ExportError> {
    if !force && path.exists() {
        return Err(ExportError::Exists {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The name a file is written under until it is complete, so that an interrupted export never
/// leaves a truncated file under the final name.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// Moves a complete file from its [`partial_path`] to `path`.
pub fn commit(path: &Path) -> Result<(), ExportError> {
    std::fs::rename(partial_path(path), path).map_err(|e| ExportError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_format::RequestIdHeader;

    #[test]
    fn run_id_prefers_the_label_then_the_request_id_prefix() {
        let mut manifest = Manifest::default();
        assert_eq!(run_id(&manifest), None);
        manifest.request_id_header = Some(RequestIdHeader {
            name: "x-request-id".into(),
            run_prefix: 0x0123_4567_89ab_cdef,
        });
        assert_eq!(run_id(&manifest).as_deref(), Some("0123456789abcdef"));
        manifest.labels.insert("run_id".into(), "nightly-7".into());
        assert_eq!(run_id(&manifest).as_deref(), Some("nightly-7"));
    }

    #[test]
    fn labels_are_a_json_object_of_strings() {
        let mut manifest = Manifest::default();
        assert_eq!(labels_json(&manifest), "{}");
        manifest.labels.insert("gpu".into(), "H100".into());
        manifest.labels.insert("engine".into(), "vllm".into());
        assert_eq!(labels_json(&manifest), r#"{"engine":"vllm","gpu":"H100"}"#);
    }

    #[test]
    fn existing_files_are_kept_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.parquet");
        refuse_existing(&path, false).unwrap();
        std::fs::write(&path, b"x").unwrap();
        let err = refuse_existing(&path, false).unwrap_err();
        assert!(err.to_string().contains("--force"), "{err}");
        refuse_existing(&path, true).unwrap();
        assert_eq!(
            partial_path(&path).file_name().unwrap(),
            "requests.parquet.partial"
        );
    }
}
