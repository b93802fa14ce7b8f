//! One line of AIPerf's `profile_export_raw.jsonl`: a request with every SSE response and the
//! `perf_counter_ns` time it was read at.

use crate::error::Issue;
use crate::fields::{array_at, lookup, opt_str, opt_u64, u64_at, Ctx};
use serde_json::Value;
use tokentrace_format::Phase;

/// One SSE event as AIPerf recorded it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawResponse {
    /// `perf_counter_ns` when the event was read.
    pub perf_ns: u64,
    /// The `data` field(s) of the event, joined by newlines as SSE does.
    pub payload: String,
    /// The event's `event` field, empty when absent.
    pub event_type: String,
    /// The event's size as it would have been on the wire (`name: value\n` per field, then `\n`).
    pub wire_bytes: usize,
}

/// Wall-clock (`time.time_ns`) times from the record metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WallTimes {
    /// When the scheduler issued the credit for the request (its intended start).
    pub credit_issued_ns: Option<u64>,
    /// When the request started (paired with `start_perf_ns`).
    pub request_start_ns: Option<u64>,
    /// When the server acknowledged the request (response headers).
    pub request_ack_ns: Option<u64>,
    /// When the request ended.
    pub request_end_ns: Option<u64>,
}

/// One request line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RawRequest {
    /// 1-based line in the raw file.
    pub line: usize,
    /// `metadata.x_request_id`: the key into `profile_export.jsonl`.
    pub x_request_id: Option<String>,
    /// Warmup or profiling.
    pub phase: Phase,
    /// `metadata.benchmark_phase` as written.
    pub phase_name: String,
    /// `perf_counter_ns` just before the request was sent: AIPerf's latency anchor.
    pub start_perf_ns: u64,
    /// Wall-clock metadata times.
    pub wall: WallTimes,
    /// HTTP status (0 when none was received).
    pub status: u16,
    /// `metadata.was_cancelled`.
    pub cancelled: bool,
    /// The error AIPerf recorded (`type (code): message`).
    pub error: Option<String>,
    /// The error's `type`, used to classify the outcome.
    pub error_type: Option<String>,
    /// The request body sent.
    pub payload: Option<Value>,
    /// Every response, in arrival order.
    pub responses: Vec<RawResponse>,
    /// Metadata kept verbatim in the manifest's per-request table.
    pub kept: serde_json::Map<String, Value>,
}

/// Metadata fields copied into the manifest's per-request table.
const KEPT_METADATA: [&str; 8] = [
    "x_request_id",
    "x_correlation_id",
    "conversation_id",
    "turn_index",
    "credit_issued_ns",
    "request_start_ns",
    "request_ack_ns",
    "request_end_ns",
];

/// Parses one raw line (already decoded as JSON).
pub(crate) fn parse(value: &Value, ctx: Ctx<'_>) -> Result<(RawRequest, Vec<Issue>), Issue> {
    let mut issues = Vec::new();
    let phase_name = opt_str(value, "metadata.benchmark_phase", ctx)?
        .unwrap_or("profiling")
        .to_string();
    let phase = match phase_name.as_str() {
        "warmup" => Phase::Warmup,
        "profiling" => Phase::Measured,
        other => {
            issues.push(ctx.issue(
                "metadata.benchmark_phase",
                format!("unknown phase {other:?}; imported as measured"),
            ));
            Phase::Measured
        }
    };
    let wall = WallTimes {
        credit_issued_ns: opt_u64(value, "metadata.credit_issued_ns", ctx)?,
        request_start_ns: opt_u64(value, "metadata.request_start_ns", ctx)?,
        request_ack_ns: opt_u64(value, "metadata.request_ack_ns", ctx)?,
        request_end_ns: opt_u64(value, "metadata.request_end_ns", ctx)?,
    };
    let status = opt_u64(value, "status", ctx)?.unwrap_or(0);
    let status = u16::try_from(status)
        .map_err(|_| ctx.issue("status", format!("{status} is not an HTTP status")))?;
    let cancelled = lookup(value, "metadata.was_cancelled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (error, error_type) = match lookup(value, "error") {
        None => (None, None),
        Some(err) => (
            Some(error_text(err)),
            err.get("type").and_then(Value::as_str).map(str::to_string),
        ),
    };
    let mut responses: Vec<RawResponse> = Vec::new();
    // Bytes of comment-only messages, counted with the next event as the recorder counts them.
    let mut pending_bytes = 0;
    for (i, response) in array_at(value, "responses", ctx)?.iter().enumerate() {
        match parse_response(response, i, ctx)? {
            Message::Event(mut event) => {
                event.wire_bytes += std::mem::take(&mut pending_bytes);
                responses.push(event);
            }
            Message::Comment { wire_bytes } => pending_bytes += wire_bytes,
        }
    }
    let kept = KEPT_METADATA
        .iter()
        .filter_map(|key| Some((key.to_string(), value.get("metadata")?.get(*key)?.clone())))
        .collect();
    let request = RawRequest {
        line: ctx.line.unwrap_or(0),
        x_request_id: opt_str(value, "metadata.x_request_id", ctx)?.map(str::to_string),
        phase,
        phase_name,
        start_perf_ns: u64_at(value, "start_perf_ns", ctx)?,
        wall,
        status,
        cancelled,
        error,
        error_type,
        payload: lookup(value, "payload").cloned(),
        responses,
        kept,
    };
    Ok((request, issues))
}

/// One message of AIPerf's SSE record.
enum Message {
    /// A message with data: an SSE event.
    Event(RawResponse),
    /// A message without any `data` field (only comments, such as sse-starlette's
    /// `: ping - <time>` keep-alives, or other fields): SSE dispatches no event for it.
    Comment {
        /// Its size on the wire.
        wire_bytes: usize,
    },
}

fn parse_response(response: &Value, index: usize, ctx: Ctx<'_>) -> Result<Message, Issue> {
    let field = |name: &str| format!("responses[{index}].{name}");
    let perf_ns = response
        .get("perf_ns")
        .and_then(Value::as_u64)
        .ok_or_else(|| ctx.issue(&field("perf_ns"), "missing or not a non-negative integer"))?;
    // A non-streaming response is kept whole as `text` instead of SSE packets.
    if let (None, Some(text)) = (
        response.get("packets"),
        response.get("text").and_then(Value::as_str),
    ) {
        return Ok(Message::Event(RawResponse {
            perf_ns,
            payload: text.to_string(),
            event_type: String::new(),
            wire_bytes: text.len(),
        }));
    }
    let packets = response
        .get("packets")
        .and_then(Value::as_array)
        .ok_or_else(|| ctx.issue(&field("packets"), "missing or not an array (and no `text`)"))?;
    let mut data = Vec::new();
    let mut event_type = String::new();
    let mut wire_bytes = 1;
    for (j, packet) in packets.iter().enumerate() {
        let name = packet.get("name").and_then(Value::as_str);
        let text = packet.get("value").and_then(Value::as_str);
        let (Some(name), Some(text)) = (name, text) else {
            return Err(ctx.issue(
                &field(&format!("packets[{j}]")),
                "expected {\"name\": string, \"value\": string}",
            ));
        };
        wire_bytes += if name == "comment" {
            // `:value\n`
            1 + text.len() + 1
        } else {
            // `name: value\n`
            name.len() + 2 + text.len() + 1
        };
        match name {
            "data" => data.push(text),
            "event" => text.clone_into(&mut event_type),
            _ => {}
        }
    }
    if data.is_empty() {
        return Ok(Message::Comment { wire_bytes });
    }
    Ok(Message::Event(RawResponse {
        perf_ns,
        payload: data.join("\n"),
        event_type,
        wire_bytes,
    }))
}

/// `type (code): message` of an AIPerf error object (or the JSON when it has another shape).
fn error_text(err: &Value) -> String {
    let kind = err.get("type").and_then(Value::as_str);
    let code = err
        .get("code")
        .filter(|c| !c.is_null())
        .map(Value::to_string);
    let message = err.get("message").and_then(Value::as_str);
    match (kind, code, message) {
        (None, None, None) => err.to_string(),
        (kind, code, message) => {
            let mut text = kind.unwrap_or("error").to_string();
            if let Some(code) = code {
                text.push_str(&format!(" ({code})"));
            }
            if let Some(message) = message {
                text.push_str(": ");
                text.push_str(message);
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::path::Path;

    fn ctx() -> Ctx<'static> {
        Ctx {
            file: Path::new("profile_export_raw.jsonl"),
            line: Some(4),
        }
    }

    fn line() -> Value {
        json!({
            "metadata": {"x_request_id": "a", "benchmark_phase": "warmup", "request_start_ns": 1000,
                         "credit_issued_ns": 900, "was_cancelled": false},
            "start_perf_ns": 50, "status": 200,
            "responses": [
                {"perf_ns": 60, "packets": [{"name": "data", "value": "{\"choices\":[]}"}]},
                {"perf_ns": 70, "packets": [{"name": "event", "value": "x"}, {"name": "data", "value": "[DONE]"}]}
            ],
            "payload": {"model": "m"}
        })
    }

    #[test]
    fn parses_a_request_line() {
        let (r, issues) = parse(&line(), ctx()).unwrap();
        assert!(issues.is_empty());
        assert_eq!(
            (r.phase, r.start_perf_ns, r.status, r.line),
            (Phase::Warmup, 50, 200, 4)
        );
        assert_eq!(r.wall.request_start_ns, Some(1000));
        assert_eq!(r.responses.len(), 2);
        assert_eq!(r.responses[1].payload, "[DONE]");
        // "event: x\n" (9) + "data: [DONE]\n" (13) + "\n" (1)
        assert_eq!(r.responses[1].wire_bytes, 23);
        assert_eq!(r.kept.get("credit_issued_ns"), Some(&json!(900)));
    }

    #[test]
    fn non_streaming_text_responses_are_kept_whole() {
        let mut v = line();
        v["responses"] =
            json!([{"perf_ns": 90, "text": "{\"choices\":[{\"message\":{\"content\":\"hi\"}}]}"}]);
        let (r, _) = parse(&v, ctx()).unwrap();
        assert_eq!(
            (r.responses[0].perf_ns, r.responses[0].wire_bytes),
            (90, r#"{"choices":[{"message":{"content":"hi"}}]}"#.len())
        );
    }

    #[test]
    fn names_the_broken_response_field() {
        let mut v = line();
        v["responses"][1]["perf_ns"] = json!("soon");
        let err = parse(&v, ctx()).unwrap_err();
        assert_eq!(err.location.field.as_deref(), Some("responses[1].perf_ns"));
        assert_eq!(err.location.line, Some(4));
    }

    #[test]
    fn comment_only_messages_are_no_events() {
        let mut v = line();
        v["responses"] = json!([
            {"perf_ns": 60, "packets": [{"name": "comment", "value": " ping - 2026-12-01 07:00:00"}]},
            {"perf_ns": 70, "packets": [{"name": "data", "value": "[DONE]"}]}
        ]);
        let (r, _) = parse(&v, ctx()).unwrap();
        assert_eq!(r.responses.len(), 1);
        assert_eq!(r.responses[0].payload, "[DONE]");
        // ": ping - …\n\n" counts with the event after it, as the recorder counts comments.
        let comment = ": ping - 2026-12-01 07:00:00\n\n".len();
        assert_eq!(
            r.responses[0].wire_bytes,
            comment + "data: [DONE]\n\n".len()
        );
    }

    #[test]
    fn event_fields_are_kept() {
        let (r, _) = parse(&line(), ctx()).unwrap();
        assert_eq!(r.responses[1].event_type, "x");
        assert_eq!(r.responses[0].event_type, "");
    }

    #[test]
    fn error_objects_become_text() {
        let mut v = line();
        v["error"] = json!({"code": 500, "type": "HTTPError", "message": "boom"});
        let (r, _) = parse(&v, ctx()).unwrap();
        assert_eq!(r.error.as_deref(), Some("HTTPError (500): boom"));
        assert_eq!(r.error_type.as_deref(), Some("HTTPError"));
    }
}
