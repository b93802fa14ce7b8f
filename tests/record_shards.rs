//! Sharded recording: four `tokentrace record` processes (`JOB_COMPLETION_INDEX` 0..3, as a
//! Kubernetes Indexed Job sets it) against one simulator on 127.0.0.1 record one plan, and
//! `tokentrace merge` (or `analyze` of the shard set) makes it one run on one clock.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;
mod synthetic;

use common::recording::{self, record_child, record_ok, sim, wait_bounded};
use common::{records_of, tokentrace};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokentrace_format::{Outcome, RequestRecord, TraceReader};
use tokentrace_sim::SimConfig;

/// How long one shard may take.
const SHARD_LIMIT: Duration = Duration::from_secs(120);

/// Unix milliseconds `ahead` from now: an agreed start every shard can still make.
fn start_in(ahead: Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now + ahead).as_millis().to_string()
}

/// Starts shard `i` of `n` with `args` (plus `--shards n --start-at AT`) writing
/// `dir/shard-i.ttrace`.
fn spawn_shard(
    url: &str,
    dir: &Path,
    i: u32,
    n: u32,
    at: &str,
    args: &[&str],
) -> (std::process::Child, PathBuf) {
    let out = dir.join(format!("shard-{i}.ttrace"));
    let mut all: Vec<&str> = args.to_vec();
    let n_text = n.to_string();
    all.extend(["--shards", &n_text, "--start-at", at]);
    let child = record_child(url, &out, &all)
        .env("JOB_COMPLETION_INDEX", i.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    (child, out)
}

/// Records `n` shards of `args` and returns their traces, each asserted to end with status 0.
fn record_shards(url: &str, dir: &Path, n: u32, args: &[&str]) -> Vec<PathBuf> {
    let at = start_in(Duration::from_secs(3));
    let mut shards: Vec<_> = (0..n)
        .map(|i| spawn_shard(url, dir, i, n, &at, args))
        .collect();
    shards
        .iter_mut()
        .map(|(child, out)| {
            let status = wait_bounded(child, SHARD_LIMIT);
            assert!(status.success(), "shard {} failed: {status}", out.display());
            out.clone()
        })
        .collect()
}

/// `tokentrace merge SHARDS -o OUT --expect-shards N`; its exit code and stderr.
fn merge(shards: &[PathBuf], out: &Path, n: u32) -> (i32, String) {
    let output = tokentrace()
        .arg("merge")
        .args(shards)
        .arg("-o")
        .arg(out)
        .args(["--expect-shards", &n.to_string()])
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Each request's intended start relative to the run's first, by id.
fn schedule(records: &[RequestRecord]) -> Vec<(u64, u64)> {
    let origin = records.iter().map(|r| r.meta.intended_ns).min().unwrap();
    records
        .iter()
        .map(|r| (r.meta.id, r.meta.intended_ns - origin))
        .collect()
}

fn diff_json(a: &Path, b: &Path) -> serde_json::Value {
    // At 99.9 % (with resamples enough for its tails) a metric of two runs of one plan
    // against one server is called different about once in a thousand.
    common::json_of(tokentrace().arg("diff").args([a, b]).args([
        "--json",
        "--protocol",
        "vllm",
        "--confidence",
        "0.999",
        "--resamples",
        "4000",
    ]))
}

/// A simulator whose latencies the server, not the client, decides: 4 ms per decode step.
fn steady_sim() -> tokentrace_sim::SimHandle {
    sim(SimConfig {
        step_base_ms: 4.0,
        step_per_seq_ms: 0.0,
        prefill_base_ms: 2.0,
        prefill_tok_s: 1_000_000.0,
        ..SimConfig::default()
    })
}

/// Held for writing by the test that compares two recordings' latencies, and for reading by
/// the other tests that start recorders: their processes would slow one recording of that
/// pair and not the other.
static MEASURING: RwLock<()> = RwLock::new(());

/// Records `plan` as `n` shards into `dir`, merges them into `dir/run.ttrace`, then records it
/// in one process into `dir/single.ttrace`; returns the shards, the merged and the single trace.
fn record_sharded_and_single(
    url: &str,
    dir: &Path,
    n: u32,
    plan: &[&str],
) -> (Vec<PathBuf>, PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let shards = record_shards(url, dir, n, plan);
    let merged = dir.join("run.ttrace");
    let (code, stderr) = merge(&shards, &merged, n);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(&format!("{n} of {n} shards")), "{stderr}");
    let single = dir.join("single.ttrace");
    record_ok(url, &single, plan);
    (shards, merged, single)
}

/// The metrics `diff` calls beyond its noise between `a` and `b` (asserting it compared the four).
fn metrics_beyond_noise(a: &Path, b: &Path) -> Vec<serde_json::Value> {
    let diff = diff_json(a, b);
    let changes = diff["metrics"].as_array().unwrap();
    assert_eq!(changes.len(), 4, "ttft, tpot, itl, e2el: {diff:#}");
    changes
        .iter()
        .filter(|c| c["beyond_noise"] != false)
        .cloned()
        .collect()
}

#[test]
fn open_loop_shards_record_exactly_the_single_process_schedule() {
    let _alone = MEASURING.write().unwrap_or_else(|e| e.into_inner());
    let sim = steady_sim();
    let url = sim.base_url();
    let dir = tempfile::tempdir().unwrap();
    let plan = [
        "--requests",
        "48",
        "--rate",
        "40",
        "--arrival",
        "poisson",
        "--seed",
        "11",
        "--max-tokens",
        "12",
        "--input-tokens",
        "32",
    ];
    let (shards, merged, single) = record_sharded_and_single(&url, dir.path(), 4, &plan);

    // Each shard holds the plan's requests k with k mod 4 = its index, and says so.
    for (i, path) in shards.iter().enumerate() {
        let (reader, records) = records_of(path);
        let info = reader.manifest().shard.clone().unwrap();
        assert_eq!((info.index, info.count), (i as u32, 4));
        assert_eq!(reader.header().shard, i as u32);
        assert_eq!(records.len(), 12);
        assert!(records.iter().all(|r| r.meta.id % 4 == i as u64));
    }
    let (reader, records) = records_of(&merged);
    let ids: Vec<u64> = records.iter().map(|r| r.meta.id).collect();
    assert_eq!(
        ids,
        (0..48).collect::<Vec<_>>(),
        "every planned request once"
    );
    assert!(records.iter().all(|r| r.meta.outcome == Outcome::Ok));
    let shards_info = reader.manifest().shards.clone().unwrap();
    assert_eq!(shards_info.present, vec![0, 1, 2, 3]);
    assert!(!shards_info.is_partial());

    // The union of the shards' intended starts is the single-process schedule, to the ns.
    let (_, single_records) = records_of(&single);
    assert_eq!(schedule(&records), schedule(&single_records));
    // The same request id carries the same prompt in both runs (the plan decides it).
    let prompt = |rs: &[RequestRecord]| rs.iter().map(|r| r.meta.prompt_hash).collect::<Vec<_>>();
    assert_eq!(prompt(&records), prompt(&single_records));

    // Its metrics agree with the single-process run within diff's bootstrap noise. The two
    // recordings run one after the other on a shared host, whose other work can slow one and
    // not the other (seen: the simulator's first token 5.4 ms late in one, 9.2 ms in the
    // next), so a pair that differs is recorded again, up to three pairs. Sharding that moved
    // a metric would move it in every pair.
    let mut moved = metrics_beyond_noise(&single, &merged);
    for again in 1..3 {
        if moved.is_empty() {
            break;
        }
        eprintln!("pair {again} differed beyond noise, recording again: {moved:#?}");
        let dir = dir.path().join(format!("again-{again}"));
        let (_, merged, single) = record_sharded_and_single(&url, &dir, 4, &plan);
        moved = metrics_beyond_noise(&single, &merged);
    }
    assert!(
        moved.is_empty(),
        "three pairs differed beyond noise; the last: {moved:#?}"
    );
    // `analyze` of the shard set is `analyze` of the merged trace.
    let analyze = |paths: &[PathBuf]| {
        common::json_of(tokentrace().arg("analyze").args(paths).args([
            "--protocol",
            "vllm",
            "--format",
            "json",
        ]))
    };
    let (of_shards, of_merged) = (analyze(&shards), analyze(&[merged]));
    for key in [
        "duration",
        "completed",
        "median_ttft_ms",
        "p99_e2el_ms",
        "mean_itl_ms",
    ] {
        // The same values, summed in another order (by trace, then id): equal to rounding.
        let (a, b) = (
            of_shards[key].as_f64().unwrap(),
            of_merged[key].as_f64().unwrap(),
        );
        assert!(
            (a - b).abs() <= 1e-12 * a.abs().max(1.0),
            "{key}: {a} vs {b}"
        );
    }
}

#[test]
fn closed_loop_shards_split_streams_and_requests_and_never_share_a_prompt() {
    let _beside = MEASURING.read().unwrap_or_else(|e| e.into_inner());
    let sim = steady_sim();
    let dir = tempfile::tempdir().unwrap();
    let plan = [
        "--requests",
        "30",
        "--concurrency",
        "6",
        "--max-tokens",
        "8",
        "--input-tokens",
        "32",
        "--seed",
        "5",
    ];
    let shards = record_shards(&sim.base_url(), dir.path(), 4, &plan);
    // 6 streams over 4 shards: 2, 2, 1, 1; 30 requests: 8, 8, 7, 7.
    let per_shard: Vec<usize> = shards.iter().map(|p| records_of(p).1.len()).collect();
    assert_eq!(per_shard, vec![8, 8, 7, 7]);
    let merged = dir.path().join("run.ttrace");
    let (code, stderr) = merge(&shards, &merged, 4);
    assert_eq!(code, 0, "{stderr}");
    let (_, records) = records_of(&merged);
    assert_eq!(records.len(), 30);
    let ids: HashSet<u64> = records.iter().map(|r| r.meta.id).collect();
    assert_eq!(ids.len(), 30, "unique ids");
    let prompts: HashSet<u64> = records.iter().map(|r| r.meta.prompt_hash).collect();
    assert_eq!(prompts.len(), 30, "no two requests sent the same prompt");
    // A shard never had more streams in flight than its share.
    for (path, share) in shards.iter().zip([2usize, 2, 1, 1]) {
        let (_, rs) = records_of(path);
        let most = rs
            .iter()
            .map(|r| {
                rs.iter()
                    .filter(|o| o.meta.send_ns <= r.meta.send_ns && o.meta.end_ns > r.meta.send_ns)
                    .count()
            })
            .max()
            .unwrap();
        assert!(
            most <= share,
            "{}: {most} in flight > {share}",
            path.display()
        );
    }
}

#[test]
fn a_killed_shard_is_named_and_its_started_requests_are_kept() {
    let _beside = MEASURING.read().unwrap_or_else(|e| e.into_inner());
    // Long streams: 500 tokens at 10 ms, so shard 2 is mid-stream when it is killed.
    let sim = sim(SimConfig {
        step_base_ms: 10.0,
        step_per_seq_ms: 0.0,
        ..recording::fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let plan = [
        "--requests",
        "8",
        "--concurrency",
        "8",
        "--max-tokens",
        "500",
        "--ignore-eos",
        "--input-tokens",
        "32",
        "--checkpoint-every",
        "0.2",
    ];
    let at = start_in(Duration::from_secs(3));
    let mut children: Vec<_> = (0..4)
        .map(|i| spawn_shard(&sim.base_url(), dir.path(), i, 4, &at, &plan))
        .collect();
    // Killed mid-stream: once its streams are on disk as checkpoints (well before their 5 s
    // end), however long the shard took to get going.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let started = TraceReader::open(&children[2].1).map_or(0, |r| r.interrupted().len());
        if started >= 1 {
            break;
        }
        if let Some(status) = children[2].0.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut pipe) = children[2].0.stderr.take() {
                std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
            }
            panic!("shard 2 ended ({status}) before it was killed: {stderr}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "shard 2 never checkpointed a stream"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // One more checkpoint period or so, so both of its streams are likely on disk.
    std::thread::sleep(Duration::from_millis(1500));
    recording::signal(children[2].0.id(), "KILL");
    let mut paths = Vec::new();
    for (i, (child, out)) in children.iter_mut().enumerate() {
        let status = wait_bounded(child, SHARD_LIMIT);
        assert_eq!(status.success(), i != 2, "shard {i}: {status}");
        paths.push(out.clone());
    }
    let killed = TraceReader::open(&paths[2]).unwrap();
    assert!(killed.run_end().is_none());
    let kept = killed.interrupted().len();
    assert!((1..=2).contains(&kept), "{kept} of its 2 streams kept");

    let merged = dir.path().join("run.ttrace");
    let (code, stderr) = merge(&paths, &merged, 4);
    assert_eq!(code, 1, "a partial run: {stderr}");
    assert!(stderr.contains("shard 2 incomplete"), "{stderr}");
    let (reader, records) = records_of(&merged);
    assert_eq!(records.len(), 6 + kept, "every request the shards kept");
    let interrupted: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.meta.outcome == Outcome::Interrupted)
        .collect();
    assert_eq!(interrupted.len(), kept);
    assert!(interrupted
        .iter()
        .all(|r| r.meta.id % 4 == 2 && !r.chunks.is_empty()));
    assert!(records
        .iter()
        .filter(|r| r.meta.id % 4 != 2)
        .all(|r| r.meta.outcome == Outcome::Ok));
    let info = reader.manifest().shards.clone().unwrap();
    assert_eq!(info.incomplete.len(), 1);
    assert_eq!(info.incomplete[0].index, 2);
    assert!(reader.run_end().unwrap().reason.starts_with("partial"));

    // The analysis says the run is partial, of the merged trace and of the shards alike.
    for inputs in [vec![merged.clone()], paths.clone()] {
        let out = tokentrace()
            .arg("analyze")
            .args(&inputs)
            .args(["--protocol", "capacity-v3", "--format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("partial run"), "{stderr}");
        assert!(stderr.contains("shard 2 incomplete"), "{stderr}");
    }
}

/// A shard trace whose host's monotonic clock read `mono_ns` when its real-time clock read
/// `realtime_ns`, holding request `id` sent `send_ns` after the anchor.
fn shard_trace(
    dir: &Path,
    index: u32,
    mono_ns: u64,
    realtime_ns: u64,
    id: u64,
    send_ns: u64,
) -> PathBuf {
    use tokentrace_format::shards::{ClockSync, ShardInfo, SPLIT_INTERLEAVED};
    use tokentrace_format::{ClockAnchor, Header, Manifest, RunEnd};
    let path = dir.join(format!("shard-{index}.ttrace"));
    let header = Header {
        major: 1,
        minor: 3,
        anchor: ClockAnchor {
            mono_ns,
            realtime_ns,
        },
        host: format!("host-{index}"),
        shard: index,
    };
    let manifest = Manifest {
        model: "m".into(),
        shard: Some(ShardInfo {
            run_id: "run-offsets".into(),
            index,
            count: 2,
            plan_hash: "0000000000000001".into(),
            split: SPLIT_INTERLEAVED.into(),
            start_at_realtime_ns: 1_796_137_200_000_000_000,
            start_lateness_ns: 1_000,
            clock: ClockSync {
                synchronized: Some(true),
                max_error_ns: Some(250_000),
                est_error_ns: Some(10_000),
            },
        }),
        ..Manifest::default()
    };
    let writer = tokentrace_format::TraceWriter::create(
        &path,
        header,
        &manifest,
        tokentrace_format::WriterConfig::default(),
    )
    .unwrap();
    // Whole milliseconds after this shard's anchor.
    let ms = send_ns / 1_000_000;
    let record = synthetic::request(
        id,
        tokentrace_format::Phase::Measured,
        ms,
        ms,
        ms + 30,
        vec![
            synthetic::chunk(ms + 10, tokentrace_format::Channel::Content, 1, Some(1)),
            synthetic::chunk(ms + 20, tokentrace_format::Channel::Content, 1, Some(1)),
        ],
    );
    let sender = writer.sender();
    sender.send(record).unwrap();
    drop(sender);
    writer
        .finish(RunEnd {
            end_ns: send_ns + 30_000_000,
            reason: "completed".into(),
            ..RunEnd::default()
        })
        .unwrap();
    path
}

#[test]
fn shards_whose_clocks_disagree_are_placed_on_one_clock_by_their_anchors() {
    let dir = tempfile::tempdir().unwrap();
    let at = 1_796_137_200_000_000_000u64;
    // Shard 0's host booted 10 s before its anchor, shard 1's 900 s before: their monotonic
    // clocks disagree by 890 s. Shard 1 anchored 2.5 s after shard 0 (real time), and each
    // sent its request 1 ms after its own anchor.
    let a = shard_trace(dir.path(), 0, 10_000_000_000, at, 0, 1_000_000);
    let b = shard_trace(
        dir.path(),
        1,
        900_000_000_000,
        at + 2_500_000_000,
        1,
        1_000_000,
    );
    let merged = dir.path().join("run.ttrace");
    let (code, stderr) = merge(&[b.clone(), a.clone()], &merged, 2);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("may disagree by up to 0.500 ms"),
        "{stderr}"
    );
    let (reader, records) = records_of(&merged);
    assert_eq!(reader.header().anchor.realtime_ns, at, "shard 0's clock");
    assert_eq!(records[0].meta.send_ns, 1_000_000);
    assert_eq!(
        records[1].meta.send_ns, 2_501_000_000,
        "2.5 s later on one clock"
    );
    assert_eq!(records[1].chunks[0].arrival_ns, 2_511_000_000);
    assert_eq!(reader.run_end().unwrap().end_ns, 2_531_000_000);
    // The shards analyzed together span the same 2.53 s as the merged trace.
    let duration = |paths: &[PathBuf]| {
        common::json_of(tokentrace().arg("analyze").args(paths).args([
            "--protocol",
            "vllm",
            "--format",
            "json",
        ]))["duration"]
            .as_f64()
            .unwrap()
    };
    assert!((duration(&[a, b]) - 2.53).abs() < 1e-9);
    assert!((duration(&[merged]) - 2.53).abs() < 1e-9);
}

#[test]
fn a_sharded_run_needs_an_agreed_start_and_a_stream_per_shard() {
    let url = recording::unreachable_url();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.ttrace");
    let cases: [(&[&str], &str); 4] = [
        (&["--shard", "1/4"], "needs --start-at"),
        (&["--shard", "4/4"], "expected I/N"),
        (
            &[
                "--shard",
                "3/4",
                "--concurrency",
                "3",
                "--start-at",
                "1796137200000",
            ],
            "without a stream",
        ),
        (&["--shards", "4"], "JOB_COMPLETION_INDEX"),
    ];
    for (args, message) in cases {
        let assert = recording::record(&url, &out, args)
            .env_remove("JOB_COMPLETION_INDEX")
            .assert()
            .code(2);
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).into_owned();
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
