//! `requests.parquet`: one row per request, its facts and the protocol's per-request values.
//!
//! The metric columns are the values of `analyze --format csv`: each row comes from
//! [`requests::rows`], so every metric has one definition, the analyzer's.

use super::table::{Cell, ColumnDef, Kind, Table};
use crate::error::ExportError;
use crate::run::{labels_json, RunColumns};
use parquet::file::metadata::KeyValue;
use serde_json::{Map, Value};
use std::path::Path;
use tokentrace_analyzer::analysis::Analysis;
use tokentrace_analyzer::facts::RequestFacts;
use tokentrace_analyzer::protocol::{Protocol, Quantity};
use tokentrace_analyzer::report::requests;

/// Rows per row group: a few MB of buffered columns.
const ROW_GROUP_ROWS: usize = 64 * 1024;

/// The columns before the metrics, in file order.
pub fn fixed_columns() -> Vec<ColumnDef> {
    use Kind::*;
    let r = ColumnDef::required;
    let n = ColumnDef::nullable;
    vec![
        r("trace_index", Int32),
        r("trace", Str),
        r("trace_path", Str),
        n("run_id", Str),
        r("model", Str),
        r("anchor_realtime_ns", Int64),
        r("labels", Str),
        r("protocol", Str),
        r("id", Int64),
        r("phase", Str),
        r("trial", Int64),
        r("counted", Bool),
        r("outcome", Str),
        r("http_status", Int32),
        n("error", Str),
        r("retries", Int32),
        r("intended_ns", Int64),
        r("send_ns", Int64),
        n("headers_ns", Int64),
        n("first_output_ns", Int64),
        n("first_content_ns", Int64),
        n("last_content_ns", Int64),
        r("end_ns", Int64),
        n("usage_prompt_tokens", Int64),
        n("usage_completion_tokens", Int64),
        n("usage_reasoning_tokens", Int64),
        n("usage_cached_tokens", Int64),
        n("planned_input_tokens", Int64),
        r("chunks", Int64),
    ]
}

/// The per-request metric columns of `protocol`, in the order `analyze` prints them: counts
/// as INT64, everything else as DOUBLE, all nullable; then `output_token_source`.
pub fn metric_columns(protocol: &Protocol) -> Vec<ColumnDef> {
    let mut columns: Vec<ColumnDef> = protocol
        .metrics
        .iter()
        .filter(|m| m.per_request)
        .map(|m| {
            let kind = match m.quantity {
                Quantity::Count { .. } => Kind::Int64,
                _ => Kind::Double,
            };
            ColumnDef::nullable(&m.name, kind)
        })
        .collect();
    columns.push(ColumnDef::nullable("output_token_source", Kind::Str));
    columns
}

/// Every column of `requests.parquet` under `protocol`; an error when a metric's name is
/// taken.
pub fn columns(protocol: &Protocol) -> Result<Vec<ColumnDef>, ExportError> {
    let mut all = fixed_columns();
    for metric in metric_columns(protocol) {
        if all.iter().any(|c| c.name == metric.name) {
            return Err(ExportError::Schema(format!(
                "protocol {}: per-request metric {:?} has the name of another column of \
                 requests.parquet; rename the metric",
                protocol.name, metric.name
            )));
        }
        all.push(metric);
    }
    Ok(all)
}

/// Writes every request of `analysis` to `path` (through its partial name `file`); returns
/// the rows written.
pub fn write(
    analysis: &Analysis<'_>,
    runs: &[RunColumns],
    file: &Path,
    path: &Path,
) -> Result<u64, ExportError> {
    let protocol = analysis.protocol;
    let defs = columns(protocol)?;
    let metrics: Vec<ColumnDef> = defs[fixed_columns().len()..].to_vec();
    let protocol_name = format!("{}@{}", protocol.name, protocol.version);
    let metadata = vec![KeyValue::new(
        "tokentrace.protocol".to_string(),
        protocol_name.clone(),
    )];
    let mut table = Table::create(file, path, defs, metadata, ROW_GROUP_ROWS)?;
    let dataset = analysis.dataset;
    let labels: Vec<String> = dataset
        .traces
        .iter()
        .map(|t| labels_json(&t.manifest))
        .collect();
    // `rows` walks the analyzed requests in dataset order; the same walk here pairs each row
    // with its facts for the columns the row does not carry (times, usage).
    let facts = dataset
        .requests
        .iter()
        .filter(|r| analysis.traces.contains(&r.trace));
    for (row, r) in requests::rows(analysis).zip(facts) {
        if row.get("id").and_then(Value::as_u64) != Some(r.id) {
            return Err(ExportError::Schema(format!(
                "request rows and facts disagree at request {}",
                r.id
            )));
        }
        let t = r.trace as usize;
        let run = runs
            .get(t)
            .ok_or_else(|| ExportError::Schema(format!("request {} belongs to no trace", r.id)))?;
        let mut cells = run_cells(run);
        let trace = &dataset.traces[t];
        cells.push(Cell::text(Some(&trace.manifest.model)));
        cells.push(Cell::u64(
            "anchor_realtime_ns",
            Some(trace.header.anchor.realtime_ns),
        )?);
        cells.push(Cell::text(Some(&labels[t])));
        cells.push(Cell::text(Some(&protocol_name)));
        cells.extend(request_cells(&row, r)?);
        for metric in &metrics {
            cells.push(metric_cell(&row, metric)?);
        }
        table.push_row(cells)?;
    }
    table.finish()
}

/// The run columns shared with `chunks.parquet`.
fn run_cells(run: &RunColumns) -> Vec<Cell> {
    vec![
        Cell::I32(Some(i32::try_from(run.trace_index).unwrap_or(i32::MAX))),
        Cell::text(Some(&run.trace)),
        Cell::text(Some(&run.trace_path)),
        Cell::text(run.run_id.as_deref()),
    ]
}

/// The request's own columns, `id` through `chunks`.
fn request_cells(row: &Map<String, Value>, r: &RequestFacts) -> Result<Vec<Cell>, ExportError> {
    let text = |key: &str| row.get(key).and_then(Value::as_str).map(str::to_string);
    let tokens = |v: Option<u32>| Cell::I64(v.map(i64::from));
    Ok(vec![
        Cell::u64("id", Some(r.id))?,
        Cell::text(text("phase").as_deref()),
        Cell::I64(Some(i64::from(r.trial))),
        Cell::Bool(row.get("counted").and_then(Value::as_bool)),
        Cell::text(text("outcome").as_deref()),
        Cell::I32(Some(i32::from(r.http_status))),
        Cell::text(text("error").as_deref()),
        Cell::I32(Some(i32::from(r.retries))),
        Cell::u64("intended_ns", Some(r.intended_ns))?,
        Cell::u64("send_ns", Some(r.send_ns))?,
        Cell::u64("headers_ns", r.headers_ns)?,
        Cell::u64("first_output_ns", r.first_output_ns)?,
        Cell::u64("first_content_ns", r.first_content_ns)?,
        Cell::u64("last_content_ns", r.last_content_ns)?,
        Cell::u64("end_ns", Some(r.end_ns))?,
        tokens(r.usage.prompt_tokens),
        tokens(r.usage.completion_tokens),
        tokens(r.usage.reasoning_tokens),
        tokens(r.usage.cached_tokens),
        tokens(r.planned_input_tokens),
        Cell::I64(Some(i64::from(r.total_chunks))),
    ])
}

/// A metric's cell from the row `analyze` prints.
fn metric_cell(row: &Map<String, Value>, column: &ColumnDef) -> Result<Cell, ExportError> {
    let value = row.get(&column.name).unwrap_or(&Value::Null);
    let wrong = || {
        ExportError::Schema(format!(
            "per-request value {} = {value} does not fit a {:?} column",
            column.name, column.kind
        ))
    };
    if value.is_null() {
        return Ok(match column.kind {
            Kind::Int64 => Cell::I64(None),
            Kind::Str => Cell::Str(None),
            _ => Cell::F64(None),
        });
    }
    match column.kind {
        Kind::Int64 => Cell::u64(&column.name, Some(value.as_u64().ok_or_else(wrong)?)),
        Kind::Str => Ok(Cell::text(Some(value.as_str().ok_or_else(wrong)?))),
        _ => Ok(Cell::F64(Some(value.as_f64().ok_or_else(wrong)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokentrace_analyzer::protocol::builtin;

    #[test]
    fn every_builtin_protocol_makes_a_table() {
        for protocol in builtin::all().unwrap() {
            let columns = columns(&protocol).unwrap();
            assert!(columns.len() > fixed_columns().len(), "{}", protocol.name);
            assert_eq!(columns.last().unwrap().name, "output_token_source");
        }
    }

    #[test]
    fn a_metric_named_like_a_fixed_column_is_refused() {
        let mut protocol = builtin::resolve(None, None).unwrap();
        let metric = protocol.metrics.iter_mut().find(|m| m.per_request).unwrap();
        metric.name = "send_ns".into();
        let err = columns(&protocol).unwrap_err();
        assert!(err.to_string().contains("send_ns"), "{err}");
    }

    #[test]
    fn metric_cells_keep_the_row_values() {
        let row: Map<String, Value> = json!({"ttft": 12.5, "n": 7, "src": "usage", "x": null})
            .as_object()
            .unwrap()
            .clone();
        let double = ColumnDef::nullable("ttft", Kind::Double);
        assert!(matches!(metric_cell(&row, &double).unwrap(), Cell::F64(Some(v)) if v == 12.5));
        let count = ColumnDef::nullable("n", Kind::Int64);
        assert!(matches!(
            metric_cell(&row, &count).unwrap(),
            Cell::I64(Some(7))
        ));
        let missing = ColumnDef::nullable("x", Kind::Double);
        assert!(matches!(
            metric_cell(&row, &missing).unwrap(),
            Cell::F64(None)
        ));
        let text = ColumnDef::nullable("src", Kind::Str);
        assert!(matches!(
            metric_cell(&row, &text).unwrap(),
            Cell::Str(Some(_))
        ));
        assert!(metric_cell(&row, &ColumnDef::nullable("src", Kind::Int64)).is_err());
    }
}
