//! Analyzer throughput and memory: a trace of N requests × C chunks (default 1,000,000 × 100)
//! is generated once, then analyzed under a protocol in a fresh child process per run, which
//! reports its time and peak resident memory (VmHWM, Linux).
//!
//! `cargo bench --bench analyzer -- [--requests N] [--chunks C] [--runs R] [--protocol P] [--threads T]`
//! (`--protocol decode-only` times the format's block decoding alone, for comparison;
//! `--html` times `tokentrace report`'s page instead of the table and prints its size.)
//! The trace is cached in the target directory and reused while N and C stay the same.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)] // criterion generates undocumented items; a bench may fail loudly

use std::path::{Path, PathBuf};
use std::time::Instant;
use tokentrace_analyzer::analysis::{self, Analysis, AnalyzeOptions};
use tokentrace_analyzer::dataset::Dataset;
use tokentrace_analyzer::facts::FactsOptions;
use tokentrace_analyzer::protocol::builtin;
use tokentrace_analyzer::report::table;
use tokentrace_format::{
    Channel, ChunkRecord, ClockAnchor, Header, Manifest, Outcome, Phase, RequestMeta,
    RequestRecord, RunEnd, TraceWriter, Usage, WriterConfig,
};

struct Settings {
    requests: u64,
    chunks: u64,
    runs: usize,
    protocol: String,
    threads: usize,
    html: bool,
}

fn settings() -> Settings {
    let mut s = Settings {
        requests: 1_000_000,
        chunks: 100,
        runs: 3,
        protocol: "capacity-v3".into(),
        threads: 1,
        html: false,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        if args[i] == "--html" {
            s.html = true;
            i += 1;
            continue;
        }
        match args[i].as_str() {
            "--requests" => s.requests = value.parse().unwrap_or(s.requests),
            "--chunks" => s.chunks = value.parse().unwrap_or(s.chunks),
            "--runs" => s.runs = value.parse().unwrap_or(s.runs),
            "--protocol" => s.protocol = value,
            "--threads" => s.threads = value.parse().unwrap_or(s.threads),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    s
}

/// A realistic request: role chunk, C-3 content chunks ~10 ms apart with jitter, a finish
/// chunk, a usage chunk and [DONE] (so C events in all), usage reported.
fn request(id: u64, chunks: u64) -> RequestRecord {
    let send = id * 1_000_000; // one request per ms
    let mut t = send + 40_000_000 + (id * 7919 % 20_000_000);
    let mut records = Vec::with_capacity(chunks as usize);
    for c in 0..chunks {
        t += 8_000_000 + (id.wrapping_mul(31).wrapping_add(c * 17) % 4_000_000);
        let channel = match c {
            0 => Channel::Role,
            _ if c + 3 == chunks => Channel::Finish,
            _ if c + 2 == chunks => Channel::Usage,
            _ if c + 1 == chunks => Channel::Done,
            _ => Channel::Content,
        };
        let text_len = if channel == Channel::Content { 4 } else { 0 };
        records.push(ChunkRecord {
            arrival_ns: t,
            read_index: c as u32,
            bytes: 120,
            channel,
            text_len,
            tokens: None,
            text: None,
        });
    }
    RequestRecord {
        meta: RequestMeta {
            id,
            phase: Phase::Measured,
            trial: 0,
            intended_ns: send,
            send_ns: send + 20_000,
            headers_ns: Some(send + 5_000_000),
            end_ns: t + 100_000,
            http_status: 200,
            outcome: Outcome::Ok,
            error: None,
            usage: Usage {
                prompt_tokens: Some(1000),
                completion_tokens: Some(chunks as u32),
                reasoning_tokens: None,
                cached_tokens: Some(512),
            },
            finish_reason: Some("stop".into()),
            prompt_hash: id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            prompt_bytes: 4000,
            output_hash: id,
            output_bytes: (chunks * 4) as u32,
            planned_input_tokens: Some(1000),
            response_headers: vec![],
            retries: 0,
        },
        chunks: records,
    }
}

fn generate(path: &Path, s: &Settings) {
    if path.exists() {
        return;
    }
    let started = Instant::now();
    let tmp = path.with_extension("partial");
    let header = Header {
        major: 1,
        minor: 0,
        anchor: ClockAnchor {
            mono_ns: 0,
            realtime_ns: 1_788_580_000_000_000_000,
        },
        host: "bench".into(),
        shard: 0,
    };
    let manifest = Manifest {
        model: "bench-model".into(),
        ..Manifest::default()
    };
    let writer = TraceWriter::create(&tmp, header, &manifest, WriterConfig::default())
        .expect("create trace");
    let sender = writer.sender();
    for id in 0..s.requests {
        sender.send(request(id, s.chunks)).expect("send");
    }
    drop(sender);
    let stats = writer
        .finish(RunEnd {
            end_ns: s.requests * 1_000_000 + 2_000_000_000,
            reason: "completed".into(),
            ..RunEnd::default()
        })
        .expect("finish");
    std::fs::rename(&tmp, path).expect("rename");
    eprintln!(
        "generated {} requests, {} chunks, {} bytes ({:.1} B/chunk) in {:.1} s",
        stats.requests,
        stats.chunks,
        stats.file_bytes,
        stats.file_bytes as f64 / stats.chunks.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
}

/// User + system CPU seconds of this process so far (Linux /proc; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesized command name, starting with the state: utime and stime
    // are the 12th and 13th of them (fields 14 and 15 of the line).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Clock ticks are 100 per second on Linux (sysconf(_SC_CLK_TCK)).
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Peak resident set of this process in KiB (Linux /proc; 0 elsewhere).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Decoding alone (the format's share of the work): every block decoded, nothing analyzed.
fn decode_only(trace: &Path) {
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let reader = tokentrace_format::TraceReader::open(trace).expect("open");
    let (mut chunks, mut requests) = (0u64, 0u64);
    for i in 0..reader.block_count() {
        let block = reader.decode_block(i).expect("decode");
        chunks += block.chunks.len() as u64;
        requests += block.requests.len() as u64;
    }
    let total = started.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu_before;
    // Decoding has no separate load phase: the whole time is the "load" figure.
    println!(
        "{total} {total} {chunks} {requests} {} {cpu}",
        peak_rss_kib()
    );
}

/// The measured part: load the facts and summarize under the protocol (what `analyze`
/// prints as its table, or with `html` what `report` writes).
fn child(trace: &Path, protocol: &str, threads: usize, html: bool) {
    let protocol = builtin::find(protocol).expect("protocol");
    let options = AnalyzeOptions::default();
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    let facts = FactsOptions {
        threads,
        keep_gaps: html || analysis::facts_options(&protocol, &options).keep_gaps,
        ..analysis::facts_options(&protocol, &options)
    };
    let dataset = Dataset::load(&[trace.to_path_buf()], facts).expect("load");
    let loaded = started.elapsed().as_secs_f64();
    let analysis = Analysis::new(&protocol, &dataset, &[0], &options);
    let text = if html {
        let runs = [tokentrace_html::Run {
            label: "bench".into(),
            analysis,
        }];
        tokentrace_html::traces_report("bench", &runs, None).expect("report")
    } else {
        table::render(&analysis, "")
    };
    let total = started.elapsed().as_secs_f64();
    std::hint::black_box(&text);
    let cpu = cpu_seconds() - cpu_before;
    let (chunks, requests) = (dataset.chunks(), dataset.requests.len());
    println!(
        "{total} {loaded} {chunks} {requests} {} {cpu} {}",
        peak_rss_kib(),
        text.len()
    );
}

fn main() {
    let s = settings();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-data");
    let trace = dir.join(format!("analyzer-{}x{}.tt", s.requests, s.chunks));
    if let Ok(path) = std::env::var("TOKENTRACE_BENCH_CHILD") {
        if s.protocol == "decode-only" {
            decode_only(Path::new(&path));
        } else {
            child(Path::new(&path), &s.protocol, s.threads, s.html);
        }
        return;
    }
    std::fs::create_dir_all(&dir).expect("bench dir");
    generate(&trace, &s);
    let mut runs: Vec<(f64, f64, u64, u64, u64, f64)> = Vec::new();
    let mut output_bytes = 0.0;
    for _ in 0..s.runs {
        let out = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(std::env::args().skip(1))
            .env("TOKENTRACE_BENCH_CHILD", &trace)
            .output()
            .expect("child");
        let line = String::from_utf8_lossy(&out.stdout);
        let f: Vec<f64> = line
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if f.len() >= 6 {
            runs.push((f[0], f[1], f[2] as u64, f[3] as u64, f[4] as u64, f[5]));
            output_bytes = f.get(6).copied().unwrap_or(0.0);
        } else {
            eprintln!("child failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let Some(&(total, loaded, chunks, requests, _, cpu)) = runs.get(runs.len() / 2) else {
        return;
    };
    let peak = runs.iter().map(|r| r.4).max().unwrap_or(0);
    println!(
        "analyzer/{}{} threads={}: {} requests, {} chunks; median of {} runs: {:.2} s wall ({:.2} s load+facts), {:.2} s CPU; {:.1} M chunks/s wall, {:.1} M chunks/s per CPU-second; peak RSS {:.0} MiB; output {:.0} KiB; all runs: {:?}",
        s.protocol,
        if s.html { " --html" } else { "" },
        s.threads,
        requests,
        chunks,
        runs.len(),
        total,
        loaded,
        cpu,
        chunks as f64 / total / 1e6,
        chunks as f64 / cpu.max(1e-9) / 1e6,
        peak as f64 / 1024.0,
        output_bytes / 1024.0,
        runs.iter().map(|r| format!("{:.2}s", r.0)).collect::<Vec<_>>()
    );
}
