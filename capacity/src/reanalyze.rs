//! Offline re-analysis of a search directory: every trial trace is measured again and judged
//! under the SLOs given (or the search's own), and the report rebuilt. The live search writes
//! its report through this same path, so re-analysis under the same SLOs reproduces it byte
//! for byte.

use crate::correctness::Correctness;
use crate::definitions::AiperfDefinitions;
use crate::error::CapacityError;
use crate::judge::Judge;
use crate::manifest::SearchManifest;
use crate::metrics::TrialMetrics;
use crate::report::{
    build_report, judge_levels, Judgement, RecordedLevel, TrialData, WorkloadData,
};
use crate::slo::{self, Slo, TrialSlo};
use crate::workload::Workload;
use serde_json::Value;
use std::path::Path;
use tokentrace_format::{RequestRecord, TraceReader};

/// The records of one trial trace and whether its writer finished it cleanly.
#[derive(Debug, Clone)]
pub struct TraceTrial {
    /// Every readable request record.
    pub records: Vec<RequestRecord>,
    /// False when the writer never finished the trace (the process was killed mid-trial).
    pub complete: bool,
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
        complete: reader.run_end().is_some(),
        finished_cleanly: ended_well && !lost_any,
    })
}

/// Measures and judges one trial trace; None when the trace was never finished (its trial was
/// killed, so it measured nothing the search could have used).
pub fn measure_trial(
    path: &Path,
    workload: &Workload,
    trial: u32,
    judge: &Judge,
) -> Result<Option<TrialData>, CapacityError> {
    let loaded = load_trial(path)?;
    if !loaded.complete {
        return Ok(None);
    }
    let metrics = TrialMetrics::from_records(&loaded.records)?;
    let correctness = Correctness::of_trial(
        &loaded.records,
        workload.osl,
        loaded.finished_cleanly,
        AiperfDefinitions::builtin()?,
    );
    let slos_hold = judge.slos_hold(path, &metrics)?;
    Ok(Some(TrialData::judge(
        trial,
        metrics,
        correctness,
        slos_hold,
    )))
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
            // A trial is a prefix of the level: an unfinished trace ends what was recorded.
            match measure_trial(&path, workload, k, judge)? {
                Some(data) if data.trial as usize == trials.len() + 1 => trials.push(data),
                _ => break,
            }
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

/// A recorded search measured and judged under a protocol and SLOs: what the report, the
/// terminal table and the HTML page are built from.
#[derive(Debug, Clone)]
pub struct SearchView {
    /// The search's manifest (its protocol replaced when another was asked for).
    pub manifest: SearchManifest,
    /// The SLOs in force, resolved.
    pub slos: Vec<TrialSlo>,
    /// Every recorded level of every workload.
    pub workloads: Vec<WorkloadData>,
}

impl SearchView {
    /// The bracket of workload `w`.
    pub fn judgement(&self, w: usize) -> Judgement {
        judge_levels(&self.workloads[w].levels, &self.manifest)
    }

    /// The capacity report (the shape of fixtures/capacity-slo-report.json).
    pub fn report(&self) -> Value {
        build_report(&self.manifest, &self.slos, &self.workloads)
    }
}

/// Measures and judges the search in `dir` under `protocol` and `slos` (the search's own
/// when None).
pub fn search_view(
    dir: &Path,
    protocol: Option<&str>,
    slos: Option<&[Slo]>,
) -> Result<SearchView, CapacityError> {
    let mut manifest = SearchManifest::load(dir)?;
    if let Some(p) = protocol {
        manifest.protocol = p.to_string();
    }
    let slos = match slos {
        Some(given) if !given.is_empty() => given.to_vec(),
        _ => manifest.parsed_slos()?,
    };
    let judge = Judge::new(&manifest.protocol, &slos)?;
    let described = slo::resolve_all(&slos)?;
    let mut workloads = Vec::new();
    for workload in &manifest.workloads {
        workloads.push(WorkloadData {
            workload: *workload,
            levels: scan_levels(dir, workload, &judge)?,
        });
    }
    Ok(SearchView {
        manifest,
        slos: described,
        workloads,
    })
}

/// Rebuilds the report of the search in `dir` under `protocol` and `slos` (the search's own
/// when None).
pub fn reanalyze(
    dir: &Path,
    protocol: Option<&str>,
    slos: Option<&[Slo]>,
) -> Result<Value, CapacityError> {
    Ok(search_view(dir, protocol, slos)?.report())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::test_manifest;
    use crate::metrics::tests::record;
    use crate::report::to_pretty_string;
    use crate::workload::SearchSettings;
    use serde_json::json;
    use std::path::PathBuf;
    use tokentrace_format::frame::{FORMAT_MAJOR, FORMAT_MINOR};
    use tokentrace_format::{
        Channel, ClockAnchor, Header, Manifest, Outcome, Phase, RunEnd, TraceWriter, WriterConfig,
    };

    const WORKLOAD: Workload = Workload { isl: 128, osl: 4 };

    /// Writes a trial whose measured requests all have TTFT `ttft_ms`.
    fn write_trial(dir: &Path, concurrency: u32, trial: u32, ttft_ms: u64) -> PathBuf {
        write_trial_with(dir, concurrency, trial, ttft_ms, |_| {})
    }

    /// [`write_trial`], with `edit` applied to every measured record.
    fn write_trial_with(
        dir: &Path,
        concurrency: u32,
        trial: u32,
        ttft_ms: u64,
        edit: impl Fn(&mut RequestRecord),
    ) -> PathBuf {
        let path = dir.join(SearchManifest::trial_path(&WORKLOAD, concurrency, trial));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let header = Header {
            major: FORMAT_MAJOR,
            minor: FORMAT_MINOR,
            anchor: ClockAnchor::now(),
            host: "test".into(),
            shard: 0,
        };
        let writer =
            TraceWriter::create(&path, header, &Manifest::default(), WriterConfig::default())
                .unwrap();
        let sender = writer.sender();
        for id in 1..=4 {
            let arrivals = [ttft_ms, ttft_ms + 10, ttft_ms + 20, ttft_ms + 30];
            let mut r = record(id, Phase::Measured, 100 * id, &arrivals, 4);
            edit(&mut r);
            sender.send(r).unwrap();
        }
        drop(sender);
        let end = RunEnd {
            reason: "completed".into(),
            ..RunEnd::default()
        };
        writer.finish(end).unwrap();
        path
    }

    fn save_manifest(dir: &Path) {
        SearchManifest {
            workloads: vec![WORKLOAD],
            slos: vec!["ttft:p95<250ms".into()],
            settings: SearchSettings {
                max_concurrency: 8,
                trials_per_level: 2,
                ..SearchSettings::default()
            },
            ..test_manifest("m")
        }
        .save(dir)
        .unwrap();
    }

    fn bracket(report: &Value) -> (Value, Value) {
        let w = &report["workloads"][0];
        (
            w["maximum_passing_concurrency"].clone(),
            w["first_failing_concurrency"].clone(),
        )
    }

    #[test]
    fn rebuilds_the_bracket_from_traces_and_ignores_unfinished_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        save_manifest(dir);
        // TTFT 100 ms at c1 and c2, 200 ms at c3, 300 ms at c4 (fails < 250 ms).
        for (c, ttft) in [(1, 100), (2, 100), (3, 200)] {
            write_trial(dir, c, 1, ttft);
            write_trial(dir, c, 2, ttft);
        }
        write_trial(dir, 4, 1, 300);
        let report = reanalyze(dir, None, None).unwrap();
        assert_eq!(bracket(&report), (json!(3), json!(4)));
        assert_eq!(
            report["workloads"][0]["passing_trials"][1]["trial"],
            json!(2)
        );
        // Byte-stable: the same directory gives the same text.
        let again = reanalyze(dir, None, None).unwrap();
        assert_eq!(to_pretty_string(&report), to_pretty_string(&again));

        // A looser SLO passes c4's one trial, but c4 needs two: undetermined.
        let loose: Vec<Slo> = vec!["ttft:p95<400ms".parse().unwrap()];
        let report = reanalyze(dir, None, Some(&loose)).unwrap();
        assert_eq!(bracket(&report), (json!(3), Value::Null));
        let why = report["workloads"][0]["unresolved"].as_str().unwrap();
        assert!(why.contains("levels 4 lack trials"), "{why}");

        // c3's second trial killed mid-write (truncated, no run end): c3 is no longer settled.
        let c3t2 = dir.join(SearchManifest::trial_path(&WORKLOAD, 3, 2));
        let bytes = std::fs::read(&c3t2).unwrap();
        std::fs::write(&c3t2, &bytes[..bytes.len() / 2]).unwrap();
        let report = reanalyze(dir, None, None).unwrap();
        assert_eq!(bracket(&report), (json!(2), json!(4)));
        assert!(report["workloads"][0]["unresolved"].is_string());

        // Another protocol judges through the analyzer.
        let v3 = reanalyze(dir, Some("capacity-v3"), None).unwrap();
        assert_eq!(bracket(&v3), (json!(2), json!(4)));
        assert!(reanalyze(dir, Some("nope"), None).is_err());
    }

    #[test]
    fn a_stream_without_done_fails_a_trial_only_under_a_protocol_that_fails_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        save_manifest(dir);
        let without_done = |r: &mut RequestRecord| {
            if r.meta.id == 2 {
                r.meta.outcome = Outcome::MissingDone;
                r.chunks.retain(|c| c.channel != Channel::Done);
            }
        };
        for c in [1, 2] {
            write_trial_with(dir, c, 1, 100, without_done);
            write_trial_with(dir, c, 2, 100, without_done);
        }
        // AIPerf reads a stream to its end: the trials are clean and pass, and say why.
        let report = reanalyze(dir, None, None).unwrap();
        let trial = &report["workloads"][0]["passing_trials"][0];
        assert_eq!(trial["correctness"]["errors"], json!(0), "{trial}");
        assert_eq!(trial["correctness"]["missing_done"], json!(1));
        assert_eq!(bracket(&report).0, json!(2));
        // capacity-v3 counts such a stream as a failed request: no level passes.
        let v3 = reanalyze(dir, Some("capacity-v3"), None).unwrap();
        assert_eq!(bracket(&v3), (Value::Null, json!(1)));
    }

    #[test]
    fn a_directory_without_a_manifest_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(matches!(
            reanalyze(tmp.path(), None, None),
            Err(CapacityError::Io { .. })
        ));
        std::fs::write(tmp.path().join("capacity.json"), "{\"kind\": 1}").unwrap();
        assert!(matches!(
            reanalyze(tmp.path(), None, None),
            Err(CapacityError::Directory { .. })
        ));
    }

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
