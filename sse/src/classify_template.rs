//! A stream's event template: the last event scanned whole, kept as its bytes outside the
//! values the classification reads (its *holes*: text fields and token counts). The events of
//! one response mostly differ from each other only there (`"content":"…"`, `"completion_tokens":
//! …`, and `"total_tokens":…`, the one number the classification skips that changes as they
//! do), so the next event is checked against the template piece by piece (a few word compares
//! for a short piece, a `memcmp` for a long one) and only its holes are scanned: a plain ASCII
//! string or a plain integer directly, anything else by the whole scan's own readers.
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
//!
//! A count that stays the same from event to event (the prompt's tokens, a cached or reasoning
//! count of zero once the reasoning is over) is folded into the template's bytes once two
//! replayed events in a row had it, and is then compared instead of read ([`Template::replay`]
//! says why that keeps the whole scan's result).

use super::json::{plain_ascii_end, plain_integer_end, Cursor};
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

/// A value the scan read (the default only fills unused hole slots).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Hole {
    /// A text field (string or null); `kept`: it was a non-empty string, kept as a segment.
    Text { kind: Kind, kept: bool },
    /// A token count (integer or null).
    Count(CountField),
    /// A number inside `usage` the classification does not read (`total_tokens`, which
    /// changes from event to event as the counts do).
    #[default]
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
    /// Empty, for the next scan.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.usable = true;
    }

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

/// Longest value of a count or number hole remembered to see it stay the same (ten digits, and
/// a few blanks before them): one 16-byte word.
const LAST_MAX: usize = 16;

/// A count or number hole's bytes in the last event replayed, as one little-endian word (so
/// that checking and keeping a value costs a load and a compare, not a library call).
#[derive(Clone, Copy, Default)]
struct Last {
    /// 0: none remembered (a hole's value is never empty).
    len: u8,
    /// The word's bytes: a `u128` field would align the whole entry to 16 bytes and double
    /// it (the table is per open stream, and read on every replay).
    word: [u8; LAST_MAX],
    /// Replays in a row in which the value changed.
    changes: u8,
}

/// Replays in a row with a new value after which a hole is no longer checked for staying
/// the same (a completion count, which moves with every event), until the template is
/// learned again.
const CHANGING: u8 = 3;

impl Last {
    /// Whether `data[start..end]` is the value remembered; if not, remember it (or nothing,
    /// when it is longer than [`LAST_MAX`], or empty, which no value read is).
    ///
    /// Only for a hole still watched: one whose value changed [`CHANGING`] times in a row is
    /// left out of the template's watched mask, and not asked again.
    #[inline]
    fn same_as_before(&mut self, data: &[u8], start: usize, end: usize) -> bool {
        let len = end - start;
        if len == 0 || len > LAST_MAX {
            self.changes = CHANGING;
            return false;
        }
        let word = match data.get(start..start + LAST_MAX) {
            // One load, the bytes past the value masked off.
            Some(window) => {
                let mut bytes = [0u8; LAST_MAX];
                bytes.copy_from_slice(window);
                let mask = u128::MAX
                    .checked_shr(8 * (LAST_MAX - len) as u32)
                    .unwrap_or(0);
                u128::from_le_bytes(bytes) & mask
            }
            // Near the end of the event: byte by byte (a value is a few digits).
            None => data[start..end]
                .iter()
                .rev()
                .fold(0, |word, &b| word << 8 | u128::from(b)),
        };
        let word = word.to_le_bytes();
        if usize::from(self.len) == len && self.word == word {
            return true;
        }
        if self.len != 0 {
            self.changes += 1;
        }
        // Fits: at most LAST_MAX.
        self.len = len as u8;
        self.word = word;
        false
    }

    /// The value remembered.
    fn bytes(&self) -> Vec<u8> {
        self.word[..usize::from(self.len)].to_vec()
    }
}

/// Read one hole's value at `start` (the end of the piece before it) as the whole scan read
/// the template's; false when it does not read as a value of the same kind. A plain ASCII
/// string or a plain integer number is read here directly ([`plain_ascii_end`],
/// [`plain_integer_end`]: the spans the cursor's readers give them); anything else goes
/// through those readers.
#[inline(always)]
fn replay_hole(
    cur: &mut Cursor<'_, '_>,
    hole: Hole,
    start: usize,
    one_line: bool,
    usage: &mut Option<Usage>,
) -> bool {
    let data = cur.data;
    match hole {
        Hole::Text { kind, kept } => {
            if let Some(close) = plain_ascii_end(data, start) {
                // As `text_value`: an empty string keeps no segment.
                let empty = close == start + 1;
                cur.pos = close + 1;
                return empty != kept
                    && (empty || cur.push_segment(kind, false, start + 1, close).is_ok());
            }
        }
        Hole::Number => {
            if let Some(end) = plain_integer_end(data, start) {
                cur.pos = end;
                return true;
            }
        }
        // A count's own reader starts with its digits.
        Hole::Count(_) => {}
    }
    // Whitespace before the value; where the bytes must be one line, none of it a break.
    if one_line && line_break_before_value(data, start) {
        return false;
    }
    cur.pos = start;
    match hole {
        Hole::Text { kind, kept } => {
            let before = cur.count;
            cur.text_value(kind).is_ok() && (cur.count > before) == kept
        }
        Hole::Count(field) => match (cur.count(), usage.as_mut()) {
            (Ok(value), Some(usage)) => {
                field.set(usage, value);
                true
            }
            _ => false,
        },
        Hole::Number => matches!(cur.peek(), Ok(b'-' | b'0'..=b'9')) && cur.number().is_ok(),
    }
}

/// Whether two byte strings are equal; a piece of a template is often a few bytes, where a
/// few overlapping word loads cost less than a library call.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&s[at..at + 8]);
        u64::from_le_bytes(bytes)
    };
    let half = |s: &[u8], at: usize| {
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(&s[at..at + 4]);
        u32::from_le_bytes(bytes)
    };
    // Each arm's loads, overlapping, cover every byte of the lengths it takes.
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        17..=32 => {
            word(a, 0) == word(b, 0)
                && word(a, 8) == word(b, 8)
                && word(a, n - 16) == word(b, n - 16)
                && word(a, n - 8) == word(b, n - 8)
        }
        _ => a == b,
    }
}

/// Whether the whitespace at `data[start..]`, before a hole's value, holds a line break.
#[inline]
fn line_break_before_value(data: &[u8], start: usize) -> bool {
    let mut at = start;
    while let Some(&byte) = data.get(at) {
        match byte {
            b' ' | b'\t' => at += 1,
            b'\n' | b'\r' => return true,
            _ => return false,
        }
    }
    false
}

/// Per stream: the last event scanned whole, as its bytes outside the holes, or only its head.
#[derive(Default)]
pub(crate) struct Template {
    /// The event's bytes outside its holes when `whole`; otherwise only its head.
    bytes: Vec<u8>,
    /// Where each hole was, as an offset into `bytes`.
    holes: [(u32, Hole); MAX_HOLES],
    /// Each count and number hole's value in the last event replayed.
    last: [Last; MAX_HOLES],
    /// The count and number holes still watched for a value that stays (bit k for hole k):
    /// not those that changed [`CHANGING`] times in a row, so a replay does not look at them.
    watched: u32,
    holes_len: usize,
    /// The leading top-level fields the classification ignores, up to the comma after the last
    /// of them: `bytes[..head]` (0: none).
    head: usize,
    whole: bool,
    /// No line break in `bytes`: an event that matches it with no whitespace at the start of
    /// a hole holds none either (see [`Template::replay`]).
    one_line: bool,
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

    /// How many holes the template has.
    #[cfg(test)]
    pub(crate) fn holes(&self) -> usize {
        self.holes_len
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
    ///
    /// A count or number hole whose value was the same in two events replayed in a row (a
    /// prompt's token count, a zero cached count) is then folded into the template's bytes:
    /// compared with the pieces around it instead of read. When it changes after all, the
    /// event does not match and is scanned whole.
    ///
    /// `one_line`: match only an event that holds no line break (`\n` or `\r`), so that bytes
    /// read as one SSE line are known to be one without looking for its end. The template's
    /// bytes must hold none, and so must the whitespace a hole may start with (Python's
    /// `json.dumps` puts a blank after every colon): a hole's value (a string, which refuses
    /// control bytes, a number, or `null`) holds none, and whitespace can only come before
    /// it.
    pub(crate) fn replay(
        &mut self,
        cur: &mut Cursor<'_, '_>,
        scan: &mut Scan,
        one_line: bool,
    ) -> bool {
        if !self.whole || (one_line && !self.one_line) {
            return false;
        }
        let data = cur.data;
        let mut usage = self.scan.usage;
        let (mut pos, mut lit) = (0, 0);
        // Where each hole's value was; the values are remembered only once the whole event
        // matched, so that an event that does not match changes nothing.
        let mut spans = [(0u32, 0u32); MAX_HOLES];
        let holes = &self.holes[..self.holes_len];
        for (&(at, hole), span) in holes.iter().zip(spans.iter_mut()) {
            let at = at as usize;
            let piece = &self.bytes[lit..at];
            let start = pos + piece.len();
            if !data.get(pos..start).is_some_and(|bytes| same(bytes, piece))
                || !replay_hole(cur, hole, start, one_line, &mut usage)
            {
                return false;
            }
            // Fit: the scan takes no event longer than `u32::MAX` (`scan_as`).
            *span = (start as u32, cur.pos as u32);
            pos = cur.pos;
            lit = at;
        }
        if !same(&data[pos..], &self.bytes[lit..]) {
            return false;
        }
        // Holes to fold: bit k for hole k.
        let mut fold = 0u32;
        let mut watch = self.watched;
        while watch != 0 {
            let k = watch.trailing_zeros() as usize;
            watch &= watch - 1;
            let (start, end) = spans[k];
            let last = &mut self.last[k];
            if last.same_as_before(data, start as usize, end as usize) {
                fold |= 1 << k;
            } else if last.changes >= CHANGING {
                self.watched &= !(1 << k);
            }
        }
        *scan = Scan { usage, ..self.scan };
        if fold != 0 {
            self.fold(fold, usage);
        }
        #[cfg(test)]
        {
            self.replayed += 1;
        }
        true
    }

    /// Make the holes of `mask` part of the template's bytes, with the values they had (kept
    /// in `last`); `usage`: the counts the event just replayed had, those holes' among them.
    ///
    /// Why the result stays the whole scan's: a folded hole's bytes, and the byte after them
    /// (the start of the next piece, never empty between two values), are now compared as
    /// the pieces are; the same bytes read the same value and end at the same place, and that
    /// value now stays in the template's usage, which only unfolded holes overwrite.
    fn fold(&mut self, mask: u32, usage: Option<Usage>) {
        let folded: usize = (0..self.holes_len)
            .filter(|k| mask & 1 << k != 0)
            .map(|k| usize::from(self.last[k].len))
            .sum();
        if self.bytes.len() + folded > MAX_TEMPLATE {
            return;
        }
        let mut bytes = Vec::with_capacity(self.bytes.len() + folded);
        let mut kept = 0;
        let mut watched = 0;
        let mut lit = 0;
        for k in 0..self.holes_len {
            let (at, hole) = self.holes[k];
            bytes.extend_from_slice(&self.bytes[lit..at as usize]);
            lit = at as usize;
            let last = self.last[k];
            if mask & 1 << k != 0 {
                bytes.extend_from_slice(&last.bytes());
            } else {
                // Fits: the offset is at most the template's length, which MAX_TEMPLATE bounds.
                self.holes[kept] = (bytes.len() as u32, hole);
                self.last[kept] = last;
                if !matches!(hole, Hole::Text { .. }) && last.changes < CHANGING {
                    watched |= 1 << kept;
                }
                kept += 1;
            }
        }
        bytes.extend_from_slice(&self.bytes[lit..]);
        // A folded value may have had whitespace before it.
        self.one_line = memchr::memchr2(b'\n', b'\r', &bytes).is_none();
        self.bytes = bytes;
        self.holes_len = kept;
        self.watched = watched;
        self.scan.usage = usage;
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
                self.holes[i] = (self.bytes.len() as u32, hole);
                from = end as usize;
            }
            self.bytes.extend_from_slice(&data[from..]);
            self.holes_len = spans.len();
            self.last = [Last::default(); MAX_HOLES];
            self.watched = spans
                .iter()
                .enumerate()
                .filter(|(_, (_, _, hole))| !matches!(hole, Hole::Text { .. }))
                .fold(0, |watched, (k, _)| watched | 1 << k);
            self.head = head;
            self.whole = true;
            self.one_line = memchr::memchr2(b'\n', b'\r', &self.bytes).is_none();
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

#[cfg(test)]
mod tests {
    use super::same;

    /// The word compare agrees with the slice compare at every length it takes apart (and
    /// past them), for equal bytes and for a difference at any one place, whatever the byte.
    #[test]
    fn pieces_compare_as_slices_do_at_every_length_and_place() {
        for n in 0..48 {
            let a: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert!(same(&a, &a.clone()), "length {n}");
            for at in 0..n {
                for flip in [0x01, 0x80, 0xFF] {
                    let mut b = a.clone();
                    b[at] ^= flip;
                    assert!(!same(&a, &b), "length {n}, byte {at} ^ {flip:#x}");
                }
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same(&a, &longer), "lengths {n} and {}", n + 1);
        }
    }
}
