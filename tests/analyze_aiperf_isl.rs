//! AIPerf's input sequence length is its own tokenizer's count of the prompt it generated
//! (InputSequenceLengthMetric reads `input_token_count`), not the server's
//! `usage.prompt_tokens`: on the AIPerf 0.13 fixture the two differ (128 against 108.75 on
//! average), and `--protocol aiperf` must report AIPerf's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

#[test]
fn input_sequence_length_matches_aiperf_not_usage() {
    let (_dir, trace) = common::import_aiperf_fixture();
    let ours = common::analyze_json(&trace, "aiperf");
    let theirs = common::read_json(&common::aiperf_fixture().join("profile_export_aiperf.json"));
    let want = &theirs["input_sequence_length"];
    let got = &ours["metrics"]["input_sequence_length"];
    for stat in ["avg", "min", "max", "p50", "p99", "std", "count", "sum"] {
        assert_eq!(
            got[stat].as_f64(),
            want[stat].as_f64(),
            "input_sequence_length.{stat}"
        );
    }
    assert_eq!(
        ours["aggregates"]["total_isl"].as_f64(),
        theirs["total_isl"]["avg"].as_f64()
    );
}
