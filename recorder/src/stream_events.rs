//! Turning the events of one body read into chunk records: the part of the hot path after the
//! clock read.

use super::{StreamContext, StreamState};
use crate::config::Capture;
use tokentrace_format::{Channel, ChunkRecord, Outcome, Usage};
use tokentrace_sse::classify::{classify_event, Classified, OutputSink};
use tokentrace_sse::parser::{SseError, SseEvent};

/// Largest error text kept from an error body or an error event.
pub(super) const ERROR_TEXT_LIMIT: usize = 1024;

impl StreamState {
    /// Parse one body read and append its events as chunks.
    pub(super) fn on_read(
        &mut self,
        ctx: &StreamContext,
        arrival_ns: u64,
        data: &[u8],
    ) -> Result<(), SseError> {
        let read_index = self.reads;
        self.reads += 1;
        self.on_data(ctx, arrival_ns, read_index, data)
    }

    /// Parse body bytes of read `read_index` (one socket read of a chunked body may hold
    /// several runs of data, each fed here with the read's time and index).
    pub(super) fn on_data(
        &mut self,
        ctx: &StreamContext,
        arrival_ns: u64,
        read_index: u32,
        data: &[u8],
    ) -> Result<(), SseError> {
        let StreamState {
            record,
            parser,
            sink,
            done,
            first_output,
            last_completion_tokens,
            read_whole,
            ..
        } = self;
        let mut taker = EventTaker {
            ctx,
            arrival_ns,
            read_index,
            record,
            done,
            first_output,
            last_completion_tokens,
            malformed: None,
            error_event: None,
        };
        if let Some((event, classified)) = parser.whole_known_event(data, sink) {
            taker.take(event, Ok(classified), sink);
            *read_whole += 1;
        } else {
            parser.feed(data, |event| {
                let classified = classify_event(event.data, event.event_type, sink);
                taker.take(event, classified, sink);
            })?;
        }
        let EventTaker {
            malformed,
            error_event,
            ..
        } = taker;
        if let Some(message) = malformed {
            self.fail(Outcome::Malformed, message);
        }
        if let Some(message) = error_event {
            self.fail(Outcome::Other, format!("error event in stream: {message}"));
        }
        Ok(())
    }
}

/// What one read's events change in a response's record, for the parser's path and the
/// template's alike.
struct EventTaker<'s> {
    ctx: &'s StreamContext,
    arrival_ns: u64,
    read_index: u32,
    record: &'s mut tokentrace_format::PackedRecord,
    done: &'s mut bool,
    first_output: &'s mut bool,
    last_completion_tokens: &'s mut Option<u32>,
    /// The first malformed event's description.
    malformed: Option<String>,
    /// The first error event's data.
    error_event: Option<String>,
}

impl EventTaker<'_> {
    /// One event, classified (or not), as one chunk.
    #[inline]
    fn take(
        &mut self,
        event: SseEvent<'_>,
        classified: Result<Classified, serde_json::Error>,
        sink: &mut OutputSink,
    ) {
        let record = &mut *self.record;
        // Every event becomes one chunk, so this one's number is the count so far plus one.
        let event_number = record.chunks.len() + 1;
        let mut chunk =
            ChunkRecord::unclassified(self.arrival_ns, self.read_index, event.wire_bytes);
        if self.ctx.capture == Capture::Raw {
            chunk.text = Some(String::from_utf8_lossy(event.data).into_owned());
        }
        match classified {
            Ok(c) => {
                chunk.channel = c.channel;
                if c.channel == Channel::Done {
                    if !*self.done {
                        *self.done = true;
                        record.meta.end_ns = self.arrival_ns;
                    }
                    record.chunks.push(chunk);
                    return;
                }
                chunk.text_len = c.text_len;
                let is_output = c.channel.is_output();
                if chunk.is_output() {
                    *self.first_output = true;
                }
                if let Some(u) = c.usage {
                    if let Some(done_tokens) = u.completion_tokens {
                        let before = self.last_completion_tokens.unwrap_or(0);
                        if is_output {
                            chunk.tokens = Some(done_tokens.saturating_sub(before));
                        }
                        *self.last_completion_tokens = Some(done_tokens);
                    }
                    merge_usage(&mut record.meta.usage, u);
                }
                if chunk.tokens.is_none() {
                    chunk.tokens = c.logprob_tokens;
                }
                if let Some(reason) = c.finish_reason {
                    if record.meta.finish_reason.as_deref() != Some(reason.as_str()) {
                        record.meta.finish_reason = Some(reason.as_str().to_string());
                    }
                }
                if chunk.channel == Channel::Error && self.error_event.is_none() {
                    self.error_event = Some(truncate_lossy(event.data));
                }
                if self.ctx.capture == Capture::Text {
                    chunk.text = Some(std::mem::take(&mut sink.captured));
                }
            }
            Err(err) => {
                if self.malformed.is_none() {
                    self.malformed = Some(format!(
                        "event {}: {err}: {}",
                        event_number,
                        truncate_lossy(event.data)
                    ));
                }
            }
        }
        record.chunks.push(chunk);
    }
}

fn merge_usage(into: &mut Usage, from: Usage) {
    into.prompt_tokens = from.prompt_tokens.or(into.prompt_tokens);
    into.completion_tokens = from.completion_tokens.or(into.completion_tokens);
    into.reasoning_tokens = from.reasoning_tokens.or(into.reasoning_tokens);
    into.cached_tokens = from.cached_tokens.or(into.cached_tokens);
}

pub(super) fn truncate_lossy(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(ERROR_TEXT_LIMIT)];
    String::from_utf8_lossy(cut).into_owned()
}
