//! A readable terminal table: one row per metric, one column per statistic.

use crate::analysis::Analysis;
use crate::protocol::Stat;
use crate::summary;
use serde_json::Value;
use std::fmt::Write;

/// Renders one analysis.
pub fn render(analysis: &Analysis<'_>, title: &str) -> String {
    let protocol = analysis.protocol;
    let mut out = String::new();
    let traces: Vec<&str> = analysis
        .traces
        .iter()
        .map(|&t| analysis.dataset.traces[t as usize].label.as_str())
        .collect();
    let _ = writeln!(
        out,
        "{title}protocol {} v{} · {} counted, {} failed, {} excluded by phase · {}",
        protocol.name,
        protocol.version,
        analysis.run.completed,
        analysis.run.failed,
        analysis.excluded_phase,
        traces.join(", ")
    );
    let summaries = summary::metrics(protocol, analysis);
    let mut columns: Vec<Stat> = Vec::new();
    for s in &summaries {
        for (stat, _) in &s.stats {
            if !columns.contains(stat) {
                columns.push(*stat);
            }
        }
    }
    let name_width = summaries
        .iter()
        .map(|s| protocol.metrics[s.metric].name.len())
        .chain(std::iter::once(6))
        .max()
        .unwrap_or(6);
    let _ = write!(out, "{:<name_width$}  {:<6}", "metric", "unit");
    for c in &columns {
        let _ = write!(out, " {:>11}", c.key());
    }
    out.push('\n');
    for s in &summaries {
        let def = &protocol.metrics[s.metric];
        let _ = write!(out, "{:<name_width$}  {:<6}", def.name, def.unit);
        for c in &columns {
            let cell = match s.stats.iter().find(|(stat, _)| stat == c) {
                None => String::new(),
                Some((_, None)) => "-".to_string(),
                Some((Stat::Samples, Some(v))) => format!("{}", *v as u64),
                Some((_, Some(v))) => format_number(*v),
            };
            let _ = write!(out, " {cell:>11}");
        }
        out.push('\n');
    }
    let aggregates = summary::aggregates(protocol, analysis, &analysis.run);
    if !aggregates.is_empty() {
        out.push('\n');
        let width = aggregates.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (key, value) in aggregates {
            let text = match value {
                Value::Number(n) => n.as_f64().map_or_else(
                    || n.to_string(),
                    |f| {
                        if n.is_f64() {
                            format_number(f)
                        } else {
                            n.to_string()
                        }
                    },
                ),
                Value::Null => "-".to_string(),
                other => other.to_string(),
            };
            let _ = writeln!(out, "{key:<width$}  {text}");
        }
    }
    for note in &analysis.run.notes {
        let _ = writeln!(out, "note: {}", note.text);
    }
    for slo in &analysis.slos {
        let (value, met) = slo.evaluate(analysis);
        let shown = value.map_or("-".to_string(), format_number);
        let verdict = if met { "met" } else { "MISSED" };
        let _ = writeln!(out, "slo {:<24} {shown:>11}  {verdict}", slo.text);
    }
    out
}

/// Three decimals, or fewer significant digits for large values, so columns stay narrow.
fn format_number(v: f64) -> String {
    if v.abs() >= 1e6 {
        format!("{v:.0}")
    } else if v.abs() >= 1e3 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}
