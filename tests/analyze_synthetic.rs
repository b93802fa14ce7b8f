//! A trace written in the test with known timestamps: `tokentrace analyze` must give the
//! hand-computed values under every shipped protocol, and its outputs are pinned by snapshots.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

mod synthetic;

use common::{json_of, stdout_of, tokentrace};
use serde_json::Value;
use std::path::Path;
use synthetic::write_trace;

fn analyze(trace: &Path, args: &[&str]) -> String {
    String::from_utf8(stdout_of(tokentrace().arg("analyze").arg(trace).args(args))).unwrap()
}

fn analyze_json(trace: &Path, protocol: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--format", "json", "--protocol", protocol];
    args.extend_from_slice(extra);
    serde_json::from_str(&analyze(trace, &args)).unwrap()
}

#[track_caller]
fn close(actual: &Value, expected: f64) {
    let a = actual
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {actual}"));
    assert!(
        (a - expected).abs() <= 1e-9 * expected.abs().max(1.0),
        "{a} != {expected}"
    );
}

#[test]
fn capacity_v3_gives_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "capacity-v3", &[]);
    assert_eq!(r["schema"], "anvil-serving.benchmark/v1");
    assert_eq!(
        (
            r["completed"].as_u64(),
            r["failed"].as_u64(),
            r["requests"].as_u64()
        ),
        (Some(2), Some(1), Some(3))
    );
    assert_eq!(r["failures"][0]["request_index"], 2);
    assert_eq!(r["failures"][0]["http_status"], 503);
    assert_eq!(r["failures"][0]["outcome"], "http_error");
    assert_eq!(r["failures"][0]["error"], "overloaded");
    assert_eq!(
        r["context_distribution"],
        serde_json::json!({"100": 2, "120": 1})
    );
    assert_eq!(
        (
            r["concurrency"].as_u64(),
            r["context_tokens"].as_u64(),
            r["max_tokens"].as_u64()
        ),
        (Some(2), Some(100), Some(8))
    );
    assert_eq!(r["run_id"], "benchmark-20260905T034640Z");
    assert_eq!(r["started_at"], "2026-09-05T03:46:40Z");
    assert_eq!(
        r["serve_flags"],
        serde_json::json!({"thinking_mode": "enabled"})
    );
    close(&r["wall_clock_ms"], 158.0); // first send 102 ms to last end 260 ms

    let t = &r["request_timings"][0];
    assert_eq!(t["request_index"], 0);
    close(&t["ttft_ms"], 48.0); // 150 - 102
    close(&t["time_to_first_output_ms"], 18.0); // 120 - 102
    close(&t["e2e_ms"], 98.0);
    close(&t["generation_ms"], 80.0);
    close(&t["visible_generation_ms"], 50.0);
    close(&t["decode_tok_s"], 62.5); // (6 - 1) / 0.080 s
    close(&t["effective_prefill_tok_s"], 100.0 / 0.018);
    close(&t["mean_inter_token_latency_ms"], 16.0); // 80 / 5
    assert_eq!(
        (
            t["reasoning_chunks"].as_u64(),
            t["content_chunks"].as_u64(),
            t["output_tokens"].as_u64()
        ),
        (Some(2), Some(3), Some(6))
    );
    assert_eq!(t["output_token_source"], "usage");

    let m = &r["metrics"];
    // Nearest rank on two values: p25 and p50 are the smaller, p75 and above the larger.
    close(&m["ttft_mean_ms"], 34.0);
    close(&m["ttft_p50_ms"], 20.0);
    close(&m["ttft_p75_ms"], 48.0);
    close(&m["ttft_max_ms"], 48.0);
    assert_eq!(m["ttft_samples"], 2);
    close(&m["time_to_first_output_p50_ms"], 18.0);
    close(&m["generation_mean_ms"], 85.0);
    close(&m["decode_tok_s_p50"], 4.0 / 0.090);
    close(&m["effective_prefill_tok_s_max"], 6000.0);
    close(&m["mean_inter_token_latency_ms_mean"], 19.25);
    close(&m["tpot_p99_ms"], 22.5);
    close(&m["prompt_tokens_mean"], 110.0);
    assert_eq!(
        (m["prompt_tokens"].as_u64(), m["output_tokens"].as_u64()),
        (Some(220), Some(11))
    );
    assert_eq!(
        (m["content_chunks"].as_u64(), m["reasoning_chunks"].as_u64()),
        (Some(7), Some(2))
    );
    close(&m["throughput_tok_s"], 11.0 / 0.158);
    assert_eq!(m["output_token_sources"], serde_json::json!({"usage": 2}));
    assert!(m["content_chunks_s"].is_null() && m["prefix_cache_hit_avg"].is_null());
}

#[test]
fn capacity_v4_reports_p50_p95_and_no_tpot() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "capacity-v4-reasoning", &[]);
    let m = r["metrics"].as_object().unwrap();
    close(&m["ttft_p50_ms"], 20.0);
    close(&m["ttft_p95_ms"], 48.0);
    assert_eq!(m["ttft_samples"], 2);
    close(&m["time_to_first_output_p95_ms"], 20.0);
    close(&m["decode_tok_s_p50"], 4.0 / 0.090);
    assert!(
        m.keys()
            .all(|k| !k.contains("tpot") && !k.ends_with("_mean") && !k.contains("_mean_ms")),
        "{:?}",
        m.keys()
    );
    assert!(!m.contains_key("e2e_samples"));
    assert_eq!(m["reasoning_chunks"], 2);
    assert!(r["request_timings"][0].get("tpot_ms").is_none());
    assert_eq!(r["measurement_protocol"], "capacity-v4-reasoning");
}

#[test]
fn tokentrace_v1_gives_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(
        &trace,
        "tokentrace-v1",
        &["--slo", "ttft:p95<19.5ms", "--slo", "itl:p99<40ms"],
    );
    let m = &r["metrics"];
    close(&m["ttft_ms"]["mean"], 19.0); // any output: 18 and 20
    close(&m["ttft_ms"]["std"], std::f64::consts::SQRT_2); // sample std of 18, 20
    close(&m["ttft_content_ms"]["mean"], 34.0);
    close(&m["ttst_ms"]["max"], 10.0);
    // Pooled gaps 10 20 10 30 | 10 20 50, numpy-linear percentiles.
    assert_eq!(m["itl_ms"]["samples"], 7);
    close(&m["itl_ms"]["mean"], 150.0 / 7.0);
    close(&m["itl_ms"]["p50"], 20.0);
    close(&m["itl_ms"]["p90"], 38.0);
    close(&m["itl_request_mean_ms"]["max"], 80.0 / 3.0);
    close(&m["itl_request_max_ms"]["min"], 30.0);
    close(&m["tpot_ms"]["min"], 14.0); // (190 - 120) / (6 - 1)
    close(&m["tpot_ms"]["max"], 20.0); // (250 - 170) / (5 - 1)
    close(&m["e2e_from_intended_ms"]["min"], 100.0);
    close(&m["schedule_lag_ms"]["max"], 2.0);
    close(&m["headers_ms"]["max"], 10.0);
    close(&m["decode_tok_s"]["max"], 5.0 / 0.070);
    close(&m["content_chunks_s"]["min"], 37.5); // 3 gaps over 80 ms
    close(&m["tokens_per_chunk"]["max"], 1.25);
    assert_eq!(m["prefix_cache_hit"]["samples"], 1);
    close(&m["prefix_cache_hit"]["mean"], 0.5);
    let a = &r["aggregates"];
    close(&a["request_throughput_s"], 2.0 / 0.158);
    close(&a["content_chunks_s"], 7.0 / 0.158);
    close(&a["prefix_cache_hit_avg"], 0.5);
    // Request 1: TTFT 18 ms, own gap p99 29.7 ms: good. Request 2: TTFT 20 ms: not good.
    assert_eq!(a["goodput"]["good_requests"], 1);
    close(&a["goodput"]["requests_per_s"], 1.0 / 0.158);
    assert_eq!(
        a["client_health"]["flags"],
        serde_json::json!(["scheduler_lag_over_10ms"])
    );
    // Run-level: p95 TTFT = 19.9 ms, p99 of pooled gaps = 48.8 ms; both missed.
    close(&r["slo"][0]["value"], 19.9);
    assert_eq!(r["slo"][0]["met"], false);
    close(&r["slo"][1]["value"], 48.8);
    assert_eq!(r["requests"]["excluded_by_phase"], 1);
}

#[test]
fn aiperf_gives_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "aiperf", &[]);
    let m = &r["metrics"];
    close(&m["time_to_first_token"]["avg"], 19.0); // first reasoning or content: 18, 20
    close(&m["time_to_second_token"]["p50"], 10.0);
    close(&m["time_to_first_output_token"]["max"], 48.0); // first content
    close(&m["request_latency"]["min"], 88.0); // last content 190 - 102
    close(&m["inter_token_latency"]["min"], 14.0); // (88 - 18) / (6 - 1)
    close(&m["inter_token_latency"]["max"], 20.0);
    assert_eq!(m["inter_chunk_latency"]["count"], 7);
    close(&m["inter_chunk_latency"]["sum"], 150.0);
    close(&m["inter_chunk_latency"]["p99"], 48.8);
    close(&m["output_token_throughput_per_user"]["max"], 5.0 / 0.070);
    close(&m["time_to_first_token"]["std"], 1.0); // population
    let a = &r["aggregates"];
    close(&a["request_throughput"], 2.0 / 0.158);
    close(&a["benchmark_duration"], 0.158);
    assert_eq!(a["total_osl"], 11);
}

#[test]
fn aiperf_0_10_reports_the_capacity_blocks_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "aiperf-0.10", &[]);
    let m = &r["metrics"];
    let keys = |metric: &str| -> Vec<String> {
        let stats = m[metric].as_object().unwrap().keys();
        stats.filter(|k| *k != "unit").cloned().collect()
    };
    // The capacity fixture's statistics: p50, p95, p99 of times; avg, p50, p95 per user.
    assert_eq!(keys("time_to_first_token"), ["p50", "p95", "p99"]);
    assert_eq!(
        keys("output_token_throughput_per_user"),
        ["avg", "p50", "p95"]
    );
    close(&m["time_to_first_token"]["p50"], 19.0); // 18 and 20, numpy-linear
    close(&m["request_latency"]["p50"], 94.0); // 88 and 100
    close(&m["inter_token_latency"]["p50"], 17.0); // 14 and 20

    // 1 / ITL in seconds: 1 / 0.014 and 1 / 0.020.
    close(
        &m["output_token_throughput_per_user"]["avg"],
        (1.0 / 0.014 + 1.0 / 0.020) / 2.0,
    );
    // AIPerf 0.10's benchmark duration: first send (102 ms) to the last output of a counted
    // request (250 ms), not to the failed request's or a stream's end.
    close(&r["aggregates"]["benchmark_duration"], 0.148);
    close(&r["aggregates"]["request_throughput"], 2.0 / 0.148);
    close(&r["aggregates"]["output_token_throughput"], 11.0 / 0.148);
}

#[test]
fn vllm_gives_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "vllm", &[]);
    // The role chunk at 110 ms counts as the first token; the finish chunk at 251 as the last.
    close(&r["mean_ttft_ms"], 14.0); // 8 and 20
    close(&r["std_ttft_ms"], 6.0);
    close(&r["p99_ttft_ms"], 19.88);
    close(&r["median_tpot_ms"], (16.0 + 20.25) / 2.0); // 80 / 5 and 81 / 4
                                                       // Gaps between every chunk with choices: 10 10 20 10 30 | 10 20 50 1.
    close(&r["mean_itl_ms"], 161.0 / 9.0);
    close(&r["median_itl_ms"], 10.0);
    close(&r["mean_e2el_ms"], (88.0 + 101.0) / 2.0);
    close(&r["duration"], 0.158);
    close(&r["total_token_throughput"], 231.0 / 0.158);
    assert_eq!(
        (r["completed"].as_u64(), r["failed"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(r["request_goodput"].is_null());
}

#[test]
fn sglang_gives_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "sglang", &[]);
    close(&r["mean_ttft_ms"], 34.0); // first non-empty content: 48 and 20
    close(&r["mean_tpot_ms"], (10.0 + 22.5) / 2.0); // (200 - 150) / 5 and (260 - 170) / 4
                                                    // Content gaps only: 10 30 | 10 20 50.
    close(&r["mean_itl_ms"], 24.0);
    close(&r["median_itl_ms"], 20.0);
    close(&r["p95_itl_ms"], 46.0);
    close(&r["max_itl_ms"], 50.0);
    close(&r["p99_e2e_latency_ms"], 98.0 + 0.99 * 12.0);
    close(&r["input_throughput"], 220.0 / 0.158);
}

#[test]
fn guidellm_gives_the_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "guidellm", &[]);
    let m = &r["metrics"];
    close(&m["time_to_first_token_ms"]["mean"], 19.0);
    close(&m["time_to_first_token_ms"]["median"], 18.0); // cdf 0.5 reaches p50 at the first value
                                                         // Token-weighted TPOT: (88/6 ms × 6 + 100/5 ms × 5) / 11 tokens.
    close(&m["time_per_output_token_ms"]["mean"], 188.0 / 11.0);
    assert_eq!(m["time_per_output_token_ms"]["count"], 11);
    // ITL weighted by tokens - 1: (14 × 5 + 20 × 4) / 9.
    close(&m["inter_token_latency_ms"]["mean"], 150.0 / 9.0);
    assert_eq!(m["inter_token_latency_ms"]["count"], 9);
    close(&m["inter_token_latency_ms"]["p50"], 14.0);
    close(&m["inter_token_latency_ms"]["p999"], 20.0);
    close(&m["inter_token_latency_ms"]["total_sum"], 150.0);
    // GuideLLM's request_latency is in seconds under its own key (request_stats.py).
    close(&m["request_latency"]["max"], 0.110);
    assert_eq!(m["request_latency"]["unit"], "s");
    // Its summarized output_tokens_per_second is a rate over time, not per-request rates: not
    // reproduced, so not emitted under its key.
    assert!(m.get("output_tokens_per_second").is_none());
    assert_eq!(r["aggregates"]["successful"], 2);
}

#[test]
fn warmup_counts_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let r = analyze_json(&trace, "tokentrace-v1", &["--include-warmup"]);
    assert_eq!(r["requests"]["counted"], 3);
    close(&r["metrics"]["ttft_ms"]["min"], 10.0);
}

#[test]
fn json_reports_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    for protocol in [
        "capacity-v3",
        "capacity-v4-reasoning",
        "tokentrace-v1",
        "aiperf",
        "vllm",
        "sglang",
        "guidellm",
    ] {
        let out = analyze(
            &trace,
            &[
                "--format",
                "json",
                "--protocol",
                protocol,
                "--slo",
                "ttft:p95<500ms",
            ],
        );
        insta::assert_snapshot!(format!("json_{protocol}"), out);
    }
}

#[test]
fn tables_and_rows_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    for protocol in ["capacity-v3", "tokentrace-v1"] {
        // The table fits the terminal: pin the width (the layout at others is in table_layout).
        let mut cmd = tokentrace();
        cmd.env("COLUMNS", "100")
            .arg("analyze")
            .arg(&trace)
            .args(["--protocol", protocol]);
        let table = String::from_utf8(stdout_of(&mut cmd)).unwrap();
        insta::assert_snapshot!(format!("table_{protocol}"), table);
    }
    insta::assert_snapshot!("csv_tokentrace-v1", analyze(&trace, &["--format", "csv"]));
    insta::assert_snapshot!(
        "jsonl_capacity-v3",
        analyze(&trace, &["--format", "jsonl", "--protocol", "capacity-v3"])
    );
}

#[test]
fn traces_are_analyzed_together_or_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_trace(dir.path(), "a.tt");
    let b = write_trace(dir.path(), "b.tt");
    let together = json_of(
        tokentrace()
            .args(["analyze", "--format", "json"])
            .arg(&a)
            .arg(&b),
    );
    assert_eq!(together["requests"]["counted"], 4);
    assert_eq!(together["metrics"]["itl_ms"]["samples"], 14);
    let apart = json_of(
        tokentrace()
            .args(["analyze", "--format", "json", "--group-by", "trace"])
            .arg(&a)
            .arg(&b),
    );
    assert_eq!(apart["groups"]["a.tt"]["requests"]["counted"], 2);
    assert_eq!(apart["groups"]["b.tt"]["requests"]["counted"], 2);
    let by_label = json_of(
        tokentrace()
            .args(["analyze", "--format", "json", "--group-by", "label:engine"])
            .arg(&a)
            .arg(&b),
    );
    assert_eq!(by_label["groups"]["engine=sim"]["requests"]["counted"], 4);
}

#[test]
fn output_goes_to_a_file_and_bad_input_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let out_path = dir.path().join("rows.csv");
    analyze(
        &trace,
        &["--format", "csv", "-o", out_path.to_str().unwrap()],
    );
    let csv = std::fs::read_to_string(&out_path).unwrap();
    assert_eq!(csv.lines().count(), 5); // header + 4 requests
    let missing = tokentrace()
        .args(["analyze", "/nonexistent/x.tt"])
        .output()
        .unwrap();
    assert!(!missing.status.success());
    let bad_protocol = tokentrace()
        .arg("analyze")
        .arg(&trace)
        .args(["--protocol", "nope"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad_protocol.stderr).contains("unknown protocol `nope`"));
    let bad_slo = tokentrace()
        .arg("analyze")
        .arg(&trace)
        .args(["--slo", "nothing:p95<1ms"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad_slo.stderr).contains("has no metric `nothing`"));
}

#[test]
fn an_slo_needs_a_unit_and_takes_every_spelling_capacity_takes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    // A bare threshold was read as milliseconds; it is refused, with the accepted form.
    let bare = tokentrace()
        .arg("analyze")
        .arg(&trace)
        .args(["--slo", "ttft:p95<200"])
        .output()
        .unwrap();
    assert_eq!(bare.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bare.stderr);
    assert!(
        stderr.contains("--slo ttft:p95<200: the threshold needs a unit, e.g. `ttft:p95<200ms`"),
        "{stderr}"
    );
    // What only `capacity --slo` took before: `avg`, `>=`, aliases, rates, whitespace.
    let r = analyze_json(
        &trace,
        "aiperf",
        &[
            "--slo",
            "ttft : avg < 1 s",
            "--slo",
            "request_latency:p50<=1s",
            "--slo",
            "per_user_tps:p50>=1tok/s",
        ],
    );
    let slo = |i: usize, key: &str| r["slo"][i][key].clone();
    assert_eq!(
        (slo(0, "metric"), slo(0, "stat")),
        ("time_to_first_token".into(), "mean".into())
    );
    assert_eq!(slo(0, "threshold"), 1000.0);
    assert_eq!(slo(1, "metric"), "request_latency");
    assert_eq!(slo(2, "metric"), "output_token_throughput_per_user");
    assert!((0..3).all(|i| slo(i, "met") == true), "{}", r["slo"]);
    // A unit that does not fit the metric is refused.
    let misfit = tokentrace()
        .arg("analyze")
        .arg(&trace)
        .args(["--protocol", "aiperf", "--slo", "per_user_tps:p50>=1ms"])
        .output()
        .unwrap();
    assert_eq!(misfit.status.code(), Some(2));
    // GuideLLM's request latency is in seconds: 100 ms is 0.1 there (it was compared as 100).
    let r = analyze_json(&trace, "guidellm", &["--slo", "e2e:max<=100ms"]);
    assert_eq!(r["slo"][0]["metric"], "request_latency");
    close(&r["slo"][0]["threshold"], 0.1);
    assert_eq!(r["slo"][0]["met"], false);
}
