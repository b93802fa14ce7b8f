//! The table of an analysis made for people: one row per metric with its unit, one column
//! per statistic, then the run-level values, the failures by reason and the SLOs.
//!
//! Every number carries its unit (the metric's from the protocol, an aggregate's from how it
//! is computed, [`crate::summary::aggregate_unit`]) and [`number::DIGITS`] significant
//! digits, counts exact. No line is wider than the terminal ([`layout::terminal_width`]):
//! statistics that do not fit are stacked in a second table.

pub mod layout;
pub mod number;
mod sections;

pub use layout::{terminal_width, Align, Grid};
pub use sections::aggregate_rows;

use crate::analysis::Analysis;
use crate::protocol::Stat;
use crate::summary;
use tokentrace_format::clock::utc_iso8601;

/// Renders one analysis for the terminal's width; `title` (e.g. `[a.tt] `) starts the
/// first line.
pub fn render(analysis: &Analysis<'_>, title: &str) -> String {
    render_width(analysis, title, terminal_width())
}

/// Renders one analysis in lines of at most `width` characters.
pub fn render_width(analysis: &Analysis<'_>, title: &str, width: usize) -> String {
    let mut sections = vec![header(analysis, title, width), statistics(analysis, width)];
    let (aggregates, health) = sections::aggregates(analysis);
    if !aggregates.is_empty() {
        sections.push(aggregates.render(width));
    }
    let mut remarks: Vec<String> = health.into_iter().collect();
    remarks.extend(
        analysis
            .run
            .notes
            .iter()
            .map(|n| format!("note: {}", n.text)),
    );
    if !remarks.is_empty() {
        let wrapped: Vec<String> = remarks.iter().map(|r| layout::wrap(r, width, 2)).collect();
        sections.push(wrapped.join("\n"));
    }
    sections.extend(sections::failures(analysis).map(|g| g.render(width)));
    sections.extend(sections::slos(analysis).map(|g| g.render(width)));
    let mut out = sections
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    out.push('\n');
    out
}

/// The protocol, the traces and when they started, then what was counted.
fn header(analysis: &Analysis<'_>, title: &str, width: usize) -> String {
    let protocol = analysis.protocol;
    let traces: Vec<_> = analysis
        .traces
        .iter()
        .map(|&t| &analysis.dataset.traces[t as usize])
        .collect();
    let labels: Vec<&str> = traces.iter().map(|t| t.label.as_str()).collect();
    let mut parts = vec![
        format!("{title}protocol {} v{}", protocol.name, protocol.version),
        labels.join(", "),
    ];
    let started = traces
        .iter()
        .map(|t| t.manifest.start_realtime_ns)
        .filter(|&ns| ns > 0)
        .min();
    if let Some(ns) = started {
        parts.push(format!("started {}", utc_iso8601(ns)));
    }
    let counts = format!(
        "requests: {} counted, {} failed, {} excluded by phase",
        analysis.run.completed, analysis.run.failed, analysis.excluded_phase
    );
    format!(
        "{}\n{}",
        layout::join_wrapped(&parts, width, 2),
        layout::wrap(&counts, width, 2)
    )
}

/// One row per summarized metric: name, unit, then its statistics, the columns being every
/// statistic any metric has (a metric without one leaves its cell empty).
fn statistics(analysis: &Analysis<'_>, width: usize) -> String {
    let protocol = analysis.protocol;
    let summaries = summary::metrics(protocol, analysis);
    let mut columns: Vec<Stat> = Vec::new();
    for s in &summaries {
        for (stat, _) in &s.stats {
            if !columns.contains(stat) {
                columns.push(*stat);
            }
        }
    }
    let keys: Vec<String> = columns.iter().map(Stat::key).collect();
    let mut header = vec![("metric", Align::Left), ("unit", Align::Left)];
    header.extend(keys.iter().map(|k| (k.as_str(), Align::Right)));
    let mut grid = Grid::new(&header);
    for s in &summaries {
        let def = &protocol.metrics[s.metric];
        let mut row = vec![def.name.clone(), def.unit.clone()];
        for c in &columns {
            row.push(match s.stats.iter().find(|(stat, _)| stat == c) {
                None => String::new(),
                // A count of values is exact; every other statistic is a measurement.
                Some((Stat::Samples, v)) => number::count(*v),
                Some((_, v)) => number::value(*v),
            });
        }
        grid.push(row);
    }
    grid.render_split(2, width)
}
