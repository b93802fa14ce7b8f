//! `tokentrace import vllm` on a detailed result written the way `vllm bench serve
//! --save-result --save-detailed` writes it (vllm/benchmarks/serve.py, `benchmark` and
//! `main_async`): chunk times rebuilt from the gaps give back vLLM's own formulas.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use serde_json::{json, Value};
use tokentrace_format::{Outcome, RequestRecord, TraceReader};

/// Three requests; the third failed, as vLLM records failures (ttft 0, no gaps, error text).
fn detailed_result() -> Value {
    json!({
        "date": "20261129-221010", "endpoint_type": "openai-chat", "backend": "openai-chat",
        "label": null, "model_id": "mock-model", "tokenizer_id": "mock-model", "num_prompts": 3,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2,
        "duration": 0.75, "completed": 2, "failed": 1,
        "total_input_tokens": 256, "total_output_tokens": 9,
        "request_throughput": 2.0 / 0.75, "request_goodput": null,
        "output_throughput": 9.0 / 0.75, "total_token_throughput": 265.0 / 0.75,
        "latencies": [0.1375, 0.2115, 0.0],
        "queue_times": [0.0, 0.01, 0.02],
        "max_output_tokens_per_s": 9.0, "max_concurrent_requests": 2, "rtfx": 0.0,
        "input_lens": [128, 128, 128],
        "output_lens": [4, 5, 0],
        "start_times": [1000.25, 1000.375, 1000.5],
        "ttfts": [0.05, 0.0625, 0.0],
        "itls": [[0.0125, 0.05, 0.025], [0.03, 0.028, 0.031, 0.06], []],
        "generated_texts": ["a bc d", "one two three", ""],
        "errors": ["", "", "Traceback (most recent call last):\n  aiohttp.ClientConnectorError"]
    })
}

fn import(result: &Value) -> (tempfile::TempDir, TraceReader, Vec<RequestRecord>) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("vllm.json");
    std::fs::write(&input, serde_json::to_vec(result).unwrap()).unwrap();
    let trace = dir.path().join("vllm.trace");
    common::import("vllm", &input, &trace);
    let (reader, records) = common::records_of(&trace);
    (dir, reader, records)
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(got: f64, want: f64) -> bool {
    // Times are kept in whole nanoseconds; each value moves by at most 1 ns.
    (got - want).abs() <= 2e-9
}

#[test]
fn chunk_times_are_rebuilt_from_ttft_and_gaps() {
    let result = detailed_result();
    let (_dir, reader, records) = import(&result);
    assert_eq!(records.len(), 3);
    let anchor = reader.header().anchor.mono_ns;
    assert_eq!(anchor, 1_000_250_000_000);
    let starts = floats(&result["start_times"]);
    let ttfts = floats(&result["ttfts"]);
    for (i, r) in records.iter().take(2).enumerate() {
        assert_eq!(r.meta.outcome, Outcome::Ok);
        assert!(close((r.meta.send_ns + anchor) as f64 * 1e-9, starts[i]));
        let gaps = floats(&result["itls"][i]);
        assert_eq!(r.chunks.len(), gaps.len() + 1);
        let mut t = starts[i] + ttfts[i];
        for (k, chunk) in r.chunks.iter().enumerate() {
            if k > 0 {
                t += gaps[k - 1];
            }
            assert!(
                close((chunk.arrival_ns + anchor) as f64 * 1e-9, t),
                "request {i} chunk {k}"
            );
            assert!(chunk.tokens.is_none());
        }
        let latency = result["latencies"][i].as_f64().unwrap();
        assert!(close(
            (r.meta.end_ns - r.meta.send_ns) as f64 * 1e-9,
            latency
        ));
        assert_eq!(
            r.meta.output_bytes as usize,
            result["generated_texts"][i].as_str().unwrap().len()
        );
    }
    let failed = &records[2];
    assert_eq!(
        (failed.meta.outcome, failed.chunks.len()),
        (Outcome::Other, 0)
    );
    assert!(failed
        .meta
        .error
        .as_deref()
        .unwrap()
        .contains("ClientConnectorError"));
    let manifest = reader.manifest();
    assert_eq!(manifest.api, "chat");
    let window = manifest.measurement_window.as_ref().unwrap();
    assert_eq!(window.duration_ns, 750_000_000, "vLLM's `duration`");
    let unknown = manifest.extra["import"]["unknown"].as_array().unwrap();
    assert!(unknown
        .iter()
        .any(|u| u.as_str().unwrap().starts_with("channels")));
    assert!(unknown
        .iter()
        .any(|u| u.as_str().unwrap().starts_with("chunk tokens")));
}

/// vLLM's TTFT, TPOT (per request, then mean), pooled ITL and E2EL, computed once from the
/// JSON arrays with vLLM's formulas and once from the imported trace, agree.
#[test]
fn vllm_formulas_agree_on_the_trace() {
    let result = detailed_result();
    let (_dir, reader, records) = import(&result);
    let counts = &reader
        .manifest()
        .client_token_counts
        .as_ref()
        .unwrap()
        .per_request;
    let ok: Vec<usize> = (0..3).filter(|&i| result["errors"][i] == "").collect();

    let ttfts = floats(&result["ttfts"]);
    let lat = floats(&result["latencies"]);
    let out = floats(&result["output_lens"]);
    let json_tpot: Vec<f64> = ok
        .iter()
        .map(|&i| (lat[i] - ttfts[i]) / (out[i] - 1.0))
        .collect();
    let json_itl: Vec<f64> = ok
        .iter()
        .flat_map(|&i| floats(&result["itls"][i]))
        .collect();

    let mut trace_tpot = Vec::new();
    let mut trace_itl = Vec::new();
    for &i in &ok {
        let r = &records[i];
        let ttft = (r.chunks[0].arrival_ns - r.meta.send_ns) as f64 * 1e-9;
        let e2el = (r.meta.end_ns - r.meta.send_ns) as f64 * 1e-9;
        let n = f64::from(counts[&(i as u64)].output_tokens.unwrap());
        assert!(close(ttft, ttfts[i]));
        trace_tpot.push((e2el - ttft) / (n - 1.0));
        trace_itl.extend(
            r.chunks
                .windows(2)
                .map(|w| (w[1].arrival_ns - w[0].arrival_ns) as f64 * 1e-9),
        );
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert_eq!(json_itl.len(), trace_itl.len());
    assert!((mean(&trace_tpot) - mean(&json_tpot)).abs() < 2e-9);
    assert!((mean(&trace_itl) - mean(&json_itl)).abs() < 2e-9);
    let mut a = json_itl.clone();
    let mut b = trace_itl.clone();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    assert!(a.iter().zip(&b).all(|(x, y)| close(*x, *y)));
}

/// numpy.percentile's default (linear) method.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let idx = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = idx.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (idx - lo as f64) * (sorted[hi] - sorted[lo])
}

/// vLLM's statistics of one metric in ms: mean, median, population std, p99.
fn vllm_stats(values: &[f64]) -> [(String, f64); 4] {
    let mut s = values.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let std = (s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    [
        ("mean".into(), mean * 1000.0),
        ("median".into(), percentile(&s, 50.0) * 1000.0),
        ("std".into(), std * 1000.0),
        ("p99".into(), percentile(&s, 99.0) * 1000.0),
    ]
}

/// `tokentrace analyze --protocol vllm` on the import gives what vLLM's `calculate_metrics`
/// gives on the file's arrays — including a request whose chunks bundled several tokens, so
/// TPOT must use vLLM's own output count, and throughputs vLLM's own `duration`.
#[test]
fn vllm_protocol_on_the_import_gives_vllm_numbers() {
    let mut result = detailed_result();
    result["output_lens"] = json!([6, 5, 0]);
    result["total_output_tokens"] = json!(11);
    let (dir, _reader, _records) = import(&result);
    let report = common::analyze_json(&dir.path().join("vllm.trace"), "vllm");

    // calculate_metrics (vllm/benchmarks/serve.py) over the successful requests.
    let ok = [0usize, 1];
    let ttfts = floats(&result["ttfts"]);
    let lat = floats(&result["latencies"]);
    let out_lens = floats(&result["output_lens"]);
    let ttft: Vec<f64> = ok.iter().map(|&i| ttfts[i]).collect();
    let tpot: Vec<f64> = ok
        .iter()
        .map(|&i| (lat[i] - ttfts[i]) / (out_lens[i] - 1.0))
        .collect();
    let itl: Vec<f64> = ok
        .iter()
        .flat_map(|&i| floats(&result["itls"][i]))
        .collect();
    let e2el: Vec<f64> = ok.iter().map(|&i| lat[i]).collect();
    for (metric, values) in [("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)] {
        for (stat, want) in vllm_stats(&values) {
            let key = format!("{stat}_{metric}_ms");
            let got = report[&key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key} missing"));
            // ns-rounded times: well within 1e-6 of values in the tens of ms.
            assert!(
                (got - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{key}: got {got}, want {want}"
            );
        }
    }
    let duration = result["duration"].as_f64().unwrap();
    // vLLM sums the prompt lengths of the successful requests: 2 x 128 (its own
    // total_input_tokens, 256), and counts them in the total token throughput.
    let checks = [
        ("completed", 2.0),
        ("request_throughput", 2.0 / duration),
        ("output_throughput", 11.0 / duration),
        ("total_input_tokens", 256.0),
        ("total_token_throughput", (256.0 + 11.0) / duration),
    ];
    for (key, want) in checks {
        let got = report[key].as_f64().unwrap();
        assert!(
            (got - want).abs() <= 1e-9 * want,
            "{key}: got {got}, want {want}"
        );
    }
}

/// Under capacity-v3 an unpaced vLLM run reports its `max_concurrency` as the concurrency; a
/// paced one (an open loop with a cap) reports none.
#[test]
fn capacity_v3_reads_the_concurrency_of_an_unpaced_vllm_run() {
    let (dir, _reader, _records) = import(&detailed_result());
    let report = common::analyze_json(&dir.path().join("vllm.trace"), "capacity-v3");
    assert_eq!(report["concurrency"], 2);

    let mut paced = detailed_result();
    paced["request_rate"] = json!(4.0);
    let (dir, _reader, _records) = import(&paced);
    let report = common::analyze_json(&dir.path().join("vllm.trace"), "capacity-v3");
    assert_eq!(report["concurrency"], Value::Null);
}
