//! Injected faults are recorded with their outcome class and message; the run goes on and
//! exits 0. Also: timeouts, and Ctrl-C finishing the trace with cancelled requests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::recording::*;
use common::records_of;
use std::time::Duration;
use tokentrace_format::{Outcome, RequestRecord};
use tokentrace_sim::{FaultConfig, SimConfig};

fn outcome_of(records: &[RequestRecord], id: u64) -> Outcome {
    records
        .iter()
        .find(|r| r.meta.id == id)
        .unwrap()
        .meta
        .outcome
}

#[test]
fn each_fault_gets_its_outcome() {
    // Both HTTP clients, each against a fresh simulator (faults fire on arrival numbers).
    for client in ["hyper", "own"] {
        // Faults fire on arrival numbers (1-based); with one request at a time and a prompt file
        // (no calibration probes), arrival n is request id n-1.
        let server = sim(fault_matrix_sim());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("faults.tt");
        let prompts = prompt_file(dir.path(), 4);
        let mut args = FAULT_MATRIX_ARGS.to_vec();
        args.extend([prompts.to_str().unwrap(), "--client", client]);
        let (reader, records) = record_ok(&server.base_url(), &out, &args);
        assert_eq!(records.len(), 14);
        assert_eq!(reader.run_end().unwrap().reason, "completed");
        let expected = FAULT_MATRIX_OUTCOMES;
        for (id, outcome) in expected {
            let r = records.iter().find(|r| r.meta.id == id).unwrap();
            assert_eq!(r.meta.outcome, outcome, "{client} {id}: {:?}", r.meta.error);
            assert_eq!(
                r.meta.error.is_some(),
                outcome != Outcome::Ok,
                "request {id}"
            );
        }
        let http = records.iter().find(|r| r.meta.id == 4).unwrap();
        assert_eq!(http.meta.http_status, 500);
        assert!(http.meta.error.as_deref().unwrap().starts_with("HTTP 500"));
        assert!(http.meta.error.as_deref().unwrap().len() <= 1024 + 16);
        // The malformed event is recorded and the stream read to its end.
        let malformed = records.iter().find(|r| r.meta.id == 10).unwrap();
        assert_eq!(count(malformed, tokentrace_format::Channel::Done), 1);
        assert_eq!(outcome_of(&records, 12), Outcome::Oversize);
    }
}

#[test]
fn stalls_and_slow_prefill_time_out() {
    let server = sim(SimConfig {
        faults: FaultConfig {
            stall_every: 2,
            stall_ms: 3_000,
            after_chunks: 1,
            ..FaultConfig::default()
        },
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stall.tt");
    let prompts = prompt_file(dir.path(), 2);
    let (_, records) = record_ok(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "4",
            "--concurrency",
            "1",
            "--max-tokens",
            "5",
            "--timeout",
            "0.5",
            "--prompts",
            prompts.to_str().unwrap(),
        ],
    );
    let outcomes: Vec<Outcome> = records.iter().map(|r| r.meta.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Ok, Outcome::Timeout, Outcome::Ok, Outcome::Timeout]
    );
    let stalled = &records[1];
    assert!(stalled.meta.end_ns - stalled.meta.send_ns >= 500_000_000);
    assert!(stalled.meta.end_ns - stalled.meta.send_ns < 2_500_000_000);

    // 20k prompt tokens at 10k tokens/s: two seconds of prefill, far beyond the TTFT limit.
    let slow = sim(SimConfig {
        prefill_tok_s: 10_000.0,
        ..fast_sim()
    });
    let out = dir.path().join("ttft.tt");
    let (_, records) = record_ok(
        &slow.base_url(),
        &out,
        &[
            "--requests",
            "2",
            "--concurrency",
            "2",
            "--max-tokens",
            "5",
            "--ttft-timeout",
            "0.3",
            "--input-tokens",
            "20000",
            "--timeout",
            "10",
        ],
    );
    assert!(
        records
            .iter()
            .all(|r| r.meta.outcome == Outcome::TtftTimeout),
        "{records:?}"
    );
}

#[test]
fn interrupt_cancels_in_flight_and_finishes_the_trace() {
    // Slow decode: each stream takes about 10 s, so every request is in flight at the signal.
    let server = sim(SimConfig {
        step_base_ms: 100.0,
        ..fast_sim()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("int.tt");
    let prompts = prompt_file(dir.path(), 2);
    let mut child = record_child(
        &server.base_url(),
        &out,
        &[
            "--requests",
            "6",
            "--concurrency",
            "3",
            "--max-tokens",
            "100",
            "--ignore-eos",
            "--grace",
            "0.2",
            "--prompts",
            prompts.to_str().unwrap(),
        ],
    )
    .spawn()
    .unwrap();
    let exit = signal_after(
        &mut child,
        Duration::from_millis(1500),
        "INT",
        Duration::from_secs(20),
    );
    assert!(exit.success());
    let (reader, records) = records_of(&out);
    assert_eq!(reader.run_end().unwrap().reason, "interrupted");
    assert_eq!(records.len(), 3, "no request may start after the interrupt");
    for r in &records {
        assert_eq!(r.meta.outcome, Outcome::Cancelled);
        assert!(
            !r.chunks.is_empty(),
            "chunks received before the interrupt are kept"
        );
    }
}
