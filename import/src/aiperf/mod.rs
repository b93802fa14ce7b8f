//! Imports an AIPerf artifact directory.
//!
//! `profile_export_raw.jsonl` (required) gives every request with each SSE event and its
//! `perf_counter_ns` read time. `profile_export.jsonl` (optional) adds AIPerf's own token
//! counts and the HTTP trace. `profile_export_aiperf.json` (optional) adds the run
//! configuration and the profiling phase's window, which AIPerf divides throughputs by.

mod build;
mod manifest;
mod raw;
mod records;

use crate::error::{ImportError, Issue};
use crate::fields::json_lines;
use crate::{require_requests, Imported};
use build::Placement;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use tokentrace_format::{ClockAnchor, Header};

/// The raw export's file name.
pub const RAW_FILE: &str = "profile_export_raw.jsonl";
/// The per-request metrics file's name.
pub const RECORDS_FILE: &str = "profile_export.jsonl";
/// The summary's file name.
pub const SUMMARY_FILE: &str = "profile_export_aiperf.json";

/// Reads an AIPerf artifact directory (or its `profile_export_raw.jsonl` directly).
pub fn read(input: &Path) -> Result<Imported, ImportError> {
    let (dir, raw_path) = if input.is_dir() {
        (input.to_path_buf(), input.join(RAW_FILE))
    } else {
        (
            input.parent().map(Path::to_path_buf).unwrap_or_default(),
            input.to_path_buf(),
        )
    };
    let raw_text = std::fs::read_to_string(&raw_path).map_err(|e| ImportError::io(&raw_path, e))?;
    let mut sources = Sources::new(&raw_path);
    let mut issues = Vec::new();

    let records_path = dir.join(RECORDS_FILE);
    let records = match sources.optional_text(&records_path)? {
        Some(text) => {
            let (map, bad) = records::parse(&records_path, &text);
            issues.extend(bad);
            Some(map)
        }
        None => None,
    };
    let summary_path = dir.join(SUMMARY_FILE);
    let summary = match sources.optional_text(&summary_path)? {
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(v) => Some(v),
            Err(e) => {
                issues.push(Issue::new(
                    &summary_path,
                    Some(e.line()),
                    "(document)",
                    format!("invalid JSON: {e}"),
                ));
                None
            }
        },
        None => None,
    };

    let mut parsed = Vec::new();
    for (ctx, value) in json_lines(&raw_path, &raw_text, &mut issues) {
        match raw::parse(&value, ctx) {
            Ok((request, notes)) => {
                issues.extend(notes);
                parsed.push(request);
            }
            Err(issue) => issues.push(issue),
        }
    }

    let anchor = parsed
        .iter()
        .flat_map(build::event_times)
        .min()
        .unwrap_or(0);
    let realtime = anchor_realtime(&parsed, anchor);
    let config = summary.as_ref().and_then(|s| s.get("input_config"));
    let trial = summary
        .as_ref()
        .and_then(|s| s.pointer("/run_info/trial"))
        .and_then(Value::as_u64)
        .map_or(0, crate::fields::sat_u32);
    let planned = config
        .and_then(|c| c.pointer("/datasets/0/prompts/isl/mean"))
        .and_then(Value::as_f64)
        .map(|x| x.round() as u32);

    let mut requests = Vec::with_capacity(parsed.len());
    let mut token_counts = Map::new();
    let mut per_request = Map::new();
    for raw in &parsed {
        let id = requests.len() as u64;
        let info = match (&records, &raw.x_request_id) {
            (Some(map), Some(x)) => {
                let info = map.get(x);
                if info.is_none() {
                    issues.push(Issue::new(
                        &raw_path,
                        Some(raw.line),
                        "metadata.x_request_id",
                        format!("{x:?} has no line in {RECORDS_FILE}; AIPerf's token counts for it are unknown"),
                    ));
                }
                info
            }
            _ => None,
        };
        if let Some(info) = info {
            let mut counts = info.counts.clone();
            if let Some(osl) = info.output_sequence_length() {
                // The count AIPerf divides ITL by and sums for output throughput.
                counts.insert("output_tokens".into(), Value::from(osl));
            }
            token_counts.insert(id.to_string(), Value::Object(counts));
        }
        let mut kept = raw.kept.clone();
        kept.insert("line".into(), Value::from(raw.line));
        kept.insert(
            "benchmark_phase".into(),
            Value::from(raw.phase_name.clone()),
        );
        per_request.insert(id.to_string(), Value::Object(kept));
        let at = Placement {
            anchor,
            id,
            trial,
            planned_input_tokens: planned,
        };
        let (record, malformed) = build::build(raw, info, at);
        if malformed {
            issues.push(Issue::new(
                &raw_path,
                Some(raw.line),
                "responses",
                "an event's data is not JSON; kept as `other`",
            ));
        }
        requests.push(record);
    }
    require_requests(&raw_path, &requests, &issues)?;

    let header = Header {
        major: 0,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: u64::try_from(anchor).unwrap_or(0),
            realtime_ns: realtime,
        },
        host: String::new(),
        shard: 0,
    };
    let inputs = manifest::Inputs {
        input: &raw_path,
        summary: summary.as_ref(),
        first_payload: parsed.iter().find_map(|r| r.payload.as_ref()),
        anchor_realtime_ns: realtime,
        sources: &sources,
        has_token_counts: !token_counts.is_empty(),
        has_http_trace: records
            .as_ref()
            .is_some_and(|m| m.values().any(|i| i.headers_received_ns.is_some())),
        token_counts,
        per_request,
        issues: &issues,
    };
    let manifest = manifest::build(inputs);
    let run_end = manifest::run_end(&requests, summary.as_ref(), &header);
    Ok(Imported {
        header,
        manifest,
        requests,
        run_end,
        issues,
    })
}

/// The wall-clock time of the anchor, through the earliest request's own wall/perf offset.
fn anchor_realtime(parsed: &[raw::RawRequest], anchor: i128) -> u64 {
    let earliest = parsed
        .iter()
        .filter_map(|r| Some((r.start_perf_ns, r.wall.request_start_ns?)))
        .min();
    earliest
        .map(|(perf, wall)| anchor + (i128::from(wall) - i128::from(perf)))
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(0)
}

/// Which of the artifact files were read and which were missing.
pub(crate) struct Sources {
    /// Files read.
    pub read: Vec<PathBuf>,
    /// Optional files that were not there.
    pub missing: Vec<PathBuf>,
}

impl Sources {
    fn new(raw: &Path) -> Sources {
        Sources {
            read: vec![raw.to_path_buf()],
            missing: Vec::new(),
        }
    }

    /// Reads an optional file: `None` when it does not exist, an error when it cannot be read.
    fn optional_text(&mut self, path: &Path) -> Result<Option<String>, ImportError> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                self.read.push(path.to_path_buf());
                Ok(Some(text))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.missing.push(path.to_path_buf());
                Ok(None)
            }
            Err(e) => Err(ImportError::io(path, e)),
        }
    }
}
