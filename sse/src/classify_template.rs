//! A stream's event template: the last event scanned whole, kept as its bytes outside the
//! values the classification reads (its *holes*: text fields and token counts). The events of
//! one response mostly differ from each other only there (`"content":"…"`, `"completion_tokens":
//! …`, and `"total_tokens":…`, the one number the classification skips that changes as they do), so the next event is checked against the template piece by piece (one `memcmp` per
//! piece) and only its holes are scanned.
//!
//! Why the result is the whole scan's: the scan is a function of the bytes alone, read from left
//! to right, and what it does at a byte depends only on the bytes before it and on what its
//! holes returned. An event whose bytes outside the holes equal the template's, whose holes
//! scan as values of the same kind, and whose text holes keep a segment exactly where the
//! template's did (the one thing later steps look at: `reasoning` after `reasoning_content`,
//! the segment limit) takes the same path as the template's event did. The scan's facts from
//! outside the holes (role, finish reason, error, tool call, logprobs, which usage counts were
//! absent) are therefore the template's, and the holes give the rest. Anything else falls back
//! to the whole scan, which then becomes the template.

use super::json::Cursor;
use super::{Kind, Scan};
use tokentrace_format::Usage;

/// Most holes an event may have to be kept as a template.
const MAX_HOLES: usize = 16;

/// Longest template kept per stream (bytes outside the holes): a chunk of vLLM, SGLang or
/// OpenAI is 200–300 bytes outside its text; an event with large ignored fields (logprobs) is
/// not worth a copy per event, nor memory per open stream.
const MAX_TEMPLATE: usize = 1024;

/// Longest head kept when the event is not kept whole: the usual one is about 100 bytes, and an
/// event with a huge ignored field must not make every open stream hold a copy of it.
const MAX_HEAD: usize = 512;

/// Which usage count a count hole fills.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CountField {
    Prompt,
    Completion,
    Cached,
    Reasoning,
}

impl CountField {
    fn set(self, usage: &mut Usage, value: Option<u32>) {
        let slot = match self {
            CountField::Prompt => &mut usage.prompt_tokens,
            CountField::Completion => &mut usage.completion_tokens,
            CountField::Cached => &mut usage.cached_tokens,
            CountField::Reasoning => &mut usage.reasoning_tokens,
        };
        *slot = value;
    }
}

/// A value the scan read.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Hole {
    /// A text field (string or null); `kept`: it was a non-empty string, kept as a segment.
    Text { kind: Kind, kept: bool },
    /// A token count (integer or null).
    Count(CountField),
    /// A number inside `usage` the classification does not read (`total_tokens`, which
    /// changes from event to event as the counts do).
    Number,
}

/// The holes one whole scan met, in order, as spans of the event's bytes.
pub(crate) struct HoleLog {
    spans: [(u32, u32, Hole); MAX_HOLES],
    len: usize,
    /// False when the event cannot be a template: too many holes, a span past `u32`, or a
    /// second `usage` field, null or not (it replaces the first's counts, which the holes
    /// cannot say).
    pub(crate) usable: bool,
}

impl Default for HoleLog {
    fn default() -> HoleLog {
        HoleLog {
            spans: [(0, 0, Hole::Count(CountField::Prompt)); MAX_HOLES],
            len: 0,
            usable: true,
        }
    }
}

impl HoleLog {
    pub(crate) fn push(&mut self, start: usize, end: usize, hole: Hole) {
        match (u32::try_from(start), u32::try_from(end)) {
            (Ok(start), Ok(end)) if self.len < MAX_HOLES => {
                self.spans[self.len] = (start, end, hole);
                self.len += 1;
            }
            _ => self.usable = false,
        }
    }
}

/// Per stream: the last event scanned whole, as its bytes outside the holes, or only its head.
#[derive(Default)]
pub(crate) struct Template {
    /// The event's bytes outside its holes when `whole`; otherwise only its head.
    bytes: Vec<u8>,
    /// Where each hole was, as an offset into `bytes`.
    holes: [(u32, Option<Hole>); MAX_HOLES],
    holes_len: usize,
    /// The leading top-level fields the classification ignores, up to the comma after the last
    /// of them: `bytes[..head]` (0: none).
    head: usize,
    whole: bool,
    /// What the scan found outside the holes (text lengths zero).
    scan: Scan,
    /// Events that matched (for the tests to see the replay happen).
    #[cfg(test)]
    pub(crate) replayed: u64,
}

impl Template {
    /// The head kept (empty: none).
    #[cfg(test)]
    pub(crate) fn head(&self) -> &[u8] {
        &self.bytes[..self.head]
    }

    /// Where a whole scan of `data` may start: after the kept head when `data` opens with it.
    pub(crate) fn resume_at(&self, data: &[u8]) -> usize {
        if self.head > 0 && data.starts_with(&self.bytes[..self.head]) {
            self.head
        } else {
            0
        }
    }

    /// Scan `cur`'s event as the template's event was scanned, holes only; true when it
    /// matched, with `scan` filled as a whole scan fills it (text lengths zero, the segments in
    /// `cur`). False leaves `scan` alone and `cur` to be thrown away.
    pub(crate) fn replay(&mut self, cur: &mut Cursor<'_, '_>, scan: &mut Scan) -> bool {
        if !self.whole {
            return false;
        }
        let data = cur.data;
        let mut usage = self.scan.usage;
        let (mut pos, mut lit) = (0, 0);
        for &(at, hole) in &self.holes[..self.holes_len] {
            let at = at as usize;
            let piece = &self.bytes[lit..at];
            if !data[pos..].starts_with(piece) {
                return false;
            }
            cur.pos = pos + piece.len();
            match hole {
                Some(Hole::Text { kind, kept }) => {
                    let before = cur.count;
                    if cur.text(kind).is_err() || (cur.count > before) != kept {
                        return false;
                    }
                }
                Some(Hole::Count(field)) => match (cur.count(), usage.as_mut()) {
                    (Ok(value), Some(usage)) => field.set(usage, value),
                    _ => return false,
                },
                Some(Hole::Number) => {
                    if !matches!(cur.peek(), Ok(b'-' | b'0'..=b'9')) || cur.number().is_err() {
                        return false;
                    }
                }
                None => return false,
            }
            pos = cur.pos;
            lit = at;
        }
        if data[pos..] != self.bytes[lit..] {
            return false;
        }
        *scan = Scan { usage, ..self.scan };
        #[cfg(test)]
        {
            self.replayed += 1;
        }
        true
    }

    /// Keep `data`, just scanned whole into `scan` (text lengths not yet added) with the holes
    /// of `log` and a head ending at `head`, as the template for the stream's next event; when
    /// it cannot be one, keep its head if it has one (and leave the template as it was if not).
    pub(crate) fn learn(&mut self, data: &[u8], head: usize, log: &HoleLog, scan: &Scan) {
        let spans = &log.spans[..log.len];
        let in_holes: usize = spans.iter().map(|&(s, e, _)| (e - s) as usize).sum();
        let literal = data.len() - in_holes;
        if log.usable && literal <= MAX_TEMPLATE {
            self.bytes.clear();
            let mut from = 0;
            for (i, &(start, end, hole)) in spans.iter().enumerate() {
                self.bytes.extend_from_slice(&data[from..start as usize]);
                // Fits: the offset is at most the event's length, which the span did.
                self.holes[i] = (self.bytes.len() as u32, Some(hole));
                from = end as usize;
            }
            self.bytes.extend_from_slice(&data[from..]);
            self.holes_len = spans.len();
            self.head = head;
            self.whole = true;
            self.scan = *scan;
        } else if head > 0 && head <= MAX_HEAD {
            self.bytes.clear();
            self.bytes.extend_from_slice(&data[..head]);
            self.holes_len = 0;
            self.head = head;
            self.whole = false;
        }
    }
}
