//! An imported AIPerf run analyzed like a recorded one: under capacity-v3 it gives a complete
//! `anvil-serving.benchmark/v1` report, key for key as the real one in the fixtures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use serde_json::Value;
use std::collections::BTreeSet;

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn imported_aiperf_run_gives_a_complete_capacity_v3_report() {
    let (_dir, trace) = common::import_aiperf_fixture();
    let report = common::analyze_json(&trace, "capacity-v3");
    let reference = common::read_json(&common::fixtures().join("capacity-v3-report.json"));
    assert_eq!(keys(&report), keys(&reference));
    assert_eq!(keys(&report["metrics"]), keys(&reference["metrics"]));
    // Every metric the protocol defines is filled; only the two it defines as null are null.
    let nulls: BTreeSet<&str> = report["metrics"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        nulls,
        BTreeSet::from(["content_chunks_s", "prefix_cache_hit_avg"])
    );
    assert_eq!(report["completed"], 20);
    assert_eq!(report["request_timings"].as_array().unwrap().len(), 20);
    assert_eq!(
        keys(&report["request_timings"][0]),
        keys(&reference["request_timings"][0])
    );
    assert_eq!(report["metrics"]["content_chunks"], 1280);
    // Run settings are integers, as in the reference, though AIPerf keeps ISL/OSL as floats.
    for (key, want) in [
        ("concurrency", 4),
        ("context_tokens", 128),
        ("max_tokens", 64),
    ] {
        assert!(report[key].is_u64(), "{key}: {}", report[key]);
        assert_eq!(report[key], want);
        assert!(reference[key].is_u64(), "{key} in the reference");
    }
}
