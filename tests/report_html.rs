//! `tokentrace report`: the HTML page of simulator runs (with failures and reasoning, two
//! traces, a second protocol) and of a capacity search, opened in headless Chromium: no
//! console message, every panel in the DOM, a screenshot kept in `target/tmp/artifacts`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may fail loudly

mod common;

use common::{browser, recording};
use std::path::{Path, PathBuf};
use tokentrace_sim::{FaultConfig, SimConfig};

/// A simulator that reasons before it answers and fails some requests two ways.
fn troubled_sim() -> tokentrace_sim::SimHandle {
    recording::sim(SimConfig {
        reasoning_tokens: 6,
        faults: FaultConfig {
            http_500_every: 9,
            reset_every: 13,
            ..FaultConfig::default()
        },
        ..recording::fast_sim()
    })
}

fn record(url: &str, out: &Path, concurrency: &str) {
    recording::record(
        url,
        out,
        &[
            "--requests",
            "60",
            "--concurrency",
            concurrency,
            "--max-tokens",
            "24",
        ],
    )
    .assert()
    .success();
}

/// The text between `<tag ... id="ID"` and the element's end, for an element without
/// children of its own kind.
fn element<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let open_end = start + dom[start..].find('>').unwrap() + 1;
    let close = open_end + dom[open_end..].find("</").unwrap();
    &dom[open_end..close]
}

fn panel<'a>(dom: &'a str, name: &str) -> &'a str {
    let marker = format!("data-panel=\"{name}\"");
    let start = dom
        .find(&marker)
        .unwrap_or_else(|| panic!("panel {name} missing"));
    let end = start + dom[start..].find("</section>").unwrap();
    &dom[start..end]
}

/// Loads the page and checks what every report must hold.
fn open_clean(page: &Path) -> String {
    let loaded = browser::load(page);
    assert!(
        loaded.console.is_empty(),
        "console messages: {:#?}",
        loaded.console
    );
    let dom = loaded.dom;
    assert!(
        dom.contains("<body data-ready=\"1\">"),
        "the script ran to its end"
    );
    assert_eq!(element(&dom, "report-errors").trim(), "", "no script error");
    dom
}

fn artifact(name: &str) -> PathBuf {
    browser::artifacts().join(name)
}

#[test]
fn a_report_of_two_runs_has_every_panel_and_no_console_error() {
    let sim = troubled_sim();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("c4.ttrace"), tmp.path().join("c8.ttrace"));
    record(&sim.base_url(), &a, "4");
    record(&sim.base_url(), &b, "8");
    let page = tmp.path().join("report.html");
    common::tokentrace()
        .arg("report")
        .args([&a, &b])
        .args(["--protocol", "capacity-v4-reasoning", "--versus", "aiperf"])
        .arg("-o")
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    for remote in [
        "src=\"http",
        "href=\"http",
        "url(http",
        "@import",
        "fetch(",
        "XMLHttpRequest",
    ] {
        assert!(
            !html.contains(remote),
            "self-contained: the page loads nothing ({remote})"
        );
    }
    let dom = open_clean(&page);
    for name in [
        "summary",
        "failures",
        "distributions",
        "timeline",
        "over-time",
        "diff",
        "versus",
    ] {
        panel(&dom, name);
    }
    // The summary: a row per metric and run, units shown.
    let summary = panel(&dom, "summary");
    assert!(summary.contains("ttft_ms") && summary.contains("c4.ttrace"));
    assert!(summary.contains("c8.ttrace") && summary.contains(">ms<"));
    // Failures grouped by reason: the two injected kinds.
    let failures = panel(&dom, "failures");
    assert!(failures.contains("http_error"), "{failures}");
    assert!(failures.contains("HTTP 500"), "{failures}");
    // Four distributions, each a histogram and a CDF, both runs overlaid.
    let distributions = panel(&dom, "distributions");
    for concept in ["TTFT", "ITL", "TPOT", "E2E latency"] {
        let start = distributions
            .find(&format!("data-concept=\"{concept}\""))
            .unwrap_or_else(|| panic!("no {concept} distribution"));
        let block = &distributions[start..];
        let block = &block[..block[1..].find("data-concept").unwrap_or(block.len() - 1)];
        assert_eq!(
            block.matches("<svg").count(),
            2,
            "{concept}: histogram and CDF"
        );
        assert!(
            block.contains("c8.ttrace"),
            "{concept}: the second run overlaid"
        );
    }
    // The timeline: a canvas per run, every request drawn (60 each, under the sampling cap).
    let timeline = panel(&dom, "timeline");
    assert_eq!(timeline.matches("<canvas").count(), 2);
    assert!(
        timeline.contains("data-rows=\"120\""),
        "{}",
        &timeline[..400]
    );
    assert_eq!(panel(&dom, "over-time").matches("<svg").count(), 4);
    let diff = panel(&dom, "diff");
    assert!(diff.contains("c8.ttrace") && diff.contains("verdict"));
    let versus = panel(&dom, "versus");
    assert!(versus.contains("time_to_first_token") && versus.contains("ttft_ms"));
    browser::screenshot(&page, &artifact("report.png"), 1400, 4200);
}

#[test]
fn a_capacity_search_report_shows_levels_against_concurrency() {
    let sim = recording::sim(recording::fast_sim());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("search");
    common::tokentrace()
        .timeout(std::time::Duration::from_secs(180))
        .arg("capacity")
        .args(["--url", &sim.base_url(), "--model", "m"])
        .args([
            "--workload",
            "16/4",
            "--slo",
            "time_to_first_token:p95<50ms",
        ])
        .args(["--trials", "1", "--warmups", "0", "--requests", "4"])
        .args(["--max-concurrency", "3"])
        .arg("-o")
        .arg(&dir)
        .assert()
        .success();
    let page = tmp.path().join("capacity.html");
    common::tokentrace()
        .arg("report")
        .arg(&dir)
        .arg("-o")
        .arg(&page)
        .assert()
        .success();
    let dom = open_clean(&page);
    let capacity = panel(&dom, "capacity");
    assert!(
        capacity.contains("data-workload=\"16 / 4\""),
        "{}",
        &capacity[..300]
    );
    assert!(capacity.contains("SLO threshold"), "the SLO line is drawn");
    // The SLO metric, TTFT percentiles and throughput, each against concurrency.
    assert_eq!(capacity.matches("<svg").count(), 3);
    assert!(capacity.contains("maximum passing concurrency"));
    let levels = capacity.matches("<tr><td class=\"num\">").count();
    assert!(levels >= 2, "a row per recorded trial: {levels}");
    browser::screenshot(&page, &artifact("capacity.png"), 1400, 1600);
}

#[test]
fn a_report_of_a_missing_trace_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    common::tokentrace()
        .arg("report")
        .arg(tmp.path().join("nope.ttrace"))
        .arg("-o")
        .arg(tmp.path().join("r.html"))
        .assert()
        .code(2)
        .stderr(predicates::str::contains("nope.ttrace"));
    assert!(!tmp.path().join("r.html").exists(), "nothing half-written");
}

#[test]
fn an_existing_page_is_kept_unless_forced() {
    let sim = recording::sim(recording::fast_sim());
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("run.ttrace");
    record(&sim.base_url(), &trace, "2");
    let page = tmp.path().join("r.html");
    std::fs::write(&page, "mine").unwrap();
    let report = || {
        let mut cmd = common::tokentrace();
        cmd.arg("report").arg(&trace).arg("-o").arg(&page);
        cmd
    };
    common::refused_without_force(&mut report());
    assert_eq!(std::fs::read_to_string(&page).unwrap(), "mine");
    report().arg("--force").assert().success();
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
}
