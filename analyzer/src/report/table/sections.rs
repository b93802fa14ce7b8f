//! The parts of an analysis's table beyond the metric statistics: run-level aggregates (with
//! goodput and client health as rows of their own), failures grouped by reason, and SLOs.

use super::layout::{Align, Grid};
use super::number;
use crate::analysis::Analysis;
use crate::failures;
use crate::protocol::Aggregate;
use crate::summary::{self, GOODPUT_FIELDS};
use serde_json::Value;

/// The aggregates as a table of (name, value, unit), and the client-health flags when the
/// protocol reports client health.
pub fn aggregates(analysis: &Analysis<'_>) -> (Grid, Option<String>) {
    let (rows, flags) = aggregate_rows(analysis);
    let mut grid = Grid::new(&[
        ("aggregate", Align::Left),
        ("value", Align::Right),
        ("unit", Align::Left),
    ]);
    for row in rows {
        grid.push(row.to_vec());
    }
    (grid, flags)
}

/// The aggregates as rows of (name, value, unit), goodput, token sources and client health
/// one row per field, and the client-health flags when the protocol reports client health:
/// what the terminal table and the HTML report show.
pub fn aggregate_rows(analysis: &Analysis<'_>) -> (Vec<[String; 3]>, Option<String>) {
    let protocol = analysis.protocol;
    let mut rows: Vec<[String; 3]> = Vec::new();
    let mut flags = None;
    let values = summary::aggregates(protocol, analysis, &analysis.run);
    for (def, (key, value)) in protocol.aggregates.iter().zip(values) {
        let mut row = |name: String, value: String, unit: &str| {
            rows.push([name, value, unit.to_string()]);
        };
        match (&def.value, &value) {
            (Aggregate::Goodput, Value::Object(fields)) => {
                for (field, unit) in GOODPUT_FIELDS {
                    let shown = fields.get(field).map_or_else(String::new, number::json);
                    row(format!("{key}.{field}"), shown, unit);
                }
            }
            (Aggregate::Goodput, _) => row(key, number::MISSING.into(), "(no --slo)"),
            (Aggregate::TokenSources, Value::Object(sources)) if !sources.is_empty() => {
                let unit = summary::aggregate_unit(&def.value);
                for (source, n) in sources {
                    row(format!("{key}.{source}"), number::json(n), unit);
                }
            }
            (Aggregate::ClientHealth, _) => {
                for (field, v) in &analysis.run.client_health {
                    let (name, shown, unit) = health_field(field, v);
                    row(format!("{key}.{name}"), shown, &unit);
                }
                let raised = &analysis.run.health_flags;
                flags = Some(if raised.is_empty() {
                    "client health: no flags raised".to_string()
                } else {
                    format!("client health flags: {}", raised.join(", "))
                });
            }
            (kind, v) => row(key, number::json(v), summary::aggregate_unit(kind)),
        }
    }
    (rows, flags)
}

/// One field of the recorder's health report as (name, value, unit). Its fields name their
/// unit by suffix (`cpu_ns`, `max_rss_bytes`, `cpu_ns_per_chunk`, the format's convention),
/// so times are shown in the unit that reads best and sizes in binary units.
fn health_field(field: &str, value: &Value) -> (String, String, String) {
    let Some(n) = value.as_f64() else {
        return (field.to_string(), number::json(value), String::new());
    };
    if let Some(stem) = field.strip_suffix("_ns_per_chunk") {
        let (shown, unit) = number::duration_ns(n);
        return (format!("{stem}_per_chunk"), shown, format!("{unit}/chunk"));
    }
    if let Some(stem) = field.strip_suffix("_ns") {
        let (shown, unit) = number::duration_ns(n);
        return (stem.to_string(), shown, unit.to_string());
    }
    if let (Some(stem), Some(b)) = (field.strip_suffix("_bytes"), value.as_u64()) {
        let (shown, unit) = number::bytes(b);
        return (stem.to_string(), shown, unit.to_string());
    }
    (field.to_string(), number::json(value), String::new())
}

/// Failed requests grouped by reason ([`failures::groups`]); None when no request failed.
pub fn failures(analysis: &Analysis<'_>) -> Option<Grid> {
    let groups = failures::groups(analysis);
    if groups.is_empty() {
        return None;
    }
    let mut grid = Grid::new(&[
        ("failed", Align::Right),
        ("outcome", Align::Left),
        ("http", Align::Right),
        ("error", Align::Left),
    ]);
    for g in groups {
        let status = if g.http_status == 0 {
            number::MISSING.to_string()
        } else {
            g.http_status.to_string()
        };
        grid.push(vec![
            g.count.to_string(),
            g.outcome.to_string(),
            status,
            g.error,
        ]);
    }
    Some(grid)
}

/// Every SLO's run-level value, in its metric's unit, and its verdict; None without SLOs.
pub fn slos(analysis: &Analysis<'_>) -> Option<Grid> {
    if analysis.slos.is_empty() {
        return None;
    }
    let mut grid = Grid::new(&[
        ("slo", Align::Left),
        ("value", Align::Right),
        ("unit", Align::Left),
        ("verdict", Align::Left),
    ]);
    for slo in &analysis.slos {
        let (value, met) = slo.evaluate(analysis);
        let unit = slo
            .metric_index(analysis.protocol)
            .map_or("", |m| analysis.protocol.metrics[m].unit.as_str());
        let verdict = if met { "met" } else { "MISSED" };
        grid.push(vec![
            slo.text.clone(),
            number::value(value),
            unit.to_string(),
            verdict.to_string(),
        ]);
    }
    Some(grid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn health_fields_take_their_unit_from_their_suffix() {
        let field = |k: &str, v: Value| health_field(k, &v);
        assert_eq!(
            field("cpu_ns", json!(30_000_000)),
            ("cpu".into(), "30.00".into(), "ms".into())
        );
        assert_eq!(
            field("cpu_ns_per_chunk", json!(2_500)),
            ("cpu_per_chunk".into(), "2.500".into(), "µs/chunk".into())
        );
        assert_eq!(
            field("max_rss_bytes", json!(15 * 1024 * 1024)),
            ("max_rss".into(), "15.00".into(), "MiB".into())
        );
        assert_eq!(
            field("late_ticks", json!(3)),
            ("late_ticks".into(), "3".into(), String::new())
        );
    }
}
