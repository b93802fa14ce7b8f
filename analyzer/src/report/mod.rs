//! Renders an analysis: JSON in the protocol's layout, a terminal table, per-request CSV/JSONL.

pub mod anvil;
pub mod flat;
pub mod nested;
pub mod requests;
pub mod table;
pub mod versus;

use crate::analysis::Analysis;
use crate::facts::RequestFacts;
use crate::protocol::{Quantity, ReportShape};
use crate::quantity;
use crate::summary::number;
use serde_json::{json, Map, Value};

/// The report of one analysis as JSON, in the protocol's layout.
pub fn json_report(analysis: &Analysis<'_>) -> Value {
    match analysis.protocol.report {
        ReportShape::AnvilBenchmarkV1 => anvil::report(analysis),
        ReportShape::Nested => nested::report(analysis),
        ReportShape::Flat => flat::report(analysis),
    }
}

/// Writes the report of one analysis as pretty JSON (streaming per-request rows where the
/// layout has them), followed by a newline.
pub fn write_json(analysis: &Analysis<'_>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    match analysis.protocol.report {
        ReportShape::AnvilBenchmarkV1 => anvil::write_report(analysis, out)?,
        _ => serde_json::to_writer_pretty(&mut *out, &json_report(analysis))?,
    }
    out.write_all(b"\n")
}

/// A label value as JSON: numbers, booleans, null, objects and arrays when it parses as JSON,
/// otherwise the string itself.
pub fn label_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The protocol's per-request values of counted request `row`, plus its token source.
pub fn request_row(analysis: &Analysis<'_>, row: usize) -> Map<String, Value> {
    values_of(analysis, analysis.request(row))
}

/// The protocol's per-request values of any request.
pub fn values_of(analysis: &Analysis<'_>, r: &RequestFacts) -> Map<String, Value> {
    let protocol = analysis.protocol;
    let mut out = Map::new();
    for (m, def) in protocol.metrics.iter().enumerate() {
        if !def.per_request {
            continue;
        }
        let v = analysis.value_of(r, m);
        let value = match def.quantity {
            // Counts stay integers, as the reports we reproduce print them.
            Quantity::Count { .. } => v.map_or(Value::Null, |v| json!(v as u64)),
            _ => number(v),
        };
        out.insert(def.name.clone(), value);
    }
    let source = quantity::output_tokens(r, &protocol.token_sources).map(|(_, s)| s.name());
    out.insert("output_token_source".into(), json!(source));
    out
}

pub use tokentrace_format::clock::utc_iso8601;

#[cfg(test)]
mod tests {
    #[test]
    fn iso_dates() {
        assert_eq!(super::utc_iso8601(0), "1970-01-01T00:00:00Z");
        // date -u -d @1788580000 → 2026-09-05T03:46:40Z
        assert_eq!(
            super::utc_iso8601(1_788_580_000_000_000_000),
            "2026-09-05T03:46:40Z"
        );
        assert_eq!(
            super::utc_iso8601(951_782_400_000_000_000),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn labels_parse_as_json_when_they_can() {
        assert_eq!(super::label_value("262144"), serde_json::json!(262144));
        assert_eq!(super::label_value("sglang"), serde_json::json!("sglang"));
        assert_eq!(super::label_value("false"), serde_json::json!(false));
    }
}
