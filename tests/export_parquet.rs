//! `tokentrace export parquet` end to end: traces recorded against the simulator (failures and
//! reasoning included) and the golden traces are exported, then read back with DuckDB and
//! pyarrow from PyPI. Every per-request value must equal what `analyze --format csv` prints
//! for the same request, and every chunk row the trace's chunk.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::python_tools::{self, Python};
use common::recording::{fast_sim, record_ok, sim};
use common::{records_of, stdout_of, tokentrace};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use tokentrace_format::{Outcome, RequestRecord};
use tokentrace_sim::{FaultConfig, SimConfig};

/// Reads both files with pyarrow (schema) and DuckDB (rows), runs the DuckDB query of
/// docs/EXPORT.md, and prints it all as one JSON object.
const DUMP: &str = r#"
import json, sys
import duckdb, pyarrow.parquet as pq
d = sys.argv[1]
out = {"schema": {}, "tables": {}}
con = duckdb.connect()
for name in ("requests", "chunks"):
    path = f"{d}/{name}.parquet"
    out["schema"][name] = [[f.name, str(f.type), f.nullable] for f in pq.read_schema(path)]
    cur = con.execute("SELECT * FROM read_parquet(?)", [path])
    columns = [c[0] for c in cur.description]
    out["tables"][name] = [dict(zip(columns, row)) for row in cur.fetchall()]
query = open(sys.argv[2]).read().replace("DIR", d)
out["example"] = [list(r) for r in con.execute(query).fetchall()]
print(json.dumps(out))
"#;

/// The example query of docs/EXPORT.md, with `DIR` for the export directory.
const EXAMPLE: &str = "SELECT r.trace, r.outcome, count(*) AS requests,
       quantile_cont((r.first_output_ns - r.send_ns) / 1e6, 0.5) AS ttft_p50_ms,
       sum(coalesce(c.chunks, 0)) AS chunks
FROM 'DIR/requests.parquet' r
LEFT JOIN (SELECT trace_index, id, count(*) AS chunks
           FROM 'DIR/chunks.parquet' GROUP BY ALL) c USING (trace_index, id)
GROUP BY ALL ORDER BY ALL";

/// Columns of requests.parquet that `analyze --format csv` does not print.
const EXTRA_REQUEST_COLUMNS: &[&str] = &[
    "trace_index",
    "trace_path",
    "run_id",
    "model",
    "anchor_realtime_ns",
    "labels",
    "protocol",
    "retries",
    "intended_ns",
    "send_ns",
    "headers_ns",
    "first_output_ns",
    "first_content_ns",
    "last_content_ns",
    "end_ns",
    "usage_prompt_tokens",
    "usage_completion_tokens",
    "usage_reasoning_tokens",
    "usage_cached_tokens",
    "planned_input_tokens",
    "chunks",
];

/// The export read back.
struct Dump {
    /// Column name → (pyarrow type, nullable), per file.
    schema: BTreeMap<String, BTreeMap<String, (String, bool)>>,
    requests: Vec<Map<String, Value>>,
    chunks: Vec<Map<String, Value>>,
    example: Vec<Value>,
}

fn dump(python: &Python, dir: &Path) -> Dump {
    let work = tempfile::tempdir().unwrap();
    let query = work.path().join("query.sql");
    std::fs::write(&query, EXAMPLE).unwrap();
    let text = python.run(DUMP, &[dir.as_os_str(), query.as_os_str()]);
    let v: Value = serde_json::from_str(&text).unwrap();
    let rows = |name: &str| -> Vec<Map<String, Value>> {
        let table = v["tables"][name].as_array().unwrap();
        table
            .iter()
            .map(|r| r.as_object().unwrap().clone())
            .collect()
    };
    let schema = v["schema"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(file, fields)| {
            let fields = fields.as_array().unwrap().iter().map(|f| {
                let kind = f[1].as_str().unwrap().to_string();
                (
                    f[0].as_str().unwrap().to_string(),
                    (kind, f[2].as_bool().unwrap()),
                )
            });
            (file.clone(), fields.collect())
        })
        .collect();
    Dump {
        schema,
        requests: rows("requests"),
        chunks: rows("chunks"),
        example: v["example"].as_array().unwrap().clone(),
    }
}

/// A simulator run with reasoning, HTTP 500s and resets mid-stream, and warmup requests.
fn record_faulty_run(dir: &Path, name: &str, requests: &str, label: &str) -> PathBuf {
    let server = sim(SimConfig {
        reasoning_tokens: 4,
        faults: FaultConfig {
            http_500_every: 5,
            reset_every: 7,
            ..FaultConfig::default()
        },
        ..fast_sim()
    });
    let out = dir.join(name);
    let args = [
        "--requests",
        requests,
        "--warmup",
        "2",
        "--concurrency",
        "3",
        "--input-tokens",
        "64",
        "--max-tokens",
        "12",
        "--label",
        label,
    ];
    let (_, records) = record_ok(&server.base_url(), &out, &args);
    assert!(records.iter().any(|r| r.meta.outcome == Outcome::HttpError));
    assert!(records
        .iter()
        .any(|r| r.meta.outcome == Outcome::StreamError));
    out
}

/// `analyze TRACES… --format csv ARGS…` as (header, rows).
fn analyze_csv(traces: &[&Path], args: &[&str]) -> (Vec<String>, Vec<Vec<String>>) {
    let out = stdout_of(
        tokentrace()
            .arg("analyze")
            .args(traces)
            .args(["--format", "csv"])
            .args(args),
    );
    let mut rows = parse_csv(&String::from_utf8(out).unwrap());
    let header = rows.remove(0);
    (header, rows)
}

/// RFC 4180 fields, as `analyze --format csv` quotes them.
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field) = (Vec::new(), Vec::new(), String::new());
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(row.is_empty() && field.is_empty(), "CSV ends mid-row");
    rows
}

/// `export parquet TRACES… -o DIR ARGS…`, asserted to succeed.
fn export(traces: &[&Path], dir: &Path, args: &[&str]) {
    stdout_of(
        tokentrace()
            .args(["export", "parquet"])
            .args(traces)
            .arg("-o")
            .arg(dir)
            .args(args),
    );
}

/// Checks that CSV cell `csv` and Parquet value `value` of a column of type `kind` agree:
/// integers exactly, floats within 1e-12 relative, empty cells as nulls.
fn assert_same(what: &str, kind: &str, csv: &str, value: &Value) {
    if csv.is_empty() {
        let empty = value.is_null() || value.as_str() == Some("");
        assert!(empty, "{what}: CSV is empty, Parquet holds {value}");
        return;
    }
    match kind {
        "int64" | "int32" => {
            assert_eq!(value.as_i64(), Some(csv.parse::<i64>().unwrap()), "{what}")
        }
        "double" => {
            let (a, b) = (csv.parse::<f64>().unwrap(), value.as_f64().unwrap());
            assert!(
                (a - b).abs() <= 1e-12 * a.abs().max(b.abs()),
                "{what}: CSV {a} != Parquet {b}"
            );
        }
        "bool" => assert_eq!(
            value.as_bool().map(|b| b.to_string()).unwrap(),
            csv,
            "{what}"
        ),
        "string" => assert_eq!(value.as_str(), Some(csv), "{what}"),
        other => panic!("{what}: unexpected column type {other}"),
    }
}

/// Exports `traces` under `args`, reads the dataset back, and checks it against `analyze`'s
/// CSV and against the traces themselves. Returns what was read.
fn check_export(python: &Python, traces: &[&Path], args: &[&str]) -> Dump {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dataset");
    export(traces, &out, args);
    let d = dump(python, &out);
    let (header, rows) = analyze_csv(traces, args);
    let schema = &d.schema["requests"];

    // The same columns as the CSV, plus the documented extras: no metric is missing.
    let csv_columns: BTreeSet<&str> = header.iter().map(String::as_str).collect();
    let extra: BTreeSet<&str> = EXTRA_REQUEST_COLUMNS.iter().copied().collect();
    let parquet_columns: BTreeSet<&str> = schema.keys().map(String::as_str).collect();
    assert_eq!(
        parquet_columns,
        csv_columns.union(&extra).copied().collect(),
        "requests.parquet columns"
    );
    for (name, (kind, _)) in schema {
        let allowed: &[&str] = match name.as_str() {
            n if n.ends_with("_ns") || n == "id" || n.starts_with("usage_") => &["int64"],
            _ => &["int64", "int32", "double", "bool", "string"],
        };
        assert!(allowed.contains(&kind.as_str()), "{name}: {kind}");
    }

    // Every request of the CSV, value for value.
    assert_eq!(d.requests.len(), rows.len());
    let mut by_key: BTreeMap<(String, u64), &Map<String, Value>> = BTreeMap::new();
    for r in &d.requests {
        let key = (
            r["trace"].as_str().unwrap().to_string(),
            r["id"].as_u64().unwrap(),
        );
        assert!(by_key.insert(key, r).is_none(), "duplicate request row");
    }
    let mut compared = 0;
    for row in &rows {
        let key = (row[0].clone(), row[1].parse::<u64>().unwrap());
        let parquet = by_key
            .get(&key)
            .unwrap_or_else(|| panic!("no row for {key:?}"));
        for (column, cell) in header.iter().zip(row) {
            let what = format!("{key:?} {column}");
            assert_same(&what, &schema[column].0, cell, &parquet[column]);
            compared += 1;
        }
    }
    assert!(compared > 10 * rows.len());

    // The facts columns and every chunk, against the traces.
    let mut chunks_by_key: BTreeMap<(u64, u64), Vec<&Map<String, Value>>> = BTreeMap::new();
    for c in &d.chunks {
        let key = (
            c["trace_index"].as_u64().unwrap(),
            c["id"].as_u64().unwrap(),
        );
        chunks_by_key.entry(key).or_default().push(c);
    }
    let mut total_chunks = 0;
    for (index, trace) in traces.iter().enumerate() {
        let (reader, records) = records_of(trace);
        let label = trace.file_name().unwrap().to_str().unwrap();
        for record in &records {
            let key = (label.to_string(), record.meta.id);
            let row = by_key[&key];
            assert_eq!(row["trace_index"], index);
            assert_eq!(row["trace_path"], trace.to_str().unwrap());
            assert_eq!(row["model"], reader.manifest().model.as_str());
            assert_eq!(
                row["anchor_realtime_ns"],
                reader.header().anchor.realtime_ns
            );
            let labels: Value = serde_json::from_str(row["labels"].as_str().unwrap()).unwrap();
            assert_eq!(
                labels,
                serde_json::to_value(&reader.manifest().labels).unwrap()
            );
            let run_id = reader
                .manifest()
                .request_id_header
                .as_ref()
                .map(|h| format!("{:016x}", h.run_prefix));
            assert_eq!(row["run_id"].as_str(), run_id.as_deref());
            check_facts(row, record);
            let mut got = chunks_by_key
                .remove(&(index as u64, record.meta.id))
                .unwrap_or_default();
            got.sort_by_key(|c| c["chunk_index"].as_u64().unwrap());
            check_chunks(&got, record, index, label);
            total_chunks += record.chunks.len();
        }
    }
    assert!(chunks_by_key.is_empty(), "chunk rows of no request");
    assert_eq!(d.chunks.len(), total_chunks);
    d
}

/// The request's times, usage and counts as the trace holds them.
fn check_facts(row: &Map<String, Value>, r: &RequestRecord) {
    let m = &r.meta;
    let id = m.id;
    let opt = |v: Option<u64>| v.map_or(Value::Null, Value::from);
    let tokens = |v: Option<u32>| v.map_or(Value::Null, Value::from);
    assert_eq!(row["intended_ns"], m.intended_ns, "{id}");
    assert_eq!(row["send_ns"], m.send_ns, "{id}");
    assert_eq!(row["headers_ns"], opt(m.headers_ns), "{id}");
    assert_eq!(row["end_ns"], m.end_ns, "{id}");
    let first_output = r
        .chunks
        .iter()
        .find(|c| c.is_output())
        .map(|c| c.arrival_ns);
    assert_eq!(row["first_output_ns"], opt(first_output), "{id}");
    let mut content = r
        .chunks
        .iter()
        .filter(|c| c.channel.is_content_text(c.text_len));
    assert_eq!(
        row["first_content_ns"],
        opt(content.clone().next().map(|c| c.arrival_ns))
    );
    assert_eq!(
        row["last_content_ns"],
        opt(content.next_back().map(|c| c.arrival_ns))
    );
    assert_eq!(
        row["usage_prompt_tokens"],
        tokens(m.usage.prompt_tokens),
        "{id}"
    );
    assert_eq!(
        row["usage_completion_tokens"],
        tokens(m.usage.completion_tokens)
    );
    assert_eq!(
        row["usage_reasoning_tokens"],
        tokens(m.usage.reasoning_tokens)
    );
    assert_eq!(row["usage_cached_tokens"], tokens(m.usage.cached_tokens));
    assert_eq!(row["planned_input_tokens"], tokens(m.planned_input_tokens));
    assert_eq!(row["retries"], m.retries);
    assert_eq!(row["chunks"], r.chunks.len());
    assert_eq!(row["http_status"], m.http_status);
    assert_eq!(row["outcome"], m.outcome.name());
}

/// A request's chunk rows, in order, against its chunks.
fn check_chunks(got: &[&Map<String, Value>], r: &RequestRecord, index: usize, label: &str) {
    assert_eq!(got.len(), r.chunks.len(), "request {}", r.meta.id);
    for (i, (row, c)) in got.iter().zip(&r.chunks).enumerate() {
        let what = format!("request {} chunk {i}", r.meta.id);
        assert_eq!(row["chunk_index"], i, "{what}");
        assert_eq!(row["arrival_ns"], c.arrival_ns, "{what}");
        assert_eq!(row["read_index"], c.read_index, "{what}");
        assert_eq!(row["channel"], c.channel.name(), "{what}");
        assert_eq!(row["bytes"], c.bytes, "{what}");
        assert_eq!(row["text_len"], c.text_len, "{what}");
        assert_eq!(
            row["tokens"],
            c.tokens.map_or(Value::Null, Value::from),
            "{what}"
        );
        assert_eq!(row["trace_index"], index, "{what}");
        assert_eq!(row["trace"], label, "{what}");
    }
}

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

#[test]
fn a_recorded_run_matches_analyze_and_its_trace() {
    let python = python_tools::python();
    let dir = tempfile::tempdir().unwrap();
    let trace = record_faulty_run(dir.path(), "faulty.tt", "24", "engine=sim");
    for args in [
        &["--protocol", "tokentrace-v1"][..],
        &["--protocol", "aiperf", "--include-warmup"][..],
        &["--protocol", "capacity-v4-reasoning"][..],
    ] {
        let d = check_export(&python, &[&trace], args);
        let counted = d.requests.iter().filter(|r| r["counted"] == true).count();
        let ok_measured = d
            .requests
            .iter()
            .filter(|r| r["outcome"] == "ok" && (r["phase"] == "measured" || args.len() > 2))
            .count();
        assert_eq!(counted, ok_measured, "{args:?}");
        let protocol = d.requests[0]["protocol"].as_str().unwrap();
        assert!(protocol.starts_with(&format!("{}@", args[1])), "{protocol}");
        let reasoning = d
            .requests
            .iter()
            .filter(|r| r["usage_reasoning_tokens"] == 4);
        assert!(reasoning.count() > 10);
        let types = &d.schema["chunks"];
        assert_eq!(types["arrival_ns"], ("int64".into(), false));
        assert_eq!(types["tokens"], ("int64".into(), true));
        assert_eq!(types["channel"], ("string".into(), false));
    }
}

#[test]
fn two_traces_share_one_dataset_told_apart_by_the_run_columns() {
    let python = python_tools::python();
    let dir = tempfile::tempdir().unwrap();
    let a = record_faulty_run(dir.path(), "a.tt", "8", "gpu=A");
    let b = record_faulty_run(dir.path(), "b.tt", "11", "gpu=B");
    let d = check_export(&python, &[&a, &b], &[]);
    let per_trace = |i: u64| d.requests.iter().filter(|r| r["trace_index"] == i).count();
    assert_eq!((per_trace(0), per_trace(1)), (10, 13));
    let run_ids: BTreeSet<&str> = d
        .requests
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(run_ids.len(), 2, "each run has its own id");
    let gpus: BTreeSet<String> = d
        .requests
        .iter()
        .map(|r| {
            let labels: Value = serde_json::from_str(r["labels"].as_str().unwrap()).unwrap();
            format!(
                "{}:{}",
                r["trace"].as_str().unwrap(),
                labels["gpu"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(gpus, BTreeSet::from(["a.tt:A".into(), "b.tt:B".into()]));
    // The documented query: per trace and outcome, requests and chunks add up to the traces.
    let mut expected: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for trace in [&a, &b] {
        let label = trace.file_name().unwrap().to_str().unwrap().to_string();
        for r in records_of(trace).1 {
            let e = expected
                .entry((label.clone(), r.meta.outcome.name().into()))
                .or_default();
            e.0 += 1;
            e.1 += r.chunks.len() as u64;
        }
    }
    let got: BTreeMap<(String, String), (u64, u64)> = d
        .example
        .iter()
        .map(|row| {
            let key = (
                row[0].as_str().unwrap().into(),
                row[1].as_str().unwrap().into(),
            );
            (key, (row[2].as_u64().unwrap(), row[4].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn golden_traces_export_whole_interrupted_requests_included() {
    let python = python_tools::python();
    let (finished, killed) = (golden("finished.trace"), golden("killed-1.2.trace"));
    let d = check_export(&python, &[&finished, &killed], &["--protocol", "vllm"]);
    let interrupted: Vec<_> = d
        .requests
        .iter()
        .filter(|r| r["outcome"] == "interrupted")
        .collect();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0]["chunks"], 24);
    assert!(d
        .requests
        .iter()
        .all(|r| r["run_id"].is_null() || r["run_id"].is_string()));
}

#[test]
fn refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dataset");
    let trace = golden("finished.trace");
    export(&[&trace], &out, &[]);
    let files = ["requests.parquet", "chunks.parquet"].map(|f| out.join(f));
    let before = files.clone().map(|f| std::fs::read(f).unwrap());
    for only in [None, Some(0), Some(1)] {
        // Either file alone is enough for a refusal.
        if let Some(keep) = only {
            std::fs::remove_file(&files[1 - keep]).unwrap();
        }
        let stderr = common::refused_without_force(
            tokentrace()
                .args(["export", "parquet"])
                .arg(&trace)
                .arg("-o")
                .arg(&out),
        );
        assert!(stderr.contains("exists"), "{stderr}");
        if let Some(keep) = only {
            assert_eq!(std::fs::read(&files[keep]).unwrap(), before[keep]);
            assert!(!files[1 - keep].exists());
            export(&[&trace], &out, &["--force"]);
        } else {
            for (f, b) in files.iter().zip(&before) {
                assert_eq!(&std::fs::read(f).unwrap(), b, "{} was changed", f.display());
            }
        }
    }
    export(&[&trace], &out, &["--force", "--protocol", "sglang"]);
    assert!(files.iter().all(|f| f.exists()));
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
