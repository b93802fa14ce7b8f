//! Incremental Server-Sent Events parser over byte slices.
//!
//! Body frames are fed as they arrive; every event completed inside a frame is handed to a
//! callback as a borrowed slice. Buffers are kept across events and reused, so once they have
//! grown to the size of the largest line nothing is allocated per event. Line terminators may be
//! CRLF, LF or CR (a CR at the end of one read followed by an LF at the start of the next counts
//! once). Comments (`:` lines) are skipped, several `data:` lines join with `\n`, and a line longer
//! than the limit stops the stream with [`SseError::Oversize`].

use crate::classify::{classify_line, Classified, OutputSink};
use memchr::memchr2;

/// Default limit of one line (and of one event's joined data): 1 MiB.
pub const DEFAULT_LINE_LIMIT: usize = 1 << 20;

/// One dispatched event, borrowed from the parser's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The joined `data:` lines (without the final newline).
    pub data: &'a [u8],
    /// The `event:` field, empty when absent.
    pub event_type: &'a [u8],
    /// Bytes on the wire since the previous event: its lines, comments and terminators.
    pub wire_bytes: u32,
}

impl SseEvent<'_> {
    /// Whether this is the OpenAI end-of-stream sentinel `[DONE]`.
    pub fn is_done(&self) -> bool {
        crate::classify::is_done(self.data)
    }
}

/// Why the parser refused the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line (or an event's joined data) exceeded the limit.
    #[error("SSE line longer than the {limit}-byte limit")]
    Oversize {
        /// The configured limit in bytes.
        limit: usize,
    },
}

/// Incremental SSE parser state; one per response.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of a line whose terminator has not arrived yet.
    partial: Vec<u8>,
    /// Joined data of the event being built.
    data: Vec<u8>,
    /// `event:` field of the event being built.
    event_type: Vec<u8>,
    /// Whether the event being built has at least one `data` field.
    has_data: bool,
    /// Wire bytes consumed since the last dispatch.
    wire_bytes: usize,
    /// The previous read ended with CR: an LF at the start of the next one belongs to it.
    after_cr: bool,
    limit: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        SseParser::new(DEFAULT_LINE_LIMIT)
    }
}

impl SseParser {
    /// A parser refusing lines longer than `limit` bytes.
    pub fn new(limit: usize) -> SseParser {
        SseParser {
            partial: Vec::new(),
            // Allocated on first use: an event whole inside one read never needs it.
            data: Vec::new(),
            event_type: Vec::new(),
            has_data: false,
            wire_bytes: 0,
            after_cr: false,
            limit,
        }
    }

    /// Whether bytes of an unfinished line or event are pending (stream cut mid-event).
    pub fn has_pending(&self) -> bool {
        !self.partial.is_empty() || self.has_data
    }

    /// Wire bytes read since the last dispatched event (they count toward the next one; an LF
    /// completing a CRLF split across reads lands here when the CR already ended an event).
    pub fn undispatched_bytes(&self) -> usize {
        self.wire_bytes
    }

    /// Feed one read; `on_event` is called for every event this read completes, in order.
    pub fn feed<F>(&mut self, mut input: &[u8], mut on_event: F) -> Result<(), SseError>
    where
        F: FnMut(SseEvent<'_>),
    {
        // An empty read says nothing about whether a CR that ended the last read starts a CRLF.
        if self.after_cr && !input.is_empty() {
            self.after_cr = false;
            if let Some((&b'\n', rest)) = input.split_first() {
                self.wire_bytes += 1;
                input = rest;
            }
        }
        while !input.is_empty() {
            let Some(pos) = memchr2(b'\n', b'\r', input) else {
                if self.partial.len() + input.len() > self.limit {
                    return Err(SseError::Oversize { limit: self.limit });
                }
                self.partial.extend_from_slice(input);
                self.wire_bytes += input.len();
                return Ok(());
            };
            let mut term_len = 1;
            if input[pos] == b'\r' {
                match input.get(pos + 1) {
                    Some(b'\n') => term_len = 2,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if let Some(used) = self.whole_data_event(input, pos, term_len, &mut on_event)? {
                input = &input[used..];
                continue;
            }
            self.wire_bytes += pos + term_len;
            if self.partial.is_empty() {
                self.process_line(&input[..pos], &mut on_event)?;
            } else {
                if self.partial.len() + pos > self.limit {
                    return Err(SseError::Oversize { limit: self.limit });
                }
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&input[..pos]);
                let result = self.process_line(&line, &mut on_event);
                line.clear();
                self.partial = line;
                result?;
            }
            input = &input[pos + term_len..];
        }
        Ok(())
    }

    /// `input` as exactly one event of a stream's usual shape, `data: …\n\n` (or with CRLF line
    /// ends) with the parser
    /// between events, when the stream's last event classifies its data by itself
    /// ([`classify_line`], which also vouches that the line holds no line break): the event
    /// and its classification, the parser left as feeding `input` would leave it. This reads
    /// the event's bytes once, where [`SseParser::feed`] looks for the line's end before the
    /// classification reads them. None: `input` is not such an event; feed it.
    ///
    /// A server that frames each event as its own HTTP chunk (vLLM, SGLang, llama.cpp) hands
    /// the recorder exactly these bytes for nearly every event.
    #[inline]
    pub fn whole_known_event<'a>(
        &mut self,
        input: &'a [u8],
        sink: &mut OutputSink,
    ) -> Option<(SseEvent<'a>, Classified)> {
        let between_events = self.partial.is_empty()
            && !self.has_data
            && self.event_type.is_empty()
            && self.wire_bytes == 0
            && !self.after_cr;
        if !between_events {
            return None;
        }
        // LF line ends (vLLM, SGLang, llama.cpp) or CRLF (sse-starlette: llama-cpp-python).
        let line = input
            .strip_suffix(b"\n\n")
            .or_else(|| input.strip_suffix(b"\r\n\r\n"))?;
        if line.len() > self.limit {
            return None;
        }
        let value = line.strip_prefix(b"data:")?;
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let classified = classify_line(value, sink)?;
        let event = SseEvent {
            data: value,
            event_type: &[],
            wire_bytes: u32::try_from(input.len()).unwrap_or(u32::MAX),
        };
        Some((event, classified))
    }

    /// The common event, `data: …\n\n` whole inside this read with nothing of an event before
    /// it, dispatched straight from the read's bytes instead of being copied into the event
    /// buffer first: Some(bytes used) when the line ending at `pos` was one. Its event, wire
    /// bytes and limit are the ones the line-by-line path gives.
    fn whole_data_event<F>(
        &mut self,
        input: &[u8],
        pos: usize,
        term_len: usize,
        on_event: &mut F,
    ) -> Result<Option<usize>, SseError>
    where
        F: FnMut(SseEvent<'_>),
    {
        let plain_start = self.partial.is_empty() && !self.has_data && self.event_type.is_empty();
        let blank_follows =
            term_len == 1 && input[pos] == b'\n' && input.get(pos + 1) == Some(&b'\n');
        let Some(value) = input[..pos].strip_prefix(b"data:") else {
            return Ok(None);
        };
        if !plain_start || !blank_follows {
            return Ok(None);
        }
        if pos > self.limit {
            return Err(SseError::Oversize { limit: self.limit });
        }
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let wire_bytes = self.wire_bytes + pos + 2;
        on_event(SseEvent {
            data: value,
            event_type: &[],
            wire_bytes: u32::try_from(wire_bytes).unwrap_or(u32::MAX),
        });
        self.wire_bytes = 0;
        Ok(Some(pos + 2))
    }

    fn process_line<F>(&mut self, line: &[u8], on_event: &mut F) -> Result<(), SseError>
    where
        F: FnMut(SseEvent<'_>),
    {
        if line.len() > self.limit {
            return Err(SseError::Oversize { limit: self.limit });
        }
        if line.is_empty() {
            self.dispatch(on_event);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                (&line[..colon], value)
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                if self.data.len() + value.len() > self.limit {
                    return Err(SseError::Oversize { limit: self.limit });
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            // `id` and `retry` do not matter to a one-shot stream; unknown fields are ignored
            // as the SSE specification requires.
            _ => {}
        }
        Ok(())
    }

    fn dispatch<F>(&mut self, on_event: &mut F)
    where
        F: FnMut(SseEvent<'_>),
    {
        if self.has_data {
            on_event(SseEvent {
                data: &self.data,
                event_type: &self.event_type,
                wire_bytes: u32::try_from(self.wire_bytes).unwrap_or(u32::MAX),
            });
            self.wire_bytes = 0;
        }
        // An empty line without data ends nothing; its bytes count toward the next event.
        self.data.clear();
        self.event_type.clear();
        self.has_data = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Owned copy of an event, for comparisons in tests.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Owned {
        data: Vec<u8>,
        event_type: Vec<u8>,
    }

    fn parse_reads(reads: &[&[u8]]) -> (Vec<Owned>, u64, bool) {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        let mut wire = 0u64;
        for read in reads {
            parser
                .feed(read, |e| {
                    wire += u64::from(e.wire_bytes);
                    events.push(Owned {
                        data: e.data.to_vec(),
                        event_type: e.event_type.to_vec(),
                    })
                })
                .unwrap();
        }
        wire += parser.undispatched_bytes() as u64;
        (events, wire, parser.has_pending())
    }

    fn datas(events: &[Owned]) -> Vec<&[u8]> {
        events.iter().map(|e| e.data.as_slice()).collect()
    }

    #[test]
    fn several_events_in_one_read() {
        let (events, wire, pending) =
            parse_reads(&[b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n"]);
        assert_eq!(
            datas(&events),
            vec![&b"{\"a\":1}"[..], b"{\"b\":2}", b"[DONE]"]
        );
        assert_eq!(wire, 44);
        assert!(!pending);
    }

    #[test]
    fn event_split_across_reads() {
        let (events, _, _) = parse_reads(&[b"da", b"ta: hel", b"lo\n", b"\n"]);
        assert_eq!(datas(&events), vec![&b"hello"[..]]);
    }

    #[test]
    fn crlf_lf_and_cr_terminators() {
        let (events, _, _) =
            parse_reads(&[b"data: a\r\n\r\ndata: b\n\ndata: c\r\rdata: d\r", b"\n\r\n"]);
        assert_eq!(datas(&events), vec![&b"a"[..], b"b", b"c", b"d"]);
    }

    #[test]
    fn comments_and_multi_line_data() {
        let (events, _, _) = parse_reads(&[b": keep-alive\n\nevent: error\ndata: x\ndata:y\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, b"x\ny");
        assert_eq!(events[0].event_type, b"error");
    }

    #[test]
    fn missing_final_blank_line_leaves_pending() {
        let (events, _, pending) = parse_reads(&[b"data: a\n\ndata: b\n"]);
        assert_eq!(datas(&events), vec![&b"a"[..]]);
        assert!(pending);
    }

    #[test]
    fn done_sentinel_recognised() {
        let mut parser = SseParser::default();
        let mut done = false;
        parser
            .feed(b"data: [DONE]\n\n", |e| done = e.is_done())
            .unwrap();
        assert!(done);
    }

    #[test]
    fn empty_read_between_cr_and_lf_keeps_one_line_end() {
        let reads: [&[u8]; 3] = [b"data: a\r", b"", b"\ndata: b\r\n\r\n"];
        let (events, wire, pending) = parse_reads(&reads);
        assert_eq!(datas(&events), vec![&b"a\nb"[..]]);
        assert_eq!(wire, 20);
        assert!(!pending);
    }

    #[test]
    fn oversize_line_refused_even_when_split() {
        let mut parser = SseParser::new(16);
        let mut dispatched = 0;
        assert_eq!(
            parser.feed(b"data: 0123456789", |_| dispatched += 1),
            Ok(())
        );
        assert_eq!(dispatched, 0);
        assert!(parser.has_pending(), "16 bytes are held as a partial line");
        assert_eq!(
            parser.feed(b"abcdef", |_| {}),
            Err(SseError::Oversize { limit: 16 })
        );
        let mut parser = SseParser::new(16);
        assert!(parser.feed(b"data: 0123456789abcdef\n", |_| {}).is_err());
    }

    #[test]
    fn oversize_joined_data_refused() {
        let mut parser = SseParser::new(12);
        let result = parser.feed(b"data: 12345\ndata: 12345\ndata: 1\n\n", |_| {});
        assert!(result.is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_split_yields_same_events(
            payloads in proptest::collection::vec("[a-z{}\":, ]{0,40}", 1..8),
            crlf in proptest::bool::ANY,
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let term = if crlf { "\r\n" } else { "\n" };
            let mut stream = String::new();
            for (i, p) in payloads.iter().enumerate() {
                if i % 3 == 1 {
                    stream.push_str(&format!(": comment{term}"));
                }
                stream.push_str(&format!("data: {p}{term}"));
                if i % 2 == 1 {
                    stream.push_str(&format!("data: second{term}"));
                }
                stream.push_str(term);
            }
            stream.push_str(&format!("data: [DONE]{term}{term}"));
            let bytes = stream.as_bytes();
            let (whole, whole_wire, _) = parse_reads(&[bytes]);
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut reads = Vec::new();
            let mut last = 0;
            for p in points {
                reads.push(&bytes[last..p]);
                last = p;
            }
            reads.push(&bytes[last..]);
            let (split, split_wire, pending) = parse_reads(&reads);
            proptest::prop_assert_eq!(&split, &whole);
            proptest::prop_assert_eq!(split_wire, whole_wire);
            proptest::prop_assert_eq!(whole_wire as usize, bytes.len());
            proptest::prop_assert_eq!(whole.len(), payloads.len() + 1);
            proptest::prop_assert!(!pending);
        }
    }
}
