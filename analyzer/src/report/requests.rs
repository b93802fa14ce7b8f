//! Per-request rows (CSV, JSON Lines) for pandas and DuckDB users.

use super::values_of;
use crate::analysis::Analysis;
use serde_json::{json, Map, Value};
use std::io::{self, Write};

/// One row per request of the analyzed traces (every phase and outcome), ordered by trace and
/// id, with `counted` telling whether it entered the metrics. Rows are made lazily.
pub fn rows<'a>(analysis: &'a Analysis<'a>) -> impl Iterator<Item = Map<String, Value>> + 'a {
    let dataset = analysis.dataset;
    let mut counted = analysis.counted.clone();
    counted.sort_unstable();
    dataset
        .requests
        .iter()
        .enumerate()
        .filter(|(_, r)| analysis.traces.contains(&r.trace))
        .map(move |(i, r)| {
            let mut row = Map::new();
            row.insert(
                "trace".into(),
                json!(dataset.traces[r.trace as usize].label),
            );
            row.insert("id".into(), json!(r.id));
            row.insert(
                "phase".into(),
                json!(format!("{:?}", r.phase).to_lowercase()),
            );
            row.insert("trial".into(), json!(r.trial));
            row.insert("outcome".into(), json!(r.outcome.name()));
            row.insert("http_status".into(), json!(r.http_status));
            row.insert("counted".into(), json!(counted.binary_search(&i).is_ok()));
            row.extend(values_of(analysis, r));
            row.insert("error".into(), json!(r.error));
            row
        })
}

/// Writes rows one at a time as CSV (RFC 4180 quoting; columns from the first row) or JSON
/// Lines.
pub struct RowWriter {
    csv: bool,
    columns: Option<Vec<String>>,
}

impl RowWriter {
    /// A CSV writer (`csv`) or a JSON Lines writer.
    pub fn new(csv: bool) -> RowWriter {
        RowWriter { csv, columns: None }
    }

    /// Writes one row (and, for the first CSV row, the header).
    pub fn write(&mut self, row: &Map<String, Value>, out: &mut dyn Write) -> io::Result<()> {
        if !self.csv {
            serde_json::to_writer(&mut *out, row)?;
            return out.write_all(b"\n");
        }
        if self.columns.is_none() {
            let columns: Vec<String> = row.keys().cloned().collect();
            let header: Vec<String> = columns.iter().map(|c| quote(c)).collect();
            writeln!(out, "{}", header.join(","))?;
            self.columns = Some(columns);
        }
        let cells: Vec<String> = self
            .columns
            .iter()
            .flatten()
            .map(|c| match row.get(c) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => quote(s),
                Some(other) => other.to_string(),
            })
            .collect();
        writeln!(out, "{}", cells.join(","))
    }
}

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(super::quote("plain"), "plain");
        assert_eq!(super::quote("a,b"), "\"a,b\"");
        assert_eq!(super::quote("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
