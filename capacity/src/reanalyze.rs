//! Offline re-analysis of a search directory: every trial trace is measured again and judged
//! under the SLOs given (or the search's own), and the report rebuilt. The live search writes
//! its report through this same path, so re-analysis under the same SLOs reproduces it byte
//! for byte.

use crate::correctness::Correctness;
use crate::error::CapacityError;
use crate::judge::Judge;
use crate::manifest::SearchManifest;
use crate::metrics::TrialMetrics;
use crate::report::{build_report, RecordedLevel, TrialData, WorkloadData};
use crate::slo::Slo;
use crate::workload::Workload;
use serde_json::Value;
use std::path::Path;
use tokentrace_format::{RequestRecord, TraceReader};

/// The records of one trial trace and whether its writer finished it cleanly.
#[derive(Debug, Clone)]
pub struct TraceTrial {
    /// Every readable request record.
    pub records: Vec<RequestRecord>,
    /// False when the trace has no run end, ended interrupted or with an error, or lost
    /// requests to a corrupt block.
    pub finished_cleanly: bool,
}

/// Reads a trial trace.
pub fn load_trial(path: &Path) -> Result<TraceTrial, CapacityError> {
    let reader = TraceReader::open(path).map_err(|e| CapacityError::Trace {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let mut records = Vec::new();
    let mut lost_any = false;
    for record in reader.requests() {
        match record {
            Ok(record) => records.push(record),
            Err(_) => lost_any = true,
        }
    }
    let ended_well = reader
        .run_end()
        .is_some_and(|end| end.reason == "completed" || end.reason == "duration");
    Ok(TraceTrial {
        records,
        finished_cleanly: ended_well && !lost_any,
    })
}

/// Measures and judges one trial trace.
pub fn measure_trial(
    path: &Path,
    workload: &Workload,
    trial: u32,
    judge: &Judge,
) -> Result<TrialData, CapacityError> {
    let loaded = load_trial(path)?;
    let metrics = TrialMetrics::from_records(&loaded.records);
    let correctness = Correctness::of_trial(&loaded.records, workload.osl, loaded.finished_cleanly);
    let slos_hold = judge.slos_hold(path, &metrics)?;
    Ok(TrialData::judge(trial, metrics, correctness, slos_hold))
}

/// Every recorded level of a workload in `dir`, sorted by concurrency, trials by number.
pub fn scan_levels(
    dir: &Path,
    workload: &Workload,
    judge: &Judge,
) -> Result<Vec<RecordedLevel>, CapacityError> {
    let workload_dir = dir.join(workload.dir_name());
    let mut levels = Vec::new();
    let entries = match std::fs::read_dir(&workload_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(levels),
        Err(e) => return Err(CapacityError::io(&workload_dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| CapacityError::io(&workload_dir, e))?;
        let name = entry.file_name();
        let Some(concurrency) = numbered(&name.to_string_lossy(), "c", "") else {
            continue;
        };
        let level_dir = entry.path();
        let mut trial_numbers = Vec::new();
        for file in std::fs::read_dir(&level_dir).map_err(|e| CapacityError::io(&level_dir, e))? {
            let file = file.map_err(|e| CapacityError::io(&level_dir, e))?;
            if let Some(k) = numbered(&file.file_name().to_string_lossy(), "trial", ".ttrace") {
                trial_numbers.push(k);
            }
        }
        trial_numbers.sort_unstable();
        let mut trials = Vec::new();
        for k in trial_numbers {
            let path = dir.join(SearchManifest::trial_path(workload, concurrency, k));
            trials.push(measure_trial(&path, workload, k, judge)?);
        }
        if !trials.is_empty() {
            levels.push(RecordedLevel {
                concurrency,
                trials,
            });
        }
    }
    levels.sort_by_key(|l| l.concurrency);
    Ok(levels)
}

/// `c12` -> 12 with prefix `c`; `trial3.ttrace` -> 3 with prefix `trial`, suffix `.ttrace`.
fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// Rebuilds the report of the search in `dir` under `protocol` and `slos` (the search's own
/// when None).
pub fn reanalyze(
    dir: &Path,
    protocol: Option<&str>,
    slos: Option<&[Slo]>,
) -> Result<Value, CapacityError> {
    let mut manifest = SearchManifest::load(dir)?;
    if let Some(p) = protocol {
        manifest.protocol = p.to_string();
    }
    let slos = match slos {
        Some(given) if !given.is_empty() => given.to_vec(),
        _ => manifest.parsed_slos()?,
    };
    let judge = Judge::new(&manifest.protocol, &slos)?;
    let mut workloads = Vec::new();
    for workload in &manifest.workloads {
        workloads.push(WorkloadData {
            workload: *workload,
            levels: scan_levels(dir, workload, &judge)?,
        });
    }
    Ok(build_report(&manifest, &slos, &workloads))
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn parses_level_and_trial_names() {
        assert_eq!(numbered("c12", "c", ""), Some(12));
        assert_eq!(numbered("trial3.ttrace", "trial", ".ttrace"), Some(3));
        for bad in ["c", "c0", "cx", "c-1", "c1.tmp", "x12"] {
            assert_eq!(numbered(bad, "c", ""), None, "{bad}");
        }
        assert_eq!(numbered("trial3.ttrace.tmp", "trial", ".ttrace"), None);
    }
}
