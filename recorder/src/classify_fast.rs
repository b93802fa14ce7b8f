//! A targeted JSON scanner for the common stream chunk shapes, about four times cheaper than
//! the serde walk. It validates everything it passes over, and whenever it meets something it
//! is not sure to treat exactly as the serde path would (an unusual type, a float where a count
//! belongs, a lone surrogate, deep nesting, many text fields…) it gives up and the serde path
//! decides. Text reaches the sink only once the whole event has been scanned successfully.

use super::{FinishReason, OutputSink, Scan};
use tokentrace_format::Usage;

/// The scanner gave up; the serde path decides.
pub(crate) struct Bail;

type R<T> = Result<T, Bail>;

/// Deepest nesting the scanner follows (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 64;

/// Text fields kept per event before giving up.
const MAX_SEGMENTS: usize = 8;

#[derive(Clone, Copy)]
enum Kind {
    Reasoning,
    Content,
    Tool,
}

/// Where a text field's bytes are: in the input, or decoded into the scratch buffer.
#[derive(Clone, Copy)]
struct Segment {
    kind: Kind,
    scratch: bool,
    start: usize,
    end: usize,
}

struct Cursor<'a, 's> {
    data: &'a [u8],
    pos: usize,
    scratch: &'s mut Vec<u8>,
    segments: [Option<Segment>; MAX_SEGMENTS],
    count: usize,
}

/// Scan `data` into `scan`; on success the event's text has been fed to `sink`.
pub(crate) fn scan(data: &[u8], scan: &mut Scan, sink: &mut OutputSink) -> R<()> {
    let mut scratch = std::mem::take(&mut sink.scratch);
    scratch.clear();
    let mut cur = Cursor {
        data,
        pos: 0,
        scratch: &mut scratch,
        segments: [None; MAX_SEGMENTS],
        count: 0,
    };
    let result = cur.event(scan);
    let segments = cur.segments;
    if result.is_ok() {
        for seg in segments.iter().flatten() {
            let bytes = if seg.scratch {
                &scratch[seg.start..seg.end]
            } else {
                &data[seg.start..seg.end]
            };
            // Checked when the segment was taken.
            let text = std::str::from_utf8(bytes).unwrap_or_default();
            let slot = match seg.kind {
                Kind::Reasoning => &mut scan.reasoning_len,
                Kind::Content => &mut scan.content_len,
                Kind::Tool => &mut scan.tool_len,
            };
            *slot = slot.saturating_add(u32::try_from(text.len()).unwrap_or(u32::MAX));
            sink.take_text(text);
        }
    }
    sink.scratch = scratch;
    result
}

impl<'a> Cursor<'a, '_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.data.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> R<u8> {
        self.ws();
        self.data.get(self.pos).copied().ok_or(Bail)
    }

    fn eat(&mut self, byte: u8) -> R<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// Consume `null` if it is next.
    fn null(&mut self) -> R<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    fn literal(&mut self, lit: &[u8]) -> R<()> {
        if self.data[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// A string at the cursor: (start, end, has_escapes) of its contents. A plain byte loop:
    /// the strings of a chunk are short, where SIMD search costs more than it saves.
    fn string(&mut self) -> R<(usize, usize, bool)> {
        self.eat(b'"')?;
        let start = self.pos;
        let mut escaped = false;
        let mut i = self.pos;
        loop {
            match *self.data.get(i).ok_or(Bail)? {
                b'"' => {
                    self.pos = i + 1;
                    return Ok((start, i, escaped));
                }
                b'\\' => {
                    escaped = true;
                    match self.data.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            let unit = self.hex4(i + 2)?;
                            if (0xD800..0xE000).contains(&unit) {
                                // Surrogates: leave their exact treatment to serde.
                                return Err(Bail);
                            }
                            i += 6;
                        }
                        _ => return Err(Bail),
                    }
                }
                0..=0x1F => return Err(Bail),
                _ => i += 1,
            }
        }
    }

    fn hex4(&self, at: usize) -> R<u32> {
        let digits = self.data.get(at..at + 4).ok_or(Bail)?;
        let mut value = 0;
        for &d in digits {
            value = value * 16 + (d as char).to_digit(16).ok_or(Bail)?;
        }
        Ok(value)
    }

    /// An object key; keys we look for are ASCII, anything else is kept as is (and must be
    /// UTF-8 for serde to accept it).
    fn key(&mut self) -> R<&'a [u8]> {
        let (start, end, escaped) = self.string()?;
        let key = &self.data[start..end];
        if escaped || !key.is_ascii() {
            return Err(Bail);
        }
        self.eat(b':')?;
        Ok(key)
    }

    /// Iterate an object's keys; `on_key` must consume the value.
    fn object(&mut self, mut on_key: impl FnMut(&mut Self, &'a [u8]) -> R<()>) -> R<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            let key = self.key()?;
            on_key(self, key)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b'}' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(Bail),
            }
        }
    }

    /// Iterate an array; `on_item` must consume each element.
    fn array(&mut self, mut on_item: impl FnMut(&mut Self) -> R<()>) -> R<()> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            on_item(self)?;
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(Bail),
            }
        }
    }

    fn skip(&mut self, depth: u32) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Bail);
        }
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(|c, _| c.skip(depth + 1)),
            b'[' => self.array(|c| c.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Bail),
        }
    }

    fn digits(&mut self) -> R<()> {
        let start = self.pos;
        while self.data.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        if self.pos == start {
            Err(Bail)
        } else {
            Ok(())
        }
    }

    /// Validate a JSON number (grammar only).
    fn number(&mut self) -> R<()> {
        if self.data.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        if self.data.get(self.pos) == Some(&b'0') {
            self.pos += 1;
        } else {
            self.digits()?;
        }
        if self.data.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            self.digits()?;
        }
        if let Some(b'e' | b'E') = self.data.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.data.get(self.pos) {
                self.pos += 1;
            }
            self.digits()?;
        }
        Ok(())
    }

    /// A count: a plain non-negative integer that fits u32, or null.
    fn count(&mut self) -> R<Option<u32>> {
        if self.null()? {
            return Ok(None);
        }
        let start = self.pos;
        self.number()?;
        let text = std::str::from_utf8(&self.data[start..self.pos]).map_err(|_| Bail)?;
        text.parse::<u32>().map(Some).map_err(|_| Bail)
    }

    /// A text field: a string (kept as a segment) or null.
    fn text(&mut self, kind: Kind) -> R<()> {
        if self.null()? {
            return Ok(());
        }
        let (start, end, escaped) = self.string()?;
        if start == end {
            // Empty text changes neither lengths nor the hash.
            return Ok(());
        }
        if self.count == MAX_SEGMENTS {
            return Err(Bail);
        }
        let segment = if escaped {
            let from = self.scratch.len();
            unescape(&self.data[start..end], self.scratch)?;
            std::str::from_utf8(&self.scratch[from..]).map_err(|_| Bail)?;
            Segment {
                kind,
                scratch: true,
                start: from,
                end: self.scratch.len(),
            }
        } else {
            std::str::from_utf8(&self.data[start..end]).map_err(|_| Bail)?;
            Segment {
                kind,
                scratch: false,
                start,
                end,
            }
        };
        self.segments[self.count] = Some(segment);
        self.count += 1;
        Ok(())
    }

    fn event(&mut self, scan: &mut Scan) -> R<()> {
        if self.peek()? != b'{' {
            return Err(Bail);
        }
        self.object(|c, key| match key {
            b"choices" => {
                if c.null()? {
                    return Ok(());
                }
                c.array(|c| c.choice(scan))
            }
            b"usage" => {
                scan.usage = c.usage()?;
                Ok(())
            }
            b"error" => {
                scan.error = true;
                c.skip(1)
            }
            _ => c.skip(1),
        })?;
        self.ws();
        if self.pos == self.data.len() {
            Ok(())
        } else {
            Err(Bail)
        }
    }

    fn choice(&mut self, scan: &mut Scan) -> R<()> {
        if self.null()? {
            return Ok(());
        }
        self.object(|c, key| match key {
            b"delta" => {
                if c.null()? {
                    return Ok(());
                }
                c.object(|c, key| match key {
                    b"content" => c.text(Kind::Content),
                    b"reasoning_content" | b"reasoning" => c.text(Kind::Reasoning),
                    b"role" => {
                        if !c.null()? {
                            c.skip(3)?;
                            scan.role = true;
                        }
                        Ok(())
                    }
                    b"tool_calls" => c.tool_calls(scan),
                    _ => c.skip(3),
                })
            }
            b"text" => c.text(Kind::Content),
            b"finish_reason" => {
                if c.null()? {
                    return Ok(());
                }
                let (start, end, escaped) = c.string()?;
                let reason = std::str::from_utf8(&c.data[start..end]).map_err(|_| Bail)?;
                if escaped {
                    return Err(Bail);
                }
                scan.finish_reason = Some(FinishReason::new(reason));
                Ok(())
            }
            b"logprobs" => {
                if c.null()? {
                    return Ok(());
                }
                c.object(|c, key| match key {
                    b"content" | b"tokens" => {
                        if c.null()? {
                            return Ok(());
                        }
                        let mut n = 0;
                        c.array(|c| {
                            n += 1;
                            c.skip(4)
                        })?;
                        *scan.logprob_tokens.get_or_insert(0) += n;
                        Ok(())
                    }
                    _ => c.skip(3),
                })
            }
            _ => c.skip(2),
        })
    }

    fn tool_calls(&mut self, scan: &mut Scan) -> R<()> {
        if self.null()? {
            return Ok(());
        }
        self.array(|c| {
            if !c.null()? {
                c.object(|c, key| match key {
                    b"function" => {
                        if c.null()? {
                            return Ok(());
                        }
                        c.object(|c, key| match key {
                            b"arguments" => c.text(Kind::Tool),
                            _ => c.skip(6),
                        })
                    }
                    _ => c.skip(5),
                })?;
            }
            scan.tool = true;
            Ok(())
        })
    }

    fn usage(&mut self) -> R<Option<Usage>> {
        if self.null()? {
            return Ok(None);
        }
        let mut usage = Usage::default();
        // serde's derived struct refuses a repeated field; leave that case to it.
        let mut seen = [false; 4];
        let mut first = |i: usize| {
            if std::mem::replace(&mut seen[i], true) {
                Err(Bail)
            } else {
                Ok(())
            }
        };
        self.object(|c, key| match key {
            b"prompt_tokens" => {
                first(0)?;
                usage.prompt_tokens = c.count()?;
                Ok(())
            }
            b"completion_tokens" => {
                first(1)?;
                usage.completion_tokens = c.count()?;
                Ok(())
            }
            b"prompt_tokens_details" => {
                first(2)?;
                usage.cached_tokens = c.detail(b"cached_tokens")?;
                Ok(())
            }
            b"completion_tokens_details" => {
                first(3)?;
                usage.reasoning_tokens = c.detail(b"reasoning_tokens")?;
                Ok(())
            }
            _ => c.skip(2),
        })?;
        Ok(Some(usage))
    }

    /// One count inside a details object (null object: None).
    fn detail(&mut self, name: &[u8]) -> R<Option<u32>> {
        if self.null()? {
            return Ok(None);
        }
        let mut value = None;
        let mut seen = false;
        self.object(|c, key| {
            if key == name {
                if std::mem::replace(&mut seen, true) {
                    return Err(Bail);
                }
                value = c.count()?;
                Ok(())
            } else {
                c.skip(3)
            }
        })?;
        Ok(value)
    }
}

/// Decode a JSON string body with escapes (no surrogates: `string` refused them) into `out`.
fn unescape(raw: &[u8], out: &mut Vec<u8>) -> R<()> {
    let mut i = 0;
    while i < raw.len() {
        let Some(j) = memchr::memchr(b'\\', &raw[i..]) else {
            out.extend_from_slice(&raw[i..]);
            return Ok(());
        };
        out.extend_from_slice(&raw[i..i + j]);
        i += j;
        let byte = match raw.get(i + 1) {
            Some(b'"') => b'"',
            Some(b'\\') => b'\\',
            Some(b'/') => b'/',
            Some(b'b') => 0x08,
            Some(b'f') => 0x0C,
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b't') => b'\t',
            Some(b'u') => {
                let hex = raw.get(i + 2..i + 6).ok_or(Bail)?;
                let hex = std::str::from_utf8(hex).map_err(|_| Bail)?;
                let unit = u32::from_str_radix(hex, 16).map_err(|_| Bail)?;
                let ch = char::from_u32(unit).ok_or(Bail)?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                i += 6;
                continue;
            }
            _ => return Err(Bail),
        };
        out.push(byte);
        i += 2;
    }
    Ok(())
}
