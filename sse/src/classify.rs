//! Classifies one SSE event's JSON (chat or completions stream chunk) without building a tree.
//!
//! serde visitors walk the object once: text fields are measured and fed to the running output
//! hash straight from the input (or serde_json's scratch buffer when the string has escapes),
//! everything not needed is skipped with `IgnoredAny`, and nothing is collected into a `Vec` or
//! `String` unless text capture is on.

use serde::de::DeserializeSeed;
use std::fmt;
use tokentrace_format::{Channel, Usage};
use xxhash_rust::xxh3::Xxh3;

/// A finish reason kept inline so recording it allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct FinishReason {
    buf: [u8; 24],
    len: u8,
}

impl FinishReason {
    pub(crate) fn new(s: &str) -> FinishReason {
        let mut buf = [0u8; 24];
        // Cut on a char boundary so `as_str` stays valid UTF-8.
        let mut len = s.len().min(buf.len());
        while !s.is_char_boundary(len) {
            len -= 1;
        }
        buf[..len].copy_from_slice(&s.as_bytes()[..len]);
        FinishReason {
            buf,
            len: len as u8,
        }
    }

    /// The reason text (cut at 24 bytes).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

impl fmt::Debug for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// What one event carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// The channel the event is recorded under.
    pub channel: Channel,
    /// UTF-8 bytes of reasoning, content and tool-argument text in the event.
    pub text_len: u32,
    /// `usage` when the event had one.
    pub usage: Option<Usage>,
    /// `finish_reason` when the event had a non-null one.
    pub finish_reason: Option<FinishReason>,
    /// Number of `logprobs.content` entries (one per token) when present.
    pub logprob_tokens: Option<u32>,
}

/// Most output text held back from the hasher (bytes).
const PENDING: usize = 64;

/// Per-request state the classifier updates: the running output hash and optional capture.
pub struct OutputSink {
    hasher: Xxh3,
    /// Text not yet given to `hasher`: a few events' worth, so the hasher is called once for
    /// many events (an event holds a few bytes; the call cost more than they do). The hash of
    /// the whole text does not depend on how it is cut into updates.
    pending: [u8; PENDING],
    pending_len: u8,
    /// Total output text bytes so far.
    pub output_bytes: u64,
    capture: bool,
    /// Text of the current event when capture is on (taken by the caller after each event).
    pub captured: String,
    /// Reused buffer for unescaping text in the fast scanner.
    pub(crate) scratch: Vec<u8>,
    /// Where the fast scanner's last whole scan read values (kept here, not rebuilt per event).
    pub(crate) holes: fast::HoleLog,
    /// The text fields of the event being scanned (`Cursor::count` says how many are its):
    /// kept here so that no event clears or copies the array.
    pub(crate) segments: [fast::Segment; fast::MAX_SEGMENTS],
    /// This stream's last event scanned whole, against which the fast scanner checks the next.
    pub(crate) template: fast::Template,
}

impl OutputSink {
    /// A fresh sink; `capture` keeps each event's text in [`OutputSink::captured`].
    pub fn new(capture: bool) -> OutputSink {
        OutputSink {
            hasher: Xxh3::new(),
            pending: [0; PENDING],
            pending_len: 0,
            output_bytes: 0,
            capture,
            captured: String::new(),
            scratch: Vec::new(),
            holes: fast::HoleLog::default(),
            segments: [fast::Segment::default(); fast::MAX_SEGMENTS],
            template: fast::Template::default(),
        }
    }

    /// xxh3 of all output text seen so far.
    pub fn output_hash(&self) -> u64 {
        let pending = &self.pending[..usize::from(self.pending_len)];
        if pending.is_empty() {
            return self.hasher.digest();
        }
        let mut hasher = self.hasher.clone();
        hasher.update(pending);
        hasher.digest()
    }

    /// Take one text field's bytes, which the caller has checked are UTF-8.
    pub(crate) fn take_text(&mut self, text: &[u8]) {
        let held = usize::from(self.pending_len);
        if held + text.len() > PENDING {
            self.hasher.update(&self.pending[..held]);
            self.pending_len = 0;
        }
        let held = usize::from(self.pending_len);
        if text.len() > PENDING {
            self.hasher.update(text);
        } else {
            self.pending[held..held + text.len()].copy_from_slice(text);
            // Fits: at most PENDING, below 256.
            self.pending_len = (held + text.len()) as u8;
        }
        self.output_bytes += text.len() as u64;
        if self.capture {
            self.captured
                .push_str(std::str::from_utf8(text).unwrap_or_default());
        }
    }
}

/// Raw facts gathered while walking one event.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) role: bool,
    pub(crate) reasoning_len: u32,
    pub(crate) content_len: u32,
    pub(crate) tool: bool,
    pub(crate) tool_len: u32,
    pub(crate) error: bool,
    pub(crate) usage: Option<Usage>,
    pub(crate) finish_reason: Option<FinishReason>,
    pub(crate) logprob_tokens: Option<u32>,
}

/// Classify one event's data. Errors mean the payload is not JSON of the expected shape.
#[inline]
pub fn classify(data: &[u8], sink: &mut OutputSink) -> Result<Classified, serde_json::Error> {
    let mut scan = Scan::default();
    if fast::scan(data, &mut scan, sink).is_err() {
        // The scanner fed nothing to the sink; start over with the general path.
        scan = Scan::default();
        classify_serde(data, &mut scan, sink)?;
    }
    Ok(decide(scan))
}

/// Classify `line`, the rest of a `data:` line, by the stream's last event alone: Some when
/// it matches that event outside the values the classification reads, and holds no line
/// break. It is then one whole event's data, classified as [`classify_event`] classifies it
/// (no `event:` field), and it was read once: the line's end need not be looked for first.
/// None changes nothing; the bytes go through the parser and [`classify_event`] as usual.
#[inline]
pub fn classify_line(line: &[u8], sink: &mut OutputSink) -> Option<Classified> {
    let mut scan = Scan::default();
    fast::scan_one_line(line, &mut scan, sink).ok()?;
    Some(decide(scan))
}

/// Whether an event's data is the OpenAI end-of-stream sentinel `[DONE]`.
pub fn is_done(data: &[u8]) -> bool {
    data.trim_ascii() == b"[DONE]"
}

/// Classify one whole event: the `[DONE]` sentinel, an event of type `error` (whatever its
/// data), or a stream chunk's JSON. Errors mean the data is none of these.
///
/// This is the one rule both the recorder and the importers apply, so a recorded and an
/// imported trace mean the same by each channel.
pub fn classify_event(
    data: &[u8],
    event_type: &[u8],
    sink: &mut OutputSink,
) -> Result<Classified, serde_json::Error> {
    if is_done(data) {
        return Ok(Classified {
            channel: Channel::Done,
            text_len: 0,
            usage: None,
            finish_reason: None,
            logprob_tokens: None,
        });
    }
    let mut classified = classify(data, sink)?;
    if event_type == b"error" {
        classified.channel = Channel::Error;
    }
    Ok(classified)
}

/// Pick the event's channel from what the walk found.
fn decide(scan: Scan) -> Classified {
    let text_len = scan.reasoning_len + scan.content_len + scan.tool_len;
    let channel = if scan.error {
        Channel::Error
    } else if scan.content_len > 0 {
        Channel::Content
    } else if scan.reasoning_len > 0 {
        Channel::Reasoning
    } else if scan.tool {
        Channel::Tool
    } else if scan.role {
        Channel::Role
    } else if scan.finish_reason.is_some() {
        Channel::Finish
    } else if scan.usage.is_some() {
        Channel::Usage
    } else {
        Channel::Other
    };
    Classified {
        channel,
        text_len,
        usage: scan.usage,
        finish_reason: scan.finish_reason,
        logprob_tokens: scan.logprob_tokens,
    }
}

/// [`classify`] through the general serde path only (the reference the fast scanner is
/// tested against; also benchmarked against it).
pub fn classify_general(
    data: &[u8],
    sink: &mut OutputSink,
) -> Result<Classified, serde_json::Error> {
    let mut scan = Scan::default();
    classify_serde(data, &mut scan, sink)?;
    Ok(decide(scan))
}

/// The general path: serde visitors over the whole object.
pub(crate) fn classify_serde(
    data: &[u8],
    scan: &mut Scan,
    sink: &mut OutputSink,
) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(data);
    EventSeed { scan, sink }.deserialize(&mut de)?;
    de.end()
}

#[path = "classify_fast.rs"]
mod fast;

#[path = "classify_visit.rs"]
mod visit;
use visit::EventSeed;

#[cfg(test)]
#[path = "classify_tests.rs"]
mod tests;
