//! AIPerf as a peer column: the same level (concurrency, request count, output tokens, chat
//! API, streaming, usage in every chunk) against a fresh simulator of its own, measured like
//! the recorder. CPU is its whole process tree's (wait4 of `aiperf`, which has reaped its
//! services, plus any orphan this process reaped as subreaper) ÷ events in its raw export;
//! a second run with one wave gives the marginal cost per event, start-up excluded.
//! Timestamp error joins its raw export (`profile_export_raw.jsonl`: per request its
//! `X-Request-ID` and, per SSE message, `perf_ns` from `time.perf_counter_ns()`, which is
//! CLOCK_MONOTONIC on Linux) with the simulator's truth log on that id and the event index.
//!
//! Found at `--aiperf PATH`, else where the conformance suite installs it
//! (`$TOKENTRACE_CONFORMANCE_CACHE` or `~/.cache/tokentrace-conformance`, `venv-aiperf/bin/aiperf`,
//! cl100k_base in `tiktoken-cache` beside it). Every run is bounded by `--aiperf-timeout`.

use crate::accuracy::{load_truth_named, Join};
use crate::procs::run_measured_tree;
use crate::{start_sim, Level, Settings, Side};
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Prompt length AIPerf is asked for (tokens): about the recorder's prompt.
const ISL: u64 = 32;

/// An AIPerf installation.
pub struct Install {
    /// The `aiperf` executable.
    pub exe: PathBuf,
    /// Offline tiktoken cache holding cl100k_base, when found.
    pub tiktoken_cache: Option<PathBuf>,
}

/// Find AIPerf: `explicit`, else the conformance suite's venv. `Err` says where it looked.
pub fn locate(explicit: Option<&Path>) -> Result<Install, String> {
    let exe = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let cache = std::env::var_os("TOKENTRACE_CONFORMANCE_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(".cache/tokentrace-conformance"))
                })
                .ok_or("no HOME")?;
            cache.join("venv-aiperf/bin/aiperf")
        }
    };
    if !exe.is_file() {
        return Err(format!(
            "{} not found (install it with conformance/install.sh or pass --aiperf PATH)",
            exe.display()
        ));
    }
    // <cache>/venv-aiperf/bin/aiperf → <cache>/tiktoken-cache
    let tiktoken_cache = std::env::var_os("TIKTOKEN_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let beside = exe.parent()?.parent()?.parent()?.join("tiktoken-cache");
            beside.is_dir().then_some(beside)
        });
    Ok(Install {
        exe,
        tiktoken_cache,
    })
}

/// AIPerf's figures at one level.
pub struct Peer {
    /// The run with the level's request count (CPU is whole-tree ÷ its events).
    pub side: Side,
    /// (CPU full − CPU one wave) ÷ (events full − events one wave), when both runs worked.
    pub marginal_cpu_ns_per_chunk: Option<f64>,
    /// Wall time of the full run, start-up included (s).
    pub wall_s: f64,
}

/// Run AIPerf at `level` (the full request count, then one wave for the marginal cost).
pub fn run(install: &Install, s: &Settings, level: Level, dir: &Path) -> io::Result<Peer> {
    let requests = crate::requests(s, level);
    let started = std::time::Instant::now();
    let full = run_once(install, s, level, requests, &dir.join("aiperf-full"))?;
    let wall_s = started.elapsed().as_secs_f64();
    let one_wave = level.streams as u64;
    let marginal = if requests > one_wave {
        match run_once(install, s, level, one_wave, &dir.join("aiperf-base")) {
            Ok(base) if full.chunks > base.chunks => {
                Some((full.cpu_ns as f64 - base.cpu_ns as f64) / (full.chunks - base.chunks) as f64)
            }
            Ok(_) => None,
            Err(err) => {
                eprintln!("e2e: aiperf one-wave run failed ({err}); no marginal figure");
                None
            }
        }
    } else {
        None
    };
    Ok(Peer {
        side: full,
        marginal_cpu_ns_per_chunk: marginal,
        wall_s,
    })
}

/// One AIPerf run of `requests` requests against a fresh simulator.
fn run_once(
    install: &Install,
    s: &Settings,
    level: Level,
    requests: u64,
    dir: &Path,
) -> io::Result<Side> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let (sim, truth_path) = start_sim(s, level, dir, "aiperf", None)?;
    let artifacts = dir.join("artifacts");
    let scratch = dir.join("tmp");
    std::fs::create_dir_all(&scratch)?;
    // Concurrency bounds the requests in flight; the rate cap (4× what the closed loop
    // completes) only keeps AIPerf 0.13 out of its "concurrency-burst" mode, whose timing
    // manager polls for a free slot without sleeping and would hold a core for the whole run.
    // `--aiperf-burst` leaves it out: AIPerf as `--concurrency` alone runs it, its documented
    // form, busy poll and all.
    let rate = 4.0 * level.streams as f64 * 1000.0 / (level.max_tokens as f64 * level.step_ms);
    let mut command = Command::new(&install.exe);
    command
        .arg("profile")
        .args(["--model", "sim", "--url", &format!("http://{}", sim.addr)])
        .args(["--endpoint-type", "chat", "--streaming"])
        .args(["--tokenizer", "cl100k_base", "--use-legacy-max-tokens"])
        // Usage in every chunk, as the recorder asks for it, and counted from it (no
        // client-side tokenization of the output, which the recorder does not do either).
        .args(["--use-server-token-count", "--per-chunk-usage"])
        .args(["--extra-inputs", "{\"ignore_eos\": true}"])
        .args(["--request-count", &requests.to_string()])
        .args(["--concurrency", &level.streams.to_string()])
        .args(["--isl", &ISL.to_string()])
        .args(["--osl", &level.max_tokens.to_string()])
        .args([
            "--random-seed",
            "1",
            "--no-server-metrics",
            "--no-gpu-telemetry",
        ])
        .args(["--ui", "none", "--export-level", "raw"])
        .arg("--artifact-dir")
        .arg(&artifacts)
        .env("HF_HUB_OFFLINE", "1")
        .env("TMPDIR", &scratch)
        .env("AIPERF_DATASET_MMAP_BASE_PATH", &scratch)
        .env("AIPERF_DATASET_MMAP_CACHE_ENABLED", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::fs::File::create(dir.join("aiperf.log"))?))
        .stderr(Stdio::from(std::fs::File::create(dir.join("aiperf.err"))?));
    if !s.aiperf_burst {
        command
            .args(["--request-rate", &format!("{rate:.1}")])
            .args(["--arrival-pattern", "constant"]);
    }
    if let Some(cache) = &install.tiktoken_cache {
        command.env("TIKTOKEN_CACHE_DIR", cache);
    }
    let limit = Duration::from_secs(s.aiperf_timeout_s);
    crate::procs::place(&mut command, s.client_cpu(), s.client_nice);
    let reaped = run_measured_tree(command, limit);
    sim.stop()?;
    let reaped = reaped?;
    if reaped.status != 0 {
        return Err(io::Error::other(format!(
            "aiperf exited with status {} (see {})",
            reaped.status,
            dir.join("aiperf.log").display()
        )));
    }
    let raw = find_raw(&artifacts).ok_or_else(|| {
        io::Error::other(format!(
            "no profile_export_raw.jsonl under {}",
            artifacts.display()
        ))
    })?;
    let truth = load_truth_named(&truth_path)?;
    let mut side = Side {
        cpu_ns: reaped.cpu_ns,
        max_rss_bytes: reaped.max_rss_bytes,
        ..Side::default()
    };
    let (mut first, mut last) = (u64::MAX, 0);
    let mut join = Join::default();
    for (id, stamps) in read_raw(&raw)? {
        side.chunks += stamps.len() as u64;
        if let (Some(&f), Some(&l)) = (stamps.first(), stamps.last()) {
            first = first.min(f);
            last = last.max(l);
        }
        join.add_written(truth.get(&id).map(Vec::as_slice), stamps.into_iter());
    }
    side.span_ns = last.saturating_sub(first);
    side.take_join(join);
    Ok(side)
}

/// Per request of a raw export: its `X-Request-ID` and each SSE message's `perf_ns`.
pub fn read_raw(path: &Path) -> io::Result<Vec<(String, Vec<u64>)>> {
    let mut out = Vec::new();
    let file = io::BufReader::new(std::fs::File::open(path)?);
    for line in file.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let record: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?;
        let id = record
            .pointer("/request_headers/X-Request-ID")
            .or_else(|| record.pointer("/metadata/x_request_id"))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string();
        let stamps: Vec<u64> = record
            .get("responses")
            .and_then(|r| r.as_array())
            .map(|responses| {
                responses
                    .iter()
                    .filter_map(|r| r.get("perf_ns").and_then(|v| v.as_u64()))
                    .collect()
            })
            .unwrap_or_default();
        out.push((id, stamps));
    }
    Ok(out)
}

/// Check [`read_raw`] on the AIPerf 0.13 fixture of the import tests, when it is there (run by
/// the `cargo test --benches` self-check).
pub fn self_check() -> io::Result<()> {
    let fixture = Path::new("tests/fixtures/aiperf-0.13-chat/profile_export_raw.jsonl");
    if !fixture.is_file() {
        return Ok(());
    }
    let records = read_raw(fixture)?;
    let Some((id, stamps)) = records.first() else {
        return Err(io::Error::other("empty AIPerf fixture"));
    };
    if id != "10db9c1c-ac6a-4c3a-bcc3-ae09147e08df"
        || stamps.len() != 67
        || stamps.windows(2).any(|w| w[0] > w[1])
    {
        return Err(io::Error::other(format!(
            "AIPerf raw export read wrong: {id}, {} stamps",
            stamps.len()
        )));
    }
    Ok(())
}

/// The raw export AIPerf wrote somewhere under `dir`.
fn find_raw(dir: &Path) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .is_some_and(|n| n == "profile_export_raw.jsonl")
            {
                return Some(path);
            }
        }
    }
    None
}
