use super::*;
use crate::definitions::AiperfDefinitions;
use crate::manifest::{experiment_from_labels, test_manifest};
use crate::metrics::tests::record;
use crate::workload::SearchSettings;
use std::collections::BTreeSet;
use tokentrace_format::{Phase, RequestRecord};

/// Every key path of a JSON value (`workloads[].passing_trials[].ttft_ms.p95`).
pub(crate) fn key_paths(value: &Value) -> BTreeSet<String> {
    fn walk(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    out.insert(path.clone());
                    walk(inner, &path, out);
                }
            }
            Value::Array(items) => {
                for item in items {
                    walk(item, &format!("{prefix}[]"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(value, "", &mut out);
    out
}

fn fixture() -> Value {
    let path = crate::fixture_path("capacity-slo-report.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn manifest(trials_per_level: u32) -> SearchManifest {
    let labels: Vec<(String, String)> = [
        ("image_tag", "sglang:latest"),
        ("image_digest", "sha256:00"),
        ("model", "some/model"),
        ("checkpoint", "abc"),
        ("hardware", "1 x GPU"),
        ("driver", "\"1\""),
        ("kernel", "6.0"),
        ("tensor_parallelism", "1"),
        ("context_length", "8192"),
        ("physical_token_pool", "8192"),
        ("speculative_mode.algorithm", "none"),
        ("speculative_mode.steps", "0"),
        ("speculative_mode.topk", "0"),
        ("speculative_mode.draft_tokens", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    SearchManifest {
        workloads: vec![Workload { isl: 128, osl: 4 }],
        slos: vec!["ttft:p95<250ms".into()],
        settings: SearchSettings {
            min_concurrency: 1,
            max_concurrency: 64,
            trials_per_level,
            ..SearchSettings::default()
        },
        experiment: experiment_from_labels(&labels),
        ..test_manifest("some/model")
    }
}

/// A trial whose measured requests all have TTFT `ttft_ms`.
fn trial_records(ttft_ms: u64) -> Vec<RequestRecord> {
    let mut records = vec![record(0, Phase::Warmup, 0, &[10, 20, 30, 40], 4)];
    for id in 1..=4 {
        records.push(record(
            id,
            Phase::Measured,
            100 * id,
            &[ttft_ms, ttft_ms + 10, ttft_ms + 20, ttft_ms + 30],
            4,
        ));
    }
    records
}

/// Levels with TTFT growing with concurrency: 100 ms at c1, +50 ms per level.
fn levels(slos: &[TrialSlo], concurrencies: &[(u32, u32)]) -> Vec<RecordedLevel> {
    concurrencies
        .iter()
        .map(|&(c, trials)| RecordedLevel {
            concurrency: c,
            trials: (1..=trials)
                .map(|t| {
                    let records = trial_records(100 + 50 * u64::from(c));
                    let metrics = TrialMetrics::from_records(&records).unwrap();
                    let hold = slos.iter().all(|s| s.holds(&metrics));
                    TrialData::judge(
                        t,
                        metrics,
                        Correctness::of_trial(
                            &records,
                            4,
                            true,
                            AiperfDefinitions::builtin().unwrap(),
                        ),
                        hold,
                    )
                })
                .collect(),
        })
        .collect()
}

#[test]
fn key_set_equals_the_fixture() {
    let m = manifest(2);
    let slos = slo::resolve_all(&m.parsed_slos().unwrap()).unwrap();
    // TTFT 150 ms at c1, 200 at c2, 250 at c3 (fails < 250), 300 at c4.
    let data = WorkloadData {
        workload: m.workloads[0],
        levels: levels(&slos, &[(1, 2), (2, 2), (3, 1), (4, 1)]),
    };
    let report = build_report(&m, &slos, &[data]);
    assert_eq!(key_paths(&report), key_paths(&fixture()));
    assert_eq!(
        report["workloads"][0]["maximum_passing_concurrency"],
        json!(2)
    );
    assert_eq!(
        report["workloads"][0]["first_failing_concurrency"],
        json!(3)
    );
    assert_eq!(report["workloads"][0]["label"], json!("128 / 4"));
    assert_eq!(report["correctness_total"]["profiling_records"], json!(12));
}

#[test]
fn without_labels_the_experiment_still_has_every_key_of_the_fixture() {
    let m = SearchManifest {
        experiment: experiment_from_labels(&[]),
        ..manifest(1)
    };
    let slos = slo::resolve_all(&m.parsed_slos().unwrap()).unwrap();
    let report = build_report(&m, &slos, &[]);
    assert_eq!(
        key_paths(&report["experiment"]),
        key_paths(&fixture()["experiment"])
    );
    assert_eq!(report["experiment"]["image_digest"], Value::Null);
    assert_eq!(report["experiment"]["model"], json!("some/model"));
}

#[test]
fn judgement_uses_every_recorded_level() {
    let m = manifest(2);
    let strict: Vec<TrialSlo> = vec!["ttft:p95<250ms".parse().unwrap()];
    let loose: Vec<TrialSlo> = vec!["ttft:p95<=250ms".parse().unwrap()];
    let recorded = [(1, 2), (2, 2), (4, 2), (3, 2)];
    let j = judge_levels(&levels(&strict, &recorded), &m);
    assert_eq!((j.maximum_passing, j.first_failing), (Some(2), Some(3)));
    assert_eq!(j.unresolved, None);
    // Inclusive: 250 ms at c3 now passes; c4 (300 ms) fails.
    let j = judge_levels(&levels(&loose, &recorded), &m);
    assert_eq!((j.maximum_passing, j.first_failing), (Some(3), Some(4)));
    assert_eq!(j.unresolved, None);
}

#[test]
fn gaps_and_short_levels_are_reported_unresolved() {
    let m = manifest(2);
    let loose: Vec<TrialSlo> = vec!["ttft:p95<320ms".parse().unwrap()];
    // c4 fails live at its first trial, c3 never run: under a looser SLO c4 passes its only
    // trial, so nothing above c2 is settled.
    let j = judge_levels(&levels(&loose, &[(1, 2), (2, 2), (4, 1)]), &m);
    assert_eq!((j.maximum_passing, j.first_failing), (Some(2), None));
    let why = j.unresolved.unwrap();
    assert!(why.contains("levels 3..=64"), "{why}");
    assert!(why.contains("levels 4 lack trials"), "{why}");

    // Everything passes up to the maximum: resolved with no failing level.
    let m = SearchManifest {
        settings: SearchSettings {
            max_concurrency: 2,
            trials_per_level: 1,
            ..SearchSettings::default()
        },
        ..manifest(1)
    };
    let j = judge_levels(&levels(&loose, &[(1, 1), (2, 1)]), &m);
    assert_eq!(
        (j.maximum_passing, j.first_failing, j.unresolved),
        (Some(2), None, None)
    );

    // The minimum fails: resolved with no passing level, and empty passing trials.
    let strict: Vec<TrialSlo> = vec!["ttft:p95<10ms".parse().unwrap()];
    let data = WorkloadData {
        workload: m.workloads[0],
        levels: levels(&strict, &[(1, 1)]),
    };
    let report = build_report(&m, &strict, &[data]);
    let w = &report["workloads"][0];
    assert_eq!(w["maximum_passing_concurrency"], Value::Null);
    assert_eq!(w["first_failing_concurrency"], json!(1));
    assert_eq!(w["passing_trials"], json!([]));
    assert!(w.get("unresolved").is_none());
}

#[test]
fn several_slos_are_listed_and_all_must_hold() {
    let m = manifest(1);
    let slos: Vec<TrialSlo> = vec![
        "ttft:p95<1000ms".parse().unwrap(),
        "itl:p50<5ms".parse().unwrap(),
    ];
    let data = WorkloadData {
        workload: m.workloads[0],
        levels: levels(&slos, &[(1, 1)]),
    };
    let report = build_report(&m, &slos, &[data]);
    assert_eq!(report["slo"].as_array().unwrap().len(), 2);
    // ITL is 10 ms, so the second objective fails even though TTFT passes.
    assert_eq!(
        report["workloads"][0]["first_failing_concurrency"],
        json!(1)
    );
}
