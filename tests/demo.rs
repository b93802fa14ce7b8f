//! The one-command demo: simulator, record, analyze, report, end to end through the binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

use assert_cmd::Command;
use std::time::Duration;
use tokentrace_format::{Channel, Phase, TraceReader};

#[test]
fn demo_records_a_reasoning_run_and_prints_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("demo.ttrace");
    let output = Command::cargo_bin("tokentrace")
        .unwrap()
        .args(["demo", "--requests", "10", "--concurrency", "4", "-o"])
        .arg(&trace)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "demo failed: {output:?}");
    assert!(stdout.contains("protocol tokentrace-v1"), "{stdout}");
    assert!(stdout.contains("ttft_ms"), "{stdout}");
    assert!(
        stdout.contains("--protocol capacity-v4-reasoning"),
        "{stdout}"
    );
    assert!(stdout.contains(&trace.display().to_string()), "{stdout}");

    let reader = TraceReader::open(&trace).unwrap();
    let requests: Vec<_> = reader.requests().map(|r| r.unwrap()).collect();
    assert_eq!(requests.len(), 14, "10 measured + 4 warmup");
    let measured = requests
        .iter()
        .filter(|r| r.meta.phase == Phase::Measured)
        .count();
    assert_eq!(measured, 10);
    for request in &requests {
        let has = |c: Channel| request.chunks.iter().any(|k| k.channel == c);
        assert!(
            has(Channel::Reasoning) && has(Channel::Content),
            "{request:?}"
        );
        assert_eq!(request.meta.usage.completion_tokens, Some(128));
    }
}
