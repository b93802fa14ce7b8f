//! The tables made for people, pinned: `analyze` under every built-in protocol at a narrow and
//! a wide terminal, failures grouped by reason, and the table of a capacity search. Values are
//! those of the synthetic trace (`tests/synthetic`), checked by hand in `analyze_synthetic`;
//! these snapshots pin the layout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;
mod synthetic;

use common::{stdout_of, tokentrace};
use std::path::{Path, PathBuf};
use synthetic::{chunk, request, write_trace, write_trace_of, MS};
use tokentrace_analyzer::protocol::builtin;
use tokentrace_capacity::manifest::{SearchManifest, MANIFEST_KIND};
use tokentrace_capacity::{SearchSettings, Workload};
use tokentrace_format::{
    Channel, ClockAnchor, Header, Manifest, Phase, RequestRecord, RunEnd, TraceWriter, Usage,
    WriterConfig,
};

/// `tokentrace ARGS` on a terminal `columns` wide, its standard output.
fn run_at(columns: usize, args: &[&str], path: &Path) -> String {
    let mut cmd = tokentrace();
    cmd.env("COLUMNS", columns.to_string()).args(args).arg(path);
    String::from_utf8(stdout_of(&mut cmd)).unwrap()
}

/// No line is wider than `width` characters.
#[track_caller]
fn fits(text: &str, width: usize) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= width,
            "{} > {width}: {line}\n{text}",
            line.chars().count()
        );
    }
}

#[test]
fn every_builtin_protocol_is_pinned_narrow_and_wide() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path(), "run.tt");
    let names: Vec<String> = builtin::all()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    // A new protocol gets its snapshots from the loop below; this list says it was seen.
    assert_eq!(names, common::BUILTIN_PROTOCOLS);
    for name in &names {
        for width in [80, 160] {
            let args = ["analyze", "--protocol", name, "--slo", "ttft:p95<500ms"];
            let out = run_at(width, &args, &trace);
            fits(&out, width);
            insta::assert_snapshot!(format!("{name}_{width}"), out);
        }
    }
}

#[test]
fn failures_are_grouped_by_reason() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace_of(dir.path(), "run.tt", synthetic::requests_with_failures());
    let out = run_at(100, &["analyze", "--protocol", "capacity-v3"], &trace);
    fits(&out, 100);
    // Two 503s share one row; the timeout's error is its first line, spaces collapsed.
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let row = |cells: &[&str]| rows.iter().any(|r| r == cells);
    assert!(row(&["2", "http_error", "503", "overloaded"]), "{out}");
    assert!(
        row(&["1", "timeout", "200", "request", "timed", "out", "after", "30", "ms"]),
        "{out}"
    );
    insta::assert_snapshot!("failures_by_reason", out);
}

#[test]
fn groups_keep_a_title_each() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_trace(dir.path(), "a.tt");
    let b = write_trace(dir.path(), "b.tt");
    let mut cmd = tokentrace();
    cmd.env("COLUMNS", "100")
        .args(["analyze", "--group-by", "trace", "--protocol", "vllm"])
        .args([&a, &b]);
    let out = String::from_utf8(stdout_of(&mut cmd)).unwrap();
    fits(&out, 100);
    assert!(out.starts_with("[a.tt] protocol vllm v"), "{out}");
    assert!(out.contains("\n\n[b.tt] protocol vllm v"), "{out}");
}

/// A trial whose 4 measured requests have their first output `ttft_ms` after their send and
/// 4 output tokens 10 ms apart.
fn trial(dir: &Path, workload: &Workload, concurrency: u32, k: u32, ttft_ms: u64) {
    let path = dir.join(SearchManifest::trial_path(workload, concurrency, k));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let header = Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 0,
            realtime_ns: synthetic::ANCHOR_REALTIME_NS,
        },
        host: "testhost".into(),
        shard: 0,
    };
    let writer =
        TraceWriter::create(&path, header, &Manifest::default(), WriterConfig::default()).unwrap();
    let sender = writer.sender();
    for id in 0..4u64 {
        let send = 100 * id;
        let first = send + ttft_ms;
        let mut chunks: Vec<_> = (0..4)
            .map(|i| chunk(first + 10 * i, Channel::Content, 4, None))
            .collect();
        chunks.push(chunk(first + 31, Channel::Usage, 0, None));
        chunks.push(chunk(first + 32, Channel::Done, 0, None));
        let mut r: RequestRecord = request(id, Phase::Measured, send, send, first + 32, chunks);
        r.meta.usage = Usage {
            prompt_tokens: Some(workload.isl),
            completion_tokens: Some(workload.osl),
            ..Usage::default()
        };
        r.meta.finish_reason = Some("length".into());
        r.meta.prompt_hash = 1000 + id;
        r.meta.output_hash = 2000 + id;
        sender.send(r).unwrap();
    }
    drop(sender);
    let end = RunEnd {
        end_ns: 1_000 * MS,
        reason: "completed".into(),
        ..RunEnd::default()
    };
    writer.finish(end).unwrap();
}

/// A recorded search of one workload under `ttft:p95<100ms`, two trials per level: levels
/// 1 and 2 pass (TTFT 20 and 40 ms), 4 fails (250 ms), 3 passes its first trial and fails
/// its second (120 ms): the bracket is 2 / 3.
fn search(dir: &Path) -> PathBuf {
    let workload = Workload { isl: 100, osl: 4 };
    for (concurrency, ttfts) in [
        (1, [20, 20]),
        (2, [40, 40]),
        (4, [250, 250]),
        (3, [60, 120]),
    ] {
        for (k, ttft) in (1..).zip(ttfts) {
            trial(dir, &workload, concurrency, k, ttft);
        }
    }
    let manifest = SearchManifest {
        kind: MANIFEST_KIND.into(),
        schema_version: 1,
        tool_version: "0.1.0".into(),
        argv: vec![],
        base_url: "http://127.0.0.1:9/v1".into(),
        model: "sim-model".into(),
        workloads: vec![workload],
        slos: vec!["ttft:p95<100ms".into()],
        protocol: "aiperf".into(),
        temperature: 0.0,
        settings: SearchSettings {
            min_concurrency: 1,
            max_concurrency: 8,
            trials_per_level: 2,
            warmups_per_trial: 0,
            measured_requests_per_trial: 4,
            complete_levels: true,
            time_budget: None,
        },
        cache_policy: "not flushed".into(),
        experiment: serde_json::Map::new(),
        server_info: None,
        trials: vec![],
    };
    manifest.save(dir).unwrap();
    dir.to_path_buf()
}

#[test]
fn a_capacity_search_prints_a_table_and_its_json_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = search(tmp.path());
    let out = run_at(100, &["analyze", "--capacity"], &dir);
    fits(&out, 100);
    insta::assert_snapshot!("capacity", out);
    let narrow = run_at(80, &["analyze", "--format", "table", "--capacity"], &dir);
    fits(&narrow, 80);
    // Under other SLOs the values stay, the verdicts follow.
    let loose = run_at(
        100,
        &["analyze", "--slo", "ttft:p95<1s", "--capacity"],
        &dir,
    );
    assert!(
        loose.contains("maximum passing concurrency 4, first failing -"),
        "{loose}"
    );
    // JSON is the report, as `capacity --reanalyze` prints it.
    let json = run_at(100, &["analyze", "--format", "json", "--capacity"], &dir);
    let reanalyzed = run_at(100, &["capacity", "--reanalyze"], &dir);
    assert_eq!(json, reanalyzed);
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["workloads"][0]["maximum_passing_concurrency"], 2);
    assert_eq!(report["workloads"][0]["first_failing_concurrency"], 3);
    let csv = tokentrace()
        .args(["analyze", "--format", "csv", "--capacity"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!csv.status.success());
    assert!(String::from_utf8_lossy(&csv.stderr).contains("--format table|json"));
}
