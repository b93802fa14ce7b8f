//! The JSON cursor under the fast classifier: whitespace, strings, numbers, objects and arrays,
//! each validated as it is passed over. Any doubt is a [`Bail`].

use super::template::HoleLog;
use super::{Segment, MAX_SEGMENTS};

/// The scanner gave up; the serde path decides.
pub(crate) struct Bail;

/// Result of a scanning step.
pub(crate) type R<T> = Result<T, Bail>;

/// `bytes` as text, or [`Bail`] when they are not UTF-8. A streamed token's text is most often
/// a few ASCII bytes, checked here inline, without a call; anything else goes through
/// `std::str::from_utf8`.
#[inline]
pub(crate) fn utf8(bytes: &[u8]) -> R<&str> {
    if bytes.is_ascii() {
        // SAFETY: every byte is below 0x80, and ASCII text is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).map_err(|_| Bail)
}

/// Deepest nesting the scanner follows (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 64;

/// Position in one event's bytes, plus where its text fields were found.
pub(crate) struct Cursor<'a, 's> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) scratch: &'s mut Vec<u8>,
    /// The text fields found so far: `segments[..count]` (the sink's array, which no event
    /// clears or copies).
    pub(crate) segments: &'s mut [Segment; MAX_SEGMENTS],
    pub(crate) count: usize,
    /// Where the scan read values (the event's template holes); only a whole scan keeps them.
    pub(crate) holes: &'s mut HoleLog,
}

impl<'a, 's> Cursor<'a, 's> {
    /// At the start of `data`, no segments yet (`segments` is written from its start); text
    /// that needs unescaping goes to `scratch`, the holes met go to `holes` (cleared here).
    pub(crate) fn new(
        data: &'a [u8],
        scratch: &'s mut Vec<u8>,
        holes: &'s mut HoleLog,
        segments: &'s mut [Segment; MAX_SEGMENTS],
    ) -> Cursor<'a, 's> {
        holes.clear();
        Cursor {
            data,
            pos: 0,
            scratch,
            segments,
            count: 0,
            holes,
        }
    }
}

impl<'a> Cursor<'a, '_> {
    pub(crate) fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.data.get(self.pos) {
            self.pos += 1;
        }
    }

    pub(crate) fn peek(&mut self) -> R<u8> {
        self.ws();
        self.data.get(self.pos).copied().ok_or(Bail)
    }

    pub(crate) fn eat(&mut self, byte: u8) -> R<()> {
        if self.peek()? == byte {
            self.pos += 1;
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// Consume `null` if it is next.
    pub(crate) fn null(&mut self) -> R<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    pub(crate) fn literal(&mut self, lit: &[u8]) -> R<()> {
        if self.data[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(Bail)
        }
    }

    /// A string at the cursor: (start, end, has_escapes) of its contents. Plain bytes are
    /// skipped eight at a time ([`plain_run`]); the strings of a chunk are short, where a
    /// library's SIMD search costs more in set-up than it saves.
    pub(crate) fn string(&mut self) -> R<(usize, usize, bool)> {
        self.eat(b'"')?;
        self.string_body()
    }

    /// The rest of a string whose opening quote the cursor has just passed.
    pub(crate) fn string_body(&mut self) -> R<(usize, usize, bool)> {
        let start = self.pos;
        let mut escaped = false;
        let mut i = self.pos;
        loop {
            i = plain_run(self.data, i);
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

    pub(crate) fn hex4(&self, at: usize) -> R<u32> {
        let digits = self.data.get(at..at + 4).ok_or(Bail)?;
        let mut value = 0;
        for &d in digits {
            value = value * 16 + (d as char).to_digit(16).ok_or(Bail)?;
        }
        Ok(value)
    }

    /// An object key; keys we look for are ASCII, anything else is kept as is (and must be
    /// UTF-8 for serde to accept it).
    pub(crate) fn key(&mut self) -> R<&'a [u8]> {
        let (start, end, escaped) = self.string()?;
        let key = &self.data[start..end];
        if escaped || !key.is_ascii() {
            return Err(Bail);
        }
        self.eat(b':')?;
        Ok(key)
    }

    /// Iterate an object's keys; `on_key` must consume the value.
    pub(crate) fn object(&mut self, mut on_key: impl FnMut(&mut Self, &'a [u8]) -> R<()>) -> R<()> {
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
    pub(crate) fn array(&mut self, mut on_item: impl FnMut(&mut Self) -> R<()>) -> R<()> {
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

    pub(crate) fn skip(&mut self, depth: u32) -> R<()> {
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

    pub(crate) fn digits(&mut self) -> R<()> {
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
    pub(crate) fn number(&mut self) -> R<()> {
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

    /// A count: a plain non-negative integer that fits u32, or null. Its digits are added up
    /// as they are passed; a sign, fraction or exponent is left to serde, and a leading zero
    /// ends the number there, as the JSON grammar has it.
    pub(crate) fn count(&mut self) -> R<Option<u32>> {
        let first = match self.data.get(self.pos) {
            Some(&d) if d.is_ascii_digit() => d,
            // Whitespace first, null, or no count: the general way.
            _ if self.null()? => return Ok(None),
            _ => return self.count_digits(),
        };
        if first == b'0' {
            self.pos += 1;
        } else {
            // Ten digits or fewer fit a u64 without a check per digit; more cannot be a u32.
            let start = self.pos;
            let mut value: u64 = 0;
            while let Some(&d) = self.data.get(self.pos).filter(|d| d.is_ascii_digit()) {
                if self.pos - start == 10 {
                    return Err(Bail);
                }
                value = value * 10 + u64::from(d - b'0');
                self.pos += 1;
            }
            return self.count_end(u32::try_from(value).map_err(|_| Bail)?);
        }
        self.count_end(0)
    }

    /// The digits of a count at the cursor (none: [`Bail`]), added up as they are passed.
    fn count_digits(&mut self) -> R<Option<u32>> {
        let mut value: u32 = 0;
        let start = self.pos;
        while let Some(&d) = self.data.get(self.pos).filter(|d| d.is_ascii_digit()) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u32::from(d - b'0')))
                .ok_or(Bail)?;
            self.pos += 1;
            if self.pos - start == 1 && d == b'0' {
                break;
            }
        }
        if self.pos == start {
            return Err(Bail);
        }
        self.count_end(value)
    }

    /// A count's value, unless its digits go on as a fraction or exponent (left to serde).
    fn count_end(&self, value: u32) -> R<Option<u32>> {
        match self.data.get(self.pos) {
            Some(b'.' | b'e' | b'E') => Err(Bail),
            _ => Ok(Some(value)),
        }
    }
}

/// Every byte of `w` (eight bytes, little-endian) that a JSON string cannot pass over as is: a
/// quote, a backslash or a control character, as the high bit of its byte in the result. Only
/// the lowest flagged byte is exact (a borrow may flag bytes above it), which is all
/// [`plain_run`] reads.
#[inline]
fn specials(w: u64) -> u64 {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let quote = zero_in(w ^ (ONES * u64::from(b'"')));
    let backslash = zero_in(w ^ (ONES * u64::from(b'\\')));
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    quote | backslash | control
}

/// The index of the first byte at or after `i` that is a quote, a backslash or a control
/// character, checked eight bytes at a time; the last few bytes of `data` (and any `i` past
/// its end) are left to the caller's byte loop.
#[inline]
pub(crate) fn plain_run(data: &[u8], i: usize) -> usize {
    first_flagged(data, i, specials)
}

/// Where the string opening at `open` (a quote) closes, when it is plain ASCII: no escape, no
/// control character and no byte of 0x80 or more before its closing quote. Eight bytes at a
/// time, as [`plain_run`]; None for anything else, and when the closing quote lies past the
/// first byte after the last whole word (the general scan then reads the string). A string
/// this finds is one [`Cursor::string_body`] ends at the same quote, unescaped, and whose
/// bytes are valid UTF-8.
#[inline]
pub(crate) fn plain_ascii_end(data: &[u8], open: usize) -> Option<usize> {
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    if data.get(open) != Some(&b'"') {
        return None;
    }
    // The lowest flagged byte is exact in each part, so it is in their union.
    let at = first_flagged(data, open + 1, |w| specials(w) | (w & HIGH));
    // Every byte before `at` was read and is plain.
    (data.get(at) == Some(&b'"')).then_some(at)
}

/// The index of the lowest byte `flags` marks (the high bit of its byte) in the words read
/// eight bytes at a time from `i`; where fewer than eight bytes are left, the index of the
/// first byte not read.
#[inline(always)]
fn first_flagged(data: &[u8], mut i: usize, flags: impl Fn(u64) -> u64) -> usize {
    while let Some(word) = data.get(i..i + 8) {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let flagged = flags(u64::from_le_bytes(bytes));
        if flagged != 0 {
            return i + (flagged.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}

/// Where the number at `at` ends, when it is a plain integer that does not start with zero
/// (digits, and after them none of `.`, `e`, `E`): the span [`Cursor::number`] takes for it,
/// and [`Cursor::count`] too when it has nine digits or fewer. None for anything else, which
/// they then read.
#[inline]
pub(crate) fn plain_integer_end(data: &[u8], at: usize) -> Option<usize> {
    if !matches!(data.get(at), Some(b'1'..=b'9')) {
        return None;
    }
    let mut end = at + 1;
    while data.get(end).is_some_and(u8::is_ascii_digit) {
        end += 1;
    }
    match data.get(end) {
        Some(b'.' | b'e' | b'E') => None,
        _ => Some(end),
    }
}

/// Decode a JSON string body with escapes (no surrogates: `string` refused them) into `out`.
pub(crate) fn unescape(raw: &[u8], out: &mut Vec<u8>) -> R<()> {
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

#[cfg(test)]
mod tests {
    use super::{plain_ascii_end, plain_integer_end, plain_run, utf8, Cursor, HoleLog, Segment};
    use super::{MAX_SEGMENTS, R};
    use proptest::prelude::*;

    /// What the cursor's own readers make of `data` from `at`: `read` on a fresh cursor.
    fn read_with<T>(
        data: &[u8],
        at: usize,
        read: impl FnOnce(&mut Cursor) -> R<T>,
    ) -> Option<(T, usize)> {
        let (mut scratch, mut holes) = (Vec::new(), HoleLog::default());
        let mut segments = [Segment::default(); MAX_SEGMENTS];
        let mut cur = Cursor::new(data, &mut scratch, &mut holes, &mut segments);
        cur.pos = at;
        let value = read(&mut cur).ok()?;
        Some((value, cur.pos))
    }

    proptest! {
        /// The inline ASCII check accepts and refuses what `from_utf8` does, and gives the
        /// same text: arbitrary bytes, and valid text with bytes above 0x7F anywhere.
        #[test]
        fn text_is_accepted_exactly_when_it_is_utf8(
            bytes in proptest::collection::vec(any::<u8>(), 0..40),
            text in "\\PC{0,20}",
        ) {
            prop_assert_eq!(utf8(&bytes).ok(), std::str::from_utf8(&bytes).ok());
            prop_assert_eq!(utf8(text.as_bytes()).ok(), Some(text.as_str()));
            let whole = text.as_bytes();
            if whole.last().is_some_and(|b| *b >= 0x80) {
                // A multi-byte character cut short is not text.
                let cut = &whole[..whole.len() - 1];
                prop_assert_eq!(utf8(cut).ok(), std::str::from_utf8(cut).ok());
            }
        }
    }

    proptest! {
        /// A string the plain-ASCII search ends is one the cursor's string reader ends at the
        /// same quote, with no escape, and whose text is ASCII; and a plain ASCII string with
        /// eight bytes after its closing quote is always found.
        #[test]
        fn a_plain_ascii_string_ends_where_the_string_reader_ends_it(
            body in proptest::collection::vec(
                prop_oneof![
                    4 => 0x20u8..0x7F,
                    1 => Just(b'\\'),
                    1 => Just(0x01u8),
                    1 => 0x80u8..=0xFF,
                ],
                0..30,
            ),
            after in proptest::collection::vec(any::<u8>(), 0..12),
            before in 0usize..3,
        ) {
            let mut data = vec![b' '; before];
            data.push(b'"');
            data.extend_from_slice(&body);
            data.push(b'"');
            data.extend_from_slice(&after);
            let read = read_with(&data, before + 1, |cur| cur.string_body());
            match plain_ascii_end(&data, before) {
                Some(close) => {
                    prop_assert_eq!(read, Some(((before + 1, close, false), close + 1)));
                    prop_assert!(data[before + 1..close].is_ascii());
                }
                None => {
                    let plain = body
                        .iter()
                        .take_while(|&&b| b != b'"')
                        .all(|&b| (0x20..0x7F).contains(&b) && b != b'\\');
                    let quote = body.iter().position(|&b| b == b'"');
                    let close = before + 1 + quote.unwrap_or(body.len());
                    // Found whenever a word read from the opening quote on holds the closing
                    // one, which it does when eight bytes start there.
                    prop_assert!(!plain || close + 8 > data.len(), "{:?} not found", data);
                }
            }
            if before > 0 {
                // Not at a quote: nothing.
                prop_assert_eq!(plain_ascii_end(&data, 0), None);
            }
        }

        /// A plain integer ends where the number reader ends it, and where the count reader
        /// does for nine digits or fewer (with the value the digits spell).
        #[test]
        fn a_plain_integer_ends_where_the_number_and_count_readers_end_it(
            text in "[-0-9.eE+ ]{0,14}",
            after in "[,}\\]a-z]{0,2}",
        ) {
            let data = format!("{text}{after}").into_bytes();
            let number = read_with(&data, 0, |cur| cur.number()).map(|((), end)| end);
            let count = read_with(&data, 0, |cur| cur.count());
            if let Some(end) = plain_integer_end(&data, 0) {
                prop_assert_eq!(number, Some(end));
                if end <= 9 {
                    let digits = std::str::from_utf8(&data[..end]).unwrap_or_default();
                    prop_assert_eq!(count, Some((digits.parse::<u32>().ok(), end)));
                }
            } else {
                // Refused: anything but digits starting 1–9 and not going on as a float.
                let after_digits = data.iter().find(|b| !b.is_ascii_digit());
                let plain = matches!(data.first(), Some(b'1'..=b'9'))
                    && !after_digits.is_some_and(|b| matches!(b, b'.' | b'e' | b'E'));
                prop_assert!(!plain, "{:?} refused", data);
            }
        }
    }

    /// The eight-byte skip stops where a byte-by-byte search would: at the first quote,
    /// backslash or control character, whatever the bytes around it (UTF-8 above 0x7F, other
    /// specials after it) and wherever it starts, or leaves fewer than eight bytes for the
    /// caller's loop.
    #[test]
    fn the_word_skip_stops_at_the_first_byte_a_string_cannot_pass() {
        let specials = [b'"', b'\\', 0x00, 0x01, 0x1F, b'\n'];
        let plain = [
            b'a', b' ', 0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80, 0xC3, 0xFF,
        ];
        for len in 0..24 {
            for at in 0..=len {
                for &special in &specials {
                    for &fill in &plain {
                        let mut data = vec![fill; len];
                        if at < len {
                            data[at] = special;
                            // A second special above the first must not move the answer.
                            if at + 1 < len {
                                data[at + 1] = 0x00;
                            }
                        }
                        for start in 0..=len + 1 {
                            let stop = plain_run(&data, start);
                            assert!(stop >= start, "{data:?} from {start}");
                            let skipped = data.get(start..stop).unwrap_or_default();
                            assert!(
                                skipped.iter().all(|b| !specials.contains(b)),
                                "{data:?} from {start} passed a special byte"
                            );
                            let at_special = data.get(stop).is_some_and(|b| specials.contains(b));
                            assert!(
                                at_special || stop + 8 > len,
                                "{data:?} from {start} stopped early at {stop}"
                            );
                        }
                    }
                }
            }
        }
    }
}
