//! Imports the JSON written by `vllm bench serve --save-result --save-detailed`
//! (vllm/benchmarks/serve.py, `benchmark` and `main_async`).
//!
//! Per request the file has `start_times` (perf_counter seconds), `ttfts`, `itls` (the gaps
//! between chunks after the first), `latencies`, `input_lens`, `output_lens`,
//! `generated_texts` and `errors`, all in submission order. Chunk times are rebuilt as
//! `start + ttft + cumsum(itls)`. The file does not say what each chunk carried, how many
//! tokens it held, or its bytes: the manifest lists these as unknown.

use crate::error::{ImportError, Issue};
use crate::fields::{describe, f64_value, len_u32, sat_u32, Ctx};
mod manifest;

use crate::{require_requests, Imported};
use serde_json::Value;
use std::path::Path;
use tokentrace_format::{
    Channel, ChunkRecord, ClockAnchor, Header, Outcome, Phase, RequestMeta, RequestRecord, RunEnd,
    Usage,
};
use xxhash_rust::xxh3::xxh3_64;

/// Per-request arrays of a detailed result.
const ARRAYS: [&str; 9] = [
    "ttfts",
    "itls",
    "start_times",
    "latencies",
    "input_lens",
    "output_lens",
    "generated_texts",
    "errors",
    "queue_times",
];

/// Error text kept per request (the rest of a traceback is cut).
const MAX_ERROR_BYTES: usize = 1024;

/// Reads a vLLM detailed-results JSON file.
pub fn read(path: &Path) -> Result<Imported, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ImportError::io(path, e))?;
    let mut issues = Vec::new();
    let mut values = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    let result = match values.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => return Err(ImportError::json(path, &e)),
        None => return Err(ImportError::invalid(path, None, None, "the file is empty")),
    };
    let appended = values.count();
    if appended > 0 {
        issues.push(Issue::new(
            path,
            None,
            "(document)",
            format!("{appended} more result(s) appended after the first (--append-result); only the first is imported"),
        ));
    }
    let ctx = Ctx {
        file: path,
        line: None,
    };
    let n = check_arrays(&result, ctx)?;
    let array = |name: &str| result.get(name).and_then(Value::as_array);
    let starts = match array("start_times") {
        Some(a) => Some(numbers(a, "start_times", ctx)?),
        None => None,
    };
    let min_start = starts
        .as_ref()
        .and_then(|s| s.iter().copied().reduce(f64::min))
        .unwrap_or(0.0);
    let duration = result.get("duration").and_then(Value::as_f64);
    let end_realtime = result
        .get("date")
        .and_then(Value::as_str)
        .and_then(crate::time::parse_compact);
    let start_realtime = end_realtime.map(|end| end.saturating_sub(duration.map_or(0, secs_to_ns)));

    let mut requests = Vec::with_capacity(n);
    let mut counts = std::collections::BTreeMap::new();
    for i in 0..n {
        let start = starts.as_ref().map_or(0.0, |s| s[i]) - min_start;
        match request(&result, i, start, ctx) {
            Ok(record) => {
                let len = |field: &str| {
                    array(field)
                        .and_then(|a| a[i].as_u64())
                        .and_then(|n| u32::try_from(n).ok())
                };
                counts.insert(
                    record.meta.id,
                    tokentrace_format::RequestTokenCounts {
                        output_tokens: len("output_lens"),
                        input_tokens: len("input_lens"),
                        other: Default::default(),
                    },
                );
                requests.push(record);
            }
            Err(issue) => issues.push(issue),
        }
    }
    require_requests(path, &requests, &issues)?;

    let header = Header {
        major: 0,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: secs_to_ns(min_start),
            realtime_ns: start_realtime.unwrap_or(0),
        },
        host: String::new(),
        shard: 0,
    };
    let end_ns = requests.iter().map(|r| r.meta.end_ns).max().unwrap_or(0);
    let manifest = manifest::manifest(
        path,
        &result,
        counts,
        starts.is_some(),
        start_realtime,
        &issues,
    );
    let run_end = RunEnd {
        end_realtime_ns: end_realtime.unwrap_or(0),
        end_ns,
        reason: "completed".into(),
        client_health: Default::default(),
    };
    Ok(Imported {
        header,
        manifest,
        requests,
        run_end,
        issues,
    })
}

/// Checks the per-request arrays and returns the request count.
fn check_arrays(result: &Value, ctx: Ctx<'_>) -> Result<usize, ImportError> {
    let invalid =
        |field: &str, message: String| ImportError::invalid(ctx.file, None, Some(field), message);
    let Some(ttfts) = result.get("ttfts") else {
        return Err(invalid(
            "ttfts",
            "missing: not a --save-detailed result of `vllm bench serve`".into(),
        ));
    };
    let n = ttfts.as_array().map(Vec::len).ok_or_else(|| {
        invalid(
            "ttfts",
            format!("expected an array, found {}", describe(ttfts)),
        )
    })?;
    if result.get("itls").is_none() {
        return Err(invalid(
            "itls",
            "missing: not a --save-detailed result of `vllm bench serve`".into(),
        ));
    }
    for name in ARRAYS {
        match result.get(name) {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) if a.len() == n => {}
            Some(Value::Array(a)) => {
                return Err(invalid(
                    name,
                    format!("has {} entries but `ttfts` has {n}", a.len()),
                ))
            }
            Some(other) => {
                return Err(invalid(
                    name,
                    format!("expected an array, found {}", describe(other)),
                ))
            }
        }
    }
    Ok(n)
}

/// Every entry of an array as a finite number.
fn numbers(values: &[Value], name: &str, ctx: Ctx<'_>) -> Result<Vec<f64>, ImportError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| f64_value(v, &format!("{name}[{i}]"), ctx))
        .collect::<Result<_, Issue>>()
        .map_err(|issue| ImportError::Invalid {
            location: issue.location,
            message: issue.message,
        })
}

/// Seconds to whole nanoseconds (negative clamps to 0).
fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9).round().max(0.0) as u64
}

/// Builds request `i`, starting `start` seconds after the earliest request.
fn request(result: &Value, i: usize, start: f64, ctx: Ctx<'_>) -> Result<RequestRecord, Issue> {
    let entry = |name: &str| result.get(name).and_then(Value::as_array).map(|a| &a[i]);
    let error = match entry("errors") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ctx.issue(
                &format!("errors[{i}]"),
                format!("expected a string, found {}", describe(other)),
            ))
        }
    };
    let ttft = entry("ttfts").map_or(Ok(0.0), |v| f64_value(v, &format!("ttfts[{i}]"), ctx))?;
    let gaps = match entry("itls") {
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(j, v)| f64_value(v, &format!("itls[{i}][{j}]"), ctx))
            .collect::<Result<Vec<_>, _>>()?,
        None | Some(Value::Null) => Vec::new(),
        Some(other) => {
            return Err(ctx.issue(
                &format!("itls[{i}]"),
                format!("expected an array, found {}", describe(other)),
            ))
        }
    };
    let latency = match entry("latencies") {
        Some(v) if !v.is_null() => Some(f64_value(v, &format!("latencies[{i}]"), ctx)?),
        _ => None,
    };
    if ttft < 0.0 || gaps.iter().any(|g| *g < 0.0) {
        return Err(ctx.issue(&format!("ttfts[{i}]"), "negative time"));
    }
    let text = entry("generated_texts")
        .and_then(Value::as_str)
        .unwrap_or("");
    let success = error.is_empty();
    let send_ns = secs_to_ns(start);
    let mut chunks = Vec::new();
    if success {
        // One time per chunk from the cumulative sum in seconds, so rounding never accumulates.
        let mut offset = ttft;
        let n_chunks = gaps.len() + 1;
        for k in 0..n_chunks {
            if k > 0 {
                offset += gaps[k - 1];
            }
            chunks.push(ChunkRecord {
                arrival_ns: secs_to_ns(start + offset),
                read_index: len_u32(k),
                bytes: 0,
                channel: Channel::Content,
                text_len: spread(text.len(), n_chunks, k),
                tokens: None,
                text: None,
            });
        }
    }
    let last_chunk = chunks.last().map_or(send_ns, |c| c.arrival_ns);
    let end_ns = match latency {
        Some(l) if success => secs_to_ns(start + l),
        _ => last_chunk,
    };
    let mut cut = error.len().min(MAX_ERROR_BYTES);
    while !error.is_char_boundary(cut) {
        cut -= 1;
    }
    Ok(RequestRecord {
        meta: RequestMeta {
            id: i as u64,
            phase: Phase::Measured,
            trial: 0,
            intended_ns: send_ns,
            send_ns,
            headers_ns: None,
            end_ns,
            http_status: if success { 200 } else { 0 },
            outcome: if success { Outcome::Ok } else { Outcome::Other },
            error: (!success).then(|| error[..cut].to_string()),
            usage: Usage::default(),
            finish_reason: None,
            prompt_hash: 0,
            prompt_bytes: 0,
            output_hash: xxh3_64(text.as_bytes()),
            output_bytes: len_u32(text.len()),
            planned_input_tokens: entry("input_lens").and_then(Value::as_u64).map(sat_u32),
            response_headers: Vec::new(),
            retries: 0,
        },
        chunks,
    })
}

/// Chunk `k`'s share of `total` text bytes spread over `n` chunks, at least 1 so every chunk
/// counts as carrying output (vLLM counted each as a token event).
fn spread(total: usize, n: usize, k: usize) -> u32 {
    let base = total / n;
    let share = base + usize::from(k < total % n);
    len_u32(share.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_keeps_the_total_and_a_minimum() {
        let shares: Vec<u32> = (0..3).map(|k| spread(10, 3, k)).collect();
        assert_eq!(shares, [4, 3, 3]);
        assert_eq!(spread(0, 2, 1), 1);
    }
}
