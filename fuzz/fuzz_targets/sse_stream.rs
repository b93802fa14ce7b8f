//! Any response body, cut into reads any way, through the recorder's receive path for SSE
//! (`SseParser::whole_known_event` first, else `SseParser::feed` and `classify_event`, as
//! `recorder/src/stream_events.rs` calls them): every event it dispatches, with its
//! classification and the running output hash and text, must be what a plain reference gives:
//! the whole body split into lines and fields by the SSE rules `sse/src/parser.rs` states, each event's
//! data classified by the serde path alone (`classify_general`). That compares the parser's
//! shortcuts (an event whole in one read, a line taken without copying) and the classifier's
//! (the fast scanner, the per-stream template and its folded counts) with the slow ways they
//! stand for, over a stream's whole history, and the wire bytes they count with the body's
//! length. Seed it with `fuzz/seeds/sse_stream/`; see docs/RELIABILITY.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentrace_format::Channel;
use tokentrace_fuzz::cut_by_lengths;
use tokentrace_sse::classify::{classify_event, classify_general, is_done, Classified, OutputSink};
use tokentrace_sse::parser::SseParser;

/// One dispatched event as the comparison sees it.
#[derive(PartialEq)]
struct Seen {
    data: Vec<u8>,
    event_type: Vec<u8>,
    classified: Option<Classified>,
    captured: String,
    output_hash: u64,
    output_bytes: u64,
}

/// The data and the type as text (lossy), so that a failure reads as the stream did.
impl std::fmt::Debug for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seen")
            .field("data", &String::from_utf8_lossy(&self.data))
            .field("event_type", &String::from_utf8_lossy(&self.event_type))
            .field("classified", &self.classified)
            .field("captured", &self.captured)
            .field("output_hash", &self.output_hash)
            .field("output_bytes", &self.output_bytes)
            .finish()
    }
}

impl Seen {
    fn new(
        data: &[u8],
        event_type: &[u8],
        classified: Option<Classified>,
        sink: &mut OutputSink,
    ) -> Seen {
        Seen {
            data: data.to_vec(),
            event_type: event_type.to_vec(),
            classified,
            captured: std::mem::take(&mut sink.captured),
            output_hash: sink.output_hash(),
            output_bytes: sink.output_bytes,
        }
    }
}

/// The body's reads: the first input byte picks how it is cut. Even: at every blank line
/// (`\n\n`), as vLLM, SGLang and llama.cpp frame one event per HTTP chunk, and no read longer
/// than 8 times the second byte. Odd: by lengths cycling through the next four bytes (1 to 64
/// each).
fn reads(input: &[u8]) -> Option<(Vec<&[u8]>, &[u8])> {
    let (&mode, rest) = input.split_first()?;
    if mode % 2 == 0 {
        let (&longest, body) = rest.split_first()?;
        let longest = usize::from(longest).max(1) * 8;
        let mut reads = Vec::new();
        let mut from = 0;
        while from < body.len() {
            let after_blank = body[from..]
                .windows(2)
                .position(|pair| pair == b"\n\n")
                .map_or(body.len(), |at| from + at + 2);
            let end = after_blank.min(from + longest);
            reads.push(&body[from..end]);
            from = end;
        }
        Some((reads, body))
    } else {
        let lengths: Vec<usize> = rest
            .get(..4)?
            .iter()
            .map(|&b| usize::from(b % 64) + 1)
            .collect();
        let body = &rest[4..];
        Some((cut_by_lengths(body, &lengths), body))
    }
}

/// The body's events by the SSE rules, read from the whole body at once: lines end at CRLF,
/// LF or CR; a blank line dispatches the event if it had a `data` field; `:` starts a comment;
/// a field's value follows its first colon, less one leading blank; `data` lines join with
/// `\n`; `event` sets the type; other fields are ignored.
fn reference_events(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut events = Vec::new();
    let (mut data, mut event_type, mut has_data) = (Vec::new(), Vec::new(), false);
    let mut at = 0;
    while at < body.len() {
        let Some(len) = body[at..].iter().position(|&b| b == b'\n' || b == b'\r') else {
            break; // a line without its end dispatches nothing
        };
        let line = &body[at..at + len];
        at += len
            + if body[at + len..].starts_with(b"\r\n") {
                2
            } else {
                1
            };
        if line.is_empty() {
            if has_data {
                events.push((std::mem::take(&mut data), std::mem::take(&mut event_type)));
            }
            data.clear();
            event_type.clear();
            has_data = false;
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if has_data {
                    data.push(b'\n');
                }
                data.extend_from_slice(value);
                has_data = true;
            }
            b"event" => event_type = value.to_vec(),
            _ => {}
        }
    }
    events
}

/// An event's classification by the serde path alone, with `classify_event`'s two rules
/// around it: `[DONE]` is the end, and an event of type `error` is an error whatever it holds.
fn reference_classified(
    data: &[u8],
    event_type: &[u8],
    sink: &mut OutputSink,
) -> Option<Classified> {
    if is_done(data) {
        return Some(Classified {
            channel: Channel::Done,
            text_len: 0,
            usage: None,
            finish_reason: None,
            logprob_tokens: None,
        });
    }
    let mut classified = classify_general(data, sink).ok()?;
    if event_type == b"error" {
        classified.channel = Channel::Error;
    }
    Some(classified)
}

fuzz_target!(|input: &[u8]| {
    let Some((reads, body)) = reads(input) else {
        return;
    };
    // The recorder's path.
    let mut parser = SseParser::default();
    let mut sink = OutputSink::new(true);
    let mut seen = Vec::new();
    let mut wire = 0u64;
    for read in &reads {
        if let Some((event, classified)) = parser.whole_known_event(read, &mut sink) {
            wire += u64::from(event.wire_bytes);
            seen.push(Seen::new(
                event.data,
                event.event_type,
                Some(classified),
                &mut sink,
            ));
        } else {
            let fed = parser.feed(read, |event| {
                wire += u64::from(event.wire_bytes);
                let classified = classify_event(event.data, event.event_type, &mut sink).ok();
                seen.push(Seen::new(
                    event.data,
                    event.event_type,
                    classified,
                    &mut sink,
                ));
            });
            // A line over the parser's limit (1 MiB) ends the stream, which the reference does
            // not model; an input that long says nothing here.
            if fed.is_err() {
                return;
            }
        }
    }
    wire += parser.undispatched_bytes() as u64;
    assert_eq!(
        wire,
        body.len() as u64,
        "wire bytes counted against the body's"
    );

    // The reference.
    let mut sink = OutputSink::new(true);
    let expected: Vec<Seen> = reference_events(body)
        .into_iter()
        .map(|(data, event_type)| {
            let classified = reference_classified(&data, &event_type, &mut sink);
            Seen::new(&data, &event_type, classified, &mut sink)
        })
        .collect();
    for (index, (got, want)) in seen.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "event {index} of {}", expected.len());
    }
    assert_eq!(seen.len(), expected.len(), "events dispatched");
});
