//! The capacity report's per-trial block is the `aiperf-0.10` protocol: on AIPerf's own run
//! (imported as a trace), `tokentrace analyze --protocol aiperf-0.10` reports every value of
//! the block to the last bit, because AIPerf's arithmetic (statistics of ns values, negative
//! times clamped, the window ending at the last output, per-user throughput as 1 / ITL in
//! seconds) is protocol data both read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use serde_json::Value;
use tokentrace_capacity::metrics::TrialMetrics;
use tokentrace_capacity::reanalyze::load_trial;

#[test]
fn analyze_under_aiperf_0_10_reports_the_capacity_block() {
    let (_dir, trace) = common::import_aiperf_fixture();
    let trial = load_trial(&trace).unwrap();
    let block = Value::Object(
        TrialMetrics::from_records(&trial.records)
            .unwrap()
            .to_json(),
    );
    let report = common::analyze_json(&trace, "aiperf-0.10");
    let metrics = &report["metrics"];
    for (ours, theirs) in [
        ("ttft_ms", "time_to_first_token"),
        ("request_latency_ms", "request_latency"),
        ("itl_ms", "inter_token_latency"),
        (
            "per_user_output_throughput_tps",
            "output_token_throughput_per_user",
        ),
    ] {
        let stats = block[ours].as_object().unwrap();
        assert!(!stats.is_empty(), "{ours}");
        for (stat, value) in stats {
            assert!(value.is_f64(), "{ours}.{stat}: {value}");
            assert_eq!(&metrics[theirs][stat], value, "{ours}.{stat}");
        }
    }
    let aggregates = &report["aggregates"];
    for (ours, theirs) in [
        ("output_throughput_tps", "output_token_throughput"),
        ("request_throughput_rps", "request_throughput"),
        ("benchmark_duration_s", "benchmark_duration"),
    ] {
        assert!(block[ours].is_f64(), "{ours}");
        assert_eq!(aggregates[theirs], block[ours], "{ours}");
    }
    // The imported profiling-phase window is AIPerf 0.13's, not 0.10's benchmark duration:
    // the `aiperf` protocol divides by it, `aiperf-0.10` does not.
    let window = common::analyze_json(&trace, "aiperf")["aggregates"]["benchmark_duration"]
        .as_f64()
        .unwrap();
    assert_ne!(Some(window), aggregates["benchmark_duration"].as_f64());
}
