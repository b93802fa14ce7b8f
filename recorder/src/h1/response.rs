//! An HTTP/1.1 response as the recorder reads it: the head (status line and the headers it
//! uses) and the body's framing — chunked, length-delimited or delimited by the connection's
//! close (RFC 9112 §6–7). Pure byte work on what each socket read brought: no I/O, no
//! allocation per read once a request is under way.

/// The longest response head accepted; a server sending more is not answering an API call.
pub const MAX_HEAD: usize = 64 * 1024;
/// The longest chunk-size or trailer line accepted, in bytes before its LF (size, extensions
/// and a CR).
pub const MAX_SIZE_LINE: usize = 1024;

/// A response head.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// `HTTP/1.0` answers close their connection unless they say otherwise.
    pub http10: bool,
    /// Every header, names lower-cased, values trimmed, in order.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of header `name` (lower case).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// How the body is delimited, or why it cannot be read.
    pub fn framing(&self, request_was_head: bool) -> Result<Framing, String> {
        if request_was_head || (100..200).contains(&self.status) || matches!(self.status, 204 | 304)
        {
            return Ok(Framing::Length(0));
        }
        if let Some(te) = self.get("transfer-encoding") {
            let last = te.rsplit(',').next().unwrap_or("").trim();
            if last.eq_ignore_ascii_case("chunked") {
                return Ok(Framing::Chunked(Chunked::default()));
            }
            // Any other coding last: the body runs to the connection's close (RFC 9112 6.3).
            return Ok(Framing::Close);
        }
        match self.get("content-length") {
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map(Framing::Length)
                .map_err(|_| format!("invalid Content-Length {v:?}")),
            None => Ok(Framing::Close),
        }
    }

    /// Whether the connection may carry another request after this response.
    pub fn keeps_alive(&self) -> bool {
        let connection = self.get("connection").unwrap_or("");
        let has = |token: &str| {
            connection
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        };
        if self.http10 {
            has("keep-alive")
        } else {
            !has("close")
        }
    }
}

/// Where the head ends in `buf` (the index after its blank line), if it has arrived.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    memchr::memmem::find(buf, b"\r\n\r\n").map(|i| i + 4)
}

/// Adds one read's bytes to a response head being read; the head and the bytes after it once
/// it is whole, None while it is not. Interim answers (100 Continue, 103 Early Hints) are
/// skipped: they precede the one that counts. The one head reader of the own client, whether a
/// request's task or the stream reader reads the head.
pub fn take_head(
    head_bytes: &mut Vec<u8>,
    bytes: &[u8],
) -> Result<Option<(Head, Vec<u8>)>, String> {
    head_bytes.extend_from_slice(bytes);
    while let Some(end) = head_end(head_bytes) {
        let head = parse_head(&head_bytes[..end])?;
        let rest = head_bytes.split_off(end);
        if (100..200).contains(&head.status) && head.status != 101 {
            *head_bytes = rest;
            continue;
        }
        return Ok(Some((head, rest)));
    }
    if head_bytes.len() > MAX_HEAD {
        return Err(format!("response head longer than {MAX_HEAD} bytes"));
    }
    Ok(None)
}

/// Parses a complete head (`buf` up to and including its blank line).
pub fn parse_head(buf: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(buf).map_err(|_| "response head is not UTF-8".to_string())?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(format!("not an HTTP/1.x status line: {status_line:?}")),
    };
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header line {line:?}"))?;
        if name.is_empty() || name.contains(|c: char| c.is_whitespace()) {
            return Err(format!("bad header name {name:?}"));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Head {
        status,
        http10,
        headers,
    })
}

/// How a body ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunked),
    /// `Content-Length`: the bytes still to come.
    Length(u64),
    /// Until the server closes the connection.
    Close,
}

/// Where a chunked body's decoder stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunked {
    state: ChunkState,
    /// A chunk-size or trailer line cut by a read.
    line: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ChunkState {
    /// Reading a chunk-size line.
    #[default]
    Size,
    /// In a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data (`bool`: its CR was seen).
    DataEnd(bool),
    /// Trailer lines after the last chunk.
    Trailer,
    /// The body is over.
    Done,
}

/// What decoding one read's bytes gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Bytes of the input consumed (the rest belongs to no response: a server that sends more
    /// than the body is not followed).
    pub consumed: usize,
    /// Whether the body is complete.
    pub done: bool,
}

impl Framing {
    /// Decodes `input`, handing each run of body data to `data` (several per read when a read
    /// holds several chunks). Err when the framing is broken.
    pub fn decode(&mut self, input: &[u8], mut data: impl FnMut(&[u8])) -> Result<Decoded, String> {
        match self {
            Framing::Close => {
                if !input.is_empty() {
                    data(input);
                }
                Ok(Decoded {
                    consumed: input.len(),
                    done: false,
                })
            }
            Framing::Length(left) => {
                let take = usize::try_from(*left).map_or(input.len(), |l| l.min(input.len()));
                if take > 0 {
                    data(&input[..take]);
                }
                *left -= take as u64;
                Ok(Decoded {
                    consumed: take,
                    done: *left == 0,
                })
            }
            Framing::Chunked(c) => c.decode(input, data),
        }
    }
}

impl Chunked {
    fn decode(&mut self, input: &[u8], mut data: impl FnMut(&[u8])) -> Result<Decoded, String> {
        let mut i = 0;
        while i < input.len() {
            // The usual chunk whole in this read (a plain size line, the data, the CRLF) in
            // one step: a stream of them stays here, where a dispatch on the state per part
            // is a branch the processor mispredicts.
            if self.state == ChunkState::Size && self.line.is_empty() {
                if let Some((size, used)) = plain_size_line(&input[i..]) {
                    let start = i + used;
                    let whole = usize::try_from(size)
                        .ok()
                        .filter(|&size| size > 0)
                        .and_then(|size| input.get(start..start.checked_add(size)?.checked_add(2)?))
                        .filter(|chunk| chunk.ends_with(b"\r\n"));
                    match whole {
                        Some(chunk) => {
                            data(&chunk[..chunk.len() - 2]);
                            i = start + chunk.len();
                        }
                        None => {
                            i = start;
                            self.state = next_after_size(size);
                        }
                    }
                    continue;
                }
            }
            match self.state {
                ChunkState::Done => break,
                ChunkState::Size | ChunkState::Trailer => {
                    let rest = &input[i..];
                    let Some(nl) = memchr::memchr(b'\n', rest) else {
                        self.line.extend_from_slice(rest);
                        i = input.len();
                        if self.line.len() > MAX_SIZE_LINE {
                            return Err(line_too_long());
                        }
                        break;
                    };
                    // A line whole inside this read is read where it is: a copy would cost
                    // an allocation per chunk. Only a line cut by a read is joined.
                    let joined;
                    let line: &[u8] = if self.line.is_empty() {
                        &rest[..nl]
                    } else {
                        self.line.extend_from_slice(&rest[..nl]);
                        joined = std::mem::take(&mut self.line);
                        &joined
                    };
                    i += nl + 1;
                    // The limit holds for a line whole in one read as for one cut by reads,
                    // so how the server's bytes were split never changes the answer.
                    if line.len() > MAX_SIZE_LINE {
                        return Err(line_too_long());
                    }
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if self.state == ChunkState::Trailer {
                        if line.is_empty() {
                            self.state = ChunkState::Done;
                        }
                        continue;
                    }
                    self.state = next_after_size(chunk_size(line)?);
                }
                ChunkState::Data(left) => {
                    let rest = &input[i..];
                    let take = usize::try_from(left).map_or(rest.len(), |l| l.min(rest.len()));
                    data(&rest[..take]);
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd(false)
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataEnd(cr) => {
                    match (cr, input[i]) {
                        (false, b'\r') => self.state = ChunkState::DataEnd(true),
                        (_, b'\n') => self.state = ChunkState::Size,
                        _ => return Err("chunk data not followed by CRLF".into()),
                    }
                    i += 1;
                }
            }
        }
        Ok(Decoded {
            consumed: i,
            done: self.state == ChunkState::Done,
        })
    }
}

/// Why a chunked body was refused for a line over [`MAX_SIZE_LINE`].
fn line_too_long() -> String {
    format!("chunk-size or trailer line longer than {MAX_SIZE_LINE} bytes")
}

/// What follows a chunk-size line: the chunk's data, or the trailer after the last chunk.
fn next_after_size(size: u64) -> ChunkState {
    if size == 0 {
        ChunkState::Trailer
    } else {
        ChunkState::Data(size)
    }
}

/// The usual chunk-size line whole at the start of `rest`, hex digits and CRLF: the size and
/// the bytes the line takes. It comes once per streamed event on most servers, where finding
/// the line's end with a library search costs more than reading its few bytes here. Anything
/// else (extensions, blanks, a bare LF, a line cut by the read, a bad digit) is None and is
/// read by the general path, which [`chunk_size`] then judges.
#[inline]
fn plain_size_line(rest: &[u8]) -> Option<(u64, usize)> {
    let mut size = 0u64;
    // 15 digits at most, as `chunk_size` takes, then the CR.
    for (i, &b) in rest.iter().enumerate().take(16) {
        let digit = HEX[usize::from(b)];
        if digit < 16 {
            size = size << 4 | u64::from(digit);
        } else if b == b'\r' && i > 0 && rest.get(i + 1) == Some(&b'\n') {
            return Some((size, i + 2));
        } else {
            return None;
        }
    }
    None
}

/// Each byte's value as a hex digit, 0xFF for a byte that is none: one load per digit instead
/// of three range tests.
const HEX: [u8; 256] = {
    let mut table = [0xFF; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = match b as u8 {
            d @ b'0'..=b'9' => d - b'0',
            d @ b'a'..=b'f' => d - b'a' + 10,
            d @ b'A'..=b'F' => d - b'A' + 10,
            _ => 0xFF,
        };
        b += 1;
    }
    table
};

/// The size of a chunk-size line (hex, optional `;extensions`, blanks around the digits).
/// Read by hand: it runs once per chunk, that is once per streamed event on most servers,
/// where a UTF-8 check, a trim and `from_str_radix` cost a few per cent of the stream reader.
fn chunk_size(line: &[u8]) -> Result<u64, String> {
    let digits = line
        .iter()
        .position(|&b| b == b';')
        .map_or(line, |at| &line[..at])
        .trim_ascii();
    let bad = || format!("bad chunk size {:?}", String::from_utf8_lossy(digits));
    // 15 hex digits: any size a u64 holds with room, and no overflow to check.
    if digits.is_empty() || digits.len() > 15 {
        return Err(bad());
    }
    let mut size = 0u64;
    for &b in digits {
        let digit = HEX[usize::from(b)];
        if digit >= 16 {
            return Err(bad());
        }
        size = size << 4 | u64::from(digit);
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head(text: &str) -> Head {
        let bytes = text.as_bytes();
        let end = head_end(bytes).unwrap();
        parse_head(&bytes[..end]).unwrap()
    }

    #[test]
    fn chunk_sizes_read_as_hex_and_anything_else_is_refused() {
        assert_eq!(chunk_size(b"1a"), Ok(26));
        assert_eq!(chunk_size(b"1A;name=value"), Ok(26));
        assert_eq!(chunk_size(b" \t0 ; ext"), Ok(0));
        assert_eq!(chunk_size(b"fffffffffffffff"), Ok((1 << 60) - 1));
        // The quick path reads only the plain form, and reads it as `chunk_size` does.
        assert_eq!(plain_size_line(b"1a\r\nx"), Some((26, 4)));
        assert_eq!(
            plain_size_line(b"fffffffffffffff\r\n"),
            Some(((1 << 60) - 1, 17))
        );
        for other in [
            &b"\r\n"[..],
            b"1a",
            b"1a\r",
            b"1a\n",
            b"1a;x\r\n",
            b" 1a\r\n",
            b"1000000000000000\r\n",
            b"g\r\n",
        ] {
            assert_eq!(plain_size_line(other), None, "{other:?}");
        }
        for bad in [
            &b""[..],
            b";x",
            b" ",
            b"+1",
            b"-1",
            b"0x1",
            b"1 2",
            b"g",
            b"1000000000000000",
            b"\xc3\xa9",
        ] {
            assert!(
                chunk_size(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(chunk_size(b"zz;x").unwrap_err(), "bad chunk size \"zz\"");
    }

    #[test]
    fn heads_give_status_headers_and_framing() {
        let h = head("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(h.status, 200);
        assert_eq!(h.get("content-type"), Some("text/event-stream"));
        assert!(matches!(h.framing(false), Ok(Framing::Chunked(_))));
        assert!(h.keeps_alive());
        let h = head("HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n");
        assert_eq!(h.framing(false), Ok(Framing::Length(5)));
        assert!(!h.keeps_alive(), "HTTP/1.0 closes unless told otherwise");
        let h = head("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
        assert_eq!(h.framing(false), Ok(Framing::Close));
        assert!(!h.keeps_alive());
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(head("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")
            .framing(false)
            .is_err());
    }

    fn decode_all(framing: &mut Framing, reads: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut done = false;
        for r in reads {
            let d = framing.decode(r, |b| out.extend_from_slice(b)).unwrap();
            done = d.done;
        }
        (out, done)
    }

    /// A size or trailer line is refused when it has more than MAX_SIZE_LINE bytes before its
    /// LF, and taken up to that, whether one read holds it whole or reads cut it anywhere. A
    /// long line whole in one read used to be taken where the same line cut by a read was
    /// refused; `fuzz/fuzz_targets/h1_response.rs`, which holds the reader against the whole
    /// response read at once, fails on that.
    #[test]
    fn the_line_limit_does_not_depend_on_how_reads_cut_the_line() {
        for (trailer, line_len) in [
            (false, MAX_SIZE_LINE),
            (false, MAX_SIZE_LINE + 1),
            (true, MAX_SIZE_LINE),
            (true, MAX_SIZE_LINE + 1),
        ] {
            // The line's bytes before its LF: `2;x…x\r` or `X-T: x…x\r`, line_len in all.
            let lead: &[u8] = if trailer { b"X-T: " } else { b"2;" };
            let mut line = lead.to_vec();
            line.resize(line_len - 1, b'x');
            line.push(b'\r');
            let wire = if trailer {
                [&b"2\r\nhi\r\n0\r\n"[..], &line, b"\n\r\n"].concat()
            } else {
                [&line[..], b"\nhi\r\n0\r\n\r\n"].concat()
            };
            let refused = line_len > MAX_SIZE_LINE;
            for cut in [0, 1, 9, 600, line_len - 1, line_len, wire.len()] {
                let cut = cut.min(wire.len());
                let mut f = Framing::Chunked(Chunked::default());
                let first = f.decode(&wire[..cut], |_| {});
                let second = first.and_then(|_| f.decode(&wire[cut..], |_| {}));
                match second {
                    Ok(d) => assert!(!refused && d.done, "{line_len} bytes, cut at {cut}"),
                    Err(e) => assert!(refused, "{line_len} bytes, cut at {cut}: {e}"),
                }
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_with_extensions_and_trailers() {
        let body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n";
        let (out, done) = decode_all(&mut Framing::Chunked(Chunked::default()), &[body]);
        assert_eq!(out, b"hello world");
        assert!(done);
        let mut f = Framing::Chunked(Chunked::default());
        assert!(
            f.decode(b"5\r\nhelloXY", |_| {}).is_err(),
            "no CRLF after data"
        );
        let mut f = Framing::Chunked(Chunked::default());
        assert!(f.decode(b"zz\r\n", |_| {}).is_err());
    }

    fn chunked(parts: &[Vec<u8>]) -> Vec<u8> {
        let mut wire = Vec::new();
        for p in parts.iter().filter(|p| !p.is_empty()) {
            wire.extend_from_slice(format!("{:x}\r\n", p.len()).as_bytes());
            wire.extend_from_slice(p);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        wire
    }

    /// The events of a whole response read in the pieces `reads`: head, framing and SSE.
    fn events_of(reads: &[&[u8]]) -> (u16, Vec<Vec<u8>>, bool) {
        let mut parser = tokentrace_sse::parser::SseParser::new(1 << 20);
        let mut events = Vec::new();
        let mut head_bytes = Vec::new();
        let mut framing: Option<(u16, Framing)> = None;
        let mut done = false;
        for read in reads {
            let body: Vec<u8> = match &framing {
                Some(_) => read.to_vec(),
                None => {
                    let Some((head, rest)) = take_head(&mut head_bytes, read).unwrap() else {
                        continue;
                    };
                    framing = Some((head.status, head.framing(false).unwrap()));
                    rest
                }
            };
            if let Some((_, f)) = framing.as_mut() {
                let d = f
                    .decode(&body, |data| {
                        parser.feed(data, |e| events.push(e.data.to_vec())).unwrap();
                    })
                    .unwrap();
                done = d.done;
            }
        }
        (framing.map_or(0, |f| f.0), events, done)
    }

    proptest! {
        /// Any split of a whole response (an interim answer or none, the head, a chunked
        /// body, SSE events inside) into reads gives the same events as reading it at once.
        #[test]
        fn any_split_of_a_response_gives_the_same_events(
            texts in proptest::collection::vec("[a-z {}\":,]{0,30}", 1..8),
            sizes in proptest::collection::vec(1usize..50, 1..10),
            cuts in proptest::collection::vec(0usize..2000, 0..16),
            interim in any::<bool>(),
        ) {
            let sse: String = texts.iter().map(|t| format!("data: {t}\n\n")).collect();
            let mut parts = Vec::new();
            let mut at = 0;
            for size in sizes.iter().cycle() {
                if at >= sse.len() {
                    break;
                }
                let end = (at + size).min(sse.len());
                parts.push(sse.as_bytes()[at..end].to_vec());
                at = end;
            }
            let mut wire = Vec::new();
            if interim {
                wire.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            }
            wire.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
            wire.extend_from_slice(&chunked(&parts));
            let whole = events_of(&[&wire]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.extend([0, wire.len()]);
            cuts.sort_unstable();
            let reads: Vec<&[u8]> = cuts.windows(2).map(|w| &wire[w[0]..w[1]]).collect();
            let split = events_of(&reads);
            prop_assert_eq!(whole.0, 200);
            prop_assert!(whole.2 && split.2, "the body's end is seen");
            prop_assert_eq!(whole.1.len(), texts.len());
            prop_assert_eq!(split, whole);
        }

        /// Size lines in every form the grammar allows (upper-case digits, leading zeros,
        /// extensions, blanks, a bare LF), each whole in a read or cut by one: the same bytes
        /// and the end, whether a line is read by the quick path or the general one.
        #[test]
        fn size_lines_in_any_form_and_any_split_give_the_same_bytes(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..8),
            styles in proptest::collection::vec(0u8..6, 8),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let mut wire = Vec::new();
            for (p, style) in parts.iter().zip(styles.iter().cycle()) {
                let line = match style {
                    0 => format!("{:x}\r\n", p.len()),
                    1 => format!("{:X}\r\n", p.len()),
                    2 => format!("000{:x}\r\n", p.len()),
                    3 => format!("{:x};name=value\r\n", p.len()),
                    4 => format!("{:x} \r\n", p.len()),
                    _ => format!("{:x}\n", p.len()),
                };
                wire.extend_from_slice(line.as_bytes());
                wire.extend_from_slice(p);
                wire.extend_from_slice(if *style == 5 { b"\n" } else { b"\r\n" });
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.extend([0, wire.len()]);
            cuts.sort_unstable();
            let reads: Vec<&[u8]> = cuts.windows(2).map(|w| &wire[w[0]..w[1]]).collect();
            let (out, done) = decode_all(&mut Framing::Chunked(Chunked::default()), &reads);
            prop_assert_eq!(out, parts.concat());
            prop_assert!(done);
        }

        /// Any split of a chunked body into reads gives the same bytes, and the end.
        #[test]
        fn any_split_of_a_chunked_body_gives_the_same_bytes(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..8),
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let wire = chunked(&parts);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.push(0);
            cuts.push(wire.len());
            cuts.sort_unstable();
            let reads: Vec<&[u8]> = cuts.windows(2).map(|w| &wire[w[0]..w[1]]).collect();
            let (out, done) = decode_all(&mut Framing::Chunked(Chunked::default()), &reads);
            prop_assert_eq!(out, parts.concat());
            prop_assert!(done);
        }
    }
}
