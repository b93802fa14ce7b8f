//! The panels of a traces report, each one `<section>` of the page.

use crate::charts::{self, css_colour, Line, Series};
use crate::model;
use crate::page::{esc, table, Page};
use crate::{HtmlError, Run, VersusInput};
use serde_json::{json, Value};
use std::fmt::Write;
use tokentrace_analyzer::compare::{self, CompareOptions};
use tokentrace_analyzer::failures;
use tokentrace_analyzer::protocol::{Concept, Stat};
use tokentrace_analyzer::report::table::{aggregate_rows, number};
use tokentrace_analyzer::summary;

/// The concepts drawn as distributions.
const DISTRIBUTIONS: [Concept; 4] = [Concept::Ttft, Concept::Itl, Concept::Tpot, Concept::E2e];

/// A measured value as every table shows it: four significant digits, `-` when absent.
pub fn num(v: Option<f64>) -> String {
    number::value(v)
}

/// A number and its unit.
fn with_unit(v: Option<f64>, unit: &str) -> String {
    match v.filter(|v| v.is_finite()) {
        None => "-".into(),
        Some(_) if unit.is_empty() => num(v),
        Some(_) => format!("{} {}", num(v), esc(unit)),
    }
}

/// The run's name, in its colour.
fn swatch(i: usize, label: &str) -> String {
    format!(
        "<span class=\"run\" style=\"border-color:{}\">{}</span>",
        css_colour(i),
        esc(label)
    )
}

/// The protocol's statistics of every metric, a row per metric and run, then the aggregates,
/// SLO verdicts and notes of each run.
pub fn summary(page: &mut Page, runs: &[Run<'_>]) {
    let Some(first) = runs.first() else {
        page.section("summary", "Summary", "<p>No trace.</p>");
        return;
    };
    let protocol = first.analysis.protocol;
    let per_run: Vec<_> = runs
        .iter()
        .map(|r| summary::metrics(protocol, &r.analysis))
        .collect();
    let mut columns: Vec<Stat> = Vec::new();
    for s in per_run.iter().flatten() {
        for (stat, _) in &s.stats {
            if !columns.contains(stat) {
                columns.push(*stat);
            }
        }
    }
    let mut header = vec!["metric".to_string(), "run".to_string(), "unit".to_string()];
    header.extend(columns.iter().map(|c| protocol.stat_key(*c)));
    let mut rows = Vec::new();
    for (k, s) in per_run[0].iter().enumerate() {
        let def = &protocol.metrics[s.metric];
        for (i, run) in per_run.iter().enumerate() {
            let Some(stats) = run.get(k) else { continue };
            let mut row = vec![
                if i == 0 {
                    esc(&def.name)
                } else {
                    String::new()
                },
                swatch(i, &runs[i].label),
                esc(&def.unit),
            ];
            for c in &columns {
                row.push(match stats.stats.iter().find(|(stat, _)| stat == c) {
                    None => String::new(),
                    Some((Stat::Samples, v)) => number::count(*v),
                    Some((_, v)) => num(*v),
                });
            }
            rows.push(row);
        }
    }
    let header_refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut numeric = vec![false, false, false];
    numeric.extend(columns.iter().map(|_| true));
    let mut html = table(&header_refs, &rows, &numeric);
    for (i, run) in runs.iter().enumerate() {
        let a = &run.analysis;
        let _ = write!(
            html,
            "<h3>{}</h3>\n<p>{} counted · {} failed · {} excluded by phase</p>\n",
            swatch(i, &run.label),
            a.run.completed,
            a.run.failed,
            a.excluded_phase
        );
        let (aggregates, flags) = aggregate_rows(a);
        let aggregates: Vec<Vec<String>> = aggregates
            .iter()
            .map(|[name, value, unit]| vec![esc(name), esc(value), esc(unit)])
            .collect();
        if !aggregates.is_empty() {
            html.push_str(&table(
                &["aggregate", "value", "unit"],
                &aggregates,
                &[false, true, false],
            ));
        }
        if let Some(flags) = flags {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", esc(&flags));
        }
        for slo in &a.slos {
            let (value, met) = slo.evaluate(a);
            let _ = writeln!(
                html,
                "<p class=\"slo {}\">SLO {}: {} — {}</p>",
                if met { "met" } else { "missed" },
                esc(&slo.text),
                num(value),
                if met { "met" } else { "missed" }
            );
        }
        for note in &a.run.notes {
            let _ = writeln!(html, "<p class=\"note\">{}</p>", esc(&note.text));
        }
    }
    page.section("summary", "Summary", &html);
}

/// Failed requests grouped by outcome and error, per run.
pub fn failures(page: &mut Page, runs: &[Run<'_>]) {
    let mut rows = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        for g in failures::groups(&run.analysis) {
            let status = if g.http_status == 0 {
                number::MISSING.to_string()
            } else {
                g.http_status.to_string()
            };
            rows.push(vec![
                swatch(i, &run.label),
                esc(g.outcome),
                status,
                esc(&g.error),
                g.count.to_string(),
            ]);
        }
    }
    let html = if rows.is_empty() {
        "<p>No request failed.</p>".to_string()
    } else {
        table(
            &["run", "outcome", "http", "error", "requests"],
            &rows,
            &[false, false, true, false, true],
        )
    };
    page.section("failures", "Failures", &html);
}

/// Histogram and CDF of TTFT, ITL (per gap), TPOT and E2E, every run overlaid.
pub fn distributions(page: &mut Page, runs: &[Run<'_>]) -> Result<(), HtmlError> {
    let mut html = String::new();
    for concept in DISTRIBUTIONS {
        let samples: Vec<_> = runs
            .iter()
            .map(|r| model::samples(&r.analysis, concept))
            .collect();
        let Some(first) = samples.iter().flatten().next() else {
            let _ = writeln!(
                html,
                "<div class=\"dist\" data-concept=\"{0}\"><h3>{0}</h3><p>The protocol defines no {0}.</p></div>",
                concept.title()
            );
            continue;
        };
        let series: Vec<Series<'_>> = runs
            .iter()
            .zip(&samples)
            .map(|(run, s)| Series {
                label: &run.label,
                values: s.as_ref().map_or(&[][..], |s| &s.values[..]),
            })
            .collect();
        let title = concept.title();
        let _ = writeln!(
            html,
            "<div class=\"dist\" data-concept=\"{}\"><h3>{} <small>({}, {} samples)</small></h3>\n<div class=\"pair\">{}{}</div></div>",
            esc(title),
            esc(title),
            esc(&first.source),
            series.iter().map(|s| s.values.len()).sum::<usize>(),
            charts::histogram(title, &first.unit, &series)?,
            charts::cdf(title, &first.unit, &series)?
        );
    }
    page.section("distributions", "Distributions", &html);
    Ok(())
}

/// The request timeline: rows for the script to draw, per run.
pub fn timeline(page: &mut Page, runs: &[Run<'_>]) {
    let mut data = Vec::new();
    let mut notes = String::new();
    for (i, run) in runs.iter().enumerate() {
        for &t in &run.analysis.traces {
            let (rows, total) = model::timeline(&run.analysis, t);
            if rows.len() < total {
                let _ = write!(
                    notes,
                    "<p>{}: {} of {} requests shown, evenly sampled in send order.</p>",
                    swatch(i, &run.label),
                    rows.len(),
                    total
                );
            }
            let rows: Vec<Value> = rows
                .iter()
                .map(|r| {
                    json!([
                        r.id,
                        round3(r.intended),
                        round3(r.send),
                        r.first_output.map(round3),
                        r.first_content.map(round3),
                        round3(r.end),
                        u8::from(r.failed)
                    ])
                })
                .collect();
            data.push(json!({
                "label": run.label,
                "colour": css_colour(i),
                "total": total,
                "rows": rows,
            }));
        }
    }
    page.data("timeline-data", &Value::Array(data).to_string());
    let html = format!(
        "<p class=\"legend\"><span class=\"k wait\"></span>waiting (intended start → send) \
         <span class=\"k prefill\"></span>prefill (send → first output) \
         <span class=\"k decode\"></span>decode (first output → end) \
         <span class=\"k content\"></span>first content \
         <span class=\"k failed\"></span>failed</p>\n{notes}\
         <p class=\"hint\">Wheel: zoom time · shift+wheel: zoom rows · drag: pan · double-click: reset · hover: request.</p>\n\
         <div id=\"timeline-host\"></div><p id=\"timeline-tip\" class=\"tip\"></p>"
    );
    page.section("timeline", "Timeline", &html);
}

/// Milliseconds to the microsecond, so the embedded rows stay short.
fn round3(ms: f64) -> f64 {
    (ms * 1000.0).round() / 1000.0
}

/// Output chunks per second, requests in flight, completions and errors over the run.
pub fn over_time(page: &mut Page, runs: &[Run<'_>]) -> Result<(), HtmlError> {
    let mut series = Vec::new();
    for run in runs {
        for &t in &run.analysis.traces {
            series.push((run.label.as_str(), model::over_time(&run.analysis, t)?));
        }
    }
    let line = |pick: fn(&model::OverTime) -> &Vec<f64>| -> Vec<Line<'_>> {
        series
            .iter()
            .map(|(label, s)| Line {
                label,
                points: pick(s)
                    .iter()
                    .enumerate()
                    .map(|(b, &y)| ((b as f64 + 0.5) * s.bin_s, y))
                    .collect(),
                markers: false,
                markers_only: false,
                colour: None,
            })
            .collect()
    };
    let bin = series.first().map_or(0.0, |(_, s)| s.bin_s);
    let mut html = format!(
        "<p>Bins of {} s from each run's first send; throughput counts every streamed output chunk at its arrival.</p>\n<div class=\"pair\">",
        num(Some(bin))
    );
    html.push_str(&charts::lines(
        "Output chunks per second",
        "s since first send",
        "chunks/s",
        &line(|s| &s.output_chunks_per_s),
        None,
    )?);
    html.push_str(&charts::lines(
        "Requests in flight",
        "s since first send",
        "requests (bin average)",
        &line(|s| &s.in_flight),
        None,
    )?);
    html.push_str(&charts::lines(
        "Completed requests per second",
        "s since first send",
        "requests/s",
        &line(|s| &s.completions_per_s),
        None,
    )?);
    html.push_str(&charts::lines(
        "Failed requests per bin",
        "s since first send",
        "requests",
        &line(|s| &s.errors),
        None,
    )?);
    html.push_str("</div>");
    page.section("over-time", "Over time", &html);
    Ok(())
}

/// Each run against the first, as `tokentrace diff` judges it.
pub fn diff(page: &mut Page, runs: &[Run<'_>]) {
    let options = CompareOptions::default();
    let mut html = String::new();
    let base = &runs[0];
    for (i, run) in runs.iter().enumerate().skip(1) {
        let changes = compare::compare(&base.analysis, &run.analysis, &options);
        let rows: Vec<Vec<String>> = changes
            .iter()
            .map(|c| {
                let ci = c.median_diff_ci.map_or("-".into(), |(lo, hi)| {
                    format!("[{}, {}]", num(Some(lo)), num(Some(hi)))
                });
                vec![
                    esc(&c.metric),
                    with_unit(c.median.0, &c.unit),
                    with_unit(c.median.1, &c.unit),
                    c.median_change_pct()
                        .map_or("-".into(), |p| format!("{p:+.2}%")),
                    ci,
                    num(c.p_value),
                    format!(
                        "<span class=\"verdict {0}\">{0}</span>",
                        if c.beyond_noise { c.direction } else { "same" }
                    ),
                ]
            })
            .collect();
        let _ = writeln!(
            html,
            "<h3>{} versus {}</h3>",
            swatch(i, &run.label),
            swatch(0, &base.label)
        );
        html.push_str(&table(
            &[
                "metric",
                "median A",
                "median B",
                "change",
                "CI of the difference",
                "p",
                "verdict",
            ],
            &rows,
            &[false, true, true, true, true, true, false],
        ));
    }
    let _ = write!(
        html,
        "<p>A metric moves beyond noise when the {:.0}% bootstrap interval of the difference of medians excludes 0 and the Mann-Whitney p-value is below {:.2} ({} resamples, seeded).</p>",
        options.confidence * 100.0,
        1.0 - options.confidence,
        options.resamples
    );
    page.section("diff", "Differences", &html);
}

/// The first run under a second protocol, metric by metric.
pub fn versus(page: &mut Page, input: &VersusInput<'_>) {
    let v = &input.versus;
    let mut html = format!(
        "<p>{} (A) versus {} (B): {} / {} requests counted, {} / {} failed.</p>\n",
        esc(&v.protocol_a),
        esc(&v.protocol_b),
        v.counted.0,
        v.counted.1,
        v.failed.0,
        v.failed.1
    );
    let rules: Vec<Vec<String>> = v
        .rules
        .iter()
        .map(|r| {
            if r.a == r.b {
                vec![esc(r.topic), "same".into(), String::new()]
            } else {
                vec![esc(r.topic), esc(&r.a), esc(&r.b)]
            }
        })
        .collect();
    html.push_str(&table(&["rule", "A", "B"], &rules, &[false; 3]));
    let mut rows = Vec::new();
    for pair in &v.metrics {
        let (na, nb) = v.names(pair, input.a, input.b);
        let definition = if pair.same_definition() {
            format!("same: {}", esc(pair.definition_a.as_deref().unwrap_or("")))
        } else {
            format!(
                "A: {}<br>B: {}",
                esc(pair.definition_a.as_deref().unwrap_or("—")),
                esc(pair.definition_b.as_deref().unwrap_or("—"))
            )
        };
        let moves: Vec<String> = pair
            .stats
            .iter()
            .filter(|s| matches!(s.stat, Stat::Mean | Stat::Median | Stat::Percentile(_)))
            .map(|s| {
                format!(
                    "{} {} → {} ({})",
                    esc(&input.a.stat_key(s.stat)),
                    num(s.a),
                    num(s.b),
                    s.change_pct().map_or("-".into(), |p| format!("{p:+.2}%"))
                )
            })
            .collect();
        rows.push(vec![
            esc(pair.concept.map_or("", |c| c.title())),
            esc(na.unwrap_or("—")),
            esc(nb.unwrap_or("—")),
            esc(&pair.unit),
            definition,
            moves.join("<br>"),
        ]);
    }
    html.push_str(&table(
        &["concept", "A", "B", "unit", "definitions", "values A → B"],
        &rows,
        &[false; 6],
    ));
    let aggregates: Vec<Vec<String>> = v
        .aggregates
        .iter()
        .map(|g| {
            vec![
                esc(&g.key_a),
                esc(&g.key_b),
                with_unit(g.a, g.unit),
                with_unit(g.b, g.unit),
                g.change_pct().map_or("-".into(), |p| format!("{p:+.2}%")),
            ]
        })
        .collect();
    if !aggregates.is_empty() {
        html.push_str("<h3>Run-level values computed alike</h3>\n");
        html.push_str(&table(
            &["A", "B", "value A", "value B", "change"],
            &aggregates,
            &[false, false, true, true, true],
        ));
    }
    page.section("versus", "Methodology", &html);
}
