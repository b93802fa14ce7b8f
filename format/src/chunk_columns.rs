//! Reads the seven chunk columns of a block payload (docs/FORMAT.md 4.4) straight into their
//! final, un-delta'd form. This is the hot path of every analysis (tens of millions of chunks
//! per second), so it is written by hand against the byte spec instead of going through a
//! generic decoder, and it fills existing vectors so that a reader can reuse their memory.

use crate::block::{BlockRequest, ChunkColumns};
use crate::types::Channel;

/// Why a column could not be read; turned into a message with the column name by the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bad {
    End,
    Prefix(u8),
    TooWide(u64),
    Tag(u8),
    Channel(u8),
    Utf8,
    Count(u64, usize),
}

impl Bad {
    #[cold]
    fn describe(self, column: &str) -> String {
        let what = match self {
            Bad::End => "block payload ends inside the column".to_string(),
            Bad::Prefix(b) => format!("invalid varint prefix {b}"),
            Bad::TooWide(v) => format!("{v} does not fit a u32"),
            Bad::Tag(t) => format!("invalid option tag {t}"),
            Bad::Channel(c) => format!("channel code {c}"),
            Bad::Utf8 => "text is not UTF-8".to_string(),
            Bad::Count(c, m) => format!("{c} entries, expected {m}"),
        };
        format!("column `{column}`: {what}")
    }
}

/// A cursor over a block payload.
pub(crate) struct ByteReader<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
}

impl ByteReader<'_> {
    #[inline(always)]
    fn byte(&mut self) -> Result<u8, Bad> {
        let b = *self.data.get(self.pos).ok_or(Bad::End)?;
        self.pos += 1;
        Ok(b)
    }

    /// An unsigned varint: one byte up to 250, else a 251/252/253 prefix and 2/4/8 LE bytes.
    #[inline(always)]
    pub(crate) fn varint(&mut self) -> Result<u64, Bad> {
        let first = self.byte()?;
        if first <= 250 {
            return Ok(u64::from(first));
        }
        self.varint_wide(first)
    }

    #[inline]
    fn varint_wide(&mut self, first: u8) -> Result<u64, Bad> {
        let len = match first {
            251 => 2,
            252 => 4,
            253 => 8,
            _ => return Err(Bad::Prefix(first)),
        };
        let bytes = self.data.get(self.pos..self.pos + len).ok_or(Bad::End)?;
        let mut le = [0u8; 8];
        le[..len].copy_from_slice(bytes);
        self.pos += len;
        Ok(u64::from_le_bytes(le))
    }

    #[inline(always)]
    fn varint_u32(&mut self) -> Result<u32, Bad> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| Bad::TooWide(v))
    }

    /// A zigzag-encoded i64.
    #[inline(always)]
    pub(crate) fn zvarint(&mut self) -> Result<i64, Bad> {
        let z = self.varint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    #[inline(always)]
    fn option_u32(&mut self) -> Result<Option<u32>, Bad> {
        match self.byte()? {
            0 => Ok(None),
            1 => self.varint_u32().map(Some),
            tag => Err(Bad::Tag(tag)),
        }
    }

    fn option_string(&mut self) -> Result<Option<String>, Bad> {
        match self.byte()? {
            0 => Ok(None),
            1 => {
                let len = self.varint()?;
                // The length is checked against the bytes present before anything is allocated.
                let len = usize::try_from(len).map_err(|_| Bad::End)?;
                let end = self.pos.checked_add(len).ok_or(Bad::End)?;
                let bytes = self.data.get(self.pos..end).ok_or(Bad::End)?;
                let text = std::str::from_utf8(bytes).map_err(|_| Bad::Utf8)?;
                self.pos = end;
                Ok(Some(text.to_string()))
            }
            tag => Err(Bad::Tag(tag)),
        }
    }

    /// Reads a column's entry count and checks it is `m`.
    fn expect_count(&mut self, m: usize) -> Result<(), Bad> {
        let count = self.varint()?;
        if count != m as u64 {
            return Err(Bad::Count(count, m));
        }
        Ok(())
    }
}

/// Reads columns 23–29 (the count of column 23 was already read and is `m`, which the caller
/// checked against the requests' chunk counts and the bytes left) into `out`.
pub(crate) fn read_chunk_columns(
    rd: &mut ByteReader<'_>,
    requests: &[BlockRequest],
    m: usize,
    out: &mut ChunkColumns,
) -> Result<(), String> {
    out.arrival_ns.clear();
    out.arrival_ns.reserve(m);
    for r in requests {
        let mut at = r.meta.send_ns;
        for _ in 0..r.chunk_len {
            at = at.wrapping_add(rd.zvarint().map_err(|b| b.describe("arrival"))? as u64);
            out.arrival_ns.push(at);
        }
    }

    rd.expect_count(m).map_err(|b| b.describe("read_index"))?;
    out.read_index.clear();
    out.read_index.reserve(m);
    for r in requests {
        let mut read = 0u32;
        for _ in 0..r.chunk_len {
            read = read.wrapping_add(rd.varint_u32().map_err(|b| b.describe("read_index"))?);
            out.read_index.push(read);
        }
    }

    read_u32_column(rd, m, &mut out.bytes).map_err(|b| b.describe("bytes"))?;

    rd.expect_count(m).map_err(|b| b.describe("channel"))?;
    let codes = rd
        .data
        .get(rd.pos..rd.pos + m)
        .ok_or_else(|| Bad::End.describe("channel"))?;
    rd.pos += m;
    out.channel.clear();
    out.channel.reserve(m);
    for &code in codes {
        let channel =
            Channel::from_code(code).ok_or_else(|| Bad::Channel(code).describe("channel"))?;
        out.channel.push(channel);
    }

    read_u32_column(rd, m, &mut out.text_len).map_err(|b| b.describe("text_len"))?;

    rd.expect_count(m).map_err(|b| b.describe("tokens"))?;
    out.tokens.clear();
    out.tokens.reserve(m);
    for _ in 0..m {
        out.tokens
            .push(rd.option_u32().map_err(|b| b.describe("tokens"))?);
    }

    rd.expect_count(m).map_err(|b| b.describe("text"))?;
    out.text.clear();
    out.text.reserve(m);
    for _ in 0..m {
        out.text
            .push(rd.option_string().map_err(|b| b.describe("text"))?);
    }
    Ok(())
}

fn read_u32_column(rd: &mut ByteReader<'_>, m: usize, out: &mut Vec<u32>) -> Result<(), Bad> {
    rd.expect_count(m)?;
    out.clear();
    out.reserve(m);
    for _ in 0..m {
        out.push(rd.varint_u32()?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(data: &[u8]) -> ByteReader<'_> {
        ByteReader { data, pos: 0 }
    }

    #[test]
    fn varint_widths_and_errors() {
        assert_eq!(reader(&[250]).varint().unwrap(), 250);
        assert_eq!(reader(&[251, 0xe8, 0x03]).varint().unwrap(), 1000);
        assert_eq!(
            reader(&[252, 0, 0x5a, 0x62, 0x02]).varint().unwrap(),
            40_000_000
        );
        assert_eq!(
            reader(&[253, 1, 0, 0, 0, 0, 0, 0, 1]).varint().unwrap(),
            (1 << 56) + 1
        );
        assert!(matches!(reader(&[254, 0]).varint(), Err(Bad::Prefix(254))));
        assert!(matches!(reader(&[252, 0]).varint(), Err(Bad::End)));
        assert!(matches!(
            reader(&[253, 0, 0, 0, 0, 1, 0, 0, 0]).varint_u32(),
            Err(Bad::TooWide(_))
        ));
        assert_eq!(reader(&[3]).zvarint().unwrap(), -2);
        assert_eq!(reader(&[4]).zvarint().unwrap(), 2);
    }

    #[test]
    fn a_string_longer_than_the_payload_is_refused_before_allocating() {
        let mut data = vec![1u8, 253];
        data.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(reader(&data).option_string(), Err(Bad::End)));
        assert!(matches!(
            reader(&[1, 2, 0xff, 0xfe]).option_string(),
            Err(Bad::Utf8)
        ));
        assert_eq!(
            reader(&[1, 2, b'h', b'i'])
                .option_string()
                .unwrap()
                .as_deref(),
            Some("hi")
        );
    }
}
