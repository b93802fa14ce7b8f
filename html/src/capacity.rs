//! The report of a capacity search: per workload, the SLO metric, latency percentiles and
//! throughput against concurrency, the SLO line, and every level's verdict.

use crate::charts::{self, Line};
use crate::page::{esc, table, Page};
use crate::panels::num;
use crate::HtmlError;
use std::fmt::Write;
use tokentrace_analyzer::protocol::Stat;
use tokentrace_capacity::definitions::TTFT;
use tokentrace_capacity::reanalyze::SearchView;
use tokentrace_capacity::report::{TrialData, Verdict};

/// Palette entries of passing and failing levels.
const PASSING: usize = 2;
const FAILING: usize = 3;

/// Output tokens per second of a trial over the protocol's wall clock.
fn throughput(trial: &TrialData) -> Option<f64> {
    let m = &trial.metrics;
    (m.duration_s > 0.0).then(|| m.output_tokens as f64 / m.duration_s)
}

/// The mean of the trials' values (None when no trial has one).
fn mean(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let (sum, n) = values
        .flatten()
        .fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The whole page of a search.
pub fn report(title: &str, view: &SearchView) -> Result<String, HtmlError> {
    let mut page = Page::new(title);
    let slo_text: Vec<String> = view.slos.iter().map(|s| s.slo().text.clone()).collect();
    page.subtitle(&format!(
        "capacity search · protocol {} · SLO {} · {} trial(s) per level",
        view.manifest.protocol,
        slo_text.join(", "),
        view.manifest.settings.trials_per_level
    ));
    let mut html = String::new();
    for (w, data) in view.workloads.iter().enumerate() {
        let judgement = view.judgement(w);
        let _ = write!(
            html,
            "<div class=\"workload\" data-workload=\"{0}\"><h3>{0}</h3>\n<p>maximum passing concurrency <b>{1}</b> · first failing <b>{2}</b>{3}</p>\n",
            esc(&data.workload.label()),
            judgement.maximum_passing.map_or("none".into(), |c| c.to_string()),
            judgement.first_failing.map_or("none".into(), |c| c.to_string()),
            judgement
                .unresolved
                .as_deref()
                .map_or(String::new(), |why| format!(" · unresolved: {}", esc(why)))
        );
        let trials_per_level = view.manifest.settings.trials_per_level;
        let verdicts: Vec<Verdict> = data
            .levels
            .iter()
            .map(|l| l.verdict(trials_per_level))
            .collect();
        html.push_str("<div class=\"pair\">");
        for slo in &view.slos {
            let at = |pass: bool| -> Vec<(f64, f64)> {
                data.levels
                    .iter()
                    .zip(&verdicts)
                    .filter(|(_, v)| (**v == Verdict::Fail) != pass)
                    .filter_map(|(l, _)| {
                        mean(l.trials.iter().map(|t| slo.observe(&t.metrics)))
                            .map(|v| (f64::from(l.concurrency), v))
                    })
                    .collect()
            };
            let all: Vec<(f64, f64)> = data
                .levels
                .iter()
                .filter_map(|l| {
                    mean(l.trials.iter().map(|t| slo.observe(&t.metrics)))
                        .map(|v| (f64::from(l.concurrency), v))
                })
                .collect();
            let s = slo.slo();
            html.push_str(&charts::lines(
                &format!("{} against concurrency (mean over trials)", s.text),
                "concurrency",
                &format!("{} {}", s.metric, s.stat.key()),
                &[
                    Line {
                        label: "every level",
                        points: all,
                        markers: false,
                        markers_only: false,
                        colour: Some(0),
                    },
                    Line {
                        label: "passing or undetermined",
                        points: at(true),
                        markers: true,
                        markers_only: true,
                        colour: Some(PASSING),
                    },
                    Line {
                        label: "failing",
                        points: at(false),
                        markers: true,
                        markers_only: true,
                        colour: Some(FAILING),
                    },
                ],
                Some((s.threshold, "SLO threshold")),
            )?);
        }
        let stats = [
            Stat::Percentile(50.0),
            Stat::Percentile(95.0),
            Stat::Percentile(99.0),
        ];
        let names = ["p50", "p95", "p99"];
        let percentiles: Vec<Line<'_>> = stats
            .iter()
            .zip(names)
            .map(|(stat, name)| Line {
                label: name,
                points: data
                    .levels
                    .iter()
                    .filter_map(|l| {
                        mean(
                            l.trials
                                .iter()
                                .map(|t| t.metrics.statistics(TTFT, &[*stat])[0]),
                        )
                        .map(|v| (f64::from(l.concurrency), v))
                    })
                    .collect(),
                markers: true,
                markers_only: false,
                colour: None,
            })
            .collect();
        html.push_str(&charts::lines(
            "TTFT percentiles against concurrency",
            "concurrency",
            "ms",
            &percentiles,
            None,
        )?);
        html.push_str(&charts::lines(
            "Output throughput against concurrency",
            "concurrency",
            "output tokens/s",
            &[Line {
                label: "output tokens/s",
                points: data
                    .levels
                    .iter()
                    .filter_map(|l| {
                        mean(l.trials.iter().map(throughput)).map(|v| (f64::from(l.concurrency), v))
                    })
                    .collect(),
                markers: true,
                markers_only: false,
                colour: None,
            }],
            None,
        )?);
        html.push_str("</div>\n");
        let mut header = vec!["concurrency".to_string(), "trial".into(), "verdict".into()];
        header.extend(view.slos.iter().map(|s| s.slo().text.clone()));
        header.extend([
            "TTFT p95 ms".into(),
            "output tokens/s".into(),
            "errors".into(),
        ]);
        let mut rows = Vec::new();
        for (level, verdict) in data.levels.iter().zip(&verdicts) {
            for trial in &level.trials {
                let mut row = vec![
                    level.concurrency.to_string(),
                    trial.trial.to_string(),
                    match (trial.passed, verdict) {
                        (false, _) => "<span class=\"fail\">fail</span>".into(),
                        (true, Verdict::Undetermined) => "pass (level undetermined)".into(),
                        (true, _) => "<span class=\"pass\">pass</span>".into(),
                    },
                ];
                row.extend(view.slos.iter().map(|s| num(s.observe(&trial.metrics))));
                row.push(num(trial
                    .metrics
                    .statistics(TTFT, &[Stat::Percentile(95.0)])[0]));
                row.push(num(throughput(trial)));
                row.push(trial.correctness.errors.to_string());
                rows.push(row);
            }
        }
        let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut numeric = vec![true, true, false];
        numeric.extend(std::iter::repeat_n(true, header.len() - 3));
        html.push_str(&table(&header_refs, &rows, &numeric));
        html.push_str("</div>\n");
    }
    if view.workloads.is_empty() {
        html.push_str("<p>The search recorded no workload.</p>");
    }
    page.section("capacity", "Capacity search", &html);
    Ok(page.finish())
}
