//! Any response bytes, cut into reads any way, through the recorder's HTTP/1.1 reader
//! (`take_head` read by read, then `Framing::decode` on what follows, as the stream reader
//! calls them): the body it hands on, and whether the response ended (and where), broke or is
//! still open, must be what the whole bytes give at once, read by a plain reference of the
//! framing rules in recorder/src/h1/response.rs. A cut between reads changes nothing there, so
//! any difference is the incremental reader's. Seed it with `fuzz/seeds/h1_response/`; see
//! docs/RELIABILITY.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentrace_fuzz::cut_by_lengths;
use tokentrace_recorder::h1::response::{head_end, parse_head, take_head, Framing, MAX_SIZE_LINE};

/// How a response read ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The body ended after this many bytes of the response (heads included).
    Done(usize),
    /// The head or the framing is broken.
    Broken,
    /// More bytes could still come.
    Open,
}

/// The response's reads: lengths cycling through the first three input bytes, each 1 to 128
/// bytes (a byte under 128) or 64 to 8,192 in steps of 64 (from 128 up), so that a read may
/// hold a whole line of any length the framing limits.
fn reads(input: &[u8]) -> Option<(Vec<&[u8]>, &[u8])> {
    let length = |b: u8| match b {
        0..=127 => usize::from(b) + 1,
        _ => usize::from(b - 127) * 64,
    };
    let lengths: Vec<usize> = input.get(..3)?.iter().map(|&b| length(b)).collect();
    let response = &input[3..];
    Some((cut_by_lengths(response, &lengths), response))
}

/// The recorder's way: read by read, the head until it is whole, then the body from the
/// bytes after it.
fn incremental(reads: &[&[u8]]) -> (Vec<u8>, End) {
    let mut reads = reads.iter().copied();
    let mut head_bytes = Vec::new();
    let mut offset = 0;
    let (head, rest) = loop {
        let Some(read) = reads.next() else {
            return (Vec::new(), End::Open);
        };
        offset += read.len();
        match take_head(&mut head_bytes, read) {
            Err(_) => return (Vec::new(), End::Broken),
            Ok(None) => {}
            Ok(Some(whole)) => break whole,
        }
    };
    let Ok(mut framing) = head.framing(false) else {
        return (Vec::new(), End::Broken);
    };
    let mut body = Vec::new();
    // Where the bytes decoded next start in the response.
    let mut start = offset - rest.len();
    for bytes in std::iter::once(&rest[..]).chain(reads) {
        match framing.decode(bytes, |data| body.extend_from_slice(data)) {
            Err(_) => return (body, End::Broken),
            Ok(decoded) if decoded.done => return (body, End::Done(start + decoded.consumed)),
            Ok(decoded) => assert_eq!(decoded.consumed, bytes.len(), "an open body left bytes"),
        }
        start += bytes.len();
    }
    (body, End::Open)
}

/// The reference: the whole response at once.
fn whole(response: &[u8]) -> (Vec<u8>, End) {
    let mut at = 0;
    let head = loop {
        let Some(end) = head_end(&response[at..]) else {
            return (Vec::new(), End::Open);
        };
        let Ok(head) = parse_head(&response[at..at + end]) else {
            return (Vec::new(), End::Broken);
        };
        at += end;
        if !(100..200).contains(&head.status) || head.status == 101 {
            break head;
        }
    };
    let rest = &response[at..];
    match head.framing(false) {
        Err(_) => (Vec::new(), End::Broken),
        Ok(Framing::Close) => (rest.to_vec(), End::Open),
        Ok(Framing::Length(length)) => match usize::try_from(length) {
            Ok(length) if length <= rest.len() => (rest[..length].to_vec(), End::Done(at + length)),
            _ => (rest.to_vec(), End::Open),
        },
        Ok(Framing::Chunked(_)) => {
            let (body, end) = dechunk(rest);
            let end = match end {
                End::Done(used) => End::Done(at + used),
                other => other,
            };
            (body, end)
        }
    }
}

/// A line ending at LF (a CR before it dropped) at `rest`'s start: the line and the bytes it
/// takes; Err(Broken) for one of more than [`MAX_SIZE_LINE`] bytes before its LF, ended or
/// not, Err(Open) for one not yet ended.
fn line(rest: &[u8]) -> Result<(&[u8], usize), End> {
    let nl = rest.iter().position(|&b| b == b'\n');
    if nl.unwrap_or(rest.len()) > MAX_SIZE_LINE {
        return Err(End::Broken);
    }
    let Some(nl) = nl else {
        return Err(End::Open);
    };
    let text = &rest[..nl];
    Ok((text.strip_suffix(b"\r").unwrap_or(text), nl + 1))
}

/// A chunked body (RFC 9112 §7.1): size lines of 1 to 15 hex digits, blanks around them and
/// `;extensions` after them allowed; each chunk's data followed by CRLF or a bare LF; after
/// the size-0 chunk, trailer lines up to a blank one.
fn dechunk(bytes: &[u8]) -> (Vec<u8>, End) {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let (text, used) = match line(&bytes[at..]) {
            Ok(found) => found,
            Err(end) => return (body, end),
        };
        at += used;
        let digits = text
            .split(|&b| b == b';')
            .next()
            .unwrap_or(b"")
            .trim_ascii();
        let size = std::str::from_utf8(digits)
            .ok()
            .filter(|d| (1..=15).contains(&d.len()) && d.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|d| u64::from_str_radix(d, 16).ok());
        let Some(size) = size else {
            return (body, End::Broken);
        };
        if size == 0 {
            loop {
                match line(&bytes[at..]) {
                    Ok((text, used)) => {
                        at += used;
                        if text.is_empty() {
                            return (body, End::Done(at));
                        }
                    }
                    Err(end) => return (body, end),
                }
            }
        }
        let available = bytes.len() - at;
        let Some(size) = usize::try_from(size).ok().filter(|&s| s <= available) else {
            body.extend_from_slice(&bytes[at..]);
            return (body, End::Open);
        };
        body.extend_from_slice(&bytes[at..at + size]);
        at += size;
        match &bytes[at..] {
            [] | [b'\r'] => return (body, End::Open),
            [b'\r', b'\n', ..] => at += 2,
            [b'\n', ..] => at += 1,
            _ => return (body, End::Broken),
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((reads, response)) = reads(input) else {
        return;
    };
    assert_eq!(incremental(&reads), whole(response));
});
