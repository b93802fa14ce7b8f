//! Turns a parsed AIPerf request into a trace record.
//!
//! Times: AIPerf's response times are `perf_counter_ns` (CLOCK_MONOTONIC on Linux), so they
//! become event times as they are, relative to the trace anchor. Metadata times are wall clock
//! (`time.time_ns`); each is moved onto the monotonic clock with the request's own offset
//! `request_start_ns - start_perf_ns`, because the two start times were taken together.

use super::raw::RawRequest;
use super::records::RecordInfo;
use crate::fields::{len_u32, sat_u32};
use tokentrace_format::{Channel, ChunkRecord, Outcome, RequestMeta, RequestRecord, Usage};
use tokentrace_sse::classify::{classify_event, OutputSink};
use xxhash_rust::xxh3::xxh3_64;

/// Monotonic times of a request's events (absolute ns), for choosing the trace anchor.
pub(crate) fn event_times(raw: &RawRequest) -> Vec<i128> {
    let mut times = vec![i128::from(raw.start_perf_ns)];
    times.extend(raw.responses.iter().map(|r| i128::from(r.perf_ns)));
    for wall in [
        raw.wall.credit_issued_ns,
        raw.wall.request_ack_ns,
        raw.wall.request_end_ns,
    ] {
        times.extend(wall_to_perf(raw, wall));
    }
    times
}

/// A wall-clock time of `raw` on the monotonic clock, when its start pair is known.
pub(crate) fn wall_to_perf(raw: &RawRequest, wall: Option<u64>) -> Option<i128> {
    let start_wall = i128::from(raw.wall.request_start_ns?);
    Some(i128::from(wall?) - (start_wall - i128::from(raw.start_perf_ns)))
}

/// Where a request's events land in the trace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    /// Trace-wide anchor (absolute monotonic ns).
    pub anchor: i128,
    /// The request's id in the trace.
    pub id: u64,
    /// Trial number.
    pub trial: u32,
    /// Planned input tokens when the record itself does not say.
    pub planned_input_tokens: Option<u32>,
}

impl Placement {
    fn rel(&self, t: i128) -> u64 {
        u64::try_from(t - self.anchor).unwrap_or(0)
    }
}

/// Builds the record; the second value says whether some event payload was not JSON.
pub(crate) fn build(
    raw: &RawRequest,
    info: Option<&RecordInfo>,
    at: Placement,
) -> (RequestRecord, bool) {
    let mut chunks = Vec::with_capacity(raw.responses.len());
    let mut usage = Usage::default();
    let mut finish_reason = None;
    let mut stream_error = None;
    let mut malformed = false;
    let mut done = false;
    // The recorder's own classifier, so an imported trace means the same by each channel.
    let mut sink = OutputSink::new(false);
    let mut read_index = 0u32;
    let mut previous_perf = None;
    for response in &raw.responses {
        // AIPerf does not keep read boundaries; events read at the same instant share one.
        if previous_perf.is_some_and(|p| p != response.perf_ns) {
            read_index += 1;
        }
        previous_perf = Some(response.perf_ns);
        let payload = response.payload.as_bytes();
        let (channel, text_len) =
            match classify_event(payload, response.event_type.as_bytes(), &mut sink) {
                Ok(event) => {
                    if let Some(u) = event.usage {
                        merge_usage(&mut usage, u);
                    }
                    if let Some(reason) = event.finish_reason {
                        finish_reason = Some(reason.as_str().to_string());
                    }
                    if event.channel == Channel::Error && stream_error.is_none() {
                        stream_error = Some(truncate(&response.payload));
                    }
                    done |= event.channel == Channel::Done;
                    (event.channel, event.text_len)
                }
                // A payload that is not JSON is kept (raw text, channel `other`) and flags the
                // request.
                Err(_) => {
                    malformed = true;
                    (Channel::Other, 0)
                }
            };
        chunks.push(ChunkRecord {
            arrival_ns: at.rel(i128::from(response.perf_ns)),
            read_index,
            bytes: len_u32(response.wire_bytes),
            channel,
            text_len,
            tokens: None,
            text: Some(response.payload.clone()),
        });
    }
    let send_ns = at.rel(i128::from(raw.start_perf_ns));
    let last_event = raw.responses.last().map(|r| i128::from(r.perf_ns));
    let end = wall_to_perf(raw, raw.wall.request_end_ns).or(last_event);
    let headers = info
        .and_then(|i| wall_to_perf(raw, i.headers_received_ns))
        .or_else(|| wall_to_perf(raw, raw.wall.request_ack_ns));
    let prompt = raw
        .payload
        .as_ref()
        .and_then(|p| serde_json::to_vec(p).ok())
        .unwrap_or_default();
    let (outcome, error) = outcome(raw, stream_error, malformed, done, finish_reason.is_some());
    let planned = info
        .and_then(RecordInfo::input_sequence_length)
        .map(sat_u32)
        .or(at.planned_input_tokens);
    let record = RequestRecord {
        meta: RequestMeta {
            id: at.id,
            phase: raw.phase,
            trial: at.trial,
            intended_ns: wall_to_perf(raw, raw.wall.credit_issued_ns)
                .map_or(send_ns, |t| at.rel(t)),
            send_ns,
            headers_ns: headers.map(|t| at.rel(t)),
            end_ns: end.map_or(send_ns, |t| at.rel(t)),
            http_status: raw.status,
            outcome,
            error,
            usage,
            finish_reason,
            prompt_hash: xxh3_64(&prompt),
            prompt_bytes: len_u32(prompt.len()),
            output_hash: sink.output_hash(),
            output_bytes: u32::try_from(sink.output_bytes).unwrap_or(u32::MAX),
            planned_input_tokens: planned,
            response_headers: info.map(|i| i.response_headers.clone()).unwrap_or_default(),
            retries: 0,
        },
        chunks,
    };
    (record, malformed)
}

/// The first KiB of an in-stream error event, as the recorder keeps it.
fn truncate(payload: &str) -> String {
    let mut end = payload.len().min(1024);
    while !payload.is_char_boundary(end) {
        end -= 1;
    }
    payload[..end].to_string()
}

/// Later usage fields win; a field absent in a later event keeps the earlier value.
fn merge_usage(into: &mut Usage, u: Usage) {
    into.prompt_tokens = u.prompt_tokens.or(into.prompt_tokens);
    into.completion_tokens = u.completion_tokens.or(into.completion_tokens);
    into.reasoning_tokens = u.reasoning_tokens.or(into.reasoning_tokens);
    into.cached_tokens = u.cached_tokens.or(into.cached_tokens);
}

/// The outcome class and error text of a request.
fn outcome(
    raw: &RawRequest,
    stream_error: Option<String>,
    malformed: bool,
    done: bool,
    finished: bool,
) -> (Outcome, Option<String>) {
    if raw.cancelled {
        return (
            Outcome::Cancelled,
            Some(
                raw.error
                    .clone()
                    .unwrap_or_else(|| "cancelled by AIPerf".into()),
            ),
        );
    }
    if raw.status >= 400 {
        return (
            Outcome::HttpError,
            raw.error
                .clone()
                .or_else(|| Some(format!("HTTP {}", raw.status))),
        );
    }
    if let Some(error) = &raw.error {
        let kind = raw.error_type.as_deref().unwrap_or("").to_ascii_lowercase();
        let class = if kind.contains("timeout") {
            Outcome::Timeout
        } else if kind.contains("connect") {
            Outcome::ConnectError
        } else if raw.responses.is_empty() {
            Outcome::Other
        } else {
            Outcome::StreamError
        };
        return (class, Some(error.clone()));
    }
    if let Some(error) = stream_error {
        return (Outcome::Other, Some(error));
    }
    if malformed {
        return (
            Outcome::Malformed,
            Some("an event's data is not JSON".into()),
        );
    }
    // The recorder's rule: complete without `[DONE]` is its own class, cut short a failure.
    if !done && raw.status == 200 && !finished {
        return (
            Outcome::StreamError,
            Some("stream ended before any finish_reason and without [DONE]".into()),
        );
    }
    if !done && raw.status == 200 {
        return (Outcome::MissingDone, None);
    }
    (Outcome::Ok, None)
}

#[cfg(test)]
mod tests {
    use super::super::raw::{RawResponse, WallTimes};
    use super::*;
    use tokentrace_format::Phase;

    fn response(perf_ns: u64, payload: &str) -> RawResponse {
        RawResponse {
            perf_ns,
            payload: payload.into(),
            event_type: String::new(),
            wire_bytes: payload.len() + 8,
        }
    }

    fn raw() -> RawRequest {
        RawRequest {
            line: 1,
            x_request_id: Some("a".into()),
            phase: Phase::Measured,
            phase_name: "profiling".into(),
            start_perf_ns: 1_000,
            wall: WallTimes {
                credit_issued_ns: Some(10_900),
                request_start_ns: Some(11_000),
                request_ack_ns: None,
                request_end_ns: Some(11_500),
            },
            status: 200,
            cancelled: false,
            error: None,
            error_type: None,
            payload: None,
            responses: vec![
                response(
                    1_100,
                    r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
                ),
                response(1_200, r#"{"choices":[{"delta":{"content":"hi"}}]}"#),
                response(
                    1_200,
                    r#"{"choices":[{"delta":{"content":" there"},"finish_reason":"stop"}]}"#,
                ),
                response(
                    1_300,
                    r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
                ),
                response(1_400, "[DONE]"),
            ],
            kept: Default::default(),
        }
    }

    #[test]
    fn maps_times_channels_and_reads() {
        let r = raw();
        let anchor = event_times(&r).into_iter().min().unwrap();
        assert_eq!(anchor, 900); // the credit, mapped onto the monotonic clock
        let at = Placement {
            anchor,
            id: 7,
            trial: 0,
            planned_input_tokens: Some(128),
        };
        let (rec, malformed) = build(&r, None, at);
        assert!(!malformed);
        assert_eq!(
            (
                rec.meta.id,
                rec.meta.intended_ns,
                rec.meta.send_ns,
                rec.meta.end_ns
            ),
            (7, 0, 100, 600)
        );
        let arrivals: Vec<u64> = rec.chunks.iter().map(|c| c.arrival_ns).collect();
        assert_eq!(arrivals, [200, 300, 300, 400, 500]);
        let reads: Vec<u32> = rec.chunks.iter().map(|c| c.read_index).collect();
        assert_eq!(reads, [0, 1, 1, 2, 3]);
        let channels: Vec<Channel> = rec.chunks.iter().map(|c| c.channel).collect();
        assert_eq!(
            channels,
            [
                Channel::Role,
                Channel::Content,
                Channel::Content,
                Channel::Usage,
                Channel::Done
            ]
        );
        assert_eq!(
            (
                rec.meta.usage.prompt_tokens,
                rec.meta.usage.completion_tokens
            ),
            (Some(5), Some(2))
        );
        assert_eq!(rec.meta.finish_reason.as_deref(), Some("stop"));
        assert_eq!((rec.meta.outcome, rec.meta.output_bytes), (Outcome::Ok, 8));
        assert_eq!(rec.meta.planned_input_tokens, Some(128));
        assert_eq!(rec.chunks[4].text.as_deref(), Some("[DONE]"));
    }

    #[test]
    fn outcomes() {
        let mut r = raw();
        r.responses.pop();
        let at = Placement {
            anchor: 0,
            id: 0,
            trial: 0,
            planned_input_tokens: None,
        };
        assert_eq!(build(&r, None, at).0.meta.outcome, Outcome::MissingDone);
        // Cut before the finish_reason as well: a failure.
        let mut cut = raw();
        cut.responses.truncate(2);
        let (record, _) = build(&cut, None, at);
        assert_eq!(record.meta.outcome, Outcome::StreamError);
        assert!(record.meta.error.unwrap().contains("finish_reason"));
        r.status = 503;
        assert_eq!(build(&r, None, at).0.meta.outcome, Outcome::HttpError);
        r.status = 200;
        r.cancelled = true;
        assert_eq!(build(&r, None, at).0.meta.outcome, Outcome::Cancelled);
        r.cancelled = false;
        r.responses.push(response(1_500, "{oops"));
        let (rec, malformed) = build(&r, None, at);
        assert!(malformed);
        assert_eq!(
            (rec.meta.outcome, rec.chunks[4].channel),
            (Outcome::Malformed, Channel::Other)
        );
    }
}
