//! `tokentrace record` against the simulator: both APIs, reasoning on and off, several tokens
//! per chunk, usage, warmup, intended vs actual start.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use tokentrace_format::{Channel, Outcome, Phase};
use tokentrace_sim::ReasoningField;

#[test]
fn chat_with_reasoning_and_speculative_chunks() {
    let server = sim(tokentrace_sim::SimConfig {
        reasoning_tokens: 6,
        spec_tokens_mean: 2.5,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chat.tt");
    let (reader, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "12",
            "--warmup",
            "2",
            "--concurrency",
            "3",
            "--input-tokens",
            "300",
            "--max-tokens",
            "20",
            "--ignore-eos",
            "--label",
            "engine=sim",
        ],
    );
    assert_eq!(records.len(), 14);
    assert_eq!(reader.run_end().unwrap().reason, "completed");
    assert_eq!(reader.manifest().labels["engine"], "sim");
    assert_eq!(
        records
            .iter()
            .filter(|r| r.meta.phase == Phase::Warmup)
            .count(),
        2
    );
    assert!(records[..2].iter().all(|r| r.meta.phase == Phase::Warmup));
    let mut chunks_below_tokens = 0;
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Ok, "{:?}", r.meta.error);
        assert_eq!(r.meta.http_status, 200);
        assert_eq!(count(r, Channel::Role), 1);
        assert!(count(r, Channel::Reasoning) >= 1);
        assert!(count(r, Channel::Content) >= 1);
        assert_eq!(count(r, Channel::Usage), 1);
        assert_eq!(count(r, Channel::Done), 1);
        assert_eq!(r.meta.usage.completion_tokens, Some(20));
        assert_eq!(r.meta.usage.reasoning_tokens, Some(6));
        assert_eq!(
            output_tokens(r),
            20,
            "per-chunk tokens must add up to usage"
        );
        let prompt = r.meta.usage.prompt_tokens.unwrap();
        assert!(prompt.abs_diff(300) <= 6, "prompt tokens {prompt}");
        assert_eq!(r.meta.planned_input_tokens, Some(300));
        assert_eq!(r.meta.finish_reason.as_deref(), Some("length"));
        assert!(r.meta.intended_ns <= r.meta.send_ns);
        assert!(r.meta.send_ns <= r.meta.headers_ns.unwrap());
        assert!(r.meta.headers_ns.unwrap() <= r.chunks[0].arrival_ns);
        assert!(r
            .chunks
            .windows(2)
            .all(|w| w[0].arrival_ns <= w[1].arrival_ns));
        assert!(r
            .chunks
            .windows(2)
            .all(|w| w[0].read_index <= w[1].read_index));
        assert_eq!(r.meta.end_ns, r.chunks.last().unwrap().arrival_ns);
        assert!(r.meta.output_bytes > 0 && r.meta.output_hash != 0);
        assert!(r.chunks.iter().all(|c| c.text.is_none()));
        if count(r, Channel::Reasoning) + count(r, Channel::Content) < 20 {
            chunks_below_tokens += 1;
        }
    }
    assert!(
        chunks_below_tokens > 0,
        "speculative steps should carry several tokens"
    );
    let health = &reader.run_end().unwrap().client_health;
    assert_eq!(
        health.chunks,
        Some(records.iter().map(|r| r.chunks.len() as u64).sum::<u64>())
    );
    assert!(health.cpu_ns > Some(0));
    assert!(health.max_rss_bytes > Some(0));
    // The lag probe's period is in the trace, and its tick count agrees with it.
    assert_eq!(health.tick_ns, Some(50_000_000));
    let (ticks, wall) = (health.ticks.unwrap(), health.wall_ns.unwrap());
    assert!(ticks <= wall / 50_000_000 + 1, "{ticks} ticks in {wall} ns");
}

#[test]
fn completions_with_final_usage_only() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cmpl.tt");
    let (reader, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--api",
            "completions",
            "--requests",
            "6",
            "--concurrency",
            "2",
            "--input-tokens",
            "64",
            "--max-tokens",
            "9",
            "--ignore-eos",
            "--usage",
            "final",
            "--capture",
            "text",
        ],
    );
    assert_eq!(reader.manifest().api, "completions");
    assert_eq!(records.len(), 6);
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Ok, "{:?}", r.meta.error);
        assert_eq!(count(r, Channel::Role), 0);
        assert_eq!(count(r, Channel::Reasoning), 0);
        assert_eq!(count(r, Channel::Content), 9);
        assert_eq!(count(r, Channel::Usage), 1);
        assert_eq!(r.meta.usage.completion_tokens, Some(9));
        // Without continuous usage the per-chunk token counts are unknown.
        assert!(r.chunks.iter().all(|c| c.tokens.is_none()));
        let text: String = r.chunks.iter().filter_map(|c| c.text.clone()).collect();
        assert_eq!(text.len() as u32, r.meta.output_bytes);
        assert_eq!(text.split_whitespace().count(), 9);
    }
}

#[test]
fn chat_with_thinking_off_and_reasoning_field() {
    let server = sim(tokentrace_sim::SimConfig {
        reasoning_tokens: 4,
        reasoning_field: ReasoningField::Reasoning,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let on = dir.path().join("on.tt");
    let off = dir.path().join("off.tt");
    let base = [
        "--requests",
        "3",
        "--input-tokens",
        "32",
        "--max-tokens",
        "10",
        "--ignore-eos",
    ];
    record(&server.base_url(), &on, &base).assert().success();
    let mut args = base.to_vec();
    args.extend(["--thinking", "off"]);
    record(&server.base_url(), &off, &args).assert().success();
    for r in records_of(&on).1 {
        assert_eq!(
            r.chunks
                .iter()
                .filter(|c| c.channel == Channel::Reasoning)
                .map(|c| c.tokens.unwrap())
                .sum::<u32>(),
            4
        );
    }
    for r in records_of(&off).1 {
        assert_eq!(count(&r, Channel::Reasoning), 0);
        assert_eq!(count(&r, Channel::Content), 10);
    }
}

#[test]
fn open_loop_intended_starts_follow_the_schedule() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("open.tt");
    let prompts = prompt_file(dir.path(), 3);
    let (reader, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--rate",
            "40",
            "--arrival",
            "constant",
            "--requests",
            "8",
            "--max-tokens",
            "4",
            "--prompts",
            prompts.to_str().unwrap(),
        ],
    );
    assert_eq!(reader.manifest().load["mode"], "open");
    assert_eq!(records.len(), 8);
    let t0 = records[0].meta.intended_ns;
    for (i, r) in records.iter().enumerate() {
        assert_eq!(
            r.meta.intended_ns - t0,
            i as u64 * 25_000_000,
            "request {i}"
        );
        assert!(r.meta.send_ns >= r.meta.intended_ns);
        assert_eq!(r.meta.planned_input_tokens, None);
        assert_eq!(r.meta.outcome, Outcome::Ok);
    }
    // The prompt file is used round robin: ids 0 and 3 carry the same prompt.
    assert_eq!(records[0].meta.prompt_hash, records[3].meta.prompt_hash);
    assert_ne!(records[0].meta.prompt_hash, records[1].meta.prompt_hash);
}

#[test]
fn input_tokens_4096_calibrated_within_two_percent() {
    // A chat template overhead the client cannot know in advance.
    let server = sim(tokentrace_sim::SimConfig {
        chat_tokens_per_message: 37,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("long.tt");
    let (_, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "4",
            "--concurrency",
            "2",
            "--input-tokens",
            "4096",
            "--max-tokens",
            "2",
        ],
    );
    for r in &records {
        let prompt = r.meta.usage.prompt_tokens.unwrap();
        assert!(
            prompt.abs_diff(4096) as f64 <= 4096.0 * 0.02,
            "prompt tokens {prompt}"
        );
        // Unique prefixes: no two prompts alike.
        assert_eq!(
            records
                .iter()
                .filter(|o| o.meta.prompt_hash == r.meta.prompt_hash)
                .count(),
            1
        );
    }
}

#[test]
fn api_key_never_reaches_the_trace() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("key.tt");
    let key = "sk-tokentrace-test-7f3a9c1e5b";
    record(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "3",
            "--max-tokens",
            "3",
            "--capture",
            "raw",
            "--api-key-env",
            "TT_TEST_KEY",
            "--header",
            "X-Api-Key: sk-tokentrace-test-7f3a9c1e5b",
        ],
    )
    .env("TT_TEST_KEY", key)
    .assert()
    .success();
    let bytes = std::fs::read(&out).unwrap();
    let found = bytes.windows(key.len()).any(|w| w == key.as_bytes());
    assert!(!found, "the API key is in the trace");
    let (reader, records) = records_of(&out);
    assert_eq!(records.len(), 3);
    assert_eq!(reader.manifest().extra["api_key_sent"], true);
    assert!(reader
        .manifest()
        .argv
        .iter()
        .any(|a| a.contains("<redacted>")));
}

#[test]
fn unreachable_target_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("none.tt");
    let output = record(&unreachable_url(), &out, &["--requests", "1"])
        .assert()
        .failure()
        .get_output()
        .clone();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unreachable"), "{stderr}");
}

#[test]
fn bad_arguments_fail_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad.tt");
    record("http://127.0.0.1:9/v1", &out, &["--extra-body", "[1]"])
        .assert()
        .failure();
    record("ftp://127.0.0.1:9/v1", &out, &["--requests", "1"])
        .assert()
        .failure();
    record("http://127.0.0.1:9/v1", &out, &["--label", "novalue"])
        .assert()
        .failure();
    let unset = record(
        "http://127.0.0.1:9/v1",
        &out,
        &["--api-key-env", "TT_TEST_UNSET_KEY"],
    )
    .env_remove("TT_TEST_UNSET_KEY")
    .assert()
    .failure()
    .get_output()
    .clone();
    assert!(String::from_utf8_lossy(&unset.stderr).contains("TT_TEST_UNSET_KEY"));
}

#[test]
fn http2_prior_knowledge_and_duration_stop() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("h2.tt");
    let (reader, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--http",
            "2",
            "--duration",
            "0.5",
            "--rate",
            "30",
            "--arrival",
            "poisson",
            "--input-tokens",
            "16",
            "--max-tokens",
            "4",
        ],
    );
    assert_eq!(reader.run_end().unwrap().reason, "duration");
    assert_eq!(reader.manifest().extra["http"], "http2");
    // About 15 arrivals in half a second at 30/s; bounded well inside that.
    assert!((3..=40).contains(&records.len()), "{}", records.len());
    let start = records[0].meta.intended_ns;
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Ok, "{:?}", r.meta.error);
        assert!(r.meta.intended_ns - start < 500_000_000);
    }
}

#[test]
fn closed_loop_measured_requests_start_after_the_warmup_ends() {
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("warm.tt");
    let (_reader, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--concurrency",
            "4",
            "--warmup",
            "2",
            "--requests",
            "6",
            "--max-tokens",
            "8",
        ],
    );
    assert_eq!(records.len(), 8);
    let warmup_end = records
        .iter()
        .filter(|r| r.meta.phase == Phase::Warmup)
        .map(|r| r.meta.end_ns)
        .max()
        .unwrap();
    for r in records.iter().filter(|r| r.meta.phase == Phase::Measured) {
        assert!(
            r.meta.send_ns >= warmup_end,
            "request {} overlaps the warmup",
            r.meta.id
        );
        assert_eq!(r.meta.outcome, Outcome::Ok);
    }
}

/// A recorder started nicer than the test, and under the batch policy, records both in its
/// manifest (`extra.scheduling`, docs/FORMAT.md 3.1): how a trace's reads were scheduled is
/// part of what it measured.
#[test]
fn the_manifest_records_the_recorders_scheduling() {
    // SAFETY: on Linux, PRIO_PROCESS with 0 is the calling thread; this reads its nice value.
    let ours = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    if ours >= 19 {
        eprintln!("skipped: the test already runs at nice 19, so the recorder cannot be nicer");
        return;
    }
    let wanted = (ours + 4).min(19);
    let server = sim(fast_sim());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nice.tt");
    let mut command = record_child(&server.base_url(), &out, &["--requests", "2"]);
    let placed = move || {
        // SAFETY: two system calls on the child itself between fork and exec, through libc's
        // thin wrappers (no lock, no allocation); a nicer value and the batch policy need no
        // privilege.
        let param = libc::sched_param { sched_priority: 0 };
        let rc = unsafe {
            match libc::setpriority(libc::PRIO_PROCESS, 0, wanted) {
                0 => libc::sched_setscheduler(0, libc::SCHED_BATCH, &param),
                failed => failed,
            }
        };
        match rc {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    // SAFETY: the closure above is all that runs in the child before exec.
    unsafe { std::os::unix::process::CommandExt::pre_exec(&mut command, placed) };
    let mut child = command.spawn().unwrap();
    assert!(wait_bounded(&mut child, std::time::Duration::from_secs(120)).success());
    let (reader, records) = records_of(&out);
    assert_eq!(records.len(), 2);
    let scheduling = &reader.manifest().extra["scheduling"];
    assert_eq!(scheduling["nice"], wanted, "{scheduling}");
    assert_eq!(scheduling["policy"], "batch", "{scheduling}");
    assert_eq!(scheduling["rt_priority"], 0, "{scheduling}");
    assert!(
        scheduling["cpus"].as_u64().is_some_and(|n| n >= 1),
        "{scheduling}"
    );
}
