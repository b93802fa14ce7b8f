//! A targeted JSON scanner for the common stream chunk shapes, cheaper than the serde walk
//! (docs/PERFORMANCE.md, *Receive path per SSE event*). It validates everything it passes
//! over, and whenever it meets something it is not sure to treat exactly as the serde path
//! would (an unusual type, a float where a count belongs, a lone surrogate, deep nesting, many
//! text fields…) it gives up and the serde path decides. Text reaches the sink only once the
//! whole event has been scanned successfully.

use super::{FinishReason, OutputSink, Scan};
use json::{unescape, utf8, Bail, Cursor, R};
use template::{CountField, Hole};
pub(crate) use template::{HoleLog, Template};
use tokentrace_format::Usage;

#[path = "classify_json.rs"]
mod json;
#[path = "classify_template.rs"]
mod template;

/// Text fields kept per event before giving up.
pub(crate) const MAX_SEGMENTS: usize = 8;

/// Which field a text segment came from (the default only fills unused segment slots).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Kind {
    Reasoning,
    #[default]
    Content,
    Tool,
}

/// Where a text field's bytes are: `start..end` of the event's bytes, or of the scratch buffer
/// when they were decoded there; checked UTF-8 either way. Offsets, not a borrowed `str`, so
/// the cursor's segments are a small array of plain values.
#[derive(Clone, Copy, Default)]
pub(crate) struct Segment {
    pub(crate) kind: Kind,
    pub(crate) in_scratch: bool,
    pub(crate) start: u32,
    pub(crate) end: u32,
}

/// Scan `data` into `scan`; on success the event's text has been fed to `sink`.
///
/// The events of one stream mostly differ only in their text and their counts. The sink keeps
/// the stream's last event scanned whole as a [`Template`]; an event that matches it outside
/// those values has only them scanned. Otherwise the event is scanned whole, from after the
/// template's head when it opens with it (`{"id":…,"object":…,"created":…,"model":…,` from
/// vLLM, SGLang, OpenAI and TGI alike: fields the classification ignores, which leave nothing
/// in `scan`), and becomes the template. Either way the result is what a scan from the first
/// byte gives (the reasons are on [`Template`]).
#[inline]
pub(crate) fn scan(data: &[u8], scan: &mut Scan, sink: &mut OutputSink) -> R<()> {
    scan_as(data, scan, sink, false)
}

/// [`scan`] by the template alone, and only of an event with no line break in it (`one_line`
/// on [`Template::replay`]); Err (the event is not such a match) leaves `scan` and `sink` as
/// they were.
#[inline]
pub(crate) fn scan_one_line(data: &[u8], scan: &mut Scan, sink: &mut OutputSink) -> R<()> {
    scan_as(data, scan, sink, true)
}

#[inline(always)]
fn scan_as(data: &[u8], scan: &mut Scan, sink: &mut OutputSink, one_line: bool) -> R<()> {
    // Every offset into the event then fits a `u32` (segments, holes, the template's spans);
    // a larger event goes to the general path.
    if u32::try_from(data.len()).is_err() {
        return Err(Bail);
    }
    let mut scratch = std::mem::take(&mut sink.scratch);
    scratch.clear();
    let (result, count) = {
        let template = &mut sink.template;
        let mut cur = Cursor::new(data, &mut scratch, &mut sink.holes, &mut sink.segments);
        let result = if template.replay(&mut cur, scan, one_line) {
            Ok(())
        } else if one_line {
            Err(Bail)
        } else {
            // What the replay may have left: its segments, its scratch text.
            cur = Cursor::new(data, cur.scratch, cur.holes, cur.segments);
            cur.scratch.clear();
            cur.pos = template.resume_at(data);
            let scanned = cur.event(scan);
            if let Ok(head) = scanned {
                template.learn(data, head, cur.holes, scan);
            }
            scanned.map(|_| ())
        };
        (result, cur.count)
    };
    if result.is_ok() {
        for k in 0..count {
            let seg = sink.segments[k];
            let from: &[u8] = if seg.in_scratch { &scratch } else { data };
            let text = &from[seg.start as usize..seg.end as usize];
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
    /// A text field: a string (kept as a segment) or null; a hole of the event's template.
    fn text(&mut self, kind: Kind) -> R<()> {
        let (start, before) = (self.pos, self.count);
        self.text_value(kind)?;
        let kept = self.count > before;
        self.holes.push(start, self.pos, Hole::Text { kind, kept });
        Ok(())
    }

    /// A count for `field` of the usage (a hole of the event's template).
    fn count_of(&mut self, field: CountField) -> R<Option<u32>> {
        let start = self.pos;
        let value = self.count()?;
        self.holes.push(start, self.pos, Hole::Count(field));
        Ok(value)
    }

    /// A text field's value without noting it as a hole (a template's replay knows its holes).
    pub(crate) fn text_value(&mut self, kind: Kind) -> R<()> {
        let (start, end, escaped) = if self.data.get(self.pos) == Some(&b'"') {
            self.pos += 1;
            self.string_body()?
        } else if self.null()? {
            return Ok(());
        } else {
            self.string()?
        };
        if start == end {
            // Empty text changes neither lengths nor the hash.
            return Ok(());
        }
        let (in_scratch, start, end) = if escaped {
            let from = self.scratch.len();
            unescape(&self.data[start..end], self.scratch)?;
            utf8(&self.scratch[from..])?;
            (true, from, self.scratch.len())
        } else {
            utf8(&self.data[start..end])?;
            (false, start, end)
        };
        self.push_segment(kind, in_scratch, start, end)
    }

    /// Keep a text field's bytes, `start..end` of the event or of the scratch buffer, as the
    /// next segment; Err when the event already has [`MAX_SEGMENTS`].
    #[inline(always)]
    pub(crate) fn push_segment(
        &mut self,
        kind: Kind,
        in_scratch: bool,
        start: usize,
        end: usize,
    ) -> R<()> {
        let slot = self.segments.get_mut(self.count).ok_or(Bail)?;
        // Fit: `scan_as` takes no event longer than `u32::MAX`, and unescaped text is
        // shorter than its escaped form.
        *slot = Segment {
            kind,
            in_scratch,
            start: start as u32,
            end: end as u32,
        };
        self.count += 1;
        Ok(())
    }

    /// The whole event, from its first byte or from just after a known head (the cursor past
    /// it, at the next top-level key); the end of its head: the bytes up to the comma after
    /// the last of its leading top-level fields that the classification ignores (0 when it
    /// opens with one it reads).
    fn event(&mut self, scan: &mut Scan) -> R<usize> {
        let mut head = self.pos;
        if head == 0 {
            self.eat(b'{')?;
            if self.peek()? == b'}' {
                self.pos += 1;
                return self.end().map(|()| 0);
            }
        }
        let mut in_head = true;
        let mut usage_seen = false;
        loop {
            let key = self.key()?;
            match key {
                b"choices" => {
                    in_head = false;
                    if !self.null()? {
                        self.array(|c| c.choice(scan))?;
                    }
                }
                b"usage" => {
                    in_head = false;
                    if usage_seen {
                        // A second `usage` replaces the first's counts; no template says so.
                        self.holes.usable = false;
                    }
                    usage_seen = true;
                    scan.usage = self.usage()?;
                }
                b"error" => {
                    in_head = false;
                    // `"error": null` (sent by some gateways on every chunk) is no error.
                    if !self.null()? {
                        scan.error = true;
                        self.skip(1)?;
                    }
                }
                _ => self.skip(1)?,
            }
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    if in_head {
                        head = self.pos;
                    }
                }
                b'}' => {
                    self.pos += 1;
                    return self.end().map(|()| head);
                }
                _ => return Err(Bail),
            }
        }
    }

    /// Nothing but whitespace after the event's object.
    fn end(&mut self) -> R<()> {
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
                // Servers moving from `reasoning_content` to `reasoning` send the same text
                // under both names: the first non-empty one is the delta's reasoning.
                let mut reasoning_taken = false;
                c.object(|c, key| match key {
                    b"content" => c.text(Kind::Content),
                    b"reasoning_content" | b"reasoning" if reasoning_taken => c.skip(3),
                    b"reasoning_content" | b"reasoning" => {
                        let before = c.count;
                        c.text(Kind::Reasoning)?;
                        reasoning_taken = c.count > before;
                        Ok(())
                    }
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
                let reason = utf8(&c.data[start..end])?;
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
                            // The first delta of a call names the function with empty
                            // arguments: the name is output too.
                            b"name" | b"arguments" => c.text(Kind::Tool),
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
                usage.prompt_tokens = c.count_of(CountField::Prompt)?;
                Ok(())
            }
            b"completion_tokens" => {
                first(1)?;
                usage.completion_tokens = c.count_of(CountField::Completion)?;
                Ok(())
            }
            b"prompt_tokens_details" => {
                first(2)?;
                usage.cached_tokens = c.detail(b"cached_tokens", CountField::Cached)?;
                Ok(())
            }
            b"completion_tokens_details" => {
                first(3)?;
                usage.reasoning_tokens = c.detail(b"reasoning_tokens", CountField::Reasoning)?;
                Ok(())
            }
            _ => c.skip_in_usage(),
        })?;
        Ok(Some(usage))
    }

    /// A field of `usage` the classification does not read. A number there (`total_tokens`)
    /// changes from event to event, so it is a hole of the event's template.
    fn skip_in_usage(&mut self) -> R<()> {
        let start = self.pos;
        if let b'-' | b'0'..=b'9' = self.peek()? {
            self.number()?;
            self.holes.push(start, self.pos, Hole::Number);
            Ok(())
        } else {
            self.skip(2)
        }
    }

    /// One count inside a details object (null object: None).
    fn detail(&mut self, name: &[u8], field: CountField) -> R<Option<u32>> {
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
                value = c.count_of(field)?;
                Ok(())
            } else {
                c.skip(3)
            }
        })?;
        Ok(value)
    }
}
