//! AIPerf's `profile_export.jsonl`: per-request metrics as AIPerf computed them. The importer
//! takes from it what the raw file lacks: AIPerf's own (tokenizer) token counts and the HTTP
//! trace (response headers and when they arrived).

use crate::error::Issue;
use crate::fields::{json_lines, lookup, Ctx};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::Path;

/// Per-request metrics whose values are token counts AIPerf counted itself.
const COUNT_METRICS: [&str; 4] = [
    "output_sequence_length",
    "output_token_count",
    "reasoning_token_count",
    "input_sequence_length",
];

/// What the importer uses of one `profile_export.jsonl` line.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RecordInfo {
    /// AIPerf's token counts (`COUNT_METRICS` present on the line).
    pub counts: Map<String, Value>,
    /// `trace_data.response_headers_received_ns` (wall clock).
    pub headers_received_ns: Option<u64>,
    /// `trace_data.response_headers`, names lower-cased.
    pub response_headers: Vec<(String, String)>,
}

impl RecordInfo {
    /// AIPerf's output sequence length (content plus reasoning tokens, its tokenizer).
    pub fn output_sequence_length(&self) -> Option<u64> {
        self.counts
            .get("output_sequence_length")
            .and_then(Value::as_u64)
    }

    /// AIPerf's input sequence length.
    pub fn input_sequence_length(&self) -> Option<u64> {
        self.counts
            .get("input_sequence_length")
            .and_then(Value::as_u64)
    }
}

/// Reads the file's lines into a map keyed by `metadata.x_request_id`; bad lines are issues.
pub(crate) fn parse(path: &Path, text: &str) -> (HashMap<String, RecordInfo>, Vec<Issue>) {
    let mut map = HashMap::new();
    let mut issues = Vec::new();
    for (ctx, value) in json_lines(path, text, &mut issues) {
        match parse_line(&value, ctx) {
            Ok((id, info)) => {
                map.insert(id, info);
            }
            Err(issue) => issues.push(issue),
        }
    }
    (map, issues)
}

fn parse_line(value: &Value, ctx: Ctx<'_>) -> Result<(String, RecordInfo), Issue> {
    let id = lookup(value, "metadata.x_request_id")
        .and_then(Value::as_str)
        .ok_or_else(|| ctx.issue("metadata.x_request_id", "missing or not a string"))?
        .to_string();
    let mut info = RecordInfo::default();
    for name in COUNT_METRICS {
        let path = format!("metrics.{name}.value");
        let Some(v) = lookup(value, &path) else {
            continue;
        };
        let count = v
            .as_f64()
            .filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x < 1e15)
            .ok_or_else(|| ctx.issue(&path, "expected a non-negative whole number"))?;
        info.counts
            .insert(name.to_string(), Value::from(count as u64));
    }
    // AIPerf leaves reasoning_token_count out when there was no reasoning text; OSL is
    // content plus reasoning, so the difference is the reasoning count it used.
    if !info.counts.contains_key("reasoning_token_count") {
        let osl = info
            .counts
            .get("output_sequence_length")
            .and_then(Value::as_u64);
        let out = info
            .counts
            .get("output_token_count")
            .and_then(Value::as_u64);
        if let (Some(osl), Some(out)) = (osl, out) {
            info.counts.insert(
                "reasoning_token_count".into(),
                Value::from(osl.saturating_sub(out)),
            );
        }
    }
    info.headers_received_ns =
        lookup(value, "trace_data.response_headers_received_ns").and_then(Value::as_u64);
    if let Some(headers) = lookup(value, "trace_data.response_headers").and_then(Value::as_object) {
        info.response_headers = headers
            .iter()
            .filter_map(|(k, v)| Some((k.to_ascii_lowercase(), v.as_str()?.to_string())))
            .collect();
    }
    Ok((id, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counts_and_headers_and_reports_bad_lines() {
        let text = concat!(
            r#"{"metadata":{"x_request_id":"a"},"metrics":{"output_sequence_length":{"value":64,"unit":"tokens"},"#,
            r#""output_token_count":{"value":60,"unit":"tokens"}},"trace_data":{"response_headers_received_ns":5,"#,
            r#""response_headers":{"Content-Type":"text/event-stream"}}}"#,
            "\n{broken\n",
            r#"{"metadata":{"x_request_id":"b"},"metrics":{"output_sequence_length":{"value":-1}}}"#,
            "\n"
        );
        let (map, issues) = parse(Path::new("profile_export.jsonl"), text);
        let a = &map["a"];
        assert_eq!(a.output_sequence_length(), Some(64));
        assert_eq!(
            a.counts.get("reasoning_token_count"),
            Some(&Value::from(4u64))
        );
        assert_eq!(a.headers_received_ns, Some(5));
        assert_eq!(
            a.response_headers,
            vec![("content-type".to_string(), "text/event-stream".to_string())]
        );
        assert_eq!(issues.len(), 2);
        assert_eq!(issues[0].location.line, Some(2));
        assert_eq!(
            issues[1].location.field.as_deref(),
            Some("metrics.output_sequence_length.value")
        );
    }
}
