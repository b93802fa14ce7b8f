//! `tokentrace export perfetto` end to end: the timeline of a simulator run (failures and
//! reasoning included) and of the golden traces, checked against the trace-event format and
//! against the traces' own times.
//!
//! The PyPI `perfetto` package's TraceProcessor is not used: it fetches a
//! `trace_processor_shell` binary on first use, which this offline machine cannot (see
//! docs/EXPORT.md).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::{fast_sim, record_ok, sim};
use common::{read_json, records_of, stdout_of, tokentrace};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tokentrace_format::{Outcome, RequestRecord};
use tokentrace_sim::{FaultConfig, SimConfig};

/// A simulator run with reasoning, HTTP 500s, resets mid-stream and warmup requests.
fn record_faulty_run(dir: &Path) -> PathBuf {
    let server = sim(SimConfig {
        reasoning_tokens: 3,
        faults: FaultConfig {
            http_500_every: 4,
            reset_every: 6,
            ..FaultConfig::default()
        },
        ..fast_sim()
    });
    let out = dir.join("run.tt");
    let args = [
        "--requests",
        "18",
        "--warmup",
        "2",
        "--concurrency",
        "3",
        "--max-tokens",
        "10",
    ];
    record_ok(&server.base_url(), &out, &args);
    out
}

/// `export perfetto TRACES… -o OUT ARGS…`, asserted to succeed, parsed.
fn export(traces: &[&Path], out: &Path, args: &[&str]) -> Value {
    stdout_of(
        tokentrace()
            .args(["export", "perfetto"])
            .args(traces)
            .arg("-o")
            .arg(out)
            .args(args),
    );
    read_json(out)
}

/// A time of the format (microseconds, decimal) back in ns.
fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// The events, each checked against what the trace-event format requires of it.
fn events(timeline: &Value) -> &[Value] {
    assert!(timeline["displayTimeUnit"].is_string());
    let events = timeline["traceEvents"].as_array().unwrap();
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        assert!(["X", "i", "C", "M"].contains(&ph), "{e}");
        assert!(e["ts"].is_number() && e["name"].is_string(), "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        match ph {
            "X" => assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}"),
            "i" => assert_eq!(e["s"], "t", "{e}"),
            "C" => assert!(e["args"]
                .as_object()
                .unwrap()
                .values()
                .all(Value::is_number)),
            _ => assert!(e["args"].is_object(), "{e}"),
        }
    }
    events
}

/// Events of one kind on one track.
fn on_track<'a>(events: &'a [Value], ph: &str, pid: u64, tid: u64) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["ph"] == ph && e["pid"] == pid && e["tid"] == tid)
        .collect()
}

/// Where a trace's time line starts: its first send, or an intended start when earlier.
fn origin(records: &[RequestRecord]) -> i64 {
    records
        .iter()
        .map(|r| r.meta.intended_ns.min(r.meta.send_ns))
        .min()
        .unwrap() as i64
}

/// The slices of every request, against its times; returns the chunk instants seen.
fn check_requests(events: &[Value], pid: u64, records: &[RequestRecord], shift: i64) -> usize {
    let at = |t: u64| t as i64 - origin(records) + shift;
    let mut instants = 0;
    for r in records {
        let m = &r.meta;
        let tid = m.id + 1;
        let slices = on_track(events, "X", pid, tid);
        let first_output = r
            .chunks
            .iter()
            .find(|c| c.is_output())
            .map(|c| c.arrival_ns);
        let stage = if first_output.is_some() {
            "decode"
        } else {
            "prefill"
        };
        let last = if m.outcome == Outcome::Ok {
            stage.to_string()
        } else {
            format!("{stage} ({})", m.outcome.name())
        };
        let mut expected = vec![("waiting".to_string(), m.intended_ns, m.send_ns)];
        match first_output {
            Some(first) => {
                expected.push(("prefill".into(), m.send_ns, first));
                expected.push((last, first, m.end_ns));
            }
            None => expected.push((last, m.send_ns, m.end_ns)),
        }
        let got: Vec<(String, i64, i64)> = slices
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    ns(&s["ts"]),
                    ns(&s["dur"]),
                )
            })
            .collect();
        let want: Vec<(String, i64, i64)> = expected
            .into_iter()
            .map(|(name, from, to)| (name, at(from), to.saturating_sub(from) as i64))
            .collect();
        assert_eq!(got, want, "request {}", m.id);
        let last = slices.last().unwrap();
        assert_eq!(last["args"]["outcome"], m.outcome.name());
        assert_eq!(last["args"]["id"], m.id);
        let failed = m.outcome != Outcome::Ok;
        assert_eq!(last["cat"], if failed { "failed" } else { "request" });
        match &m.error {
            Some(error) if failed => assert_eq!(last["args"]["error"], error.as_str()),
            _ => assert!(last["args"]["error"].is_null()),
        }
        let names = on_track(events, "M", pid, tid);
        assert_eq!(names[0]["args"]["name"], format!("request {}", m.id));
        let chunks = on_track(events, "i", pid, tid);
        if !chunks.is_empty() {
            // Whole requests or nothing, each chunk at its arrival.
            assert_eq!(chunks.len(), r.chunks.len(), "request {}", m.id);
            for (e, c) in chunks.iter().zip(&r.chunks) {
                assert_eq!(ns(&e["ts"]), at(c.arrival_ns));
                assert_eq!(e["name"], c.channel.name());
                assert_eq!(e["args"]["bytes"], c.bytes);
                assert_eq!(
                    e["args"]["tokens"],
                    c.tokens.map_or(Value::Null, Value::from)
                );
            }
        }
        instants += chunks.len();
    }
    instants
}

/// A counter's points on process `pid`, (ts ns, args).
fn counter<'a>(events: &'a [Value], pid: u64, name: &str) -> Vec<(i64, &'a Value)> {
    events
        .iter()
        .filter(|e| e["ph"] == "C" && e["pid"] == pid && e["name"] == name)
        .map(|e| (ns(&e["ts"]), &e["args"]))
        .collect()
}

#[test]
fn a_recorded_run_maps_onto_tracks_slices_instants_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let trace = record_faulty_run(dir.path());
    let out = dir.path().join("run.json");
    let timeline = export(&[&trace], &out, &[]);
    let events = events(&timeline);
    let (_, records) = records_of(&trace);
    assert!(records.iter().any(|r| r.meta.outcome == Outcome::HttpError));
    assert!(records
        .iter()
        .any(|r| r.meta.outcome == Outcome::StreamError));
    let instants = check_requests(events, 1, &records, 0);
    let chunks: usize = records.iter().map(|r| r.chunks.len()).sum();
    assert_eq!(
        instants, chunks,
        "every chunk has its instant under the bound"
    );
    assert_eq!(timeline["otherData"]["chunk_events"], chunks);
    assert_eq!(timeline["otherData"]["chunk_events_dropped"], 0);
    let process = on_track(events, "M", 1, 0);
    assert_eq!(process[0]["args"]["name"], "run.tt");

    // In flight: never above the concurrency, back to zero at the end.
    let in_flight = counter(events, 1, "requests in flight");
    let levels: Vec<u64> = in_flight
        .iter()
        .map(|(_, a)| a["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(levels.iter().max(), Some(&3));
    assert_eq!(levels.last(), Some(&0));
    assert!(in_flight.windows(2).all(|w| w[0].0 < w[1].0));

    // Throughput: per-second rates over 100 ms bins add back up to the output chunks and
    // their tokens.
    let throughput = counter(events, 1, "output throughput");
    let total = |key: &str| -> f64 {
        throughput
            .iter()
            .map(|(_, a)| a[key].as_f64().unwrap() * 0.1)
            .sum()
    };
    let output: Vec<_> = records
        .iter()
        .flat_map(|r| &r.chunks)
        .filter(|c| c.is_output())
        .collect();
    let tokens: u32 = output.iter().map(|c| c.tokens.unwrap_or(0)).sum();
    assert!((total("chunks_per_s") - output.len() as f64).abs() < 1e-6);
    assert!((total("tokens_per_s") - f64::from(tokens)).abs() < 1e-6);
    assert!(throughput.iter().all(|(ts, _)| ts % 100_000_000 == 0));
}

#[test]
fn chunk_instants_are_bounded_by_whole_requests_and_the_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let trace = record_faulty_run(dir.path());
    let out = dir.path().join("bounded.json");
    let timeline = export(
        &[&trace],
        &out,
        &["--max-chunk-events", "50", "--bin-ms", "250"],
    );
    let events = events(&timeline);
    let (_, records) = records_of(&trace);
    let instants = check_requests(events, 1, &records, 0);
    let chunks: usize = records.iter().map(|r| r.chunks.len()).sum();
    let meta = &timeline["otherData"];
    assert!(instants <= 50 && instants > 0, "{instants}");
    assert_eq!(meta["max_chunk_events"], 50);
    assert_eq!(meta["chunk_events"], instants);
    assert_eq!(meta["chunk_events_dropped"], chunks - instants);
    let without = records
        .iter()
        .filter(|r| !r.chunks.is_empty())
        .filter(|r| on_track(events, "i", 1, r.meta.id + 1).is_empty())
        .count();
    assert_eq!(meta["requests_without_chunk_events"], without);
    assert_eq!(meta["throughput_bin_ms"], 250.0);
    let throughput = counter(events, 1, "output throughput");
    assert!(throughput.iter().all(|(ts, _)| ts % 250_000_000 == 0));
}

#[test]
fn golden_traces_share_a_wall_clock_time_line() {
    let dir = tempfile::tempdir().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let traces = [
        golden.join("finished.trace"),
        golden.join("killed-1.2.trace"),
    ];
    let paths: Vec<&Path> = traces.iter().map(PathBuf::as_path).collect();
    let out = dir.path().join("golden.json");
    let timeline = export(&paths, &out, &["--wall-clock"]);
    let events = events(&timeline);
    let meta = timeline["otherData"]["traces"].as_array().unwrap();
    let mut starts = BTreeMap::new();
    for (i, trace) in traces.iter().enumerate() {
        let pid = i as u64 + 1;
        let (reader, records) = records_of(trace);
        let t = &meta[i];
        assert_eq!(t["pid"], pid);
        let start = reader.header().anchor.realtime_ns as i64 + origin(&records);
        assert_eq!(t["origin_realtime_ns"], start);
        starts.insert(pid, start);
        let shift = t["offset_ns"].as_i64().unwrap();
        check_requests(events, pid, &records, shift);
        let name = &on_track(events, "M", pid, 0)[0]["args"]["name"];
        assert_eq!(name, trace.file_name().unwrap().to_str().unwrap());
    }
    let earliest = *starts.values().min().unwrap();
    for (i, start) in starts.values().enumerate() {
        assert_eq!(
            meta[i]["offset_ns"],
            start - earliest,
            "offset of trace {i}"
        );
    }
    let interrupted: Vec<_> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == 2 && e["args"]["outcome"] == "interrupted")
        .collect();
    let name = interrupted.last().unwrap()["name"].as_str().unwrap();
    assert!(name.ends_with(" (interrupted)"), "{name}");
}

#[test]
fn refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let trace = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/finished.trace");
    let out = dir.path().join("t.json");
    std::fs::write(&out, b"keep me").unwrap();
    common::refused_without_force(
        tokentrace()
            .args(["export", "perfetto"])
            .arg(&trace)
            .arg("-o")
            .arg(&out),
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    let timeline = export(&[&trace], &out, &["--force"]);
    assert!(timeline["traceEvents"].as_array().unwrap().len() > 10);
    assert!(!dir.path().join("t.json.partial").exists());
}
